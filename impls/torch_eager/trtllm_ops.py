"""The trtllm-gen MoE dev kernels' math in torch: permute, gated activation (plain and DeepSeek FP8 requant),
convertsf, finalize. Written from docs/trtllm_gen_dev_kernels.md (FlashInfer's trtllm_fused_moe_dev_kernel.cu),
never from spec/. All arithmetic in fp32, one rounding at each store, as the kernels do (without their fast-math
approximations: torch's exp and division are correctly rounded or nearly so).

Routing: ``expanded_idx_to_permuted_idx`` [T, K] int32, the permuted row of token t's k-th expert or -1.
"""

import torch

from .quant import FP8_MAX, fp32, to_e4m3

BLOCK = 128  # DeepSeek FP8 scale block (columns)
FLT_MIN = 2.0**-126
SF_TILES = {"R128c4": (128, 4), "R8c4": (8, 4), "R8c16": (8, 16)}


def permute(hidden_states, expanded_idx_to_permuted_idx, num_padded_tokens):
    """[T, H] -> [P, H]: row p(t, k) = row t for every mapped slot; others 0."""
    e2p = expanded_idx_to_permuted_idx.long()
    token = torch.arange(e2p.shape[0], device=e2p.device)[:, None].expand_as(e2p)
    mapped = e2p >= 0
    out = torch.zeros(num_padded_tokens, *hidden_states.shape[1:], dtype=hidden_states.dtype,
                      device=hidden_states.device)
    out[e2p[mapped]] = hidden_states[token[mapped]]
    return out


def mapped_rows(expanded_idx_to_permuted_idx, num_rows):
    rows = torch.zeros(num_rows, dtype=torch.bool, device=expanded_idx_to_permuted_idx.device)
    e2p = expanded_idx_to_permuted_idx.long()
    rows[e2p[e2p >= 0]] = True
    return rows


def _controls(num_rows, alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim, like):
    """Per-row [P, 1] alpha, beta, clamp_limit through each row's tile expert; defaults 1, 0, +inf."""
    if alpha is None:
        return fp32(1.0, like), fp32(0.0, like), fp32(float("inf"), like)
    expert = cta_idx_xy_to_batch_idx.long()[torch.arange(num_rows, device=like.device) // tile_tokens_dim]
    return alpha[expert, None], beta[expert, None], clamp_limit[expert, None]


def swiglu(gemm1_out, alpha, beta, clamp_limit):
    """fp32 [P, 2I] -> fp32 [P, I]: g = second half (gated), u = first; g' = min(g, L), u' = clamp(u, -L, L),
    g'·sigmoid(alpha·g')·(u' + beta)."""
    up, gate = gemm1_out.float().chunk(2, dim=-1)
    gate = torch.minimum(gate, clamp_limit)
    up = torch.maximum(torch.minimum(up, clamp_limit), -clamp_limit)
    return gate * torch.sigmoid(alpha * gate) * (up + beta)


def activation(gemm1_out, expanded_idx_to_permuted_idx, alpha=None, beta=None, clamp_limit=None,
               cta_idx_xy_to_batch_idx=None, tile_tokens_dim=0):
    """bf16/fp16 [P, 2I] -> [P, I] same dtype; unmapped rows 0."""
    P = gemm1_out.shape[0]
    y = swiglu(gemm1_out, *_controls(P, alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim,
                                     gemm1_out))
    rows = mapped_rows(expanded_idx_to_permuted_idx, P)[:, None]
    return torch.where(rows, y, 0.0).to(gemm1_out.dtype)


def activation_deepseek_fp8(gemm1_out, gemm1_out_scale, expanded_idx_to_permuted_idx, alpha=None, beta=None,
                            clamp_limit=None, cta_idx_xy_to_batch_idx=None, tile_tokens_dim=0):
    """e4m3 [P, 2I] with scales [2I/128, P] -> (e4m3 [P, I], scales [I/128, P]): dequantize, SwiGLU, then per
    128-column block s = max(amax·fl(1/448), FLT_MIN), q = e4m3(y·(1/s)). Unmapped rows: codes and scales 0."""
    P, I2 = gemm1_out.shape
    x = gemm1_out.float() * gemm1_out_scale.t().repeat_interleave(BLOCK, dim=1)      # [P, 2I]
    y = swiglu(x, *_controls(P, alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim, x))
    blocks = y.view(P, I2 // 2 // BLOCK, BLOCK)                                        # [P, I/128, 128]
    amax = torch.nan_to_num(blocks.abs(), nan=0.0).amax(dim=-1)                       # [P, I/128]
    scale = torch.clamp(amax * (fp32(1.0, x) / fp32(FP8_MAX, x)), min=FLT_MIN)
    q = to_e4m3(blocks * (1.0 / scale)[..., None]).view(P, I2 // 2)
    rows = mapped_rows(expanded_idx_to_permuted_idx, P)
    q = torch.where(rows[:, None], q.view(torch.uint8), 0).view(torch.float8_e4m3fn)
    return q, torch.where(rows[:, None], scale, 0.0).t().contiguous()


def finalize(gemm2_out, expanded_idx_to_permuted_idx, expert_weights=None, hidden=None):
    """[P, H_padded] -> [T, hidden] same dtype: fp32 accumulation over k in order of w[t, k]·x[p(t, k)]."""
    e2p = expanded_idx_to_permuted_idx.long()
    T, K = e2p.shape
    hidden = hidden or gemm2_out.shape[1]
    acc = torch.zeros(T, hidden, dtype=torch.float32, device=gemm2_out.device)
    for k in range(K):
        rows = e2p[:, k]
        w = torch.ones(T, device=gemm2_out.device) if expert_weights is None else expert_weights[:, k].float()
        term = w[:, None] * gemm2_out[rows.clamp(min=0), :hidden].float()
        acc += torch.where((rows >= 0)[:, None], term, 0.0)
    return acc.clamp(-FP8_MAX, FP8_MAX).to(gemm2_out.dtype) if gemm2_out.dtype == torch.float8_e4m3fn \
        else acc.to(gemm2_out.dtype)


def finalize_deepseek_fp8(gemm2_out, gemm2_out_scale, expanded_idx_to_permuted_idx, expert_weights):
    """[P, H] bf16/fp16/e4m3 with block scales [H/128, P] -> ([T, H] same dtype, scales [H/128, T]):
    acc = Σ_k fl(w·s)·x over k in order, one fp32 rounding per term (an FFMA: the product in float64, exact);
    then per token and 128-column block s = max(amax·fl(1/448), 2^-126), out = acc·(1/s): the activation's floor,
    so an all-zero block stores zeros."""
    e2p = expanded_idx_to_permuted_idx.long()
    T, K = e2p.shape
    P, H = gemm2_out.shape
    scale = gemm2_out_scale.t().repeat_interleave(BLOCK, dim=1)                        # [P, H]
    acc = torch.zeros(T, H, dtype=torch.float32, device=gemm2_out.device)
    for k in range(K):
        rows = e2p[:, k].clamp(min=0)
        w = expert_weights[:, k].float()[:, None] * scale[rows]                        # [T, H] fp32
        fma = (acc.double() + w.double() * gemm2_out[rows].double()).float()
        acc = torch.where((e2p[:, k] >= 0)[:, None], fma, acc)
    blocks = acc.view(T, H // BLOCK, BLOCK)
    s = blocks.abs().amax(dim=-1) * (fp32(1.0, acc) / fp32(FP8_MAX, acc))              # [T, H/128]
    s = torch.clamp(s, min=FLT_MIN)
    out = (blocks * (1.0 / s)[..., None]).view(T, H)
    out = to_e4m3(out) if gemm2_out.dtype == torch.float8_e4m3fn else out.to(gemm2_out.dtype)
    return out, s.t().contiguous()


def convertsf(sf, num_tokens, hidden_dim_sf, src_layout):
    """Flat swizzled scale factors (one byte each) -> linear [num_tokens, hidden_dim_sf]: the tile dims of
    trtllm-gen's SfLayoutDecl.h unpermuted (R128c4 [M/128, N/4, 32, 4, 4], R8c4 [M/8, N/4, 8, 4],
    R8c16 [M/8, N/16, 8, 16])."""
    rows, cols = SF_TILES[src_layout]
    tiles = -(-num_tokens // rows)
    n = hidden_dim_sf
    flat = sf.reshape(-1)[: tiles * rows * n]
    if src_layout == "R128c4":
        linear = flat.view(tiles, n // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)   # (i//128, (i%128)//32, i%32, j//4, j%4)
    else:
        linear = flat.view(tiles, n // cols, rows, cols).permute(0, 2, 1, 3)  # (i//8, i%8, j//cols, j%cols)
    return linear.reshape(tiles * rows, n)[:num_tokens].contiguous()
