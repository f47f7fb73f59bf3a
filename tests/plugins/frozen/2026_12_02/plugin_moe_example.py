"""A complete fused-MoE plug-in for difftest: Mixtral/Qwen-style routing and a SwiGLU expert layer in numpy, on
the bf16 and the DeepSeek fp8 block-scale paths (numpy and ml_dtypes, of the test extra). Copy it and replace
`run` with the call to your kernel.

Fuzz it against the spec (docs/plugins.md):

    python -m difftest fuzz --impl examples/plugin_moe_example.py:FUSED_MOE --op moe --time-budget 60

Routing ("renormalize"): ids = top-k of the logits (ties: lower expert id); weights = softmax over the k
picked logits, times routed_scaling_factor. Each local expert e (ids outside the shard contribute nothing):
h = x·W13ᵀ, stored in bf16; a = silu(gate)·up in fp32, stored in bf16; y = a·W2ᵀ times the router weight on the
fp32 accumulator, stored in bf16; out = the fp32 sum over the token's experts, stored in bf16. On the fp8
path x and a are quantized per token and 128 columns (s = max(amax, 1e-10)/448, q = e4m3(clamp(x/s, ±448)))
and the weights are e4m3 codes with one fp32 scale per 128×128 block. GEMMs sum the dequantized values
exactly (float64) and round once to fp32: a more accurate sum than the recipe's fp32 accumulation, which the
bound allows. `RECIPES` states these rounding points; the spec then holds the output to the bound between
two implementations of that arithmetic.

The expert weights are not among the inputs: `difftest.model.generate.weights(case)` regenerates them from the
case, `.stacked()` as read-only [E, ...] arrays (one call for all experts, cached while the case's weights
stay the same), `.expert(e)` as one expert's dict. The keys per quant path: bf16 w13 [E, N1, H] and
w2 [E, H, I] (bf16 values in float32); fp8_block the same shapes as uint8 e4m3 codes plus w13_scale
[E, 2·ceil(I/128), ceil(H/128)] (each half of the gated W13 its own block rows) and w2_scale
[E, ceil(H/128), ceil(I/128)], float32.
"""

import ml_dtypes
import numpy as np

from difftest.model import generate
from spec.recipes import Recipe

RECIPES = {  # the spec's default rounding points; bf16 has no intermediate to re-quantize
    "bf16": Recipe(name="example_moe_bf16", requant_intermediate=False),
    "fp8_block": Recipe(name="example_moe_fp8_block"),
}
FP8_MAX, BLOCK = 448.0, 128


def bf16(x):
    """Round to the nearest bf16 value (ties to even), kept in float32."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def e4m3_values(codes):
    return np.asarray(codes).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def quantize_rows(x):
    """Per token and 128 columns: (dequantized values float64 [T, K]). s = fl32(max(amax, 1e-10) / 448)."""
    T, K = x.shape
    g = x.reshape(T, K // BLOCK, BLOCK)
    s = np.maximum(np.abs(g).max(axis=-1), np.float32(1e-10)) / np.float32(FP8_MAX)
    q = np.clip(g / s[..., None], -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn)
    return (q.astype(np.float64) * s[..., None].astype(np.float64)).reshape(T, K)


def block_weight(codes, scales, halves=None):
    """W [N, K] float64 from e4m3 codes [N, K] and 128×128 block scales; `halves` (= I) for a gated W13,
    whose second half starts a new block row."""
    N, K = codes.shape
    rows = np.arange(N) // BLOCK
    if halves is not None:
        first = -(-halves // BLOCK)
        rows = np.where(np.arange(N) < halves, np.arange(N) // BLOCK, first + (np.arange(N) - halves) // BLOCK)
    cols = np.arange(K) // BLOCK
    return e4m3_values(codes) * scales[rows][:, cols].astype(np.float64)


def route(config, logits):
    """(ids [T, k], weights [T, k] float32)."""
    k = config.top_k
    ids = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    x = np.take_along_axis(logits, ids, axis=-1).astype(np.float64)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    w = (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)
    if config.routed_scaling_factor is not None:
        w = w * np.float32(config.routed_scaling_factor)
    return ids, w


class FusedMoE:
    name = "example:fused_moe_numpy"
    version = "1.0"
    ops = ("moe",)
    deterministic = True
    may_crash = False  # a native kernel: True, so that an abort is a finding, not the end of the campaign
    # what it implements; `fuzz --impl` draws only these configurations (difftest/model/where.py)
    space = {"quant": ["bf16", "fp8_block"], "method": "renormalize", "activation": "swiglu",
             "half_order": "gate_up", "router_weight_on_input": False, "rsf_placement": "routing",
             "scale_fmt": "fp32", "expert_weights": "prepared"}  # fp32 scales; it takes quantized weights

    def available(self):
        return None

    def unsupported(self, case):
        c = case.config
        if c.quant == "fp8_block" and (c.hidden_size % BLOCK or c.intermediate_size % BLOCK):
            return "fp8_block needs hidden and intermediate sizes divisible by 128"
        return None  # everything else outside `space` is never drawn

    def recipe(self, case):
        return RECIPES[case.config.quant]

    def run(self, case, inputs):
        c, r = case.config, case.config.routing
        x, I = inputs["hidden"], c.intermediate_size  # x [T, H]: bf16 values in float32
        W = generate.weights(case).stacked()  # read-only [E, ...]: never write into them
        ids, w = route(r, inputs["logits"])
        L = r.num_experts - c.local_expert_offset if c.local_num_experts is None else c.local_num_experts
        fp8 = c.quant == "fp8_block"
        xq = quantize_rows(x) if fp8 else x.astype(np.float64)
        total = np.zeros(x.shape, np.float32)
        for e in range(c.local_expert_offset, c.local_expert_offset + L):
            t, j = np.nonzero(ids == e)
            if not len(t):
                continue
            w13 = block_weight(W["w13"][e], W["w13_scale"][e], I) if fp8 else W["w13"][e].astype(np.float64)
            w2 = block_weight(W["w2"][e], W["w2_scale"][e]) if fp8 else W["w2"][e].astype(np.float64)
            h = bf16((xq[t] @ w13.T).astype(np.float32))  # [n, 2I]
            gate, up = h[:, :I], h[:, I:]
            silu = (gate / (1.0 + np.exp(-gate.astype(np.float64)))).astype(np.float32)
            a = bf16(silu * up)
            aq = quantize_rows(a) if fp8 else a.astype(np.float64)
            y = (aq @ w2.T).astype(np.float32) * w[t, j][:, None]
            np.add.at(total, t, bf16(y))
        return {"out": bf16(total), "ids": ids.astype(np.int32)}


FUSED_MOE = FusedMoE()
