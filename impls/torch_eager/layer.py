"""The MoE layer in torch eager: route, sort slots by expert, gather, per-expert MLP, index_add_ combine.

Rounding points (RECIPE in recipe.py states them per quant path): GEMMs accumulate in fp32 (fp8_block: one
fp32 dot per 128-wide K block, scaled (dot * a_s) * w_s and summed over blocks in K order; mxfp8 and nvfp4:
operands dequantized to fp32, then one fp32 matmul); GEMM1 output -> bf16; activation in fp32 -> bf16;
quantized paths re-quantize that bf16 intermediate; GEMM2's fp32 output * router weight -> bf16; fp32 sum over
experts in ascending expert id (x rsf when rsf_placement == "combine") -> bf16.

CPU and CUDA share this code; on CUDA, fp32 matmuls must not use TF32 (checked).
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F

from . import quant as Q
from .routing import WEIGHT_DTYPES, append_shared, route

QUANT_PATHS = ("bf16", "fp8_block", "mxfp8", "nvfp4")
ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh", "relu2", "silu", "gelu", "identity")
GATED_ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh")
HALF_ORDERS = ("gate_up", "up_gate")
RSF_PLACEMENTS = ("routing", "combine")
SCALE_FMTS = ("fp32", "ue8m0")  # fp8_block activation scales: fp32, or UE8M0 powers of two (DeepGEMM)
BLOCK = {"fp8_block": 128, "mxfp8": 32, "nvfp4": 16}  # activation quantization group along K


class MoEOutput(NamedTuple):
    out: torch.Tensor      # bf16 [T, H]
    ids: torch.Tensor      # int32 [T, k + S]
    weights: torch.Tensor  # float32 [T, k + S], rsf included only when rsf_placement == "routing"


def swiglu(gate, up):
    return F.silu(gate) * up


def geglu(gate, up):
    return F.gelu(gate) * up  # erf gelu


def geglu_tanh(gate, up):
    return F.gelu(gate, approximate="tanh") * up


def relu2(x):
    return torch.square(F.relu(x))


NON_GATED = {"relu2": relu2, "silu": F.silu, "gelu": F.gelu, "identity": lambda x: x}
GATED = {"swiglu": swiglu, "geglu": geglu, "geglu_tanh": geglu_tanh}


def act(h, activation, half_order):
    """Activation of GEMM1's output h [n, N1] (fp32) -> [n, I]. Gated rows are [gate; up] or [up; gate]."""
    if activation in NON_GATED:
        return NON_GATED[activation](h)
    first, second = h.chunk(2, dim=-1)
    gate, up = (first, second) if half_order == "gate_up" else (second, first)
    return GATED[activation](gate, up)


def swap_w13_halves(w):
    """[..., 2X, C] -> the two row halves exchanged ([gate; up] <-> [up; gate]); works on scales too."""
    first, second = w.chunk(2, dim=-2)
    return torch.cat([second, first], dim=-2)


def block_scaled_mm(aq, a_s, wq, w_s):
    """fp32 [n, N]: sum over 128-wide K blocks, in K order, of (fp32 dot(aq, wq) * a_s) * w_s.

    aq e4m3 [n, K], a_s [n, K/128]; wq e4m3 [N, K], w_s [ceil(N/128), K/128]; K % 128 == 0.
    """
    n, K = aq.shape
    N = wq.shape[0]
    a = aq.float().view(n, K // 128, 128).transpose(0, 1)  # [KB, n, 128]
    w = wq.float().view(N, K // 128, 128).permute(1, 2, 0)  # [KB, 128, N]
    ws = w_s.repeat_interleave(128, dim=0)[:N].t()  # [KB, N]
    terms = torch.bmm(a, w) * a_s.t().unsqueeze(-1) * ws.unsqueeze(1)  # [KB, n, N]
    acc = terms[0]
    for kb in range(1, terms.shape[0]):
        acc = acc + terms[kb]
    return acc


def quantize_rows(x, quant, scale_ue8m0=False):
    """bf16 activations [n, K] -> GEMM operand: fp32 (bf16), (e4m3, scales) (fp8_block; UE8M0: power-of-two
    scales), else dequantized."""
    if quant == "bf16":
        return x.float()
    if quant == "fp8_block":
        return Q.per_token_group_quant_fp8(x, 128, scale_ue8m0=scale_ue8m0)
    if quant == "mxfp8":
        return Q.mxfp8_dequant(*Q.mxfp8_quant(x, rule="ceil448"))
    g = Q.nvfp4_global_scale(x, dim=-1)  # per token, so a token's result does not depend on its batch
    return Q.nvfp4_dequant(*Q.nvfp4_quant(x, g), g)


def weight_operand(ew, name, quant):
    if quant == "bf16":
        return ew[name].float()
    if quant == "fp8_block":
        return ew[name], ew[name + "_scale"]
    if quant == "mxfp8":
        return Q.mxfp8_dequant(ew[name], ew[name + "_scale"])
    return Q.nvfp4_dequant(ew[name], ew[name + "_scale"], ew[name + "_global"])


def gemm(a, w, quant):
    """fp32 a @ w.T ([n, K] x [N, K] -> [n, N])."""
    if quant == "fp8_block":
        return block_scaled_mm(*a, *w)
    return a @ w.t()


def expert_forward(x, w, ew, *, activation, half_order, quant, router_weight_on_input, scale_ue8m0=False):
    """One expert on its tokens: x bf16 [n, H], router weights w fp32 [n] -> bf16 [n, H] (weighted)."""
    h = gemm(quantize_rows(x, quant, scale_ue8m0), weight_operand(ew, "w13", quant), quant)  # [n, N1] fp32
    if router_weight_on_input:
        h = h * w.unsqueeze(1)  # (x * w) @ W13, applied to GEMM1's fp32 accumulator
    h = h.to(torch.bfloat16)
    a = act(h.float(), activation, half_order).to(torch.bfloat16)  # [n, I]
    y = gemm(quantize_rows(a, quant, scale_ue8m0), weight_operand(ew, "w2", quant), quant)  # [n, H] fp32
    if not router_weight_on_input:
        y = y * w.unsqueeze(1)
    return y.to(torch.bfloat16)


def expert_source(weights):
    """e -> dict of one expert's tensors, from stacked [E, ...] tensors or a callable."""
    if callable(weights):
        return weights
    return lambda e: {name: t[e] for name, t in weights.items()}


def check_expert(ew, e, H, activation, quant):
    """Raise ValueError naming the expert and key whose shape breaks the table of docs/interfaces.md."""
    need = {"bf16": ("w13", "w2"), "fp8_block": ("w13", "w13_scale", "w2", "w2_scale"),
            "mxfp8": ("w13", "w13_scale", "w2", "w2_scale"),
            "nvfp4": ("w13", "w13_scale", "w13_global", "w2", "w2_scale", "w2_global")}[quant]
    missing = [k for k in need if k not in ew]
    if missing:
        raise ValueError(f"expert {e} lacks weights {missing} for quant={quant!r}")
    pack = 2 if quant == "nvfp4" else 1
    I = ew["w2"].shape[-1] * pack
    N1 = 2 * I if activation in GATED_ACTIVATIONS else I
    if tuple(ew["w13"].shape) != (N1, H // pack) or tuple(ew["w2"].shape) != (H, I // pack):
        raise ValueError(f"expert {e}: w13 {tuple(ew['w13'].shape)} / w2 {tuple(ew['w2'].shape)} do not "
                         f"match H={H}, I={I}, {activation} (w13 [{N1}, {H // pack}], w2 [{H}, {I // pack}])")
    if quant in BLOCK and (H % BLOCK[quant] or I % BLOCK[quant]):
        raise ValueError(f"quant={quant!r} needs H={H} and I={I} divisible by {BLOCK[quant]}")


def check_layer(hidden, logits, *, activation, half_order, quant, local_expert_offset, local_num_experts,
                num_shared, rsf_placement, scale_fmt="fp32"):
    if hidden.ndim != 2 or logits.ndim != 2 or hidden.shape[0] != logits.shape[0]:
        raise ValueError(f"hidden [T, H] and logits [T, E] must share T, got {tuple(hidden.shape)}, "
                         f"{tuple(logits.shape)}")
    num_total = logits.shape[1] + num_shared
    for name, value, allowed in (("activation", activation, ACTIVATIONS),
                                 ("half_order", half_order, HALF_ORDERS), ("quant", quant, QUANT_PATHS),
                                 ("rsf_placement", rsf_placement, RSF_PLACEMENTS),
                                 ("scale_fmt", scale_fmt, SCALE_FMTS)):
        if value not in allowed:
            raise ValueError(f"{name} {value!r} is not one of {allowed}")
    if scale_fmt != "fp32" and quant != "fp8_block":
        raise ValueError(f"scale_fmt {scale_fmt!r} needs quant 'fp8_block', got {quant!r}")
    count = num_total - local_expert_offset if local_num_experts is None else local_num_experts
    if local_expert_offset < 0 or count < 1 or local_expert_offset + count > num_total:
        raise ValueError(f"local experts [{local_expert_offset}, {local_expert_offset + count}) must lie in "
                         f"[0, E + S = {num_total})")
    if hidden.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        raise ValueError("torch.backends.cuda.matmul.allow_tf32 must be False: GEMMs are declared fp32")


def layer_routing(logits, bias, routing, rsf_placement, ids):
    """Routing for the layer: rsf folded into the weights ("routing") or left for the combine ("combine"). Fused
    shared experts count once after the combine: weight 1 ("one") or sum(routed w) / rsf, either over rsf where
    the combine multiplies by rsf (sum(routed w) holds no rsf there, so that one is 1/rsf already)."""
    r = dict(routing)
    S = r.pop("num_fused_shared_experts", 0)
    weights_dtype = r.pop("weights_dtype", "fp32")
    shared_weight = r.pop("shared_weight", "one")
    rsf = r.get("routed_scaling_factor")
    if rsf_placement == "combine":
        r["routed_scaling_factor"] = None
    if S < 0 or weights_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"num_fused_shared_experts={S} must be >= 0 and weights_dtype={weights_dtype!r} "
                         f"one of {tuple(WEIGHT_DTYPES)}")
    forced = None if ids is None else ids[:, :r["top_k"]]
    routed_ids, w = route(logits, bias, **r, ids=forced)
    ids, w = append_shared(routed_ids, w, logits.shape[1], S, rsf, shared_weight)
    if shared_weight == "one" and rsf_placement == "combine" and rsf is not None and S:
        k = routed_ids.shape[1]
        w = torch.cat([w[:, :k], w[:, k:] / torch.tensor(rsf, dtype=w.dtype, device=w.device)], dim=1)
    return ids, w.to(WEIGHT_DTYPES[weights_dtype]).float(), S, rsf


def moe_layer(hidden, logits, bias, weights, *, routing, activation, half_order="gate_up", quant="bf16",
              local_expert_offset=0, local_num_experts=None, rsf_placement="routing",
              router_weight_on_input=False, ids=None, scale_fmt="fp32"):
    """MoE layer: MoEOutput(out bf16 [T, H], ids int32 [T, k + S], weights fp32 [T, k + S]).

    ``weights``: stacked tensors keyed as in docs/interfaces.md ([E + S, ...], global expert ids) or a
    callable e -> dict of one expert's tensors; only experts that received a local token are read. Fused
    shared experts are ids E..E+S-1 of that source. Expert parallelism: only ids in [local_expert_offset,
    local_expert_offset + local_num_experts) contribute (None: all from the offset on); weights are normalized
    over all routed experts. ``ids`` ([T, k] or [T, k + S]) forces the routed selection. ``scale_fmt`` "ue8m0"
    (fp8_block): the activations and the intermediate quantized with power-of-two scales.
    """
    check_layer(hidden, logits, activation=activation, half_order=half_order, quant=quant,
                local_expert_offset=local_expert_offset, local_num_experts=local_num_experts,
                num_shared=routing.get("num_fused_shared_experts", 0), rsf_placement=rsf_placement,
                scale_fmt=scale_fmt)
    T, H = hidden.shape
    ids, w, S, rsf = layer_routing(logits, bias, routing, rsf_placement, ids)
    num_total = logits.shape[1] + S
    hi = num_total if local_num_experts is None else local_expert_offset + local_num_experts
    source = expert_source(weights)
    flat_ids = ids.flatten().long()  # [T * (k + S)]
    tokens = torch.arange(T, device=hidden.device).repeat_interleave(ids.shape[1])
    flat_w = w.flatten()
    order = torch.argsort(flat_ids, stable=True)  # slots grouped by expert, tokens ascending inside
    experts, counts = torch.unique_consecutive(flat_ids[order], return_counts=True)
    acc = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    for e, slots in zip(experts.tolist(), order.split(counts.tolist()), strict=True):
        if not local_expert_offset <= e < hi:
            continue
        ew = source(e)
        check_expert(ew, e, H, activation, quant)
        tok = tokens[slots]
        y = expert_forward(hidden[tok], flat_w[slots], ew, activation=activation, half_order=half_order,
                           quant=quant, router_weight_on_input=router_weight_on_input,
                           scale_ue8m0=scale_fmt == "ue8m0")
        acc.index_add_(0, tok, y.float())  # one row per token per call: deterministic on CUDA too
    if rsf_placement == "combine" and rsf is not None:
        acc = acc * rsf
    return MoEOutput(acc.to(torch.bfloat16), ids, w)


def quantize_expert_weights(w13, w2, quant, *, gated=False, scale_ue8m0=False):
    """Stacked bf16 (or fp32) weights [E, N1, H], [E, H, I] -> the dict of docs/interfaces.md for the quant path.

    fp8_block: 128x128 blocks (``gated``: each half of W13 on its own block rows; UE8M0: power-of-two scales);
    mxfp8: "ceil448" rule; nvfp4: one encode global scale per expert ([E]); bf16: rounded to bf16.
    """
    if quant == "bf16":
        return {"w13": w13.to(torch.bfloat16), "w2": w2.to(torch.bfloat16)}
    out = {}
    for name, t in (("w13", w13), ("w2", w2)):
        if quant == "fp8_block" and name == "w13" and gated:
            halves = [Q.weight_block_quant(h, scale_ue8m0=scale_ue8m0) for h in t.chunk(2, dim=-2)]
            out[name], out[name + "_scale"] = (torch.cat(parts, dim=-2) for parts in zip(*halves, strict=True))
        elif quant == "fp8_block":
            out[name], out[name + "_scale"] = Q.weight_block_quant(t, scale_ue8m0=scale_ue8m0)
        elif quant == "mxfp8":
            out[name], out[name + "_scale"] = Q.mxfp8_quant(t, rule="ceil448")
        else:
            g = Q.nvfp4_global_scale(t, dim=(-2, -1))  # [E, 1, 1]
            out[name], out[name + "_scale"] = Q.nvfp4_quant(t, g)
            out[name + "_global"] = g.flatten()
    return out
