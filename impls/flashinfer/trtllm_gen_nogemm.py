"""FlashInfer's trtllm-gen MoE pipeline with torch GEMMs in place of its batched GEMMs: a test of the stages
around the GEMMs (routing, permute, activation, finalize) as one layer, on any device the routing adapter runs.

    routing   trtllm-gen routing kernel (trtllm_gen_routing.py): bf16 weights, expanded_idx_to_permuted_idx
    permute   dev kernel: hidden rows (fp8_block: codes and scales) into the expert-grouped padded buffer
    GEMM1     torch, per local expert on its rows, stored bf16
    act       swiglu: dev activation kernel, out = silu(g)·u with g the SECOND half of GEMM1's output, so w13
              is passed as [up; gate]; relu2: torch (activation::run has no non-gated path: not a kernel test)
              fp8_block swiglu: GEMM1's bf16 output quantized in torch per (row, 128), s = amax·fl(1/448),
              q = e4m3(h·fl(1/s)) (the e4m3 codes and block scales FlashInfer's DeepSeek-FP8 GEMM1 writes), then
              the DeepSeek-FP8 activation kernel: dequantize, silu(g)·u in fp32, re-quantize per (row, 128),
              s = max(fl(amax·fl(1/448)), FLT_MIN), q = e4m3(fl(y·MUFU.RCP(s)))
    requant   fp8_block relu2 only: torch, per (row, 128): s = amax·fl(1/448), q = e4m3(y·fl(1/s))
    GEMM2     torch, per local expert, stored bf16
    finalize  dev kernel: out[t] = bf16(Σ_k w[t, k]·x[p(t, k)]) in fp32, the router weight applied here

GEMMs: bf16 path on fp32 operands (bf16 values, exact products) summed by cuBLAS in fp32 with TF32 off;
fp8_block path on codes × scales decoded in fp64 (exact) and summed in fp64; both rounded to bf16 once (the fp64
sum through fp32, an fp32-accumulation realization). Recipes: spec.recipes TRTLLM_GEN_NOGEMM_* (fp8_block: the
swiglu row declares GEMM1's output quantization, Recipe.gemm1_out_quant, and the kernel's re-quantization; the relu2
row torch's re-quantization).
"""

import dataclasses
import functools
import types

import numpy as np

from . import trtllm_gen_routing as routing
from ._env import prepared_inputs_problem, to_numpy, to_torch

NAME = "flashinfer.trtllm_gen_nogemm"
OP = "moe"
DETERMINISTIC = True  # no atomics: cuBLAS without split-K atomics, finalize sums in a fixed order
QUANTS = ("bf16", "fp8_block")
ACTIVATIONS = ("swiglu", "relu2")
BLOCK = 128
RCP448 = np.float32(1) / np.float32(448)
EPS = 1e-10  # amax floor of both torch quantizers (the spec's)


def available():
    """The routing adapter's checks, then the exported trtllm-gen headers the dev-kernel module is built from
    (needed on every arch: FlashInfer ships no prebuilt dev-kernel module)."""
    from . import _trtllm_gen_jit as jit

    return routing.available() or jit.export_headers()[1]


def _by_method(limits):
    """{method: limit} -> a space's joint limit {"method=A,B": limit} (difftest/model/where.py), one key per limit."""
    groups = {}
    for method, limit in limits.items():
        groups.setdefault(limit, []).append(method)
    return {"method=" + ",".join(methods): limit for limit, methods in groups.items()}


# What unsupported() takes, field by field and jointly (difftest/model/where.py): per method, the routing stage's expert
# and top_k tiers, which methods scale and always renormalize, the bias MiniMax2 and ungrouped DeepSeekV3 need and the
# grouped kernel's group limits; I >= 64 where the activation kernel runs (swiglu). It keeps the sizes and the routing
# stage's other limits.
SPACE = {"quant": list(QUANTS), "hidden_dtype": "bf16", "activation": list(ACTIVATIONS), "scale_fmt": "fp32",
         "expert_weights": "prepared", "num_fused_shared_experts": 0, "router_weight_on_input": False,
         "rsf_placement": "routing", "logits_dtype": ["fp32", "bf16"], "num_tokens": "1..", "eps": routing.EPS,
         "method": list(routing.SPACE["method"]),
         "num_experts": _by_method(routing.SPACE["num_experts"]),
         "top_k": {**_by_method({m: f"1..{most}" for m, most in routing.MAX_TOP_K.items()}),
                   **routing.DEEPSEEK_TOP_K_SPACE},
         "routed_scaling_factor": {"method=" + ",".join(routing.SPACE["routed_scaling_factor"]): [None, 1.0]},
         "renormalize": {"method=" + ",".join(routing.SCALED): True},
         "bias_dtype": {"method=minimax2": ["fp32", "bf16"], routing.UNGROUPED_DEEPSEEK: ["fp32", "bf16"]},
         "n_group": {"method=deepseek_v3": f"1..{routing.DEEPSEEK_MAX_GROUPS}"},
         "experts_per_group": {"method=deepseek_v3&n_group=2..": f"1..{routing.DEEPSEEK_MAX_GROUP_SIZE}"},
         "topk_group": {"method=deepseek_v3": f"1..{routing.DEEPSEEK_MAX_TOPK_GROUP}"},
         "intermediate_size": {"activation=swiglu": "64.."}}


def unsupported(config):
    """None when a MoEConfig is inside what the composed pipeline runs; else the violated constraint."""
    c, r = config, config.routing
    if prepared_inputs_problem(c):
        return prepared_inputs_problem(c)
    if c.quant not in QUANTS:
        return f"quant={c.quant!r} not in {QUANTS}"
    if c.hidden_dtype != "bf16":
        return f"hidden_dtype={c.hidden_dtype!r}: the pipeline takes bf16 hidden states"
    if c.activation not in ACTIVATIONS:
        return (f"activation {c.activation!r} not in {ACTIVATIONS}: the activation kernel computes silu(g)·u "
                "only; relu2 is done in torch")
    if c.activation == "swiglu" and c.intermediate_size < 64:
        return f"intermediate_size={c.intermediate_size}: the activation kernel launches 2I/128 CTAs, needs I >= 64"
    if c.quant == "fp8_block" and (c.hidden_size % BLOCK or c.intermediate_size % BLOCK):
        return (f"fp8_block needs hidden_size={c.hidden_size} and intermediate_size={c.intermediate_size} "
                f"multiples of {BLOCK} (1×128 activation and 128×128 weight blocks)")
    if r.num_fused_shared_experts:
        return "fused shared experts are not modelled by this adapter"
    if c.router_weight_on_input:
        return "router_weight_on_input: finalize applies the router weight"
    if c.rsf_placement != "routing":
        return "rsf_placement must be 'routing': the routing kernel scales the weights, finalize applies no rsf"
    n_local = r.num_experts - c.local_expert_offset if c.local_num_experts is None else c.local_num_experts
    if not (0 <= c.local_expert_offset and 1 <= n_local and c.local_expert_offset + n_local <= r.num_experts):
        return (f"local experts [{c.local_expert_offset}, {c.local_expert_offset + n_local}) must lie in "
                f"[0, {r.num_experts})")
    return routing.unsupported(routing_config(c))


def routing_config(config):
    """The RoutingConfig the routing stage runs: the case's, with the layer's expert shard and the default tile (a
    namespace of the same attributes where the configuration is one: a reproducer script's, without difftest)."""
    shard = dict(local_expert_offset=config.local_expert_offset, local_num_experts=config.local_num_experts,
                 tile_tokens_dim=None)
    if dataclasses.is_dataclass(config.routing):
        return dataclasses.replace(config.routing, **shard)
    return types.SimpleNamespace(**{**vars(config.routing), **shard})


def recipe_for(config, as_built=False):
    """The spec recipe's name: flashinfer_trtllm_gen_nogemm_bf16 / _fp8_block (the DeepSeek-FP8 activation kernel) /
    _fp8_block_relu2 (torch's activation and re-quantization); ``as_built`` (the AS_BUILT variant below) and a grouped
    DeepSeekV3 case: its _grouped_as_built row (the routing kernel's bf16 bias)."""
    name = f"flashinfer_trtllm_gen_nogemm_{config.quant}"
    name += "_relu2" if config.quant == "fp8_block" and config.activation == "relu2" else ""
    return name + ("_grouped_as_built" if routing.as_built_bias(config.routing, as_built) else "")


def kernel_w13(w13, half_order, activation):
    """w13 [..., N1, K] (torch) in the case's half order -> the activation kernel's [up; gate] (rows 0:I linear,
    I:2I gated); non-gated w13 unchanged. Works on the block-scale rows [..., N1/128, K/128] alike."""
    from ._prep import up_gate_rows

    return up_gate_rows(w13, half_order) if activation == "swiglu" else w13


def quant_fp8(x, variant):
    """[M, K] float -> (e4m3 [M, K], fp32 scales [M, K/128]) per (row, 128 columns), s = amax·fl(1/448):
    "mul_rcp_amax" q = e4m3(x·fl(448·fl(1/amax))) (the hidden states), "mul_rcp_scale" q = e4m3(x·fl(1/s))
    (the intermediate). amax ignores NaN and is floored at 1e-10; codes saturate at ±448 (spec.quant)."""
    import torch

    if variant not in ("mul_rcp_amax", "mul_rcp_scale"):
        raise ValueError(f"variant must be 'mul_rcp_amax' or 'mul_rcp_scale', got {variant!r}")
    M, K = x.shape
    g = x.float().reshape(M, K // BLOCK, BLOCK)
    amax = torch.nan_to_num(g.abs(), nan=0.0).amax(-1, keepdim=True).clamp_min(EPS)
    s = amax * torch.tensor(RCP448, device=x.device)
    v = g * (448.0 * (1.0 / amax)) if variant == "mul_rcp_amax" else g * (1.0 / s)
    return v.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).reshape(M, K), s.reshape(M, K // BLOCK)


def dequant_rows(codes, scales):
    """e4m3 [M, K] with per-(row, 128) scales [M, K/128] -> exact float64 values."""
    return codes.double() * scales.double().repeat_interleave(BLOCK, dim=1)


def dequant_blocks(codes, scales):
    """e4m3 [N, K] with 128×128 block scales [ceil(N/128), ceil(K/128)] -> exact float64 values."""
    n, k = codes.shape
    s = scales.double().repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:n, :k]
    return codes.double() * s


def expert_gemm(a, w, rows_of, n_out):
    """out[r] = a[r]·w(e)ᵀ for every local expert e and its permuted rows rows_of[e]; other rows 0. a: [P, K]
    float32 / float64 values; w(e) -> [n_out, K] of a's dtype. Rounded once to bf16 (fp64 sums through fp32)."""
    import torch

    out = torch.zeros(a.shape[0], n_out, dtype=torch.bfloat16, device=a.device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for e, rows in rows_of.items():
            out[rows] = (a[rows] @ w(e).T).float().to(torch.bfloat16)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return out


def rows_by_expert(expanded_idx_to_permuted_idx, local_ids, device):
    """{local expert: int64 tensor of its permuted rows} from the routing outputs (numpy)."""
    import torch

    e2p = np.asarray(expanded_idx_to_permuted_idx)
    return {int(e): torch.from_numpy(e2p[local_ids == e].astype(np.int64)).to(device)
            for e in np.unique(local_ids[local_ids >= 0])}


# [(numpy arrays, half order, activation, quant, device tensors)]: the last weights, kept while they recur
_prepared = []


def prepare_weights(inputs, config, device):
    """Stacked numpy weights -> device tensors: w13 rows (and block-scale rows) in the kernel's [up; gate]."""
    import torch

    keys = ("w13", "w2") if config.quant == "bf16" else ("w13", "w13_scale", "w2", "w2_scale")
    arrays = tuple(inputs[k] for k in keys)
    tag = (config.half_order, config.activation, config.quant, str(device))
    if _prepared and _prepared[0][1] == tag and all(a is b for a, b in zip(_prepared[0][0], arrays, strict=True)):
        return _prepared[0][2]
    if config.quant == "bf16":
        w = {"w13": to_torch(inputs["w13"], "bf16", device).float(),
             "w2": to_torch(inputs["w2"], "bf16", device).float()}
    else:
        w = {"w13": to_torch(inputs["w13"], "e4m3fn", device), "w2": to_torch(inputs["w2"], "e4m3fn", device),
             "w13_scale": torch.tensor(inputs["w13_scale"], dtype=torch.float32, device=device),
             "w2_scale": torch.tensor(inputs["w2_scale"], dtype=torch.float32, device=device)}
        w["w13_scale"] = kernel_w13(w["w13_scale"], config.half_order, config.activation)
    w["w13"] = kernel_w13(w["w13"], config.half_order, config.activation)
    _prepared[:] = [(arrays, tag, w)]
    return w


class ShardIndexError(RuntimeError):
    """The routing kernel's shard launch put a slot under another local expert than its global id minus the offset:
    the layer stops before any weight is indexed by it. ``difftest_failure`` is the signature difftest gives it (the
    routing output and the check), so this finding is told apart from any other RuntimeError of the layer."""

    difftest_failure = ("permutation", "shard expert index")


def run(config, inputs, device="cuda"):
    """inputs {"hidden", "logits", "bias"?, "w13", "w2" (+ fp8_block scales)} numpy -> {"out" [T, H] float32 of
    bf16 values, "ids" [T, k] int32 global expert ids}."""
    import torch

    from . import _trtllm_gen_ops as ops

    c, r = config, config.routing
    full, shard, a = routing.launches(routing_config(c), inputs, device)
    tile, offset, n_local = a["tile_tokens_dim"], a["local_expert_offset"], a["local_num_experts"]
    ids = routing.slot_ids(to_numpy(full["expanded_idx_to_permuted_idx"]), to_numpy(full["cta_idx_xy_to_batch_idx"]),
                           tile, 0)
    e2p = shard["expanded_idx_to_permuted_idx"]
    local = routing.slot_ids(to_numpy(e2p), to_numpy(shard["cta_idx_xy_to_batch_idx"]), tile, 0)
    # The kernel's own output, checked before any weight is indexed by it: each slot's local expert is its global id
    # minus the offset, -1 off the shard. With Llama4's single-warp path on a shard with an offset the batch indices
    # are global (the open fixture): past the shard they would index out of its weights, inside it they would read
    # another expert's, a mismatch of the output that looks like arithmetic (H200, 2 December: three fixtures, out off
    # by up to 0.57 at elements whose bound is 0, the rounding rule's exact stores).
    k = r.top_k
    want = np.where((ids[:, :k] >= offset) & (ids[:, :k] < offset + n_local), ids[:, :k] - offset, -1)
    wrong = np.argwhere(local[:, :k] != want)
    if wrong.size:
        t, j = wrong[0]
        raise ShardIndexError(f"the routing kernel's shard launch puts token {t}'s slot {j} (global expert "
                           f"{ids[t, j]}) under local expert {local[t, j]} of a {n_local}-expert shard at offset "
                           f"{offset}, not {want[t, j]} (cf. open fixture {routing.LLAMA4_SHARD})")
    rows_of = rows_by_expert(to_numpy(e2p), local, device)
    P, H = a["max_padded"], c.hidden_size
    n1 = 2 * c.intermediate_size if c.activation == "swiglu" else c.intermediate_size
    # permute writes every (t, k) without testing for -1: slots outside the shard go to one spare row, cut off
    e2p_all = torch.where(e2p >= 0, e2p, P).contiguous()
    w = prepare_weights(inputs, c, device)
    hidden = to_torch(inputs["hidden"], "bf16", device)
    if c.quant == "bf16":
        x = ops.permute(hidden, e2p_all, P + 1)[:P].float()
        h = expert_gemm(x, lambda e: w["w13"][e + offset], rows_of, n1)
    else:
        q, s = quant_fp8(hidden, "mul_rcp_amax")
        xq, xs = ops.permute(q, e2p_all, P + 1, hidden_states_scale=s.T.contiguous())
        x = dequant_rows(xq[:P], xs[:, :P].T)
        h = expert_gemm(x, lambda e: dequant_blocks(w["w13"][e + offset], w["w13_scale"][e + offset]), rows_of, n1)
    if c.quant == "fp8_block" and c.activation == "swiglu":  # GEMM1's output as e4m3 codes; scales [2I/128, P]
        hq, hs = quant_fp8(h, "mul_rcp_scale")
        aq, as_t = ops.activation_deepseek_fp8(hq, hs.T.contiguous(), e2p)
        a = dequant_rows(aq, as_t.T)
    elif c.activation == "swiglu":
        a = ops.activation(h, e2p)
    else:
        a = torch.relu(h.float()).square().to(torch.bfloat16)
    if c.quant == "bf16":
        y = expert_gemm(a.float(), lambda e: w["w2"][e + offset], rows_of, H)
    else:
        if c.activation == "relu2":
            a = dequant_rows(*quant_fp8(a, "mul_rcp_scale"))
        y = expert_gemm(a, lambda e: dequant_blocks(w["w2"][e + offset], w["w2_scale"][e + offset]), rows_of, H)
    out = ops.finalize(y, e2p, expert_weights=shard["topk_weights"])
    return {"out": to_numpy(out), "ids": ids[:, :r.top_k].astype(np.int32)}


# The layer declared as built: the routing kernel's bf16 bias in grouped DeepSeekV3 cases (an open finding), to look
# past it in a campaign: ``--impl impls.flashinfer.trtllm_gen_nogemm:AS_BUILT`` (as trtllm_gen_routing.AS_BUILT).
AS_BUILT = types.SimpleNamespace(**{**globals(), "NAME": f"{NAME}_as_built", "KNOWN_AS": NAME,
                                    "recipe_for": functools.partial(recipe_for, as_built=True)})
