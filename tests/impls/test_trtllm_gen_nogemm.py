"""The composed trtllm-gen pipeline adapter on CPU: its refusals, recipes, weight row order, torch quantizers
and GEMMs, and the whole pipeline wired to CPU stand-ins of the four kernels (the documented math of
docs/trtllm_gen_dev_kernels.md and a routing stage built from the spec), checked by difftest against the spec."""

import dataclasses
import importlib.util

import numpy as np
import pytest

from spec.recipes import NAMED

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="flashinfer-python not installed"),
]
torch = pytest.importorskip("torch")

from difftest.checking import check, impl_spec  # noqa: E402
from difftest.checking.interface import from_adapter_module  # noqa: E402
from difftest.model.case import Case, MoEConfig, RoutingConfig  # noqa: E402
from impls.flashinfer import _trtllm_gen_ops as ops  # noqa: E402
from impls.flashinfer import trtllm_gen_nogemm as ng  # noqa: E402
from impls.flashinfer import trtllm_gen_routing as tg  # noqa: E402
from spec import permutation  # noqa: E402
from spec.quant import E4M3_VALUES, per_token_group_quant_fp8, weight_block_quant  # noqa: E402

RENORM = RoutingConfig("renormalize", 6, 16, 4)
DSV3 = RoutingConfig("deepseek_v3", 6, 32, 4, 4, 2, 2.5, eps=tg.EPS, bias_dtype="fp32")


def moe(routing=RENORM, **kw):
    return MoEConfig(**{"routing": routing, "hidden_size": 256, "intermediate_size": 128, **kw})


@pytest.mark.parametrize("config, words", [
    (moe(quant="mxfp8"), "quant='mxfp8'"),
    (moe(activation="geglu"), "activation 'geglu'"),
    (moe(intermediate_size=32), "I >= 64"),
    (moe(quant="fp8_block", hidden_size=192), "multiples of 128"),
    (moe(rsf_placement="combine"), "rsf_placement"),
    (moe(router_weight_on_input=True), "router_weight_on_input"),
    (moe(local_expert_offset=12, local_num_experts=8), "local experts [12, 20)"),
    (moe(routing=dataclasses.replace(RENORM, method="llama4", top_k=1, num_experts=256)), "llama4"),
    (moe(routing=dataclasses.replace(DSV3, num_fused_shared_experts=1)), "shared experts"),
])
def test_unsupported_names_the_constraint(config, words):
    assert words in ng.unsupported(config)


@pytest.mark.parametrize("config", [moe(), moe(quant="fp8_block"), moe(activation="relu2", intermediate_size=32),
                                    moe(routing=DSV3, quant="fp8_block", local_expert_offset=8, local_num_experts=8)])
def test_supported(config):
    assert ng.unsupported(config) is None


def test_recipe_per_quant_path():
    bf16, fp8 = NAMED[ng.recipe_for(moe())], NAMED[ng.recipe_for(moe(routing=DSV3, quant="fp8_block"))]
    relu2 = NAMED[ng.recipe_for(moe(quant="fp8_block", activation="relu2"))]
    assert (bf16.name, fp8.name, relu2.name) == ("flashinfer_trtllm_gen_nogemm_bf16",
                                                 "flashinfer_trtllm_gen_nogemm_fp8_block",
                                                 "flashinfer_trtllm_gen_nogemm_fp8_block_relu2")
    assert not bf16.requant_intermediate and relu2.requant_variant == "mul_rcp_scale" and not relu2.gemm1_out_quant
    # swiglu: the DeepSeek-FP8 activation kernel's own re-quantization of its fp32 output, GEMM1's output quantized
    assert (fp8.requant_variant, fp8.requant_scale_formula, fp8.act_out) == ("mul_mufu_rcp_scale",
                                                                            "mul_rcp448_flt_min", "fp32")
    assert fp8.gemm1_out_quant and fp8.gemm1_out_quant_variant == "mul_rcp_scale"
    assert bf16.router_weight_at == fp8.router_weight_at == "combine" and bf16.gemm1_out == "bf16"
    assert (bf16.sigmoid, bf16.routing_weights) == ("tanh", "bf16")  # the routing recipe's
    assert NAMED[ng.recipe_for(moe(routing=DSV3, quant="fp8_block"))].bias == "fp32"  # declared
    assert NAMED[ng.AS_BUILT.recipe_for(moe(routing=DSV3, quant="fp8_block"))].bias == "bf16"
    assert NAMED[ng.AS_BUILT.recipe_for(moe())].bias == "fp32"  # not grouped: unchanged


def test_w13_rows_for_the_activation_kernel():
    """The kernel gates the SECOND half: spec [gate; up] rows become [up; gate], block scales alike."""
    w = torch.arange(2 * 4 * 3).reshape(2, 4, 3)
    swapped = ng.kernel_w13(w, "gate_up", "swiglu")
    assert torch.equal(swapped[:, :2], w[:, 2:]) and torch.equal(swapped[:, 2:], w[:, :2])
    assert torch.equal(ng.kernel_w13(w, "up_gate", "swiglu"), w)
    assert torch.equal(ng.kernel_w13(w, "gate_up", "relu2"), w)


@pytest.mark.parametrize("variant", ["mul_rcp_amax", "mul_rcp_scale"])
def test_quant_fp8_is_the_spec_quantizer(variant):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 384)) * np.exp2(rng.integers(-20, 20, (5, 1)))).astype(np.float32)
    x[1, 128:256] = 0.0
    x = torch.from_numpy(x).to(torch.bfloat16)
    q, s = ng.quant_fp8(x, variant)
    want_q, want_s = per_token_group_quant_fp8(x.float().numpy(), 128, variant=variant, scale_formula="mul_rcp448")
    assert np.array_equal(q.view(torch.uint8).numpy(), want_q) and np.array_equal(s.numpy(), want_s)


def test_dequant_and_expert_gemm():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((256, 384)).astype(np.float32)
    codes, scales = weight_block_quant(w)
    got = ng.dequant_blocks(torch.from_numpy(codes).view(torch.float8_e4m3fn), torch.from_numpy(scales))
    exact = E4M3_VALUES[codes].astype(np.float64) * np.repeat(np.repeat(scales, 128, 0), 128, 1).astype(np.float64)
    assert np.array_equal(got.numpy(), exact)  # codes·scales exactly: float64, no fp32 rounding
    a = torch.from_numpy(rng.standard_normal((6, 3)))
    ws = torch.from_numpy(rng.standard_normal((2, 4, 3)))
    out = ng.expert_gemm(a, lambda e: ws[e], {0: torch.tensor([0, 3]), 1: torch.tensor([5])}, 4)
    assert torch.equal(out[[1, 2, 4]], torch.zeros(3, 4, dtype=torch.bfloat16))
    assert torch.equal(out[3], (a[3] @ ws[0].T).float().to(torch.bfloat16))
    assert torch.equal(out[5], (a[5] @ ws[1].T).float().to(torch.bfloat16))


# ---- CPU stand-ins of the kernels, each the documented math, to check the pipeline's wiring against the spec.

def fake_routing(case, inputs):
    """Routing outputs from the spec (recipe-exact ids and bf16 weights) in the trtllm-gen layout."""
    res = impl_spec.layer(case, inputs, NAMED[ng.recipe_for(case.config)])

    def launch(logits, bias, method, a, *, local_expert_offset, local_num_experts):
        local = permutation.local_expert_ids(res.ids, case.config.routing.num_experts, local_expert_offset,
                                             local_num_experts)
        tile = a["tile_tokens_dim"]
        e2p = permutation.expanded_idx_to_permuted_idx(local, local_num_experts, tile)
        ctas = np.full(a["max_ctas"], -7)
        lay = permutation.layout(local, local_num_experts, tile)
        ctas[:len(lay.cta_idx_xy_to_batch_idx)] = lay.cta_idx_xy_to_batch_idx
        return {"expanded_idx_to_permuted_idx": torch.from_numpy(e2p.astype(np.int32)),
                "cta_idx_xy_to_batch_idx": torch.from_numpy(ctas.astype(np.int32)),
                "topk_weights": torch.from_numpy(res.weights.astype(np.float32)).to(torch.bfloat16)}
    return launch


def fake_permute(h, e2p, n, hidden_states_scale=None):
    out = torch.zeros(n, h.shape[1], dtype=h.dtype)
    t = torch.arange(e2p.shape[0]).repeat_interleave(e2p.shape[1])
    out[e2p.reshape(-1).long()] = h[t]
    if hidden_states_scale is None:
        return out
    s = torch.zeros(hidden_states_scale.shape[0], n)
    s[:, e2p.reshape(-1).long()] = hidden_states_scale[:, t]
    return out, s


def fake_activation(h, e2p):
    i = h.shape[1] // 2
    u, g = h[:, :i].float(), h[:, i:].float()
    out = (g * torch.sigmoid(g) * u).to(h.dtype)
    mapped = torch.zeros(h.shape[0], dtype=torch.bool)
    mapped[e2p[e2p >= 0].long()] = True
    return torch.where(mapped[:, None], out, torch.zeros_like(out))


def fake_activation_deepseek_fp8(hq, hs, e2p):
    """activationDeepSeekKernel as documented: u, g = fl32(code·scale) of [up; gate], y = fl32(silu(g)·u), re-quantized
    per (row, 128) by spec.trtllm_ops.requant_deepseek_fp8 (FLT_MIN floor, MUFU.RCP); unmapped rows 0."""
    from spec.numerics import round_to
    from spec.trtllm_ops import gated_activation, requant_deepseek_fp8

    x = round_to(E4M3_VALUES[hq.view(torch.uint8).numpy()] * np.repeat(hs.numpy().T, 128, axis=1), "fp32")
    q, s = requant_deepseek_fp8(round_to(gated_activation(x), "fp32"))
    mapped = np.zeros(len(q), bool)
    mapped[e2p[e2p >= 0].numpy()] = True
    q, s = np.where(mapped[:, None], q, 0).astype(np.uint8), np.where(mapped[None, :], s, 0).astype(np.float32)
    return torch.from_numpy(q).view(torch.float8_e4m3fn), torch.from_numpy(s)


def fake_finalize(y, e2p, expert_weights):
    acc = torch.zeros(e2p.shape[0], y.shape[1])
    for k in range(e2p.shape[1]):
        p = e2p[:, k].long()
        term = expert_weights[:, k].float()[:, None] * y[p.clamp_min(0)].float()
        acc += torch.where((p >= 0)[:, None], term, torch.zeros_like(term))
    return acc.to(y.dtype)


@pytest.mark.parametrize("config", [
    moe(),
    moe(half_order="up_gate"),
    moe(activation="relu2"),
    moe(routing=DSV3, quant="fp8_block", intermediate_size=256),
    moe(routing=DSV3, quant="fp8_block", local_expert_offset=8, local_num_experts=16),
    moe(routing=DSV3, quant="fp8_block", activation="relu2"),
    moe(local_expert_offset=4, local_num_experts=8),
])
def test_pipeline_with_cpu_kernels_matches_the_spec(config, monkeypatch):
    case = Case("moe", config, seed=3)
    impl = from_adapter_module(ng)
    impl = impl._replace(run=lambda case, inputs: _run_on_cpu(case, inputs, monkeypatch))
    result = check.run_case(impl, case)
    assert result.status == "pass", result.message


def _run_on_cpu(case, inputs, monkeypatch, deepseek_fp8=fake_activation_deepseek_fp8):
    from difftest.checking.interface import with_stacked_weights

    monkeypatch.setattr(tg, "trtllm_gen_routing", fake_routing(case, inputs))
    for name, fake in (("permute", fake_permute), ("activation", fake_activation), ("finalize", fake_finalize),
                       ("activation_deepseek_fp8", deepseek_fp8)):
        monkeypatch.setattr(ops, name, fake)
    return ng.run(case.config, with_stacked_weights(case, inputs), device="cpu")


def test_pipeline_runs_on_a_reproducer_scripts_configuration(monkeypatch):
    """A reproducer script hands the adapter a namespace of the configuration's attributes, not the dataclass
    (difftest is not importable there): the layer gives the same outputs (it raised TypeError in dataclasses.replace,
    which the script would have reported as the bug)."""
    from types import SimpleNamespace

    from difftest.checking.interface import with_stacked_weights
    from difftest.model import generate
    from difftest.readers.reproducer import config_dict

    def namespace(d):
        return SimpleNamespace(**{k: namespace(v) if isinstance(v, dict) else v for k, v in d.items()})

    case = Case("moe", moe(routing=DSV3, quant="fp8_block", local_expert_offset=8, local_num_experts=16), seed=3)
    inputs = generate.inputs(case)
    want = _run_on_cpu(case, inputs, monkeypatch)
    got = ng.run(namespace(config_dict(case.config)), with_stacked_weights(case, inputs), device="cpu")
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_pipeline_check_can_fail(monkeypatch):
    """The wiring test catches a gate/up mix-up: the activation gating the first half fails against the spec."""
    monkeypatch.setattr(ng, "kernel_w13", lambda w, half_order, activation: w)
    monkeypatch.setattr(ng, "_prepared", [])  # not the previous test's correctly prepared weights
    case = Case("moe", moe(), seed=3)
    impl = from_adapter_module(ng)._replace(run=lambda case, inputs: _run_on_cpu(case, inputs, monkeypatch))
    assert check.run_case(impl, case).status == "fail"


def test_fp8_pipeline_check_can_fail(monkeypatch):
    """The fp8_block swiglu path runs the DeepSeek-FP8 kernel on GEMM1's quantized output: a kernel stand-in that
    reads the scales of the wrong half (the up scales for the gate) fails against the spec."""
    def swapped_scales(hq, hs, e2p):
        i = hs.shape[0] // 2
        return fake_activation_deepseek_fp8(hq, torch.cat([hs[i:], hs[:i]]), e2p)

    case = Case("moe", moe(routing=DSV3, quant="fp8_block", intermediate_size=256), seed=3)
    for kernel, status in ((fake_activation_deepseek_fp8, "pass"), (swapped_scales, "fail")):
        impl = from_adapter_module(ng)._replace(
            run=lambda case, inputs, kernel=kernel: _run_on_cpu(case, inputs, monkeypatch, kernel))
        assert check.run_case(impl, case).status == status, kernel.__name__


def test_layer_bound_carries_the_tanh_approx_term_of_renormalized_weights():
    """H200 finding (session 3, nemotron-h through the composed layer): with tanh.approx sigmoids of very negative
    logits, renormalized weights move by (rsf + k·w)·η/Σs, far more than the unrenormalized rsf·η the layer used
    to charge; its bound was 0 where the kernel's output was one bf16 ulp off. One ulp now passes, three fail."""
    from difftest.checking import compare, impl_spec
    from difftest.model import generate
    from difftest.model.case import Case

    case = Case.from_dict({"config": {"activation": "relu2", "half_order": "gate_up", "hidden_dtype": "bf16",
                                      "hidden_size": 240, "intermediate_size": 128, "local_expert_offset": 0,
                                      "local_num_experts": None, "quant": "bf16", "router_weight_on_input": False,
                                      "routing": {"bias_dtype": "fp32", "eps": 1e-20, "group_mask_value": "-inf",
                                                  "logits_dtype": "fp32", "method": "deepseek_v3", "n_group": 1,
                                                  "num_experts": 128, "num_fused_shared_experts": 0,
                                                  "num_tokens": 9, "renormalize": True,
                                                  "routed_scaling_factor": 2.5, "top_k": 6, "topk_group": 1},
                                      "rsf_placement": "routing"}, "dist": "all_negative", "op": "moe", "seed": 9409})
    recipe = NAMED["flashinfer_trtllm_gen_nogemm_bf16"]
    inputs = generate.inputs(case)
    spec = impl_spec.layer(case, inputs, recipe)
    t, h = 1, 178

    def verdict(ulps):
        out = spec.out.copy()
        out[t, h] = out[t, h] + ulps * 2.0**-6  # bf16 spacing in [2, 4)
        return compare.compare_moe(case, inputs, {"out": out, "ids": spec.ids}, recipe, "t")

    assert 2 <= spec.out[t, h] < 4
    assert verdict(1).ok and not verdict(3).ok


def test_shard_batch_indices_must_be_local(monkeypatch):
    """Llama4's single-warp path on a shard with an offset writes global expert indices into
    cta_idx_xy_to_batch_idx (open fixture flashinfer-trtllm_gen_routing-llama4_warp_path_shard). A stand-in doing
    that on the H200 case of fixture moe-flashinfer.trtllm_gen_nogemm-2844e7cee4ac (5 experts, shard [1, 5), token on
    expert 3: batch index 3 where 2 is local) is named as that fixture, not computed with expert 4's weights; the
    correct stand-in passes."""
    from difftest.checking.interface import with_stacked_weights
    from difftest.model import generate

    config = moe(routing=dataclasses.replace(RENORM, method="llama4", num_tokens=1, num_experts=5, top_k=1),
                 hidden_size=16, intermediate_size=64, local_expert_offset=1, local_num_experts=4)
    case = Case("moe", config, seed=0)
    inputs = generate.inputs(case)
    inputs["logits"] = np.array([[0.8262, 0.7572, 0.15, 2.4659, 0.2858]], np.float32)
    assert check.run_case(from_adapter_module(ng)._replace(
        run=lambda case, _: _run_on_cpu(case, inputs, monkeypatch)), case, inputs).status == "pass"
    correct = fake_routing(case, inputs)

    def global_batch_indices(logits, bias, method, a, *, local_expert_offset, local_num_experts):
        out = correct(logits, bias, method, a, local_expert_offset=local_expert_offset,
                      local_num_experts=local_num_experts)
        ctas = out["cta_idx_xy_to_batch_idx"]
        return {**out, "cta_idx_xy_to_batch_idx": torch.where(ctas >= 0, ctas + local_expert_offset, ctas)}

    _run_on_cpu(case, inputs, monkeypatch)  # installs the other stand-ins
    monkeypatch.setattr(tg, "trtllm_gen_routing", global_batch_indices)
    with pytest.raises(ng.ShardIndexError, match="slot 0 .global expert 3. under local expert 3 .*llama4_warp_path"):
        ng.run(case.config, with_stacked_weights(case, inputs), device="cpu")
    # the finding's signature names the routing output and the check, not the exception type (--known tells it apart)
    result = check.run_case(from_adapter_module(ng)._replace(
        run=lambda case, _: ng.run(case.config, with_stacked_weights(case, inputs), device="cpu")), case, inputs)
    assert (result.status, result.failures) == ("error", (("permutation", "shard expert index"),)), result
