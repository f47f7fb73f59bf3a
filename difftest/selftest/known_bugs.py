"""Bug models and reproduction cases for fifteen public MoE bugs, K1-K15 (each BUGS entry names its report).

The buggy kernels cannot run here, so each bug gets a model: the torch implementation with the one thing the
report names changed (a glue mistake, or a kernel-internal mechanism emulated in torch), loadable by registry
name as ``bug:K01`` ... ``bug:K15`` (what the fixtures name; difftest/checking/interface.py SELF_TEST). ``BUGS`` pairs
each model with the case that triggers it (the report's minimal trigger, scaled down where the mechanism
allows) and the public report it reproduces;
tools/make_known_bug_fixtures.py writes them as "open" fixtures: each must fail on its model and pass on every
correct implementation.
"""

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import torch

from impls.torch_eager import layer as te_layer
from impls.torch_eager import quant as te_quant
from impls.torch_eager import routing as te_routing
from spec.routing import GROUPED_METHODS, SOFTMAX_METHODS

from ..checking.impl_torch import TORCH, expert_tensors, numpy, tensor
from ..model.case import Case, Decline, MoEConfig, QuantConfig, RoutingConfig
from ..model.generate import weights as generated_weights
from .bug_models import DEEPSEEK_BIASED_WEIGHTS

# ---- helpers: torch pieces re-run with one thing changed


def _bits_as_bf16(a):
    """The bytes of a float32 array read as consecutive bf16 values (little-endian: low half first)."""
    halves = np.ascontiguousarray(a, np.float32).ravel().view(np.uint16).astype(np.uint32) << 16
    return halves.view(np.float32)


def _bf16(x):
    return torch.as_tensor(x).to(torch.bfloat16).float().numpy()


def _moe_case(case, **changes):
    return replace(case, config=replace(case.config, **changes))


def _expert(a, w, ew, c):
    """te.layer.expert_forward with GEMM1's operand `a` given: [n, H] operand -> bf16 [n, H] weighted by w."""
    h = te_layer.gemm(a, te_layer.weight_operand(ew, "w13", c.quant), c.quant).to(torch.bfloat16)
    act = te_layer.act(h.float(), c.activation, c.half_order).to(torch.bfloat16)
    a2 = te_layer.quantize_rows(act, c.quant)
    y = te_layer.gemm(a2, te_layer.weight_operand(ew, "w2", c.quant), c.quant)
    return (y * w.unsqueeze(1)).to(torch.bfloat16)


def _combine(case, inputs, ids, w, *, local=None, expert=None, operand=None):
    """out (numpy, bf16 values [T, H]) of a moe case whose routing is (ids, w) with rsf folded into w.

    local(e) -> bool: the experts this shard runs (default: the case's local window); expert(e) -> the dict of
    expert e's tensors (default: the generated weights); operand: GEMM1's operand for all T tokens (default:
    each expert quantizes its own rows, as impls/torch_eager does)."""
    c = case.config
    T, H = c.routing.num_tokens, c.hidden_size
    hi = c.routing.num_experts if c.local_num_experts is None else c.local_expert_offset + c.local_num_experts
    local = local or (lambda e: c.local_expert_offset <= e < hi)
    expert = expert or expert_tensors(generated_weights(case), c.quant, "cpu")
    hidden = tensor(inputs["hidden"], c.hidden_dtype, "cpu")
    ids, w = torch.as_tensor(np.asarray(ids, np.int64)), torch.as_tensor(np.asarray(w, np.float32))
    acc = torch.zeros(T, H, dtype=torch.float32)
    for e in torch.unique(ids).tolist():
        if not local(e):
            continue
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        a = te_layer.quantize_rows(hidden[tok], c.quant) if operand is None else operand[tok]
        acc.index_add_(0, tok, _expert(a, w[tok, slot], expert(e), c).float())
    return numpy(acc.to(torch.bfloat16))


def _model(name, ops, run, **modelled):
    """torch eager with one public bug; the routing models return ids and weights only, so they are of contract 1
    (before the padded permutation), and the layer models of torch's own contract. ``modelled``: {field: values}
    of the kernel path the bug is in (a moe case's routing fields too); any other value is declined, naming it, so
    that a campaign of the model reports its bug and not its misuse (KeyError 'w13_scale' on a path it does not
    model, found as a new bug by a fresh `fuzz --known fixtures/`)."""

    def unsupported(case):
        c = case.config
        for field, values in modelled.items():
            value = getattr(c.routing if case.op == "moe" and not hasattr(c, field) else c, field)
            if value not in values:
                return Decline(f"models the bug on {field} {' or '.join(map(str, values))} only, not {value}",
                               **{field: value})
        return TORCH.unsupported(case)

    return TORCH._replace(name=f"bug:{name}", ops=ops, run=run, contract=1 if ops == ("routing",) else TORCH.contract,
                          unsupported=unsupported)


# ---- routing bugs


def _k02_run(case, inputs):
    """K2: trtllm-gen routingMainKernel (n_group=1) pads the warp with lanes of score -1.0 (invalidScore) and
    takes -1 as the top-k minValue, assuming sigmoid + bias >= 0. Modelled as a top-k over the E keys s + b
    followed by padding lanes E..31 of key -1 (ties: lower lane first), so a padding lane beats every valid
    expert whose key is below -1; a padding pick carries no score (weight 0) and the weights are renormalized
    over the picks. Any other routing (another method, no bias, groups, fused shared experts) is torch's: the model
    is of that kernel path alone."""
    c = case.config
    if c.method != "deepseek_v3" or "bias" not in inputs or c.n_group > 1 or c.num_fused_shared_experts:
        return TORCH.run(case, inputs)
    s = te_routing.sigmoid(torch.tensor(inputs["logits"]))
    keys = s + torch.tensor(inputs["bias"])
    lanes = max(32, c.num_experts)
    padded = torch.cat([keys, torch.full((c.num_tokens, lanes - c.num_experts), -1.0)], dim=1)
    ids = te_routing.topk_ids(padded, c.top_k)
    scores = torch.cat([s, torch.zeros(c.num_tokens, lanes - c.num_experts)], dim=1)
    w = te_routing.selected_weights(
        "deepseek_v3",
        None,
        scores,
        ids,
        renormalize=c.renormalize,
        eps=c.eps,
        rsf=c.routed_scaling_factor,
        renorm_order="divide_then_scale",
    )
    return {"ids": numpy(ids.to(torch.int32)), "weights": numpy(w)}


def _k03_run(case, inputs):
    """K3: softmax top-k with renormalize=False returns the gathered raw logits instead of the softmax
    probabilities (softmax was applied only inside the renormalize branch). Renormalizing, or another method than
    the ungrouped softmax top-k, or with fused shared experts, it is torch's."""
    c = case.config
    out = TORCH.run(case, inputs)
    ungrouped_softmax = c.method in SOFTMAX_METHODS and c.method not in GROUPED_METHODS  # default, renormalize_naive
    if not ungrouped_softmax or c.renormalize or c.num_fused_shared_experts:
        return out
    w = np.take_along_axis(inputs["logits"], out["ids"].astype(np.int64), axis=1)
    rsf = np.float32(1.0 if c.routed_scaling_factor is None else c.routed_scaling_factor)
    return {**out, "weights": (w * rsf).astype(np.float32)}  # ids and permutation as torch's


def _k05_k06_weights(case, inputs, ids):
    """K5/K6: the warp-per-token kernels recover the unbiased score of a selected expert as key - bias, with
    key = fl32(sigmoid + bias); where the sigmoid is below half an ulp of the bias this is exactly 0. The
    weights are then renormalized with the case's eps (K5: 0 before fi PR #3803, so 0/0 = NaN; K6: 1e-20,
    so 0)."""
    r = case.config.routing if case.op == "moe" else case.config
    bias = torch.tensor(inputs["bias"])
    keys = te_routing.sigmoid(torch.tensor(inputs["logits"])) + bias
    ids = torch.as_tensor(np.asarray(ids, np.int64))
    recovered = keys.gather(1, ids) - bias[ids]
    w = te_routing.normalize(
        recovered, eps=r.eps, rsf=r.routed_scaling_factor, renorm_order="divide_then_scale"
    )
    return numpy(w)


def _k05_run(case, inputs):
    """K5: torch's selection (ties: lower id, as the spec), weights recovered by subtraction; DeepSeek-V3 routing
    with a bias and no fused shared experts only (the kernels that subtract it), else torch's."""
    out = TORCH.run(case, inputs)
    if case.config.method != "deepseek_v3" or "bias" not in inputs or case.config.num_fused_shared_experts:
        return out
    return {**out, "weights": _k05_k06_weights(case, inputs, out["ids"])}  # ids and permutation as torch's


K6_SINGLE_CLUSTER_MAX_TOKENS = 256  # FlashInfer routing dispatch: above it, cooperative / histogram paths


def _k06_run(case, inputs):
    """K6: the token count picks the routing path; above the single-cluster limit the weights are recovered
    by subtraction (_k05_k06_weights), at or below it the block-per-token path is correct."""
    out = TORCH.run(case, inputs)
    if case.config.routing.num_tokens <= K6_SINGLE_CLUSTER_MAX_TOKENS:
        return out
    w = _k05_k06_weights(case, inputs, out["ids"])
    return {"out": _combine(case, inputs, out["ids"], w), "ids": out["ids"], "weights": w}


# ---- glue and layout bugs of the layer


def _k04_run(case, inputs):
    """K4: the fp32 e_score_correction_bias passed straight to a kernel that reads bf16: element i of the
    bias the kernel sees is the i-th 16-bit half of the fp32 buffer (even i: low mantissa bits of b[i/2])."""
    bias = _bits_as_bf16(inputs["bias"])[: inputs["bias"].size]
    return TORCH.run(case, {**inputs, "bias": bias})


def _rsf_again_run(case, inputs):
    """K7/K8: rsf folded into the top-k weights (placement "routing") and the layer output multiplied by rsf
    once more, rounded to the bf16 output."""
    rsf = case.config.routing.routed_scaling_factor
    out = TORCH.run(_moe_case(case, rsf_placement="routing"), inputs)
    # no rsf (None) scales by nothing, twice as once: np.float32(None) is NaN, which a fresh campaign reported as new
    return {**out, "out": _bf16(out["out"] * np.float32(1.0 if rsf is None else rsf))}


def _k09_run(case, inputs):
    """K9: fp32 top-k weights handed to a finalize kernel that reads bf16: the weight of (token t, slot j) is
    the (t·k + j)-th 16-bit half of the fp32 [T, k] buffer."""
    out = TORCH.run(case, inputs)
    w = _bits_as_bf16(out["weights"])[: out["weights"].size].reshape(out["weights"].shape)
    return {"out": _combine(case, inputs, out["ids"], w), "ids": out["ids"], "weights": w}


def _k10_run(case, inputs):
    """K10: the launcher subtracts local_expert_offset from the global ids and the kernel subtracts it again,
    so expert e runs here only if offset <= e - offset < offset + local_num_experts."""
    c = case.config
    out = TORCH.run(case, inputs)
    off, n = c.local_expert_offset, c.local_num_experts
    if n is None:  # no expert-parallel shard: no offset to subtract twice
        return out

    def local(e):
        return off <= e - off < off + n

    return {"out": _combine(case, inputs, out["ids"], out["weights"], local=local), "ids": out["ids"]}


GATED_INTERLEAVE_ROWS = 8  # FlashInfer reorder_rows_for_gated_act_gemm: gate / up rows alternate in 8s


def _gated_interleave(t):
    """Rows [first half; second half] of t -> blocks of 8 rows taken alternately from each half (the row order
    trtllm-gen's gated GEMM1 epilogue expects)."""
    b = GATED_INTERLEAVE_ROWS
    first, second = t.chunk(2, dim=0)
    blocks = torch.stack([first.unflatten(0, (-1, b)), second.unflatten(0, (-1, b))], dim=1)
    return blocks.flatten(0, 2)


def _k11_run(case, inputs):
    """K11 (root cause open; the reporter's first candidate, the non-gated layout contract): the weight
    preparation applies the gated [gate; up] row interleave to a non-gated relu2 w13 (rows and their NVFP4
    scale rows alike), while w2's columns keep the original order."""
    c = case.config
    out = TORCH.run(case, inputs)
    source = expert_tensors(generated_weights(case), c.quant, "cpu")

    def expert(e):
        ew = dict(source(e))
        for k in ("w13", "w13_scale"):
            ew[k] = _gated_interleave(ew[k].view(torch.uint8)).view(ew[k].dtype)
        return ew

    return {"out": _combine(case, inputs, out["ids"], out["weights"], expert=expert), "ids": out["ids"]}


def _k12_run(case, inputs):
    """K12: w13 built as [gate | up] (Megatron / TE) but read by the kernel as [up | gate] (w3_w1 order)."""
    flipped = {"gate_up": "up_gate", "up_gate": "gate_up"}[case.config.half_order]
    return TORCH.run(_moe_case(case, half_order=flipped), inputs)


SF_ROWS, SF_COLS = 128, 4  # NVFP4 scale-factor tile of the 128x4 swizzled layout
UNWRITTEN_SF = 0xFF  # padding bytes no one wrote (torch.empty), modelled as 0xFF: an e4m3fn NaN code


def _swizzled_128x4(sf):
    """Flat buffer of e4m3 codes [M, C] in the 128x4 swizzled layout, padding bytes UNWRITTEN_SF."""
    M, C = sf.shape
    Mp, Cp = -(-M // SF_ROWS) * SF_ROWS, -(-C // SF_COLS) * SF_COLS
    m, k = torch.meshgrid(torch.arange(M), torch.arange(C), indexing="ij")
    at = (m // 128) * (128 * Cp) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + k % 4
    buf = torch.full((Mp * Cp,), UNWRITTEN_SF, dtype=torch.uint8)
    buf[at.flatten()] = sf.view(torch.uint8).flatten()
    return buf


def _k13_run(case, inputs):
    """K13: the tile-192 tactic (forced) reads the NVFP4 activation scale factors row-major while they were
    written 128x4-swizzled, so token t > 0 gets other tokens' scales or unwritten padding (NaN)."""
    c = case.config
    out = TORCH.run(case, inputs)
    hidden = tensor(inputs["hidden"], c.hidden_dtype, "cpu")
    g = te_quant.nvfp4_global_scale(hidden, dim=-1)
    packed, sf = te_quant.nvfp4_quant(hidden, g)
    misread = _swizzled_128x4(sf)[: sf.numel()].view(sf.shape).view(torch.float8_e4m3fn)
    a = te_quant.nvfp4_dequant(packed, misread, g)
    return {"out": _combine(case, inputs, out["ids"], out["weights"], operand=a), "ids": out["ids"]}


# ---- quantizer bugs (fp8_group, ue8m0, row-major scales)


def _ue8m0_quant(case, inputs, scale):
    """fp8_group quant with ue8m0 scales: amax per group, s = scale(amax) a power of two, q = e4m3(x / s)."""
    c = case.config
    xg = te_quant.group_view(tensor(inputs["x"], c.input_dtype, "cpu").float(), c.group_size)
    s = scale(xg.abs().amax(-1, keepdim=True))
    q = te_quant.to_e4m3(xg / s).flatten(-2)
    s = numpy(s.squeeze(-1))
    return {"q": numpy(q), "scales": s, "scale_buffer": s.view(np.uint8).ravel()}


def _k14_run(case, inputs):
    """K14 (sglang #29954, DeepGEMM ceil_to_ue8m0): ue8m0 scale 2^ceil(log2(s)) in fp32. One fp32 ulp above
    2^k, log2 rounds to exactly k, so the scale is 2^k instead of 2^(k+1) and x/s overflows 448."""

    def scale(amax):
        s = te_quant.group_scale(amax.clamp_min(1e-10), case.config.scale_formula)
        return torch.exp2(torch.ceil(torch.log2(s)))

    return _ue8m0_quant(case, inputs, scale)


def _k15_run(case, inputs):
    """K15: vLLM's C++ per_token_group_quant_fp8 floors the scale, max(amax / 448, 1e-10), before the
    power-of-two rounding; the Triton fallback (the spec) floors amax at 1e-10. Tiny and all-zero groups
    differ."""

    def scale(amax):
        s = te_quant.group_scale(amax, case.config.scale_formula).clamp_min(1e-10)
        return te_quant.e8m0_to_float(te_quant.ue8m0_ceil(s))

    return _ue8m0_quant(case, inputs, scale)


# ---- the catalogue

K01 = DEEPSEEK_BIASED_WEIGHTS._replace(name="bug:K01_deepseek_biased_weights")  # K1: weights from s + b
K02 = _model("K02_minus_one_sentinel", ("routing",), _k02_run)
K03 = _model("K03_raw_logit_weights", ("routing",), _k03_run)
PREPARED = ("prepared",)  # the layer models that combine experts themselves read the prepared (quantized) weights
K04 = _model("K04_fp32_bias_read_as_bf16", ("moe",), _k04_run, quant=("fp8_block",), bias_dtype=("fp32",))
K05 = _model("K05_weights_by_subtraction_no_eps", ("routing",), _k05_run)
K06 = _model("K06_weights_by_subtraction_warp_path", ("moe",), _k06_run, quant=("bf16",))
K07 = _model("K07_rsf_forwarded_and_applied", ("moe",), _rsf_again_run, quant=("bf16",), method=("deepseek_v3",))
K08 = _model("K08_tbo_epilogue_rsf_again", ("moe",), _rsf_again_run, quant=("bf16",), method=("deepseek_v3",))
K09 = _model("K09_fp32_weights_read_as_bf16", ("moe",), _k09_run, quant=("nvfp4",), expert_weights=PREPARED)
K10 = _model("K10_double_offset_subtraction", ("moe",), _k10_run, quant=("nvfp4",), expert_weights=PREPARED)
K11 = _model("K11_gated_interleave_on_relu2", ("moe",), _k11_run, quant=("nvfp4",), activation=("relu2",),
             expert_weights=PREPARED)
K12 = _model("K12_gate_up_read_as_up_gate", ("moe",), _k12_run, quant=("bf16",))
K13 = _model("K13_tile192_scale_layout", ("moe",), _k13_run, quant=("nvfp4",), expert_weights=PREPARED)
K14 = _model("K14_log2_ue8m0", ("quant",), _k14_run, scheme=("fp8_group",), scale_fmt=("ue8m0",))
K15 = _model("K15_scale_floor_before_ue8m0", ("quant",), _k15_run, scheme=("fp8_group",), scale_fmt=("ue8m0",))


class KnownBug(NamedTuple):
    key: str  # K1..K15
    checks: str  # what the fixture checks, one line
    case: Case
    model: str  # attribute of this module
    provenance: str  # the public report(s): repository, issue / PR number, date


def _r(method, T, E, k, **kw):
    return RoutingConfig(method, T, E, k, **kw)


def _bug(key, checks, op, config, dist, seed, provenance):
    return KnownBug(key, checks, Case(op, config, dist, seed), f"K{int(key[1:]):02d}", provenance)


DSV3 = dict(method="deepseek_v3", bias_dtype="fp32")  # sigmoid + fp32 correction bias

BUGS = (
    _bug(
        "K1",
        "DeepSeek-V3 routing weights come from the unbiased sigmoid, not s + bias",
        "routing",
        _r(**DSV3, T=4, E=16, k=4, n_group=4, topk_group=2, routed_scaling_factor=1.0),
        "normal",
        1,
        "vllm-project/vllm PR #12002 (2025-01-13, fixes issue #11971); regression again in "
        "huggingface/transformers PR #41647 (2025-10-16, from transformers #40132)",
    ),
    _bug(
        "K2",
        "negative correction bias (keys below -1) with n_group=1: no padding lane is selected",
        "routing",
        _r(**DSV3, T=4, E=16, k=4),
        "negative_bias",
        0,
        "flashinfer-ai/flashinfer issue #2168 (2025-12-03); community patch fw-ai/flashinfer #8; "
        "same assumption in the review of vllm-project/vllm PR #31478",
    ),
    _bug(
        "K3",
        "softmax top-k without renormalization returns softmax probabilities, not raw logits",
        "routing",
        _r("default", 4, 8, 2, renormalize=False),
        "normal",
        0,
        "sgl-project/sglang PR #35160 (2026-08-17, open); siblings sglang-jax PR #1282, "
        "sgl-project/sglang PR #31449, flashinfer-ai/flashinfer PRs #2889, #2809",
    ),
    _bug(
        "K4",
        "an fp32 correction bias is used as fp32 values, not its bytes read as bf16 (FP8 block)",
        "moe",
        MoEConfig(_r(**DSV3, T=2, E=32, k=8, n_group=4, topk_group=2), 128, 128, quant="fp8_block"),
        "normal",
        0,
        "vllm-project/vllm PR #25895 (2025-09-29, fixes issue #25189; regressions from PRs #23991, #23640)",
    ),
    _bug(
        "K5",
        "GLM-like bias ~11.3, vanishing sigmoid, exact ties at rank 8/9: finite weights",
        "routing",
        _r(**DSV3, T=2, E=256, k=8),
        "glm_bias",
        1,
        "sgl-project/sglang issue #30989 and PR #31001 (2026-07-13, regression from #29783); "
        "NVIDIA/TensorRT-LLM PR #13328 (review)",
    ),
    _bug(
        "K6",
        "more than 256 tokens (warp-per-token routing paths), GLM-like bias: non-zero output",
        "moe",
        MoEConfig(_r(**DSV3, T=257, E=256, k=8, routed_scaling_factor=2.5, eps=1e-20), 16, 16),
        "glm_bias",
        1,
        "flashinfer-ai/flashinfer PR #3875 (2026-07-07; related PR #3803)",
    ),
    _bug(
        "K7",
        "routed_scaling_factor applied exactly once (placement: routing weights)",
        "moe",
        MoEConfig(_r(**DSV3, T=4, E=16, k=4, routed_scaling_factor=2.5), 32, 32),
        "normal",
        0,
        "vllm-project/vllm PR #45037 (2026-06-09, regression from PR #41184); "
        "sgl-project/sglang PR #12998; kvcache-ai/sglang PR #86",
    ),
    _bug(
        "K8",
        "routed_scaling_factor applied exactly once (placement: combine epilogue)",
        "moe",
        MoEConfig(
            _r(**DSV3, T=4, E=16, k=4, n_group=4, topk_group=2, routed_scaling_factor=2.5),
            32,
            32,
            rsf_placement="combine",
        ),
        "normal",
        0,
        "sgl-project/sglang PR #35152 (2026-08-17, open; guard from PR #8690)",
    ),
    _bug(
        "K9",
        "fp32 top-k weights reach the NVFP4 finalize as fp32 values",
        "moe",
        MoEConfig(_r("renormalize", 4, 8, 2), 32, 32, quant="nvfp4"),
        "normal",
        0,
        "flashinfer-ai/flashinfer PR #3763 (2026-06-29), PR #3925 (2026-07-11; follow-up to #3595, #3644)",
    ),
    _bug(
        "K10",
        "expert-parallel shard (offset 4 of 8): the local experts' contributions, not zeros",
        "moe",
        MoEConfig(
            _r("renormalize", 4, 8, 2), 32, 32, quant="nvfp4", local_expert_offset=4, local_num_experts=4
        ),
        "normal",
        0,
        "flashinfer-ai/flashinfer issue #3547 (2026-06-09), PRs #3591, #3686, #1469; "
        "vllm-project/vllm-gaudi PR #1796; NVIDIA/TensorRT-LLM PR #15155",
    ),
    _bug(
        "K11",
        "non-gated relu2 NVFP4 layer, n_group=1 sigmoid + bias routing: w13 rows match w2 columns",
        "moe",
        MoEConfig(_r(**DSV3, T=4, E=8, k=3), 32, 32, activation="relu2", quant="nvfp4"),
        "normal",
        0,
        "vllm-project/vllm issue #52308 (2026-08-14, open), PRs #52316, #33518, #36146; "
        "flashinfer-ai/flashinfer PRs #2304, #2451, #2462, issue #2907",
    ),
    _bug(
        "K12",
        "gated SwiGLU w13 in [gate | up] order is read as such",
        "moe",
        MoEConfig(_r("renormalize", 4, 8, 2), 32, 32),
        "normal",
        0,
        "NVIDIA/Megatron-LM PR #6045 (2026-07-25, open)",
    ),
    _bug(
        "K13",
        "NVFP4 layer: activation scale factors read in the layout they were written (tactic)",
        "moe",
        MoEConfig(_r("renormalize", 4, 8, 2), 32, 32, quant="nvfp4"),
        "normal",
        0,
        "flashinfer-ai/flashinfer issue #4486 (2026-08-12), PRs #4741 (2026-08-26), #4574; "
        "sgl-project/sglang issue #34629",
    ),
    _bug(
        "K14",
        "ue8m0 scales of groups whose amax / 448 lies one fp32 ulp above a power of two are rounded up",
        "quant",
        QuantConfig("fp8_group", 4, 512, input_dtype="fp32", scale_fmt="ue8m0"),
        "pow2_edge",
        0,
        "sgl-project/sglang issue #29954 and PR #29956 (2026-07-02); deepseek-ai/DeepGEMM issue #309",
    ),
    _bug(
        "K15",
        "ue8m0 scales of all-zero groups: amax floored at 1e-10 (2^-42), not the scale (2^-33)",
        "quant",
        QuantConfig("fp8_group", 2, 256, scale_fmt="ue8m0"),
        "zero_group",
        0,
        "vllm-project/vllm issue #53339 and PR #53346 (2026-08-22); NVIDIA/TensorRT-LLM PR #17635",
    ),
)
