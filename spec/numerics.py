"""Bit-exact number formats: parameters, round-to-nearest-even, bit patterns.

A value of format f is (-1)^s · 2^(E - bias) · (1 + M/2^m) for a biased exponent E > 0, and
(-1)^s · 2^(1 - bias) · M/2^m for E = 0 (subnormals). Rounding is a single RNE of the float64 value of the
input (float32 inputs widen exactly, so no double rounding). Two overflow semantics:

* ``saturate=False`` -- the ml_dtypes cast: beyond ``max`` (after rounding) goes to ±Inf where the format
  has Inf (bf16, fp16, e5m2) and to NaN for e4m3fn. So 464 (the midpoint of 448 and the would-be 480)
  rounds to 448 by ties-to-even and anything larger becomes NaN.
* ``saturate=True`` -- CUDA ``cvt.rn.satfinite``: beyond ``max`` and ±Inf go to ±max; NaN stays NaN.
  torch 2.13's CPU cast to float8_e4m3fn behaves like this one (it saturates, Inf included).

e2m1 has neither Inf nor NaN, so it always saturates; NaN maps to a zero whose sign is the opposite of the
NaN's sign bit (ml_dtypes' convention, so NaN → code 0x8). e8m0 (UE8M0 scales) has only powers of two:
``encode`` accepts exact ones, ``decode`` reads them; the rules that round a scale to e8m0 live in
spec/quant.py. NaN bit patterns are canonical (quiet bit set, payload dropped) and keep the sign bit.
"""

from dataclasses import dataclass
from math import frexp

import numpy as np

FP8_BLOCK = 128  # DeepSeek FP8: 128×128 weight blocks, 1×128 activation groups (docs/semantics.md §3)
MX_BLOCK = 32  # MXFP8: one e8m0 scale per 32 elements of a row
NVFP4_BLOCK = 16  # NVFP4: one e4m3 scale per 16 elements of a row
SCALE_BLOCKS = {"fp8_block": FP8_BLOCK, "mxfp8": MX_BLOCK, "nvfp4": NVFP4_BLOCK}  # elements along K per scale


@dataclass(frozen=True)
class Format:
    """One row of the format table; ``unit_roundoff`` u = 2^-p for p = mantissa_bits + 1."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float
    min_normal: float
    min_subnormal: float
    unit_roundoff: float
    has_inf: bool
    has_nan: bool
    signed: bool

    @property
    def emin(self):
        return frexp(self.min_normal)[1] - 1

    @property
    def code_dtype(self):
        return np.dtype(f"uint{max(self.bits, 8)}")


# One row per format; every other module reads these by name (E4M3FN.max == 448.0).
#  name, bits, exponent/mantissa bits, bias, max, min_normal, min_subnormal, u, has_inf, has_nan, signed
FP64 = Format("fp64", 64, 11, 52, 1023, (2 - 2.0**-52) * 2.0**1023, 2.0**-1022, 2.0**-1074, 2.0**-53,
              True, True, True)
FP32 = Format("fp32", 32, 8, 23, 127, (2 - 2.0**-23) * 2.0**127, 2.0**-126, 2.0**-149, 2.0**-24,
              True, True, True)
BF16 = Format("bf16", 16, 8, 7, 127, (2 - 2.0**-7) * 2.0**127, 2.0**-126, 2.0**-133, 2.0**-8,
              True, True, True)
FP16 = Format("fp16", 16, 5, 10, 15, 65504.0, 2.0**-14, 2.0**-24, 2.0**-11, True, True, True)
E4M3FN = Format("e4m3fn", 8, 4, 3, 7, 448.0, 2.0**-6, 2.0**-9, 2.0**-4, False, True, True)
E5M2 = Format("e5m2", 8, 5, 2, 15, 57344.0, 2.0**-14, 2.0**-16, 2.0**-3, True, True, True)
E2M1 = Format("e2m1", 4, 2, 1, 1, 6.0, 1.0, 0.5, 2.0**-2, False, False, True)
E8M0 = Format("e8m0", 8, 8, 0, 127, 2.0**127, 2.0**-127, 2.0**-127, 2.0**-1, False, True, False)

FORMATS = {f.name: f for f in (FP64, FP32, BF16, FP16, E4M3FN, E5M2, E2M1, E8M0)}


def as_format(fmt):
    """The Format named ``fmt`` (a Format passes through)."""
    if isinstance(fmt, Format):
        return fmt
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: must be a Format or one of {sorted(FORMATS)}")
    return FORMATS[fmt]


def _float64(x):
    x = np.asarray(x)
    if x.dtype.kind == "c":
        raise ValueError(f"input dtype {x.dtype} is complex: formats hold real numbers")
    with np.errstate(invalid="ignore"):  # a signaling float32 NaN becomes a quiet float64 NaN, as intended
        return x.astype(np.float64)


def _significand(x, fmt):
    """(q, e): e = max(exponent of x, emin), q = RNE(x / 2^(e - m)) an integer, so x ≈ q · 2^(e - m)."""
    e = np.maximum(np.frexp(x)[1] - 1, fmt.emin)
    return np.rint(np.ldexp(x, fmt.mantissa_bits - e)), e


def _round(x, fmt, saturate):
    if fmt is E8M0:
        raise ValueError("e8m0 has no rounding rule here (scales are rounded in spec/quant): use encode")
    x = _float64(x)
    if fmt is FP64 or fmt is FP32:  # float64 is its own RNE; the machine's float64 -> float32 conversion is
        with np.errstate(over="ignore", invalid="ignore"):  # this rule (tests/spec/test_numerics.py); invalid: sNaN
            r = x if fmt is FP64 else x.astype(np.float32).astype(np.float64)
        return np.where(np.abs(r) > fmt.max, np.copysign(fmt.max, x), r) if saturate else r
    return _round_rne(x, fmt, saturate)


def _round_rne(x, fmt, saturate):
    """The rounding rule of round_to, on float64 x, for every format but e8m0."""
    q, e = _significand(x, fmt)
    with np.errstate(over="ignore"):  # a carry past float64's max is an overflow like any other
        r = np.ldexp(q, e - fmt.mantissa_bits)
    # |r| > max also catches ±Inf; NaN compares false and stays NaN.
    overflow = saturate or not (fmt.has_inf or fmt.has_nan)
    beyond = fmt.max if overflow else (np.inf if fmt.has_inf else np.nan)
    r = np.where(np.abs(r) > fmt.max, np.copysign(beyond, x), r)
    if not fmt.has_nan:
        r = np.where(np.isnan(x), np.copysign(0.0, -x), r)
    return r


def round_to(x, fmt, *, saturate=False):
    """RNE of float64(x) to ``fmt``; beyond max: ±max if ``saturate``, else ±Inf (NaN for e4m3fn).

    Returns float32 (float64 for "fp64") holding values exactly representable in ``fmt``.
    """
    fmt = as_format(fmt)
    return _round(x, fmt, saturate).astype(np.float64 if fmt is FP64 else np.float32)


def encode(x, fmt, *, saturate=False):
    """Bit pattern of round_to(x, fmt): sign | biased exponent | mantissa, as uint8/uint16 (uint32/64).

    For e8m0, x must be exact powers of two in [2^-127, 2^127] or NaN.
    """
    fmt = as_format(fmt)
    if fmt is E8M0:
        return _encode_e8m0(x, saturate)
    r = _round(x, fmt, saturate)
    m = fmt.mantissa_bits
    q, e = _significand(np.where(np.isfinite(r), np.abs(r), 0.0), fmt)
    # Codes are monotone in |value|: one binade holds 2^m codes, and a carry of q into 2^(m+1) lands on
    # the next binade's first code; subnormals are the e = emin binade with q < 2^m.
    code = ((e - fmt.emin).astype(np.int64) << m) + q.astype(np.int64)
    code = np.where(q == 0, 0, code)  # frexp gives 0 an exponent above emin
    all_ones = (1 << fmt.exponent_bits) - 1
    if fmt.has_inf:
        code = np.where(np.isinf(r), all_ones << m, code)
        code = np.where(np.isnan(r), (all_ones << m) | (1 << (m - 1)), code)
    elif fmt.has_nan:
        code = np.where(np.isnan(r), (1 << (fmt.bits - 1)) - 1, code)
    code |= np.signbit(r).astype(np.int64) << (fmt.bits - 1)
    return code.astype(fmt.code_dtype)


def _encode_e8m0(x, saturate):
    if saturate:
        raise ValueError("e8m0 encode is exact (powers of two only): saturate does not apply")
    x = _float64(x)
    mant, exp = np.frexp(x)
    exact = (mant == 0.5) & (exp - 1 >= -127) & (exp - 1 <= 127)
    if not np.all(exact | np.isnan(x)):
        raise ValueError("e8m0 encodes only exact powers of two in [2^-127, 2^127] (or NaN)")
    return np.where(np.isnan(x), 0xFF, exp - 1 + E8M0.bias).astype(np.uint8)


def _values(fmt):
    """Value of every code of a format of at most 16 bits, as a float32 table indexed by the code."""
    c = np.arange(2**fmt.bits, dtype=np.int64)
    m, magnitude_bits = fmt.mantissa_bits, fmt.bits - fmt.signed
    mag = c & ((1 << magnitude_bits) - 1)
    E, M = mag >> m, mag & ((1 << m) - 1)
    # e8m0 has no subnormals: its E = 0 is the normal number 2^-127.
    implicit = ((E > 0) | (fmt.min_subnormal == fmt.min_normal)).astype(np.int64)
    v = np.ldexp((implicit << m) + M, np.maximum(E, fmt.emin + fmt.bias) - fmt.bias - m).astype(np.float64)
    if fmt.has_inf:
        v = np.where(E == (1 << fmt.exponent_bits) - 1, np.where(M == 0, np.inf, np.nan), v)
    elif fmt.has_nan:
        v = np.where(mag == (1 << magnitude_bits) - 1, np.nan, v)
    if fmt.signed:
        v = np.where(c >> magnitude_bits, -v, v)
    return v.astype(np.float32)


_TABLES = {f.name: _values(f) for f in FORMATS.values() if f.bits <= 16}


def decode(codes, fmt):
    """Value of each bit pattern (a table lookup for formats of at most 16 bits).

    Returns float32 (float64 for "fp64"); e2m1 codes are one per uint8, in the low nibble.
    """
    fmt = as_format(fmt)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "ui":
        raise ValueError(f"{fmt.name} codes must be an integer array of bit patterns, got {codes.dtype}")
    if (codes.dtype != fmt.code_dtype or fmt.bits == 4) and codes.size and (
            codes.min() < 0 or codes.max() >= 2**fmt.bits):
        raise ValueError(f"{fmt.name} codes must lie in [0, 2^{fmt.bits})")
    if fmt.bits > 16:
        return codes.astype(fmt.code_dtype).view(np.float64 if fmt is FP64 else np.float32)
    return _TABLES[fmt.name][codes]


E4M3_VALUES = decode(np.arange(256, dtype=np.uint8), E4M3FN)  # e4m3fn decode table, indexed by code


def pair_table(table):
    """Entry c0 + 256·c1 holds table[c0], table[c1] side by side (little-endian: c0 first in memory), so that
    one gather decodes two adjacent codes: decode_pairs."""
    c = np.arange(1 << 16)
    return np.ascontiguousarray(np.stack([table[c & 0xFF], table[c >> 8]], axis=-1))


def decode_pairs(pairs, pair_codes):
    """pairs (a pair_table) at pair_codes (uint16 views of adjacent uint8 codes, any layout) -> the decoded
    values, contiguous, [..., 2·last axis]: one gather per two codes."""
    got = np.take(pairs.view(np.dtype((np.void, pairs.strides[0]))).ravel(), pair_codes, mode="clip")
    return got.view(pairs.dtype).reshape(*pair_codes.shape[:-1], 2 * pair_codes.shape[-1])
