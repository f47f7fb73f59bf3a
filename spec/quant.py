"""FP8 / MXFP8 / NVFP4 quantization of activations and expert weights, and the block-scaled FP8 GEMM.

Semantics: docs/semantics.md §2, §3, §5. Values arrive as float32
arrays holding exactly representable values; e4m3fn, e2m1 and e8m0 travel as uint8 codes. Scales are dequant
multipliers (x ≈ q·s). Arithmetic written on float32 operands is one fp32 round-to-nearest-even per operation.
NaN rule, every quantizer: amax ignores NaN elements (CUDA fmaxf / __hmax, as the kernels reduce), a NaN
element becomes a NaN code, and the other elements of its group quantize as if it were absent.
"""

from typing import NamedTuple

import numpy as np

from .bounds import Quantized
from .hopper import hopper_block_sums, hopper_rcp  # the measured device model: spec/hopper.py
from .numerics import (  # the block table lives beside the formats (one home; imported by bounds and trtllm_ops)
    E2M1,
    E4M3_VALUES,
    E4M3FN,
    E8M0,
    FP8_BLOCK,
    FP32,
    MX_BLOCK,
    NVFP4_BLOCK,
    decode,
    encode,
    round_to,
)
from .recipes import GEMM_ACCS, QUANT_VARIANTS, REQUANT_SCALE_FORMULAS, SCALE_FORMULAS

GROUP_SIZES = (16, 32, 64, 128, 256)
SCALE_FMTS = ("fp32", "ue8m0")
MXFP8_RULES = ("ocp", "ceil448")
HALF_ORDERS = ("gate_up", "up_gate")



class QuantPath(NamedTuple):
    """A quant path of the MoE layer (spec/layer.py): how its expert weights and activations are stored."""

    scheme: str | None  # the quant op's scheme that quantizes its activations (None: they stay bf16)
    element: str  # the codes' format (spec.numerics name)
    scale: str | None  # the block scales' format (fp8_block: fp32, rounded up to powers of two by scale_fmt ue8m0)
    block: int | None  # elements along K per scale; fp8_block's weights are block × block (spec.numerics.SCALE_BLOCKS)
    whole_blocks: bool  # hidden and intermediate sizes must be multiples of block (fp8_block: a partial last block)
    scale_fmts: tuple  # the scale_fmt values it takes (moe_layer, MoEConfig)
    weight_forms: tuple  # unquantized expert weights it takes besides its prepared ones (MoEConfig.expert_weights)


# The quant paths, one row each: every consumer (spec/layer.py, difftest's case model, strategies and presets) reads
# this table, and tests/project/test_quant_paths.py fails when a path lacks one of them.
QUANT_TABLE = {
    "bf16": QuantPath(scheme=None, element="bf16", scale=None, block=None, whole_blocks=False, scale_fmts=("fp32",),
                      weight_forms=("fp32",)),  # its bf16 weights are its prepared ones
    "fp8_block": QuantPath(scheme="fp8_group", element="e4m3fn", scale="fp32", block=FP8_BLOCK, whole_blocks=False,
                           scale_fmts=("fp32", "ue8m0"), weight_forms=("bf16", "fp32")),
    "mxfp8": QuantPath(scheme="mxfp8", element="e4m3fn", scale="e8m0", block=MX_BLOCK, whole_blocks=True,
                       scale_fmts=("fp32",), weight_forms=("bf16", "fp32")),
    "nvfp4": QuantPath(scheme="nvfp4", element="e2m1", scale="e4m3fn", block=NVFP4_BLOCK, whole_blocks=True,
                       scale_fmts=("fp32",), weight_forms=("bf16", "fp32")),
}
QUANT_PATHS = tuple(QUANT_TABLE)

FP8_MAX = np.float32(E4M3FN.max)
RCP448 = np.float32(1) / FP8_MAX  # fl(1/448), the reciprocal constant of the SGLang JIT kernel
E4M3_EMAX = 8  # OCP MX: exponent of e4m3fn's largest normal, 448 = 1.75·2^8


def _fp32_values(x, name):
    """x as float32, refusing any value float32 cannot hold (a silent rounding would hide a bug)."""
    x = np.asarray(x)
    x32 = x.astype(np.float32)
    if not np.array_equal(x32, x, equal_nan=True):
        raise ValueError(f"{name} must hold float32-representable values")
    return x32


def _codes(q, name):
    q = np.asarray(q)
    if q.dtype != np.uint8:
        raise ValueError(f"{name} must be uint8 codes, got {q.dtype}")
    return q


def _rows_of_groups(x, group, name):
    """[M, K] -> [M, K/group, group], K a multiple of `group`."""
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [M, K], got shape {x.shape}")
    if x.shape[1] % group:
        raise ValueError(f"{name}.shape[1]={x.shape[1]} must be a multiple of the group size {group}")
    return x.reshape(x.shape[0], x.shape[1] // group, group)


def _amax(groups, axis=-1, floor=0.0):
    return np.fmax.reduce(np.abs(groups), axis=axis, initial=np.float32(floor))  # fmax: NaN ignored


def ue8m0_ceil(s):
    """e8m0 code of the least power of two >= s: biased exponent of fp32 s, +1 if its mantissa is non-zero.
    Exact for normals; subnormals -> 2^-126; 0 -> code 0 (2^-127); above 2^127, Inf and NaN -> 255 (NaN)."""
    s = _fp32_values(s, "s")
    if np.any(s < 0):
        raise ValueError("ue8m0_ceil: scales must be non-negative")
    bits = s.view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.int32) + ((bits & 0x7FFFFF) != 0)
    return np.minimum(exponent, 255).astype(np.uint8)


def ue8m0_ceil_log2(s):
    """Mutant of ue8m0_ceil: exp2(ceil(log2f(s))) (Triton, vLLM, DeepGEMM ceil_to_ue8m0; docs/semantics.md
    §2.3, K14), log2f the fp32 rounding of log2. One ulp above 2^k, k >= 4 or k <= -5, log2f rounds to k:
    2^k, not 2^(k+1)."""
    s = _fp32_values(s, "s")
    if not np.all((s > 0) & np.isfinite(s)):
        raise ValueError("ue8m0_ceil_log2: scales must be positive and finite")
    log2 = np.log2(s.astype(np.float64)).astype(np.float32)
    return np.clip(np.ceil(log2).astype(np.int32) + 127, 0, 255).astype(np.uint8)


def _scaled(x, s, amax, variant):
    """x/s in the formulation `variant` names (docs/semantics.md §2.2): each operation one fp32 rounding;
    "mul_448_div_amax" is 448/amax as CUDA's fast math evaluates it, fl(448·MUFU.RCP(amax)) (hopper_rcp), and
    "mul_mufu_rcp_scale" x/s as it evaluates it, fl(x·MUFU.RCP(s))."""
    if variant == "div":
        return x / s
    if variant == "mul_rcp_scale":
        return x * (np.float32(1) / s)
    if variant == "mul_448_div_amax":
        return x * (FP8_MAX * hopper_rcp(amax))
    if variant == "mul_mufu_rcp_scale":
        return x * hopper_rcp(s)
    return x * (FP8_MAX * (np.float32(1) / amax))  # mul_rcp_amax


def deepseek_scale(amax, floor=FP32.min_normal):
    """s = max(fl32(amax·fl32(1/448)), floor): the trtllm-gen DeepSeek-FP8 dev kernels' block scale, a multiply,
    floored at FLT_MIN = 2^-126 so that an all-zero block stores zeros (floor 0 is the unfloored scale: s = 0 there)."""
    return np.maximum(round_to(round_to(amax, FP32) * RCP448, FP32), np.float32(floor))


def _scale(amax, formula):
    """A group's scale from its amax (already floored at eps, except for mul_rcp448_flt_min): amax/448 (div448),
    fl(amax·fl(1/448)) (mul_rcp448), or deepseek_scale (mul_rcp448_flt_min)."""
    if formula == "div448":
        return amax / FP8_MAX
    return amax * RCP448 if formula == "mul_rcp448" else deepseek_scale(amax).astype(np.float32)


def per_token_group_quant_fp8(x, group_size=FP8_BLOCK, *, eps=1e-10, variant="div", scale_formula="div448",
                              scale_fmt="fp32"):
    """Per row and `group_size` columns: s = max(amax, eps)/448, q = e4m3fn(clamp(x/s, ±448)) (docs/semantics.md §2.1);
    scale_formula mul_rcp448_flt_min: s = deepseek_scale(amax), eps unused; ue8m0: s -> 2^e by ue8m0_ceil,
    q = e4m3fn(x·2^-e) exact. [M, K] -> (q uint8 [M, K], s float32 [M, K/g]).
    amax ignores NaN; NaN -> NaN code; ±Inf makes s Inf and the group's codes NaN or zero."""
    x = _fp32_values(x, "x")
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size={group_size} is not one of {GROUP_SIZES}")
    for name, value, allowed in (("variant", variant, QUANT_VARIANTS), ("scale_formula", scale_formula,
                                 REQUANT_SCALE_FORMULAS), ("scale_fmt", scale_fmt, SCALE_FMTS)):
        if value not in allowed:
            raise ValueError(f"{name}={value!r} is not one of {allowed}")
    if not eps >= 0:
        raise ValueError(f"eps={eps} must be non-negative")
    groups = _rows_of_groups(x, group_size, "x")
    amax = _amax(groups, floor=0.0 if scale_formula == "mul_rcp448_flt_min" else eps)
    s = _scale(amax, scale_formula)
    if scale_fmt == "ue8m0":
        s = decode(ue8m0_ceil(s), E8M0)
        v = groups / s[..., None]  # exact: s is a power of two
    else:
        v = _scaled(groups, s[..., None], amax[..., None], variant)
    q = encode(np.clip(v, -FP8_MAX, FP8_MAX), E4M3FN)
    return q.reshape(x.shape), s


def weight_block_quant(w, block=FP8_BLOCK, *, eps=1e-10, variant="div", scale_formula="div448", scale_fmt="fp32"):
    """DeepSeek weight quantization: per block×block tile of the last two dims s = max(amax, eps)/448 and
    q = e4m3fn(clamp(w/s, ±448)); partial last tiles have a scale too (docs/semantics.md §3). [..., N, K] ->
    (q uint8 [..., N, K], s float32 [..., ceil(N/b), ceil(K/b)]). NaN rule as per_token_group_quant_fp8; variant,
    scale_formula and scale_fmt (ue8m0: s rounded up to a power of two, w/s exact) as there."""
    w = _fp32_values(w, "w")
    for name, value, allowed in (("variant", variant, QUANT_VARIANTS), ("scale_formula", scale_formula,
                                 SCALE_FORMULAS), ("scale_fmt", scale_fmt, SCALE_FMTS)):
        if value not in allowed:
            raise ValueError(f"{name}={value!r} is not one of {allowed}")
    if w.ndim < 2:
        raise ValueError(f"w must be [..., N, K], got shape {w.shape}")
    *lead, n, k = w.shape
    nb, kb = -(-n // block), -(-k // block)
    padded = np.zeros((*lead, nb * block, kb * block), np.float32)  # zeros never raise a tile's amax
    padded[..., :n, :k] = w
    tiles = padded.reshape(*lead, nb, block, kb, block)
    amax = _amax(tiles, axis=(-3, -1), floor=eps)
    s = amax / FP8_MAX if scale_formula == "div448" else amax * RCP448
    if scale_fmt == "ue8m0":
        s, variant = decode(ue8m0_ceil(s), E8M0), "div"  # a power of two: w/s is exact
    per_tile = (slice(None),) * len(lead) + (slice(None), None, slice(None), None)
    q = encode(np.clip(_scaled(tiles, s[per_tile], amax[per_tile], variant), -FP8_MAX, FP8_MAX), E4M3FN)
    return q.reshape(padded.shape)[..., :n, :k], s


def weight_dequant(q, s, block=FP8_BLOCK):
    """W[..., n, k] = e4m3fn(q[..., n, k]) · s[..., n // b, k // b], one fp32 multiply (docs/semantics.md §3)."""
    q = _codes(q, "q")
    s = _fp32_values(s, "s")
    *lead, n, k = q.shape
    if s.shape != (*lead, -(-n // block), -(-k // block)):
        raise ValueError(f"scales {s.shape} are not [..., ceil(N/{block}), ceil(K/{block})] for q {q.shape}")
    per_element = np.repeat(np.repeat(s, block, axis=-2), block, axis=-1)[..., :n, :k]
    return E4M3_VALUES[q] * per_element


def w13_block_quant(gate, up, *, half_order="gate_up", block=FP8_BLOCK, **quantizer):
    """w13 from its halves, each block-quantized on its own (docs/semantics.md §3): gate, up [..., I, H] -> (q uint8
    [..., 2I, H], s float32 [..., 2·ceil(I/b), ceil(H/b)]), in `half_order` (FlashInfer: "up_gate"); `quantizer`:
    weight_block_quant's keywords."""
    if half_order not in HALF_ORDERS:
        raise ValueError(f"half_order={half_order!r} is not one of {HALF_ORDERS}")
    if np.shape(gate) != np.shape(up):
        raise ValueError(f"gate {np.shape(gate)} and up {np.shape(up)} must have the same shape")
    ordered = (gate, up) if half_order == "gate_up" else (up, gate)
    halves = [weight_block_quant(h, block, **quantizer) for h in ordered]
    return tuple(np.concatenate(parts, axis=-2) for parts in zip(*halves, strict=True))


def w13_dequant(q, s, block=FP8_BLOCK):
    """Inverse of w13_block_quant: dequantizes each half with its own scale rows. -> float32 [..., 2I, H]."""
    q = _codes(q, "q")
    s = np.asarray(s)
    i = q.shape[-2] // 2
    if q.shape[-2] % 2 or s.shape[-2] != 2 * -(-i // block):
        raise ValueError(f"w13 scales {s.shape} must have 2·ceil(I/{block}) rows for q {q.shape}")
    ib = s.shape[-2] // 2
    return np.concatenate([weight_dequant(q[..., :i, :], s[..., :ib, :], block),
                           weight_dequant(q[..., i:, :], s[..., ib:, :], block)], axis=-2)


def block_scaled_gemm(aq, a_s, wq, w_s, *, acc="fp32", block=128):
    """C[m,n] = Σ_b a_s[m,b]·w_s[n//128,b]·P_b, P_b = Σ_{k in block b} a[m,k]·w[n,k] (docs/semantics.md §3);
    fp64: in fp64.
    fp32: C = fl(C + fl(fl(fl(P_b)·a_s)·w_s)), b ascending (tensor_core: the same; rounding to nearest is one of the
    roundings it allows); hopper_fp8: as fp32, P_b accumulated by
    hopper_fp8_step, 32 products at a time (the tensor core's e8m13 accumulator; fl(P_b) is then exact), computed
    by hopper_block_sums.
    P_b of e4m3 codes is exact in float64 (products are multiples of 2^-18 below 2^18: a sum of 128 fits 53
    bits). -> [M, N] float64 (fp64) or float32."""
    if acc not in GEMM_ACCS:
        raise ValueError(f"acc={acc!r} is not one of {GEMM_ACCS}")
    aq, wq = _codes(aq, "aq"), _codes(wq, "wq")
    a_s, w_s = _fp32_values(a_s, "a_s"), _fp32_values(w_s, "w_s")
    (m, k), (n, kw) = aq.shape, wq.shape
    kb = -(-k // block)
    if kw != k:
        raise ValueError(f"aq [M, K]={aq.shape} and wq [N, K]={wq.shape} must share K")
    if a_s.shape != (m, kb) or w_s.shape != (-(-n // block), kb):
        raise ValueError(f"scales {a_s.shape}, {w_s.shape} must be [M, ceil(K/{block})], "
                         f"[ceil(N/{block}), ceil(K/{block})]")
    if acc == "hopper_fp8":  # [K/block, M, N]: each P_b exact in float32
        hopper = np.ascontiguousarray(hopper_block_sums(aq, wq, block).astype(np.float32).transpose(2, 0, 1))
    else:
        a, w = E4M3_VALUES[aq].astype(np.float64), E4M3_VALUES[wq].astype(np.float64)
    w_scales = np.repeat(w_s, block, axis=0)[:n]  # [N, K/block]
    out = np.zeros((m, n), np.float64 if acc == "fp64" else np.float32)
    for b in range(kb):
        cols = slice(b * block, (b + 1) * block)
        p = hopper[b] if acc == "hopper_fp8" else (a[:, cols] @ w[:, cols].T).astype(out.dtype)
        out += p * a_s[:, b, None].astype(out.dtype) * w_scales[:, b]
    return out


def mxfp8_quant(x, *, rule="ocp"):
    """MXFP8, per 32 elements of a row: q = e4m3fn_satfinite(x/X), x/X exact. ocp (OCP MX v1.0): X = 2^(floor(
    log2 amax) - 8), x/X in (448, 512) saturates; ceil448 (TRT-LLM): X = ue8m0_ceil(fl(amax·fl(1/448))).
    [M, K] -> (q uint8 [M, K], X e8m0 uint8 [M, K/32]); amax ignores NaN; amax 0 -> code 0 (2^-127)."""
    x = _fp32_values(x, "x")
    if rule not in MXFP8_RULES:
        raise ValueError(f"rule={rule!r} is not one of {MXFP8_RULES}")
    groups = _rows_of_groups(x, MX_BLOCK, "x")
    codes = mx_scale(_amax(groups), rule)
    v = np.ldexp(groups.astype(np.float64), 127 - codes[..., None].astype(np.int32))
    return encode(v, E4M3FN, saturate=True).reshape(x.shape), codes


def mx_scale(amax, rule):
    """e8m0 code of the MXFP8 scale X of a block whose amax is `amax` (fp32 values, >= 0), non-decreasing in
    amax: ocp X = 2^(floor(log2 amax) - 8), ceil448 X = ue8m0_ceil(fl(amax·fl(1/448))); amax 0 -> code 0."""
    amax = _fp32_values(amax, "amax")
    if rule == "ocp":
        _, e = np.frexp(amax)  # amax = f·2^e, f in [0.5, 1): floor(log2 amax) = e - 1, exact
        return np.where(amax > 0, np.clip(e - 1 - E4M3_EMAX + 127, 0, 254), 0).astype(np.uint8)
    return ue8m0_ceil(amax * RCP448)


def mxfp8_dequant(q, scales):
    """x̂[m, k] = e4m3fn(q[m, k]) · 2^(X[m, k // 32] - 127), one fp32 multiply. -> float32 [M, K]."""
    q, scales = _codes(q, "q"), _codes(scales, "scales")
    if q.ndim != 2 or scales.shape != (q.shape[0], q.shape[1] // MX_BLOCK) or q.shape[1] % MX_BLOCK:
        raise ValueError(f"scales {scales.shape} must be [M, K/{MX_BLOCK}] for q {q.shape}")
    return E4M3_VALUES[q] * np.repeat(decode(scales, E8M0), MX_BLOCK, axis=-1)


def nvfp4_global_scale(x, eps=1e-10):
    """gs = fl(448·6 / max(amax(x), eps)) over the whole tensor (FlashInfer, ModelOpt); amax ignores NaN. The
    eps floor of the FP8 quantizers (TRT-LLM PR #17635 clamps amax at 1e-10) keeps tiny and zero rows finite."""
    amax = np.maximum(_amax(_fp32_values(x, "x").ravel()), np.float32(eps))
    if not np.isfinite(amax):
        raise ValueError(f"nvfp4_global_scale: amax={amax} must be finite")
    return np.float32(FP8_MAX * np.float32(E2M1.max)) / amax


def nvfp4_quant(x, global_scale):
    """NVFP4 per 16 elements (TRT-LLM cvt_warp_fp16_to_fp4, exact reciprocals), each op fp32: sf = e4m3fn_sat(
    gs·(amax·fl(1/6))), q = e2m1(x·r), r = 1/(sf·fl(1/gs)) or 0 if sf = 0. [M, K] finite (e2m1 has no NaN)
    -> (packed uint8 [M, K/2], low nibble = even element; sf e4m3fn uint8 [M, K/16])."""
    x = _fp32_values(x, "x")
    gs = _fp32_values(global_scale, "global_scale")
    if gs.shape != () or not (gs > 0 and np.isfinite(gs)):
        raise ValueError(f"global_scale={global_scale} must be a positive finite scalar")
    if not np.all(np.isfinite(x)):
        raise ValueError("nvfp4_quant: x must be finite (e2m1 has no NaN or Inf)")
    groups = _rows_of_groups(x, NVFP4_BLOCK, "x")
    amax = _amax(groups)
    sf_codes = encode(gs * (amax * (np.float32(1) / np.float32(E2M1.max))), E4M3FN, saturate=True)
    sf = decode(sf_codes, E4M3FN)
    with np.errstate(divide="ignore"):
        r = np.where(sf != 0, np.float32(1) / (sf * (np.float32(1) / gs)), np.float32(0))
    nibbles = encode(groups * r[..., None], E2M1, saturate=True).reshape(x.shape)
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4), sf_codes


def nvfp4_dequant(packed, scales, global_scale):
    """x̂[m, k] = fl(e2m1(nibble k of packed[m]) · sf[m, k // 16] / gs), the product exact; float32 [M, K]."""
    packed, scales = _codes(packed, "packed"), _codes(scales, "scales")
    gs = _fp32_values(global_scale, "global_scale")
    if packed.ndim != 2 or scales.shape != (packed.shape[0], 2 * packed.shape[1] // NVFP4_BLOCK) \
            or (2 * packed.shape[1]) % NVFP4_BLOCK:
        raise ValueError(f"scales {scales.shape} must be [M, K/{NVFP4_BLOCK}] for packed {packed.shape}")
    nibbles = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    sf = np.repeat(decode(scales, E4M3FN), NVFP4_BLOCK, axis=-1)
    return decode(nibbles, E2M1) * sf / gs


# ---- activation quantization on a layer's quant path, with what its error model needs (bounds.Quantized)

QUANT_EPS = 1e-10  # amax floor of every FP8 quantizer here


def block_scales(scales, width, cols_per_scale):
    """Dequant multiplier of each column: scales [R, ceil(width/cols_per_scale)] -> float64 [R, width]."""
    return np.repeat(np.asarray(scales, np.float64), cols_per_scale, 1)[:, :width]


def unpack_nibbles(packed):
    """[R, K/2] packed e2m1 bytes -> [R, K] codes, the low nibble first."""
    return np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[0], -1)


def nvfp4_rows(x):
    """NVFP4 per token: each row its own global scale gs = 448·6/max(amax(row), 1e-10)."""
    values, scale = np.zeros(x.shape), np.zeros(x.shape)
    for t, row in enumerate(x):
        gs = nvfp4_global_scale(row)
        packed, sf = nvfp4_quant(row[None], gs)
        scale[t] = np.repeat(decode(sf[0], E4M3FN).astype(np.float64), NVFP4_BLOCK) / np.float64(gs)
        values[t] = decode(unpack_nibbles(packed)[0], E2M1) * scale[t]
    return values, scale


def quant_448_div_amax(x, group):
    """mono_moe's quantizer per (row, `group` columns): NaN → 0, then per_token_group_quant_fp8 with variant
    "mul_448_div_amax" (amax = max(|x|, 1e-10), s = fl(amax·fl(1/448)), q = e4m3_satfinite(fl(x·fl(448·rcp(amax)))),
    rcp the device's reciprocal: hopper.hopper_rcp, the measured MUFU.RCP of every fp32 amax).
    [M, K] -> (q uint8 [M, K], s float32 [M, K/group])."""
    x = np.where(np.isnan(x), np.float32(0), x).astype(np.float32)
    return per_token_group_quant_fp8(x, group, eps=QUANT_EPS, variant="mul_448_div_amax", scale_formula="mul_rcp448")


def quantize(x, quant, recipe, variant, scale_formula, group=FP8_BLOCK, scale_fmt="fp32"):
    """Activation quantization of x [M, K] on a quant path: fp8_block 1×`group` (per_token_group_quant_fp8 with
    `variant`, `scale_formula`, `scale_fmt`, or quant_448_div_amax), mxfp8 (recipe.mx_rule), nvfp4 (per-token
    global scale). -> Quantized (a ue8m0 scale moves in powers of two: not linear in amax)."""
    x = np.asarray(x, np.float32)
    if quant == "fp8_block":
        if variant == "mul_448_div_amax":
            if scale_fmt != "fp32":
                raise ValueError(f"the mul_448_div_amax quantizer (mono_moe) has no {scale_fmt} scales")
            q, s = quant_448_div_amax(x, group)
        else:
            q, s = per_token_group_quant_fp8(x, group, variant=variant, scale_formula=scale_formula,
                                             scale_fmt=scale_fmt)
        scale = block_scales(s, x.shape[1], group)
        return Quantized(E4M3_VALUES[q] * scale, scale, QUANT_TABLE[quant].element, (group,), E4M3FN.unit_roundoff,
                         scale_fmt == "fp32", (q, s))
    if quant == "mxfp8":
        q, e8 = mxfp8_quant(x, rule=recipe.mx_rule)
        scale = block_scales(decode(e8, E8M0), x.shape[1], MX_BLOCK)
        u = E4M3FN.unit_roundoff * (2 if recipe.mx_rule == "ocp" else 1)  # ocp: x/X < 512 saturates at 448
        scale_of = lambda amax: decode(mx_scale(amax, recipe.mx_rule), E8M0).astype(np.float64)
        return Quantized(E4M3_VALUES[q] * scale, scale, QUANT_TABLE[quant].element, (MX_BLOCK,), u, False, None,
                         scale_of)
    values, scale = nvfp4_rows(x)
    return Quantized(values, scale, QUANT_TABLE[quant].element, (NVFP4_BLOCK, x.shape[1]), E2M1.unit_roundoff, False,
                     None)
