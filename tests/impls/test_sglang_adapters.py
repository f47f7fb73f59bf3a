"""SGLang kernel adapters on CPU: availability reasons, declared limits, recipes and spaces, and the argument and
output plumbing against a stand-in for sgl_kernel that computes the kernels' documented results on CPU (so the
comparison passes only if the adapter hands the kernel the right arguments and reads its buffers right), with
broken stand-ins that must fail. The kernels themselves run on the H200 (tools/device_verify.sh)."""

import sys
import types

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

import impls  # noqa: E402
from difftest.checking import check, interface  # noqa: E402
from difftest.model import where  # noqa: E402
from difftest.model.case import Case, QuantConfig, RoutingConfig  # noqa: E402
from impls.sglang import _env, adapter  # noqa: E402
from impls.sglang import per_token_group_quant_8bit as ptg  # noqa: E402
from spec import layouts  # noqa: E402
from spec import routing as sr  # noqa: E402
from spec.quant import per_token_group_quant_fp8, ue8m0_ceil  # noqa: E402
from spec.recipes import NAMED, Recipe  # noqa: E402

MFG = adapter("moe_fused_gate")
MFG_BF16 = adapter("moe_fused_gate_bf16")
TOPK = adapter("topk_softmax")
V1 = adapter("per_token_group_quant_8bit_v1")
SGLANG = [name.partition(".")[2] for name in impls.adapters() if name.startswith("sglang.")]  # the one registry


# ---- a CPU stand-in for sgl_kernel: the documented results, written the way the kernels write them


# The fakes' rounding points (spec.recipes.Recipe fields, read by spec.routing.route): σ by __expf, and with bf16
# input the bias, σ, s + b and the group sums in bf16; topk_softmax's exponentials by __expf.
FAKE_GATE = Recipe(name="fake_moe_fused_gate", sigmoid="expf", exp="ex2")
FAKE_GATE_BF16 = FAKE_GATE.but(bias="bf16", routing_scores="bf16", routing_bias_add="bf16", routing_group_scores="bf16")
FAKE_TOPK_SOFTMAX = Recipe(name="fake_topk_softmax", exp="ex2")


def _route(logits, bias, **options):
    return sr.route(logits.float().numpy(), None if bias is None else bias.float().numpy(), **options)


def fake_moe_fused_gate(inp, bias, n_group, topk_group, topk, shared, rsf, apply_rsf, *, renorm=True):
    bf16 = inp.dtype == torch.bfloat16
    recipe = FAKE_GATE_BF16 if bf16 else FAKE_GATE
    assert bias.dtype == inp.dtype, "the kernel's host check: input and bias should have the same dtype"
    r = _route(inp, bias, method="deepseek_v3", top_k=topk - shared, n_group=n_group, topk_group=topk_group,
               routed_scaling_factor=rsf if apply_rsf else None, renormalize=renorm, num_fused_shared_experts=shared,
               recipe=recipe)
    return [torch.from_numpy(r.weights.astype(np.float32)), torch.from_numpy(r.ids.astype(np.int32))]


def fake_topk_softmax(weights, ids, logits, renormalize, moe_softcapping=0.0, correction_bias=None):
    r = _route(logits, None, method="renormalize_naive" if renormalize else "default", top_k=weights.shape[1],
               recipe=FAKE_TOPK_SOFTMAX)
    weights.copy_(torch.from_numpy(r.weights.astype(np.float32)))
    ids.copy_(torch.from_numpy(r.ids.astype(np.int32)))


def fake_quant(x, q, s, group, eps, fp8_min, fp8_max, ue8m0, enable_v2=None, *, row_major_writes=False,
               skip_tail=False):
    """Writes through output_s's own strides, as the kernels do; row_major_writes: ignore them (a layout bug);
    skip_tail: leave the padding bytes of the last packed word unwritten (v1 does)."""
    assert (eps, fp8_min, fp8_max) == (1e-10, -448.0, 448.0)
    kernel = ptg.kernel_for(group, enable_v2)
    codes, scales = per_token_group_quant_fp8(x.float().numpy(), group, variant=ptg.VARIANT[kernel],
                                              scale_formula=ptg.SCALE_FORMULA, scale_fmt="ue8m0" if ue8m0 else "fp32")
    q.view(torch.uint8).copy_(torch.from_numpy(codes))
    target = torch.as_strided(s, s.shape, (s.shape[1], 1)) if row_major_writes else s
    if not ue8m0:
        target.copy_(torch.from_numpy(scales))
        return
    e8 = ue8m0_ceil(scales)
    words = layouts.pack_ue8m0(e8)
    if skip_tail:  # the bytes past group G keep what the buffer held (the adapter's poison)
        padded = np.full((e8.shape[0], words.shape[1] * 4), ptg.POISON, np.uint8)
        padded[:, :e8.shape[1]] = e8
        words = padded.view(np.int32)
    target.copy_(torch.from_numpy(words))


@pytest.fixture
def fake_kernels(monkeypatch):
    """sgl_kernel replaced by the CPU stand-in (the attributes may be swapped per test), launches unchecked."""
    mod = types.ModuleType("sgl_kernel")
    mod.moe_fused_gate = fake_moe_fused_gate
    mod.topk_softmax = fake_topk_softmax
    mod.sgl_per_token_group_quant_8bit = fake_quant
    monkeypatch.setitem(sys.modules, "sgl_kernel", mod)
    monkeypatch.setattr(_env, "launch_check", lambda kernel: None)
    return mod


def on_cpu(name):
    mod = adapter(name)
    impl = interface.from_adapter_module(mod)
    return impl._replace(run=lambda case, inputs: mod.run(case.config, inputs, device="cpu"))


def routing_case(method="deepseek_v3", **kw):
    base = dict(method=method, num_tokens=8, num_experts=64, top_k=6, n_group=8, topk_group=4,
                routed_scaling_factor=2.5, bias_dtype="fp32")
    if method != "deepseek_v3":
        base.update(n_group=1, topk_group=1, routed_scaling_factor=None, bias_dtype=None)
    return RoutingConfig(**{**base, **kw})


# ---- availability, registry, declarations


@pytest.mark.parametrize("stem", SGLANG)
def test_every_adapter_is_listed_with_the_reason_sglang_cannot_run_here(stem):
    """Whatever is installed here: each adapter's listed reason is _env.problem()'s (None where the kernels run)."""
    rows = {name: reason for name, _, _, reason in interface.listing()}
    assert rows[f"sglang.{stem}"] == _env.problem()


@pytest.mark.parametrize("stem", SGLANG)
def test_a_missing_package_is_the_first_reason(stem, monkeypatch):
    def absent(dist):
        raise _env.importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(_env.importlib.metadata, "version", absent)
    assert _env.problem().startswith("sgl_kernel is not installed (expected sglang-kernel 0.4.4")
    assert adapter(stem).available() == _env.problem()


def test_availability_reports_wrong_version_and_then_the_device(monkeypatch):
    monkeypatch.setattr(_env.importlib.metadata, "version", lambda dist: "0.4.10")
    assert _env.problem().startswith("sglang-kernel 0.4.10 is installed, expected 0.4.4")
    monkeypatch.setattr(_env.importlib.metadata, "version", lambda dist: "0.4.4")
    monkeypatch.setattr(_env.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _env.problem() == "no CUDA device (torch.cuda.is_available() is False)"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (10, 0))
    assert _env.problem() == "compute capability 10.0 not supported (needs 9.0)"


def test_adapters_name_recipes_the_spec_defines_and_spaces_that_parse():
    for stem in SGLANG:
        mod = adapter(stem)
        assert mod.RECIPE is None or mod.RECIPE in NAMED, mod.NAME
        impl = interface.from_adapter_module(mod)
        assert impl.space == mod.SPACE and impl.may_crash and impl.deterministic
        assert where.from_space(impl.space, mod.NAME)  # every field and value is one a filter accepts


def test_recipes_state_the_fast_math_build():
    for name in ("sglang_moe_fused_gate", "sglang_moe_fused_gate_bf16", "sglang_topk_softmax"):
        r = NAMED[name]
        assert (r.exp, r.subnormals, r.routing_weights, r.renorm_order) == ("ex2", "flush", "fp32",
                                                                            "divide_then_scale")
    fp32, bf16 = NAMED["sglang_moe_fused_gate"], NAMED["sglang_moe_fused_gate_bf16"]
    assert fp32.sigmoid == bf16.sigmoid == "expf"
    assert (fp32.bias, fp32.routing_scores, fp32.routing_bias_add, fp32.routing_group_scores) == ("fp32",) * 4
    assert (bf16.bias, bf16.routing_scores, bf16.routing_bias_add, bf16.routing_group_scores) == ("bf16",) * 4


@pytest.mark.parametrize("change, reason", [
    ({"method": "deepseek_v2", "bias_dtype": None}, "deepseek_v3 routing only"),
    ({"renormalize": False}, "always renormalizes"),
    ({"eps": 1e-20}, "plain sum"),
    ({"num_experts": 48, "n_group": 8, "top_k": 4}, "not a power of two"),
    ({"num_experts": 64, "n_group": 1, "topk_group": 1}, "64 > 32"),
    ({"num_experts": 8, "n_group": 8, "top_k": 2}, "one-expert groups"),
])
def test_moe_fused_gate_refusals(change, reason):
    assert reason in MFG.unsupported(routing_case(**change))


def test_moe_fused_gate_accepts_deepseek_v3_and_the_bf16_instantiation_only_bf16_logits():
    assert MFG.unsupported(routing_case()) is None
    assert MFG.unsupported(routing_case(logits_dtype="bf16", bias_dtype=None)) is None
    assert "reads bf16 logits" in MFG_BF16.unsupported(routing_case())
    assert MFG_BF16.unsupported(routing_case(logits_dtype="bf16")) is None
    assert MFG.limits(64, 64).startswith("one-expert groups") and "> 32" in MFG.limits(128, 64)


def test_topk_softmax_refusals():
    assert TOPK.unsupported(routing_case("default")) is None
    assert TOPK.unsupported(routing_case("renormalize_naive", eps=1e-20)) == \
        "eps=1e-20: the kernel renormalizes by the plain sum"
    assert TOPK.unsupported(routing_case("default", eps=1e-20)) is None  # default never divides
    assert "unscaled" in TOPK.unsupported(routing_case("default", routed_scaling_factor=2.5))
    assert "softmax → top-k" in TOPK.unsupported(routing_case("renormalize"))


def quant_config(**kw):
    return QuantConfig(**{**dict(scheme="fp8_group", num_tokens=5, hidden_size=384, group_size=128,
                                 input_dtype="bf16", variant="mul_448_div_amax", scale_formula="mul_rcp448"), **kw})


def test_quant_dispatch_and_refusals():
    assert [ptg.kernel_for(g) for g in (16, 32, 64, 128, 256)] == ["v2"] * 4 + ["v1"]
    assert ptg.kernel_for(128, enable_v2=False) == "v1"
    assert ptg.unsupported(quant_config()) is None
    assert "DISPATCH_PYTORCH_DTYPE_TO_CTYPE_FP16" in ptg.unsupported(quant_config(input_dtype="fp32"))
    assert V1.unsupported(quant_config(input_dtype="fp32", variant="mul_mufu_rcp_scale")) is None
    assert "quantizer is 'mul_mufu_rcp_scale'" in V1.unsupported(quant_config())
    assert "quantizer is 'mul_mufu_rcp_scale'" in V1.unsupported(quant_config(variant="mul_rcp_scale"))
    assert "row-major" in ptg.unsupported(quant_config(scale_fmt="ue8m0", layout="row"))
    assert "K/128" in ptg.unsupported(quant_config(scale_fmt="ue8m0", layout="ue8m0_packed", group_size=64))
    assert ptg.unsupported(quant_config(scale_fmt="ue8m0", layout="ue8m0_packed")) is None
    assert "mxfp8" in ptg.unsupported(quant_config(scheme="mxfp8", group_size=128))


@pytest.mark.parametrize("layout, T", [("row", 5), ("col", 5), ("col", 1), ("col_tma", 5), ("col_tma", 4),
                                       ("ue8m0_packed", 5), ("ue8m0_packed", 0)])
def test_output_scale_has_the_spec_layouts_strides_and_size(layout, T):
    H, group = 1280, 128  # G = 10: not a multiple of 4
    view, base = ptg.output_scale(T, H, group, layout, "cpu")
    s = np.zeros((T, H // group), np.float32) + 2.0**-3
    spec = {"row": layouts.row_major, "col": layouts.column_major, "col_tma": layouts.column_major_tma,
            "ue8m0_packed": layouts.ue8m0_packed}[layout](s)
    assert tuple(view.shape) == spec.shape and base.numel() * base.element_size() == spec.data.nbytes
    if T > 1:
        assert tuple(view.stride()) == tuple(spec.strides)
    assert (base.view(torch.uint8) == ptg.POISON).all()


# ---- plumbing through the stand-in: passes when right, fails when the kernel (stand-in) is wrong


@pytest.mark.parametrize("name, config", [
    ("moe_fused_gate", routing_case()),
    ("moe_fused_gate", routing_case(routed_scaling_factor=None, num_fused_shared_experts=2, logits_dtype="bf16")),
    ("moe_fused_gate", routing_case(num_experts=16, n_group=1, topk_group=1, top_k=3, bias_dtype=None)),
    ("moe_fused_gate_bf16", routing_case(logits_dtype="bf16", num_fused_shared_experts=1)),
    ("topk_softmax", routing_case("default", logits_dtype="fp16")),
    ("topk_softmax", routing_case("renormalize_naive", num_experts=12, top_k=4)),
])
def test_routing_adapters_pass_with_the_documented_kernel(fake_kernels, name, config):
    for dist, seed in (("normal", 0), ("near_ties", 1), ("glm_bias", 2)):
        r = check.run_case(on_cpu(name), Case("routing", config, dist, seed))
        assert r.status == "pass", r.message


def test_moe_fused_gate_without_renormalization_fails(fake_kernels):
    fake_kernels.moe_fused_gate = lambda *a: fake_moe_fused_gate(*a, renorm=False)
    r = check.run_case(on_cpu("moe_fused_gate"), Case("routing", routing_case(), "normal", 0))
    assert r.status == "fail" and "weights" in r.message


def test_topk_softmax_ids_from_the_wrong_end_fail(fake_kernels):
    def reversed_ids(weights, ids, logits, renormalize, *rest):
        fake_topk_softmax(weights, ids, logits, renormalize)
        ids.copy_(logits.shape[1] - 1 - ids)

    fake_kernels.topk_softmax = reversed_ids
    r = check.run_case(on_cpu("topk_softmax"), Case("routing", routing_case("default"), "normal", 0))
    assert r.status == "fail" and "ids" in r.message


@pytest.mark.parametrize("name, config", [
    ("per_token_group_quant_8bit", quant_config(layout="row")),
    ("per_token_group_quant_8bit", quant_config(layout="col", input_dtype="fp16", group_size=32)),
    ("per_token_group_quant_8bit", quant_config(layout="col_tma", num_tokens=7)),
    ("per_token_group_quant_8bit", quant_config(scale_fmt="ue8m0", layout="ue8m0_packed")),
    ("per_token_group_quant_8bit", quant_config(scale_fmt="ue8m0", layout="ue8m0_packed", num_tokens=0)),
    ("per_token_group_quant_8bit_v1", quant_config(layout="col_tma", input_dtype="fp32",
                                                   variant="mul_mufu_rcp_scale")),
    ("per_token_group_quant_8bit_v1", quant_config(scale_fmt="ue8m0", layout="ue8m0_packed", input_dtype="fp32")),
])
def test_quant_adapters_pass_with_the_documented_kernel(fake_kernels, name, config):
    for dist, seed in (("normal", 0), ("pow2_edge", 1), ("zero_group", 2)):
        r = check.run_case(on_cpu(name), Case("quant", config, dist, seed))
        assert r.status == "pass", r.message


def test_a_v1_campaign_draws_only_what_the_kernel_takes_and_it_passes(fake_kernels):
    """The v1 quantizer's space states UE8M0's joint limit (packed scales, K/128 groups): a campaign cell's draws are
    never declined (55 % were compared on the H200 before: 3,503 row-major and 2,798 non-128 UE8M0 draws declined) and
    still hold UE8M0 ones, which pass on the documented kernel."""
    from hypothesis import HealthCheck, given, settings

    from difftest.running.run import campaign_cells

    (_, _, _, configs), = campaign_cells([V1.NAME], ("quant",), None)
    drawn = []

    @settings(max_examples=60, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(configs)
    def draw(config):
        drawn.append(config)

    draw()
    assert [V1.unsupported(c) for c in drawn] == [None] * len(drawn)
    ue8m0 = [c for c in drawn if c.scale_fmt == "ue8m0"]
    assert len(ue8m0) >= 5 and {c.layout for c in drawn} > {"ue8m0_packed"}
    for i, config in enumerate(ue8m0[:5]):
        r = check.run_case(on_cpu("per_token_group_quant_8bit_v1"), Case("quant", config, "normal", i))
        assert r.status == "pass", r.message


@pytest.mark.parametrize("layout", ["col", "col_tma", "ue8m0_packed"])
def test_scales_written_row_major_into_a_column_major_buffer_fail(fake_kernels, layout):
    fake_kernels.sgl_per_token_group_quant_8bit = lambda *a, **k: fake_quant(*a, **k, row_major_writes=True)
    config = quant_config(layout=layout, scale_fmt="ue8m0" if layout == "ue8m0_packed" else "fp32",
                          hidden_size=1280)  # G = 10, 3 packed words: row-major memory differs from column-major
    r = check.run_case(on_cpu("per_token_group_quant_8bit"), Case("quant", config, "normal", 0))
    assert r.status == "fail" and "scale" in r.message, r


def test_unwritten_tail_bytes_of_packed_ue8m0_fail(fake_kernels):
    """G = 3 groups: the last int32 word has one padding byte, which must be 0; the stand-in leaves the poison."""
    fake_kernels.sgl_per_token_group_quant_8bit = lambda *a, **k: fake_quant(*a, **k, skip_tail=True)
    config = quant_config(scale_fmt="ue8m0", layout="ue8m0_packed")
    r = check.run_case(on_cpu("per_token_group_quant_8bit"), Case("quant", config, "normal", 0))
    assert r.status == "fail" and "scale_buffer" in r.message and "0xa5" in r.message, r.message


def test_launch_check_names_the_cuda_error(monkeypatch):
    class Cudart:
        class cudaGetErrorName:  # noqa: N801 (the C function's name)
            restype = None

            def __new__(cls, err):
                return b"cudaErrorInvalidConfiguration"

        @staticmethod
        def cudaGetLastError():
            return 9

    monkeypatch.setattr(_env, "_cudart", lambda: Cudart)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    with pytest.raises(RuntimeError, match="moe_fused_gate: CUDA error 9 cudaErrorInvalidConfiguration"):
        _env.launch_check("moe_fused_gate")


# ---- the H200 call's findings (docs/device-results.md, "SGLang kernels")


@pytest.mark.parametrize("mod, config, reason", [
    (MFG, routing_case(num_tokens=0), "grid of num_blocks"),
    (MFG_BF16, routing_case(num_tokens=0, logits_dtype="bf16"), "cudaErrorInvalidValue"),
    (TOPK, routing_case("default", num_tokens=0, num_experts=50), "softmax_workspace must be provided"),
    (MFG, routing_case(tile_tokens_dim=8), "no padded permutation"),
    (TOPK, routing_case("renormalize_naive", tile_tokens_dim=8), "no padded permutation"),
    (MFG_BF16, routing_case(num_experts=1, n_group=1, topk_group=1, top_k=1, logits_dtype="bf16"),
     "misaligned address"),
])
def test_limits_found_on_the_h200_are_declared(mod, config, reason):
    assert reason in mod.unsupported(config)


def test_the_fp32_instantiation_keeps_one_expert_rows():
    assert MFG.unsupported(routing_case(num_experts=1, n_group=1, topk_group=1, top_k=1)) is None
    assert "tile_tokens_dim" in MFG.SPACE and "tile_tokens_dim" in TOPK.SPACE


def _flushing_gate(*args, flush=True, nan_rows=()):
    """The documented kernel, plus what FTZ does to it: σ below the fp32 min normal stored as 0 (MUFU.RCP.FTZ),
    so a row whose selected σ all flush renormalizes 0·rcp(0) = NaN, and a shared weight Σ/rsf below the min
    normal is 0. nan_rows: rows made NaN regardless (a broken kernel)."""
    inp, bias, n_group, topk_group, topk, shared, rsf, apply_rsf = args
    w, ids = fake_moe_fused_gate(*args)
    x = inp.double().numpy()
    sigma = 1 / (1 + np.exp(-x))
    k = topk - shared
    sel = np.take_along_axis(sigma, ids[:, :k].long().numpy(), axis=1)
    w = w.numpy().copy()
    if flush:
        w[(sel < np.finfo(np.float32).tiny).all(axis=1), :k] = np.nan
        if shared:
            w[sel.sum(axis=1) / rsf < np.finfo(np.float32).tiny, k:] = 0.0
    w[list(nan_rows), :k] = np.nan
    return [torch.from_numpy(w), ids]


def _underflowing_logits(T=6, E=16):
    """Rows 0-1: every logit in (-88.7, -87.4], where σ = 1/(1 + 2^t) is an fp32 subnormal (flushed by FTZ)."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (T, E)).astype(np.float32)
    x[:2] = rng.uniform(-88.6, -87.5, (2, E)).astype(np.float32)
    return x


@pytest.mark.parametrize("shared", [0, 1])
def test_ftz_nan_weights_of_underflowing_rows_pass_and_other_nans_fail(fake_kernels, shared):
    """The H200 returned NaN weights where every selected σ is subnormal (24 cases) and a 0 shared weight where
    Σ/rsf is (1 case): the tester accepts those under the recipe's subnormals="flush" — and nothing else."""
    config = routing_case(num_tokens=6, num_experts=16, n_group=1, topk_group=1, top_k=2, bias_dtype=None,
                          routed_scaling_factor=16.0 if shared else None, num_fused_shared_experts=shared)
    inputs = {"logits": _underflowing_logits()}
    case = Case("routing", config, "normal", 0)
    fake_kernels.moe_fused_gate = _flushing_gate
    r = check.run_case(on_cpu("moe_fused_gate"), case, inputs)
    assert r.status == "pass", r.message
    fake_kernels.moe_fused_gate = lambda *a: _flushing_gate(*a, nan_rows=(3,))
    r = check.run_case(on_cpu("moe_fused_gate"), case, inputs)
    assert r.status == "fail" and "nan" in r.message, r.message


def test_a_zero_shared_weight_where_the_sum_is_normal_fails(fake_kernels):
    def zero_shared(*args):
        w, ids = fake_moe_fused_gate(*args)
        w[:, -1] = 0.0
        return [w, ids]

    fake_kernels.moe_fused_gate = zero_shared
    config = routing_case(num_tokens=6, num_experts=16, n_group=1, topk_group=1, top_k=2, bias_dtype=None,
                          routed_scaling_factor=16.0, num_fused_shared_experts=1)
    r = check.run_case(on_cpu("moe_fused_gate"), Case("routing", config, "normal", 0),
                       {"logits": _underflowing_logits()})
    assert r.status == "fail" and "shared" in r.message, r.message


def _rn_reciprocal(x, q, s, group, eps, fp8_min, fp8_max, ue8m0, enable_v2=None):
    """The quantizers with the correctly rounded reciprocal the spec took before it had the whole MUFU.RCP table
    (RN(1/x) where x is not a bf16 value): v2 x·fl(448·RN(1/amax)), v1 x·RN(1/s)."""
    kernel = ptg.kernel_for(group, enable_v2)
    variant = {"v1": "mul_rcp_scale", "v2": "mul_rcp_amax"}[kernel]
    codes, scales = per_token_group_quant_fp8(x.float().numpy(), group, variant=variant,
                                              scale_formula=ptg.SCALE_FORMULA)
    q.view(torch.uint8).copy_(torch.from_numpy(codes))
    s.copy_(torch.from_numpy(scales))


@pytest.mark.parametrize("name", ["per_token_group_quant_8bit", "per_token_group_quant_8bit_v1"])
def test_a_correctly_rounded_reciprocal_fails_on_fp16_groups_as_the_old_spec_did_on_the_h200(fake_kernels, name):
    """The H200's fp16 one-code findings (115 v2 + 98 v1 cases, session 4) were the spec taking RN(1/x) where
    MUFU.RCP is an ulp off; with the whole table the spec is the kernel's reciprocal, and a kernel that rounds its
    reciprocal correctly (what the old spec assumed) now fails such inputs."""
    fake_kernels.sgl_per_token_group_quant_8bit = _rn_reciprocal
    config = quant_config(input_dtype="fp16", num_tokens=16, hidden_size=1024,
                          variant=ptg.VARIANT["v1" if name.endswith("v1") else "v2"])
    fails = [check.run_case(on_cpu(name), Case("quant", config, "normal", seed)).status for seed in range(8)]
    assert "fail" in fails, fails
