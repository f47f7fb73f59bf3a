"""Quantization in torch: per-token-group FP8 (SGLang), DeepSeek 128x128 weight blocks, MXFP8, NVFP4.

All scale arithmetic is fp32 with each operation rounded as written; e4m3 values are produced by clamping to
+-448 and casting (RNE; NaN stays NaN), so results do not depend on whether the cast saturates.
NaN: every amax skips NaN elements (the CUDA quantizers reduce with fmaxf / __hmax, which return the other
operand; torch's amax would propagate it); the NaN element itself becomes a NaN code.
"""

import torch

from . import layouts

FP8_MAX = 448.0  # e4m3fn largest finite value
E2M1_MAX = 6.0
QUANT_VARIANTS = ("div", "mul_rcp_scale", "mul_rcp_amax")
SCALE_FORMULAS = ("div448", "mul_rcp448")
MX_RULES = ("ocp", "ceil448")
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def fp32(value, like):
    """A python number rounded once to fp32, on like's device.

    Divisors are such tensors: torch on CUDA turns division by a python scalar into a reciprocal multiply, and
    ``number / tensor`` is reciprocal(tensor) * number on every device.
    """
    return torch.tensor(value, dtype=torch.float32, device=like.device)


def to_e4m3(v):
    """fp32 -> float8_e4m3fn, RNE, saturating at +-448; NaN stays NaN."""
    return v.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def ue8m0_ceil(s):
    """uint8 e8m0 codes of the smallest power of two >= s (fp32 s >= 0, finite).

    Exponent bits + (mantissa != 0), never float log2, so s one ulp above 2^k gives 2^(k+1). Codes are capped
    at 254 (255 is e8m0 NaN); s = 0 gives code 0.
    """
    bits = s.float().contiguous().view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    code = exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return code.clamp(max=254).to(torch.uint8)


def e8m0_to_float(codes):
    """uint8 e8m0 codes -> fp32 2^(code - 127); code 255 -> NaN."""
    value = torch.exp2(codes.to(torch.float64) - 127).float()
    return value.masked_fill(codes == 255, float("nan"))


def abs_amax(x, dim):
    """max |x| over dim (kept as size 1), NaN elements skipped; 0 when all are NaN."""
    a = x.abs()
    return a.masked_fill(a.isnan(), 0.0).amax(dim, keepdim=True)


def group_view(x, group_size):
    """[..., K] -> [..., K/g, g]; K must be a multiple of g."""
    if x.shape[-1] % group_size:
        raise ValueError(f"last dim K={x.shape[-1]} must be divisible by group_size={group_size}")
    return x.unflatten(-1, (x.shape[-1] // group_size, group_size))


def group_scale(amax, scale_formula):
    """fp32 dequant scale from a group's amax: amax / 448 ("div448") or amax * fl(1/448) ("mul_rcp448")."""
    if scale_formula == "div448":
        return amax / fp32(FP8_MAX, amax)
    return amax * fp32(1 / FP8_MAX, amax)


def scale_group(xg, amax, s, variant):
    """fp32 x / s ("div"), x * fl(1/s) ("mul_rcp_scale") or x * fl(448 * fl(1/amax)) ("mul_rcp_amax")."""
    if variant == "div":
        return xg / s
    if variant == "mul_rcp_scale":
        return xg * (1.0 / s)
    return xg * (FP8_MAX * (1.0 / amax))


def check_quant(x, group_size, variant, scale_formula, scale_ue8m0, column_major_scales, scale_tma_aligned):
    if x.ndim < 2 or not x.is_floating_point():
        raise ValueError(f"x must be a floating [..., M, K] tensor, got {tuple(x.shape)} {x.dtype}")
    if variant not in QUANT_VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {QUANT_VARIANTS}")
    if scale_formula not in SCALE_FORMULAS:
        raise ValueError(f"scale_formula {scale_formula!r} is not one of {SCALE_FORMULAS}")
    if scale_tma_aligned and not column_major_scales:
        raise ValueError("scale_tma_aligned needs column_major_scales")
    if scale_ue8m0 and column_major_scales and not scale_tma_aligned:
        raise ValueError("column-major UE8M0 scales must be scale_tma_aligned (packed int32)")


def per_token_group_quant_fp8(x, group_size=128, *, eps=1e-10, variant="div", scale_formula="div448",
                              scale_ue8m0=False, column_major_scales=False, scale_tma_aligned=False):
    """(q float8_e4m3fn [..., M, K], scales) with s = max(amax, eps) / 448 per group of group_size.

    UE8M0 rounds s up to a power of two (``ue8m0_ceil``) and quantizes with x / s, exact for every variant.
    Scales: fp32 [..., M, K/g] row-major, column-major or column-major TMA; with UE8M0 and column-major TMA,
    packed int32 [..., M, ceil(G/4)] (layouts.ue8m0_packed); with UE8M0 row-major, fp32 powers of two.
    """
    check_quant(x, group_size, variant, scale_formula, scale_ue8m0, column_major_scales, scale_tma_aligned)
    xg = group_view(x.float(), group_size)  # [..., M, G, g]
    amax = abs_amax(xg, -1).clamp_min(eps)
    s = group_scale(amax, scale_formula)
    if scale_ue8m0:
        codes = ue8m0_ceil(s)
        s = e8m0_to_float(codes)
        q = to_e4m3(xg / s).flatten(-2)
        if column_major_scales:
            return q, layouts.ue8m0_packed(codes.squeeze(-1))
    else:
        q = to_e4m3(scale_group(xg, amax, s, variant)).flatten(-2)
    s = s.squeeze(-1)
    if not column_major_scales:
        return q, layouts.row_major(s)
    return q, (layouts.column_major_tma(s) if scale_tma_aligned else layouts.column_major(s))


def per_token_group_dequant(q, scales, group_size=128):
    """fp32 q * s with row-major logical scales [..., M, K/g]."""
    return (group_view(q.float(), group_size) * scales.unsqueeze(-1)).flatten(-2)


def block_view(w, block):
    """[..., N, K] zero-padded to multiples of block -> [..., N/b, b, K/b, b]."""
    N, K = w.shape[-2:]
    pad_n, pad_k = layouts.ceil_div(N, block) * block - N, layouts.ceil_div(K, block) * block - K
    w = torch.nn.functional.pad(w, (0, pad_k, 0, pad_n))
    return w.unflatten(-1, (w.shape[-1] // block, block)).unflatten(-3, (w.shape[-2] // block, block))


def expand_blocks(scales, N, K, block):
    """[..., ceil(N/b), ceil(K/b)] -> [..., N, K], each scale repeated over its (partial) block."""
    return scales.repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :N, :K]


def weight_block_quant(w, block=128, *, eps=1e-10, scale_ue8m0=False):
    """(q float8_e4m3fn [E?, N, K], scales fp32 [E?, ceil(N/b), ceil(K/b)]): s = max(block amax, eps) / 448,
    rounded up to a power of two with UE8M0 (q = w / s then exact).

    Partial edge blocks have one scale each, from their valid elements.
    """
    if w.ndim < 2:
        raise ValueError(f"weights must be [..., N, K], got {tuple(w.shape)}")
    N, K = w.shape[-2:]
    amax = abs_amax(block_view(w.float(), block), (-3, -1)).squeeze(-1).squeeze(-2)  # [..., N/b, K/b]
    amax = amax.clamp_min(eps)
    s = amax / fp32(FP8_MAX, amax)
    if scale_ue8m0:
        s = e8m0_to_float(ue8m0_ceil(s))
    return to_e4m3(w.float() / expand_blocks(s, N, K, block)), s


def weight_dequant(q, scales, block=128):
    """fp32 W[n, k] = q[n, k] * s[n // b, k // b]."""
    N, K = q.shape[-2:]
    return q.float() * expand_blocks(scales, N, K, block)


def mxfp8_quant(x, *, rule="ocp"):
    """(q float8_e4m3fn [..., K], e8m0 codes uint8 [..., K/32]) per block of 32.

    "ocp": scale 2^(floor(log2 amax) - 8) (OCP MX v1.0; values above 448 after scaling saturate);
    "ceil448": the smallest power of two >= fl(amax / 448). An all-zero block gets code 0.
    """
    if rule not in MX_RULES:
        raise ValueError(f"rule {rule!r} is not one of {MX_RULES}")
    xg = group_view(x.float(), 32)
    amax = abs_amax(xg, -1)
    if rule == "ceil448":
        codes = ue8m0_ceil(amax / fp32(FP8_MAX, amax))
    else:
        exponent = torch.frexp(amax).exponent - 1  # floor(log2 amax), exact for subnormals too
        codes = torch.where(amax > 0, (exponent - 8 + 127).clamp(0, 254), 0).to(torch.uint8)
    return to_e4m3(xg / e8m0_to_float(codes)).flatten(-2), codes.squeeze(-1)


def mxfp8_dequant(q, codes):
    """fp32 q * 2^(code - 127), per block of 32."""
    return (group_view(q.float(), 32) * e8m0_to_float(codes).unsqueeze(-1)).flatten(-2)


def e2m1_encode(v):
    """fp32 -> e2m1 codes uint8 (sign bit 3): RNE, saturating at +-6; NaN -> +6 (satfinite, no NaN)."""
    grid = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=v.device)
    midpoints = (grid[1:] + grid[:-1]) / 2
    a = v.abs().nan_to_num(nan=E2M1_MAX).contiguous()
    below = torch.searchsorted(midpoints, a, right=False)  # number of midpoints < a
    upto = torch.searchsorted(midpoints, a, right=True)  # number of midpoints <= a; differs only at a tie
    magnitude = torch.where(below % 2 == 0, below, upto)  # a tie goes to the even code (even mantissa)
    sign = (torch.signbit(v) & ~v.isnan()).to(torch.uint8) << 3
    return magnitude.to(torch.uint8) | sign


def e2m1_decode(codes):
    """e2m1 codes (0..15) -> fp32 through the 16-entry table (torch has no fp4 arithmetic)."""
    grid = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    table = torch.cat([grid, -grid])
    return table[codes.long()]


def pack_e2m1(codes):
    """[..., K] codes -> uint8 [..., K/2]: low nibble = even element, high nibble = odd element."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed):
    """uint8 [..., K/2] -> codes [..., K]."""
    return torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)


def nvfp4_global_scale(x, dim=None):
    """Encode global scale fl(448 * 6 / max(amax, 1e-10)) over dim (kept as size 1; None: whole tensor)."""
    a = x.float().abs()
    amax = a.amax() if dim is None else a.amax(dim, keepdim=True)
    return fp32(FP8_MAX * E2M1_MAX, amax) / amax.clamp_min(1e-10)


def nvfp4_quant(x, global_scale):
    """(packed e2m1 uint8 [..., K/2], scales float8_e4m3fn [..., K/16]) per block of 16 (TRT-LLM math).

    sf = e4m3(g * fl(amax * fl(1/6))); q = e2m1(x * fl(1 / fl(sf * fl(1/g)))) (0 when sf == 0).
    ``global_scale`` g is the encode scale (448 * 6 / amax): a scalar, or x.ndim dims ending in 1 (per row,
    per expert).
    """
    g = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device)
    if g.ndim:
        g = g.unsqueeze(-1)  # broadcast a per-row [..., 1] scale over the blocks
    xg = group_view(x.float(), 16)  # [..., K/16, 16]
    sf = to_e4m3(g * (xg.abs().amax(-1, keepdim=True) * fp32(1 / E2M1_MAX, x)))
    sf32 = sf.float()
    out_scale = torch.where(sf32 != 0, 1.0 / (sf32 * (1.0 / g)), 0.0)
    codes = e2m1_encode((xg * out_scale).flatten(-2))
    return pack_e2m1(codes), sf.squeeze(-1)


def nvfp4_dequant(packed, scales, global_scale):
    """fp32 (e2m1 * sf) / g, per block of 16."""
    g = torch.as_tensor(global_scale, dtype=torch.float32, device=packed.device)
    q = group_view(e2m1_decode(unpack_e2m1(packed)), 16)
    return (q * scales.float().unsqueeze(-1)).flatten(-2) / g
