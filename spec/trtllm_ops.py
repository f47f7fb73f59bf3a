"""The ops of trtllm-gen's MoE dev kernels (FlashInfer DevKernel.h: permute, activation, convertsf, finalize).

Exact math in float64 with each rounding a visible call; docs/trtllm_gen_dev_kernels.md gives what the
kernels compute. Routing enters as ``expanded_idx_to_permuted_idx`` [T, K] (spec/permutation.py): the
permuted row of token t's k-th expert, -1 where that expert is not local.
"""

import functools

import numpy as np

from .hopper import hopper_rcp
from .mlp import sigmoid
from .numerics import E4M3FN, FP8_BLOCK, FP32, encode, round_to
from .quant import deepseek_scale  # the dev kernels' block scale (one home: the layer's requant uses it)

DEEPSEEK_BLOCK = FP8_BLOCK  # the DeepSeek-FP8 kernels' 1×128 scale groups
SF_LAYOUTS = ("R128c4", "R8c4", "R8c16")
SF_TILES = {"R128c4": (128, 4), "R8c4": (8, 4), "R8c16": (8, 16)}  # (rows, columns) of one tile


def permute(x, expanded_idx_to_permuted_idx, num_padded_tokens):
    """out[p(t, k), :] = x[t, :] for every (t, k) with p >= 0; other rows 0. [T, H] -> [P, H], dtype kept."""
    e2p = np.asarray(expanded_idx_to_permuted_idx)
    out = np.zeros((num_padded_tokens, *np.shape(x)[1:]), np.asarray(x).dtype)
    t, k = np.nonzero(e2p >= 0)
    out[e2p[t, k]] = np.asarray(x)[t]
    return out


def gated_activation(x, alpha=1.0, beta=0.0, clamp_limit=np.inf):
    """SwiGLU on [up; gate] halves: u = x[:, :I], g = x[:, I:] (the SECOND half is gated), g' = min(g, L),
    u' = clip(u, -L, L), y = g'·σ(α·g')·(u' + β). [P, 2I] -> [P, I] float64, exact; alpha, beta, clamp_limit
    scalars or [P, 1]. NaN propagates."""
    x = np.asarray(x, np.float64)
    half = x.shape[1] // 2
    up, gate = np.clip(x[:, :half], -clamp_limit, clamp_limit), np.minimum(x[:, half:], clamp_limit)
    return gate * sigmoid(alpha * gate) * (up + beta)


def requant_deepseek_fp8(y, floor=FP32.min_normal, fmt=E4M3FN, rcp=hopper_rcp):
    """Per row p and block b of 128 columns of the fp32 value y: amax = max |y| (NaN dropped),
    s[b, p] = deepseek_scale(amax, floor), q = fmt_rn_sat(fl32(y·rcp(s))); s = 0 gives 0·inf = NaN and ±inf.
    [P, I] -> (q [P, I]: e4m3 codes uint8, else float32 values; s float32 [I/128, P]). rcp: MUFU.RCP as measured
    (spec/hopper.hopper_rcp: the measured table, every fp32 s); difftest/checking/compare/trtllm_ops.py still
    allows one ulp from RN."""
    y = round_to(y, FP32)
    rows, cols = y.shape
    blocks = y.reshape(rows, cols // DEEPSEEK_BLOCK, DEEPSEEK_BLOCK)
    amax = np.max(np.where(np.isnan(blocks), 0, np.abs(blocks)), axis=-1, initial=0.0)
    s = deepseek_scale(amax, floor)
    with np.errstate(divide="ignore", invalid="ignore"):  # s = 0: rcp(0) = inf, 0·inf = NaN, as the kernel
        v = round_to(blocks * rcp(s)[..., None].astype(np.float64), FP32).reshape(rows, cols)
    q = encode(v, fmt, saturate=True) if fmt is E4M3FN else round_to(v, fmt)
    return q, np.ascontiguousarray(s.T)


def finalize(x, expanded_idx_to_permuted_idx, expert_weights=None, hidden=None, order=None):
    """out[t, h] = Σ_k w[t, k]·x[p(t, k), h] over k with p >= 0, h < hidden; w = 1 when absent; an all-unmapped
    token is 0. [P, H_padded] -> [T, hidden] float64 (the caller rounds once to the output dtype). order None:
    exact; "in_order": fp32 FMAs over k = 0, 1, ... from 0; an int k_split: the small-batch kernel's groups
    g < k_split, each FMAs over k = g, g + k_split, ... from 0, then fp32 adds of the groups in order."""
    e2p = np.asarray(expanded_idx_to_permuted_idx)
    x = np.asarray(x, np.float64)[:, : hidden or np.shape(x)[1]]
    w = np.ones(e2p.shape) if expert_weights is None else np.asarray(expert_weights, np.float64)
    w = w if w.ndim == 3 else w[..., None]  # [T, K, 1], or a weight per column [T, K, hidden]
    terms = np.where((e2p >= 0)[..., None], w, 0.0) * x[np.maximum(e2p, 0)]  # [T, K, hidden], exact products
    if order is None:
        return terms.sum(axis=1)
    k_split = 1 if order == "in_order" else order
    groups = [fp32_fma_sum(terms[:, g::k_split]) for g in range(k_split)]
    return functools.reduce(lambda a, b: round_to(a + b, FP32).astype(np.float64), groups)


def finalize_deepseek_fp8(x, x_scale, expanded_idx_to_permuted_idx, expert_weights, hidden=None):
    """finalize with the weight of column h fl32(w[t, k]·x_scale[h // 128, p(t, k)]): block-dequantize and combine
    in one product. x [P, H_padded] (values), x_scale [H_padded/128, P] -> [T, hidden] float64, exact; then
    stored as requant_deepseek_fp8(·, fmt=x's dtype), floored like the activation's requantization: an all-zero
    block (a token with no local expert, for one) stores scale 2^-126 and zeros, not 0·rcp(0) = NaN."""
    e2p = np.asarray(expanded_idx_to_permuted_idx)
    s = np.repeat(np.asarray(x_scale, np.float64).T, DEEPSEEK_BLOCK, axis=1)[np.maximum(e2p, 0)]  # [T, K, H]
    w = round_to(np.asarray(expert_weights, np.float64)[..., None] * s, FP32).astype(np.float64)
    return finalize(x, e2p, w[..., : hidden or s.shape[-1]], hidden)


def fp32_fma_sum(terms):
    """acc = fl32(acc + term) over axis 1 in order from 0: one FFMA each (the float64 sum of an fp32 value and an
    exact bf16/fp16/e4m3 × bf16 product is exact or too far from an fp32 midpoint to move the rounding)."""
    acc = np.zeros((terms.shape[0], *terms.shape[2:]))
    for k in range(terms.shape[1]):
        acc = round_to(acc + terms[:, k], FP32).astype(np.float64)
    return acc


def sf_offset(i, j, num_cols, layout):
    """Offset of linear element (i, j) in trtllm-gen's swizzled scale-factor layout (SfLayoutDecl.h):
    R128c4 [M/128, N/4, 32, 4, 4] at (i//128, j//4, i%32, (i%128)//32, j%4); R8c4 [M/8, N/4, 8, 4] at
    (i//8, j//4, i%8, j%4); R8c16 [M/8, N/16, 8, 16] at (i//8, j//16, i%8, j%16)."""
    rows, cols = SF_TILES[layout]
    tile = (i // rows * (num_cols // cols) + j // cols) * rows * cols
    if layout == "R128c4":
        return tile + i % 32 * 16 + i % 128 // 32 * 4 + j % 4
    return tile + i % rows * cols + j % cols


def convertsf(sf, num_rows, num_cols, layout):
    """out[i, j] = sf[sf_offset(i, j)]: a swizzled flat scale-factor buffer as linear [num_rows, num_cols]."""
    i, j = np.indices((num_rows, num_cols))
    return np.asarray(sf).ravel()[sf_offset(i, j, num_cols, layout)]
