"""The SM100 trtllm-gen fused-MoE adapters checked without SM100 (issue 36 item 3).

Each adapter's call into ``flashinfer.fused_moe.trtllm_{bf16,fp8_block_scale,fp4_block_scale}_moe`` is intercepted on
CPU tensors and checked against the installed FlashInfer: argument names and the defaults left to FlashInfer against
``inspect.signature``; shapes, dtypes and contiguity against the docstrings (the launcher's checks in
``flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu`` where a docstring is silent or contradicts them); enums by
member; and the prepared weights and scales byte for byte against FlashInfer's own preparation
(``flashinfer/fused_moe/prepare.py``). ``fp4_quantize`` and ``block_scale_interleave`` are CUDA-only: FP4 runs them
as the stubs below (their documented outputs) on both sides, so the NVFP4 swizzle itself is checked only against
FlashInfer's pure-torch 128×4 layout helpers. Mutants of the adapters' source show that each check bites.
"""

import importlib
import importlib.util
import inspect
import re
import types
from pathlib import Path

import numpy as np
import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="flashinfer-python not installed "
                       "(pip install --no-deps flashinfer-python==0.7.2.post1 apache-tvm-ffi)"),
]
torch = pytest.importorskip("torch")

from difftest.checking.interface import with_stacked_weights  # noqa: E402
from difftest.model import generate  # noqa: E402
from difftest.model.case import Case, MoEConfig, RoutingConfig  # noqa: E402
from impls.flashinfer import (  # noqa: E402
    _trtllm,
    trtllm_bf16_moe,
    trtllm_fp4_block_scale_moe,
    trtllm_fp8_block_scale_moe,
)

ADAPTERS = (trtllm_bf16_moe, trtllm_fp8_block_scale_moe, trtllm_fp4_block_scale_moe)
QUANT = {trtllm_bf16_moe: "bf16", trtllm_fp8_block_scale_moe: "fp8_block", trtllm_fp4_block_scale_moe: "nvfp4"}
LAUNCHER = "data/csrc/trtllm_fused_moe_kernel_launcher.cu"

# ---- the contract, stated once from the installed FlashInfer 0.7.2.post1

# Tensor arguments: shape in T = seq_len, E = num_experts, L = local_num_experts, H = hidden_size,
# I = intermediate_size, N1 = M (2I gated, I otherwise); the dtypes accepted. Every tensor passed is contiguous.
ROUTING = {"routing_logits": ("T, E", {"float32", "bfloat16"}), "routing_bias": ("E", {"float32", "bfloat16"})}
TENSORS = {
    "trtllm_bf16_moe": {
        **ROUTING, "hidden_states": ("T, H", {"bfloat16"}),
        # BlockMajorK with blockK 128 B = 64 bf16 (the docstring's shape line, [E, M // 128, H // 128, 128],
        # contradicts both its weight_layout paragraph and the launcher; they agree on [E, K/block_k, M, block_k])
        "gemm1_weights": ("L, H // 64, N1, 64", {"bfloat16"}), "gemm2_weights": ("L, I // 64, H, 64", {"bfloat16"}),
    },
    "trtllm_fp8_block_scale_moe": {
        **ROUTING, "hidden_states": ("T, H", {"float8_e4m3fn"}), "hidden_states_scale": ("H // 128, T", {"float32"}),
        "gemm1_weights": ("L, N1, H", {"float8_e4m3fn"}),
        "gemm1_weights_scale": ("L, N1 // 128, H // 128", {"float32"}),
        "gemm2_weights": ("L, H, I", {"float8_e4m3fn"}),
        "gemm2_weights_scale": ("L, H // 128, I // 128", {"float32"}),
    },
    "trtllm_fp4_block_scale_moe": {
        **ROUTING, "hidden_states": ("T, H // 2", {"uint8"}), "hidden_states_scale": ("T, H // 16", {"float8_e4m3fn"}),
        "gemm1_weights": ("L, N1, H // 2", {"uint8"}), "gemm1_weights_scale": ("L, N1, H // 16", {"float8_e4m3fn"}),
        # the docstring says [E, H, I] for the packed FC2 weights: I // 2 bytes ("weights must be fp4 packed in uint8")
        "gemm2_weights": ("L, H, I // 2", {"uint8"}), "gemm2_weights_scale": ("L, H, I // 16", {"float8_e4m3fn"}),
        "output1_scale_scalar": ("L", {"float32"}), "output1_scale_gate_scalar": ("L", {"float32"}),
        "output2_scale_scalar": ("L", {"float32"}),
    },
}
# Where each row above is written down: docstring phrases (whitespace-normalized) and launcher messages. If FlashInfer
# rewords one, the row it backs needs a second look.
DOCSTRING = {
    "trtllm_bf16_moe": [
        "``[seq_len, num_experts]`` tensor of routing logits. ``float32`` or ``bfloat16``.",
        "``[seq_len, hidden_size]`` tensor of input hidden states. Must be ``bfloat16``.",
        "This BF16 MoE entry point requires ``BlockMajorK``",
        "``2`` ``BlockMajorK`` — Blocked along K, logical shape ``[K / blockK, Mn, blockK]`` "
        "(``blockK`` is fixed at 128 B)",
    ],
    "trtllm_fp8_block_scale_moe": [
        "``[hidden_size // 128, seq_len]`` tensor of hidden-states block scales.",
        "``[num_experts, M, hidden_size]`` when ``weight_layout == WeightLayout.MajorK`` (``0``)",
        "``[num_experts, 2*intermediate_size // (32 if mxfp8 else 128), hidden_size // (32 if mxfp8 else 128)]``",
        "``[num_experts, hidden_size, intermediate_size]`` when ``weight_layout == WeightLayout.MajorK``",
        "``[num_experts, hidden_size // (32 if mxfp8 else 128), intermediate_size // (32 if mxfp8 else 128)]``",
    ],
    "trtllm_fp4_block_scale_moe": [
        "Hidden states of shape ``[seq_len, hidden_size // 2]`` (NVFP4)",
        "``[seq_len, hidden_size // (32 if mxfp8 else 16)]``. Dtype is float8.",
        "only the linear layout is supported.",
        "``[num_experts, M, hidden_size // 2]`` packed FP4 FC1 weights, dtype ``uint8``.",
        "``[num_experts, M, hidden_size // (32 if mxfp4 else 16)]`` FC1 weight block scales, dtype float8",
        "``[num_experts, hidden_size, intermediate_size // (32 if mxfp4 else 16)]`` FC2 weight block scales, "
        "dtype float8",
        "``[local_num_experts]`` scaling factors for the first-layer activation output.",
    ],
}
LAUNCHER_MESSAGES = [
    "BlockMajorK [num_experts, K/block_k, M, block_k]", "BF16 Moe: weight_layout must be BlockMajorK",
    "hidden_states_scale must be float.", "gemm1_weights_scale must be float.", "hidden_states must be fp8.",
    "weights must be fp4 packed in uint8.", "gemm1_weights_scale must be fp8.", "gemm2_weights_scale must be fp8.",
    "routing_logits must be float or bfloat16.", "routing_bias must be bfloat16 or float.",
]
# Flags each adapter passes (members, never ints; FlashInfer's own runners pass the same with its prepared views:
# TrtllmBf16RoutedRunner shuffled BlockMajorK, TrtllmFp8BlockRunner MajorK shuffled only for MXFP8), and every argument
# it leaves to FlashInfer with the default the recipes were written against: a FlashInfer default that moves fails.
FLAGS = {
    "trtllm_bf16_moe": {"use_shuffled_weight": True, "weight_layout": ("WeightLayout", "BlockMajorK")},
    "trtllm_fp8_block_scale_moe": {"use_shuffled_weight": False, "weight_layout": ("WeightLayout", "MajorK"),
                                   "fp8_quantization_type": ("Fp8QuantizationType", "DeepSeekFp8")},
    "trtllm_fp4_block_scale_moe": {"hidden_states_scale_layout": ("SfLayout", "layout_linear"),
                                   **dict.fromkeys(("gemm1_bias", "gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit",
                                                    "gemm2_bias"))},
}
LEFT = {"tune_max_num_tokens": 8192, "norm_topk_prob": True, "routing_replay_out": None, "output": None}
DEFAULTS = {
    "trtllm_bf16_moe": {**LEFT, "enable_pdl": True, "gemm1_alpha": None, "gemm1_beta": None,
                        "gemm1_clamp_limit": None},
    "trtllm_fp8_block_scale_moe": {**LEFT, "enable_pdl": None, "num_fused_shared_experts": None, "gemm1_alpha": None,
                                   "gemm1_beta": None, "gemm1_clamp_limit": None, "valid_hidden_size": None,
                                   "valid_intermediate_size": None, "gemm1_bias": None, "gemm2_bias": None},
    "trtllm_fp4_block_scale_moe": {**LEFT, "enable_pdl": None, "per_token_scale": None,
                                   "num_fused_shared_experts": None, "valid_hidden_size": None,
                                   "valid_intermediate_size": None},
}
FP4_QUANTIZE = {"sf_vec_size": 16, "sf_use_ue8m0": False, "is_sf_swizzled_layout": False, "nvfp4_4over6": None}
FI_ACTIVATION = {"swiglu": "SwiGLU", "geglu": "GeGLU", "relu2": "ReLU2", "identity": "Identity"}  # fused_moe.api


def normalized(text):
    return " ".join(text.split())


def tensor(a):
    """torch from numpy, copied: the generated arrays are read-only."""
    return torch.from_numpy(np.array(a))


def kernel_name(module):
    return module.NAME.split(".", 1)[1]


# ---- cases and the intercepted call


def moe_case(module, activation="swiglu", half_order="gate_up", method="renormalize", shard=None, bias=False,
             logits_dtype="fp32", T=3, E=4, H=256, I=128, seed=5):
    """A small case every SM100 adapter takes (E % 4 == 0, H and I multiples of 128); T != H/128 and H != I, so
    that a transposed argument changes its shape."""
    grouped = method == "deepseek_v3"
    offset, local = shard or (0, None)
    routing = RoutingConfig(method, T, E, 1 if method == "llama4" else 2, 4 if grouped else 1, 2 if grouped else 1,
                            2.5 if grouped else None, logits_dtype=logits_dtype, bias_dtype="fp32" if bias else None)
    config = MoEConfig(routing, H, I, activation=activation, half_order=half_order, quant=QUANT[module],
                       local_expert_offset=offset, local_num_experts=local)
    return Case("moe", config, "normal", seed)


def case_inputs(module, case):
    inputs = with_stacked_weights(case, generate.inputs(case))
    if module is trtllm_fp4_block_scale_moe:  # the calibration the case model lacks (CALIBRATION), given here
        amax = float(np.max(np.abs(inputs["hidden"])))
        inputs = {**inputs, "hidden_global": np.float32(448.0 * 6.0 / amax), "intermediate_global": np.float32(3.0)}
    return inputs


class Stubs:
    """The CUDA-only helpers FP4 preparation calls, as their documented outputs on CPU: ``fp4_quantize`` returns
    (uint8 [M, K/2], uint8 flat [M·K/16]) as fp4_quantize_sm100 allocates them (flashinfer/quantization/
    fp4_quantization.py), taken from ``given`` by the input's storage, else bytes derived from the input's bits;
    ``block_scale_interleave`` is FlashInfer's pure-torch 128×4 swizzle (diffusion_ops/minimax_h3_fc1_swiglu.py)."""

    def __init__(self):
        from flashinfer.quantization import fp4_quantization

        sf_layout = importlib.import_module("flashinfer.diffusion_ops.minimax_h3_fc1_swiglu")  # the package
        self.real_quantize = inspect.signature(fp4_quantization.fp4_quantize)
        self.swizzle = sf_layout._swizzle_sf_128x4
        self.given, self.quantize_calls = {}, []

    def fp4_quantize(self, *args, **kwargs):
        bound = self.real_quantize.bind(*args, **kwargs)
        bound.apply_defaults()
        x = bound.arguments["input"]
        self.quantize_calls.append(bound.arguments)
        if x.data_ptr() in self.given:
            return self.given[x.data_ptr()]
        bits = x.contiguous().view(torch.int16).to(torch.int32)
        return (bits[:, 0::2] & 0xFF).to(torch.uint8), (bits[:, 0::16] >> 8 & 0x7F).to(torch.uint8).reshape(-1)

    def block_scale_interleave(self, sf):
        assert sf.dtype == torch.uint8 and sf.ndim == 2 and sf.shape[0] % 128 == 0, (
            f"block_scale_interleave takes uint8 [M % 128 == 0, K/16] here, got {sf.dtype} {tuple(sf.shape)}")
        return self.swizzle(sf)


@pytest.fixture
def intercept(monkeypatch):
    """call(module, case, inputs) -> (kwargs of the adapter's FlashInfer call, the stubs): the entry point replaced
    by a recorder that returns the documented do_finalize=True result, zeros [T, H] bf16."""
    import flashinfer
    import flashinfer.fp4_quantization as fp4_shim
    from flashinfer import fused_moe
    from flashinfer.quantization import fp4_quantization

    stubs = Stubs()
    for namespace in (flashinfer, fp4_shim, fp4_quantization):
        monkeypatch.setattr(namespace, "fp4_quantize", stubs.fp4_quantize)
    for namespace in (flashinfer, fp4_quantization):
        monkeypatch.setattr(namespace, "block_scale_interleave", stubs.block_scale_interleave)
    calls = []

    def call(module, case, inputs):
        name = kernel_name(module)
        T, H = case.config.routing.num_tokens, case.config.hidden_size
        out = torch.zeros(T, H, dtype=torch.bfloat16)
        as_returned = [out] if name == "trtllm_fp4_block_scale_moe" else out  # "List" vs the deprecated tensor
        monkeypatch.setattr(fused_moe, name, lambda **kwargs: calls.append(kwargs) or as_returned)
        result = module.run(case.config, inputs, device="cpu")
        assert len(calls) == 1 and result["out"].shape == (T, H)
        return calls.pop(), stubs

    return call


# ---- the checks


def dims(c):
    r = c.routing
    local = r.num_experts - c.local_expert_offset if c.local_num_experts is None else c.local_num_experts
    return {"T": r.num_tokens, "E": r.num_experts, "L": local, "H": c.hidden_size, "I": c.intermediate_size,
            "N1": (2 if c.gated else 1) * c.intermediate_size}


def check_signature(name, kwargs):
    """Names against inspect.signature of the installed function; the arguments left out keep DEFAULTS."""
    import flashinfer.fused_moe.core as core

    signature = inspect.signature(getattr(core, name))
    try:
        signature.bind(**kwargs)
    except TypeError as e:
        raise AssertionError(f"{name}: the adapter's call does not bind to the installed signature: {e}") from None
    left = {p: v.default for p, v in signature.parameters.items() if p not in kwargs}
    assert left == DEFAULTS[name], f"{name}: arguments left to FlashInfer {left}, expected {DEFAULTS[name]}"


def check_tensors(name, kwargs, c):
    d = dims(c)
    table = TENSORS[name]
    extra = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k not in table]
    assert not extra, f"{name}: tensors {extra} passed without a contract row here"
    for arg, (shape, dtypes) in table.items():
        t = kwargs[arg]
        if arg == "routing_bias" and c.routing.bias_dtype is None:
            assert t is None, f"{name}: routing_bias passed for a case without a bias"
            continue
        want = tuple(eval(f"({shape},)", {"__builtins__": {}}, d))
        assert tuple(t.shape) == want, f"{name}: {arg} shape {tuple(t.shape)}, FlashInfer's [{shape}] = {list(want)}"
        dtype = str(t.dtype).removeprefix("torch.")
        assert dtype in dtypes, f"{name}: {arg} dtype {dtype}, FlashInfer takes {sorted(dtypes)}"
        assert t.is_contiguous(), f"{name}: {arg} strides {t.stride()} are not contiguous for shape {want}"


def check_scalars(name, kwargs, c):
    """The routing block, the flags and the enums (members of FlashInfer's IntEnums, named in its docstrings)."""
    import flashinfer.fused_moe.core as core
    from flashinfer import tllm_enums

    r, d = c.routing, dims(c)
    grouped = r.method == "deepseek_v3"
    want = {"num_experts": d["E"], "top_k": r.top_k, "n_group": r.n_group if grouped else None,
            "topk_group": r.topk_group if grouped else None, "intermediate_size": d["I"],
            "local_expert_offset": c.local_expert_offset, "local_num_experts": d["L"],
            "routed_scaling_factor": r.routed_scaling_factor, "do_finalize": True}
    for arg, value in {**want, **FLAGS[name]}.items():
        if isinstance(value, tuple):  # (enum, member)
            value = getattr(getattr(tllm_enums, value[0]), value[1])
            assert type(kwargs[arg]) is type(value), f"{name}: {arg}={kwargs[arg]!r} is not a {type(value).__name__}"
        assert kwargs[arg] == value, f"{name}: {arg}={kwargs[arg]!r}, expected {value!r}"
    method, activation = kwargs["routing_method_type"], kwargs["activation_type"]
    assert type(method) is tllm_enums.RoutingMethodType and method.name == _trtllm.METHODS[r.method], (
        f"{name}: routing_method_type={method!r} for {r.method!r}")
    methods_doc = normalized(inspect.getdoc(core.trtllm_bf16_moe))  # the fp8 and fp4 docstrings point to it
    assert f"``{int(method)}`` ``{method.name}``" in methods_doc, f"{method!r} is not in FlashInfer's method list"
    assert type(activation) is tllm_enums.ActivationType, f"{name}: activation_type={activation!r} is not a member"
    doc = normalized(inspect.getdoc(getattr(core, name)))
    assert f"``{activation.value}`` {activation.name}" in doc, f"{name}: its docstring does not list {activation!r}"
    assert tllm_enums.is_gated_activation(activation) == c.gated, f"{name}: {activation!r} vs gated={c.gated}"


def up_first(w13, c):
    """GEMM1 rows [.., N1, K] in the case's half_order -> FlashInfer's order: gated w13 ``in [up, gate] order``
    (prepare_trtllm_bf16_weights, prepare_trtllm_fp4_weights), the first half the linear/up half X1."""
    if not c.gated or c.half_order == "up_gate":
        return w13
    n = w13.shape[1] // 2
    return torch.cat([w13[:, n:], w13[:, :n]], 1)


def local(c, inputs):
    offset, count = c.local_expert_offset, dims(c)["L"]
    return {k: v[offset:offset + count] for k, v in inputs.items() if k.startswith(("w13", "w2"))}


def flashinfer_activation(c):
    from flashinfer.fused_moe import api

    return getattr(api, FI_ACTIVATION[c.activation])()


def expected_weights(module, c, inputs, stubs):
    """The local experts' weights as FlashInfer's own preparation lays them out, from the same values."""
    from flashinfer.fused_moe import prepare
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat

    w, d = local(c, inputs), dims(c)
    geometry = dict(num_local_experts=d["L"], hidden_size=d["H"], intermediate_size=d["I"],
                    activation=flashinfer_activation(c), permute_cache={})
    if module is trtllm_bf16_moe:
        bf16 = lambda k: tensor(w[k]).to(torch.bfloat16)
        out = prepare.prepare_trtllm_bf16_weights(up_first(bf16("w13"), c), bf16("w2"), **geometry)
        return {k: out[k] for k in ("gemm1_weights", "gemm2_weights")}
    if module is trtllm_fp8_block_scale_moe:  # DeepSeekFp8: MajorK, no permutation (test below); scales rows alike
        e4m3 = lambda k: tensor(w[k]).view(torch.float8_e4m3fn)
        return {"gemm1_weights": up_first(e4m3("w13"), c),
                "gemm1_weights_scale": up_first(tensor(w["w13_scale"]), c),
                "gemm2_weights": e4m3("w2"), "gemm2_weights_scale": tensor(w["w2_scale"])}
    placeholders = {}
    for k in ("w13", "w2"):  # prepare_trtllm_fp4_weights quantizes bf16: its fp4_quantize returns the given codes
        order = (lambda t: up_first(t, c)) if k == "w13" else (lambda t: t)
        codes, scales = order(tensor(w[k])), order(tensor(w[k + "_scale"]))
        placeholders[k] = torch.zeros(*codes.shape[:2], 2 * codes.shape[2], dtype=torch.bfloat16)
        stubs.given[placeholders[k].data_ptr()] = (codes.reshape(-1, codes.shape[2]), scales.reshape(-1))
    out = prepare.prepare_trtllm_fp4_weights(placeholders["w13"], placeholders["w2"], **geometry,
                                             quant=QuantConfig(weight=QuantFormat.NVFP4, activation=QuantFormat.NVFP4))
    return {k: out[k] for k in ("gemm1_weights", "gemm1_weights_scale", "gemm2_weights", "gemm2_weights_scale")}


def check_values(module, name, kwargs, c, inputs, stubs):
    """Routing inputs as given; weights and scales as FlashInfer prepares them; FP4: the activation quantizer's
    call and output as prepare_trtllm_fp4_activations makes them, the epilogue scalars per local expert."""
    logits = tensor(inputs["logits"])
    logits = logits.to(torch.bfloat16) if c.routing.logits_dtype == "bf16" else logits
    assert torch.equal(kwargs["routing_logits"], logits), f"{name}: routing_logits differ from the case's logits"
    if c.routing.bias_dtype is not None:
        assert torch.equal(kwargs["routing_bias"], tensor(inputs["bias"])), f"{name}: routing_bias differs"
    for arg, want in expected_weights(module, c, inputs, stubs).items():
        got = kwargs[arg]
        assert got.dtype == want.dtype, f"{name}: {arg} dtype {got.dtype}, FlashInfer's preparation {want.dtype}"
        bad = (got.view(torch.uint8) != want.view(torch.uint8)).reshape(got.shape[0], -1).any(-1)
        assert not bad.any(), (f"{name}: {arg} differs from FlashInfer's preparation in local experts "
                               f"{bad.nonzero().flatten().tolist()} ({c.activation}, {c.half_order})")
    if module is not trtllm_fp4_block_scale_moe:
        return
    from flashinfer.fused_moe import prepare
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat

    hidden_call = stubs.quantize_calls[0]
    assert {k: hidden_call[k] for k in FP4_QUANTIZE} == FP4_QUANTIZE, f"{name}: fp4_quantize called with {hidden_call}"
    g = hidden_call["global_scale"]
    assert g.shape == (1,) and g.dtype == torch.float32, f"fp4_quantize global_scale {g.dtype} {tuple(g.shape)}"
    hidden = tensor(inputs["hidden"]).to(torch.bfloat16)
    q, sf = prepare.prepare_trtllm_fp4_activations(hidden, quant=QuantConfig(weight=QuantFormat.NVFP4,
                                                                             activation=QuantFormat.NVFP4))
    assert torch.equal(kwargs["hidden_states"], q), f"{name}: hidden_states are not fp4_quantize's packed codes"
    assert torch.equal(kwargs["hidden_states_scale"].view(torch.uint8), sf.view(torch.uint8)), (
        f"{name}: hidden_states_scale is not fp4_quantize's linear scales as FlashInfer reshapes them")
    w, gx, gc = local(c, inputs), float(inputs["hidden_global"]), float(inputs["intermediate_global"])
    g13, g2 = (tensor(np.float32(w[k])) for k in ("w13_global", "w2_global"))
    for arg, want in (("output1_scale_scalar", gc / (gx * g13)), ("output1_scale_gate_scalar", 1 / (gx * g13)),
                      ("output2_scale_scalar", 1 / (gc * g2))):
        assert torch.allclose(kwargs[arg], want.float(), rtol=2**-22, atol=0), f"{name}: {arg} {kwargs[arg]} != {want}"


def check_adapter(module, case, intercept, code=None, values=True):
    """Every check on `module`'s call for `case` (`values`: with the values); `code`: a mutant of it to run instead."""
    c = case.config
    reason = module.unsupported(c)
    if module is trtllm_fp4_block_scale_moe:
        assert reason and "calibration" in reason, reason
    else:
        assert reason is None, reason
    inputs = case_inputs(module, case)
    kwargs, stubs = intercept(code or module, case, inputs)
    name = kernel_name(module)
    check_signature(name, kwargs)
    check_tensors(name, kwargs, c)
    check_scalars(name, kwargs, c)
    if values:
        check_values(module, name, kwargs, c, inputs, stubs)


# ---- every path the adapters claim


PATHS = [(m, a, h) for m in ADAPTERS for a in m.SPACE["activation"]
         for h in (("gate_up", "up_gate") if a in ("swiglu", "geglu") else ("gate_up",))]


@pytest.mark.parametrize("module, activation, half_order", PATHS,
                         ids=[f"{kernel_name(m)}-{a}-{h}" for m, a, h in PATHS])
def test_each_claimed_path_calls_flashinfer_as_its_api_says(module, activation, half_order, intercept):
    check_adapter(module, moe_case(module, activation, half_order), intercept)


@pytest.mark.parametrize("module", ADAPTERS, ids=kernel_name)
def test_every_routing_method_with_bias_bf16_logits_and_a_shard(module, intercept):
    """The routing block for each method the adapters map (groups only for DeepSeekV3; values checked above), and
    an expert shard: the local experts' weights [L, ...], offset and count as given."""
    for method in _trtllm.METHODS:
        case = moe_case(module, method=method, bias=method == "deepseek_v3", E=8, H=128)
        check_adapter(module, case, intercept, values=False)
    check_adapter(module, moe_case(module, shard=(4, 4), logits_dtype="bf16", E=8, seed=6), intercept)
    check_adapter(module, moe_case(module, shard=(4, None), E=12, seed=7), intercept)


def test_the_contract_rows_are_what_flashinfer_documents():
    """Each docstring phrase and launcher message the tables above rest on is still in the installed FlashInfer, and
    the entry points the adapters import are the functions whose signatures and docstrings are read."""
    import flashinfer
    import flashinfer.fused_moe.core as core
    from flashinfer import fused_moe

    for name, phrases in DOCSTRING.items():
        assert getattr(fused_moe, name) is getattr(core, name), f"flashinfer.fused_moe.{name} is not core's"
        doc = normalized(inspect.getdoc(getattr(core, name)))
        missing = [p for p in phrases if normalized(p) not in doc]
        assert not missing, f"{name}'s docstring no longer says {missing}"
    source = (Path(flashinfer.__file__).parent / LAUNCHER).read_text()
    missing = [m for m in LAUNCHER_MESSAGES if m not in source]
    assert not missing, f"{LAUNCHER} no longer says {missing}"


def test_fp8_weights_are_flashinfers_deepseek_preparation_unpermuted():
    """prepare_trtllm_fp8_block_weights (DeepSeekFp8) quantizes [up; gate] weights and keeps MajorK: the adapter
    given the same codes and scales in [gate; up] order hands the kernel exactly FlashInfer's tensors."""
    from flashinfer.fused_moe import prepare
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat, SwiGLU

    E, H, I = 2, 256, 128
    values = torch.linspace(-1, 1, E * (2 * I * H + H * I)).to(torch.bfloat16)
    w13, w2 = values[:E * 2 * I * H].view(E, 2 * I, H), values[E * 2 * I * H:].view(E, H, I).flip(-1)
    fi = prepare.prepare_trtllm_fp8_block_weights(w13, w2, quant=QuantConfig(weight=QuantFormat.DeepSeekFp8,
                                                  activation=QuantFormat.DeepSeekFp8), num_local_experts=E,
                                                  hidden_size=H, intermediate_size=I, activation=SwiGLU())
    swap = lambda t: torch.cat([t[:, t.shape[1] // 2:], t[:, :t.shape[1] // 2]], 1)
    got = trtllm_fp8_block_scale_moe.prepare_weights(swap(fi["gemm1_weights"]), swap(fi["gemm1_weights_scale"]),
                                                     fi["gemm2_weights"], fi["gemm2_weights_scale"])
    for arg, tensor in zip(("gemm1_weights", "gemm1_weights_scale", "gemm2_weights", "gemm2_weights_scale"), got,
                           strict=True):
        want = fi[arg]
        assert tensor.dtype == want.dtype and tensor.stride() == want.stride(), arg
        assert torch.equal(tensor.view(torch.uint8), want.view(torch.uint8)), f"{arg} differs from FlashInfer's"


def test_fp8_hidden_scales_are_flashinfers_transposed_layout():
    """Where both quantizers are exact (amax a power of two, values 2^j·{0, ±1/4, ±1/2, ±1}), the adapter's e4m3
    codes and [H/128, T] scales equal FlashInfer's DeepSeekFp8 activation preparation bit for bit."""
    from flashinfer.fused_moe import prepare
    from flashinfer.fused_moe.api import QuantConfig, QuantFormat

    T, H = 5, 384
    j = torch.arange(T * H // 128).view(T, H // 128, 1) % 7 - 3
    m = torch.tensor([0, 0.25, -0.5, 1.0, -1.0])[torch.arange(128) % 5]
    hidden = (2.0 ** j * m).view(T, H).to(torch.bfloat16)
    q, s = trtllm_fp8_block_scale_moe.quantize_hidden(hidden)
    fq, fs = prepare.prepare_trtllm_fp8_block_activations(hidden, quant=QuantConfig(
        weight=QuantFormat.DeepSeekFp8, activation=QuantFormat.DeepSeekFp8))
    passed = trtllm_fp8_block_scale_moe.transposed_hidden_scale(s)
    assert passed.shape == fs.shape == (H // 128, T) and passed.is_contiguous()
    assert torch.equal(passed, fs), "hidden_states_scale is not FlashInfer's [H/128, T] scales"
    assert torch.equal(q.view(torch.uint8), fq.view(torch.uint8)), "hidden e4m3 codes differ from FlashInfer's"


def test_the_128x4_swizzle_stand_in_is_flashinfers_documented_layout():
    """The stub for block_scale_interleave: padded to 128 rows and 4 columns (_compute_swizzled_layout_sf_size,
    "padded in the m dimension to a multiple of 128"), inverted by the unswizzle FlashInfer's trace templates use."""
    from flashinfer.quantization.fp4_quantization import _compute_swizzled_layout_sf_size
    from flashinfer.trace.templates.gemm import _unswizzle_sf_128x4

    stubs = Stubs()
    sf = (torch.arange(256 * 12) % 251).to(torch.uint8).view(256, 12)
    out = stubs.block_scale_interleave(sf)
    assert out.shape == (_compute_swizzled_layout_sf_size(256, 12, 128),)
    assert torch.equal(_unswizzle_sf_128x4(out, 256, 12), sf)
    assert out[:4].tolist() == sf[0, :4].tolist() and out[4:8].tolist() == sf[32, :4].tolist()  # rows 0, 32, 64, 96


# ---- mutants: each check bites


def mutant(module, old, new):
    """`module` re-executed from its source with `old` (exactly once there) replaced by `new`."""
    path = Path(module.__file__)
    source = path.read_text()
    assert source.count(old) == 1, f"mutation site {old!r} is not unique in {path.name}"
    mutated = types.ModuleType(module.__name__ + "_mutant")
    mutated.__file__, mutated.__package__ = str(path), module.__package__
    exec(compile(source.replace(old, new), str(path), "exec"), mutated.__dict__)
    return mutated


MUTANTS = [  # (adapter, file the mutation is in, old, new, what the failure names)
    (trtllm_bf16_moe, None, "gemm2_weights=gemm2_weights", "gemm2_weight=gemm2_weights", "does not bind"),
    (trtllm_bf16_moe, None, "shuffle_rows(reorder_gated(w) if gated else w, 128)", "(reorder_gated(w) if gated else w)",
     "gemm1_weights differs"),
    (trtllm_bf16_moe, None, "reorder_gated(w) if gated else w", "w", "gemm1_weights differs"),
    (trtllm_bf16_moe, None, "        w13 = up_gate_rows(w13, half_order)", "        pass", "gemm1_weights differs"),
    (trtllm_bf16_moe, None, "g2 = [block_major_k(shuffle_rows(w, 128)) for w in w2]",
     "g2 = [block_major_k(shuffle_rows(w.t().contiguous(), 128)) for w in w2]", "gemm2_weights shape"),
    (trtllm_bf16_moe, None, "use_shuffled_weight=True", "use_shuffled_weight=False", "use_shuffled_weight"),
    (trtllm_fp8_block_scale_moe, None, "gemm1_weights_scale=w13_scale", "gemm1_weights_scales=w13_scale",
     "does not bind"),
    (trtllm_fp8_block_scale_moe, None, "hidden_states_scale=transposed_hidden_scale(hidden_scale_col_major)",
     "hidden_states_scale=hidden_scale_col_major", "hidden_states_scale shape"),
    (trtllm_fp8_block_scale_moe, None, "w2.contiguous(), w2_scale.contiguous()",
     "w2.transpose(1, 2).contiguous(), w2_scale.contiguous()", "gemm2_weights shape"),
    (trtllm_fp8_block_scale_moe, None, "up_gate_rows(w13, half_order).contiguous()", "w13.contiguous()",
     "gemm1_weights differs"),
    (trtllm_fp8_block_scale_moe, None, "up_gate_rows(w13_scale, half_order).contiguous()", "w13_scale.contiguous()",
     "gemm1_weights_scale differs"),
    (trtllm_fp8_block_scale_moe, None, "weight_layout=WeightLayout.MajorK", "weight_layout=0", "is not a WeightLayout"),
    (trtllm_fp4_block_scale_moe, None, "gemm2_weights_scale=w2_sf", "gemm2_weight_scale=w2_sf", "does not bind"),
    (trtllm_fp4_block_scale_moe, None, "out[3].append(block_scale_interleave(s2[i2s.to(s2.device)].contiguous()))",
     "out[3].append(s2[i2s.to(s2.device)].contiguous())", "gemm2_weights_scale differs"),
    (trtllm_fp4_block_scale_moe, None, "i13 = _maybe_get_cached_w3_w1_permute_indices(cache, w13[e], 128, "
     "is_gated_act_gemm=gated)", "i13 = _maybe_get_cached_w3_w1_permute_indices(cache, w13[e], 128, "
     "is_gated_act_gemm=False)", "gemm1_weights differs"),
    (trtllm_fp4_block_scale_moe, None, "i2 = get_w2_permute_indices_with_cache(cache, w2[e], 128)",
     "i2 = get_w2_permute_indices_with_cache(cache, w2[e], 64)", "gemm2_weights differs"),
    (trtllm_fp4_block_scale_moe, None, "hidden_states_scale_layout=SfLayout.layout_linear",
     "hidden_states_scale_layout=SfLayout.layout_128x4", "hidden_states_scale_layout"),
    (trtllm_fp4_block_scale_moe, None, "output1_scale_gate_scalar=1.0 / (hidden_global * g_w13)",
     "output1_scale_gate_scalar=1.0 / (hidden_global * g_w2)", "output1_scale_gate_scalar"),
    (trtllm_fp4_block_scale_moe, None, "is_sf_swizzled_layout=False, nvfp4_4over6=None",
     "is_sf_swizzled_layout=False", "fp4_quantize called with"),
    (trtllm_bf16_moe, _trtllm, "return dict(routing_logits=logits,", "return dict(router_logits=logits,",
     "does not bind"),
    (trtllm_fp8_block_scale_moe, _trtllm, "return {k: v[offset:offset + count]", "return {k: v[:count]",
     "differs from FlashInfer's preparation in local experts"),
    (trtllm_fp4_block_scale_moe, _trtllm, "return getattr(RoutingMethodType, METHODS[method])",
     "return int(getattr(RoutingMethodType, METHODS[method]))", "routing_method_type"),
]


@pytest.mark.parametrize("module, where, old, new, failure", MUTANTS,
                         ids=[f"{kernel_name(m)}-{i}" for i, (m, *_) in enumerate(MUTANTS)])
def test_a_mutated_adapter_fails_the_contract(module, where, old, new, failure, intercept, monkeypatch):
    if where is None:
        bad = mutant(module, old, new)
    else:  # the shared module, as the adapter sees it: through its module attribute
        monkeypatch.setattr(module, where.__name__.rsplit(".", 1)[1], mutant(where, old, new))
        bad = module
    case = moe_case(module, shard=(4, 4), E=8) if "offset" in old else moe_case(module)
    with pytest.raises(AssertionError, match=re.escape(failure)):
        check_adapter(module, case, intercept, code=bad)
