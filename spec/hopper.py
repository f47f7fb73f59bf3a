"""The measured Hopper (H200) device model: what the GPU computes where it is not IEEE round-to-nearest.

MUFU.RCP's reciprocal (what CUDA emits for x/y under -use_fast_math) as a table of its deviation from RN(1/x)
per fp32 significand (spec/data/), and the FP8 tensor core's WGMMA step (its truncating e8m13 accumulator) with
the block sums of a block-scaled GEMM built from it. Every fact here was measured bit-exactly on an H200
(spec/data/README.md: each fact, its file and its probe); spec/quant.py's quantizers and
block_scaled_gemm(acc="hopper_fp8") use them.
"""

import functools
import lzma
from pathlib import Path

import numpy as np

from .numerics import E4M3_VALUES, decode_pairs, pair_table

HOPPER_CHUNK = 32  # K of one FP8 WGMMA instruction
HOPPER_FRACTION_BITS = 13  # the Hopper FP8 tensor-core accumulator is e8m13 (spec/data/README.md)


def _exponent(x):
    """floor(log2 |x|) of nonzero float64 x (exact: frexp); 0 maps to -1000, below every operand's."""
    return np.where(x == 0, -1000, np.frexp(x)[1] - 1)


def _e4m3_exponent(x):
    """The exponent field's meaning for e4m3 values: floor log2 |x|, -6 for subnormals; -1000 for zero, so a
    sum with it never sets a step's alignment."""
    return np.where(x == 0, -1000, np.maximum(_exponent(x), -6))


def _truncate(x, e):
    """x truncated toward zero to a multiple of 2^e (float64, exact for the magnitudes here)."""
    q = np.ldexp(1.0, e)
    return np.trunc(x / q) * q


# MUFU.RCP (rcp.approx.ftz.f32, what CUDA emits for x/y under -use_fast_math) minus RN(1/x), in ulps of the result,
# for each of the 2^23 fp32 significands: measured on an H200 (spec/data/probes/mufu_rcp_table.cu; it agrees with
# the first, bf16-only probe at the 128 bf16 significands). The deviation is a function of the significand alone, -1, 0
# or +1 (every normal x of both signs whose 1/x is normal: 0 conflicts, spec/data/probes/mufu_exhaustive.cu). Stored
# 2 bits per significand, xz-compressed: byte m // 4 holds significand m's deviation + 1 in bits 2(m % 4)..+1.
MUFU_RCP_TABLE = Path(__file__).parent / "data" / "mufu_rcp_ulps.bin.xz"
_FP32_MIN_NORMAL_BITS = 0x00800000
_RCP_NORMAL_MAX_BITS = 0x7E800000  # 2^126: above it 1/x is subnormal and FTZ returns 0
_INF_BITS = 0x7F800000


@functools.cache
def mufu_rcp_ulps():
    """MUFU.RCP(x) - RN(1/x) in ulps, int8 [2^23], indexed by x's 23 fraction bits (read once from MUFU_RCP_TABLE)."""
    packed = np.frombuffer(lzma.decompress(MUFU_RCP_TABLE.read_bytes()), np.uint8)
    codes = (packed[:, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
    if packed.size != 1 << 21 or np.any(codes == 3):
        raise ValueError(f"{MUFU_RCP_TABLE}: not a table of 2^23 deviations in -1..1")
    return codes.reshape(-1).astype(np.int8) - 1


def hopper_rcp(x):
    """1/x as Hopper's MUFU.RCP (rcp.approx.ftz.f32) returns it, for every float32 x: sign(x)·(RN(1/|x|) moved by
    mufu_rcp_ulps()[significand of x] ulps) where x and 1/x are normal (bit-exact, measured); FTZ elsewhere (PTX
    ISA): zero or subnormal x -> ±inf, |x| > 2^126 (1/x subnormal) or infinite -> ±0; NaN -> NaN. -> float32."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    mag, sign = bits & 0x7FFFFFFF, bits & 0x80000000
    with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
        rn = (np.float32(1) / np.abs(x)).view(np.int32)
    out = (rn + mufu_rcp_ulps()[mag & 0x7FFFFF]).astype(np.uint32)
    out = np.where(mag < _FP32_MIN_NORMAL_BITS, _INF_BITS, np.where(mag > _RCP_NORMAL_MAX_BITS, 0, out))
    out = np.where(mag > _INF_BITS, 0x7FFFFFFF, out)
    return (out.astype(np.uint32) | sign).view(np.float32)


def hopper_fp8_step(c, a, w):
    """One Hopper FP8 WGMMA step, c + Σ_k a[m, k]·w[n, k] over k < 32, bit-exact as measured on an H200
    (2,097,152 of 2,097,152 cuBLASLt block sums, spec/data/README.md): products are exact; with
    E = max(max_k (e_a + e_w), e_c) over the nonzero products — e_x the e4m3 exponent of x (floor log2 |x|, -6
    for subnormals) and e_c = floor log2 |c| (c ≠ 0) — every product and c is truncated toward zero to a
    multiple of 2^(E-13); the exact sum of those is truncated toward zero to 13 fraction bits (e8m13). Zero
    products take no part in E (measured: 16,384 of 16,384 sparse sums). a [M, ..., k], w [N, ..., k] e4m3
    values, c [M, N, ...] float64 -> [M, N, ...] float64."""
    e = (_e4m3_exponent(a)[:, None] + _e4m3_exponent(w)[None]).max(axis=-1)
    e = np.maximum(np.where(c == 0, e, np.maximum(e, _exponent(c))), -1000) - HOPPER_FRACTION_BITS  # all-zero: 0
    s = _truncate(a[:, None] * w[None], e[..., None]).sum(axis=-1) + _truncate(c, e)
    return _truncate(s, _exponent(s) - HOPPER_FRACTION_BITS)


HOPPER_CHUNK_ELEMENTS = 1 << 22  # products per hopper_fp8_step call (32 MiB of float64)


def hopper_block_sums_reference(a, w, block):
    """[M, N, K/block] block sums of a [M, K], w [N, K] (e4m3 values, float64), each block a chain of
    hopper_fp8_step from 0 in ascending K; columns in chunks that bound the products' memory. The definition:
    hopper_block_sums computes the same, faster."""
    (m, k), n = a.shape, w.shape[0]
    kb = -(-k // block)
    pad = ((0, 0), (0, kb * block - k))  # zero products leave a step unchanged
    a, w = np.pad(a, pad).reshape(m, kb, block), np.pad(w, pad).reshape(n, kb, block)
    cols = max(1, HOPPER_CHUNK_ELEMENTS // max(1, m * kb * HOPPER_CHUNK))
    sums = [np.zeros((m, 0, kb))]
    for n0 in range(0, n, cols):
        c = np.zeros((m, min(cols, n - n0), kb))
        for j in range(0, block, HOPPER_CHUNK):
            c = hopper_fp8_step(c, a[..., j:j + HOPPER_CHUNK], w[n0:n0 + cols, :, j:j + HOPPER_CHUNK])
        sums.append(c)
    return np.concatenate(sums, axis=1)


# 256^(e - 1) of each e4m3 code, e its exponent as hopper_fp8_step reads it (floor log2 |v|, -6 for subnormals);
# 0 for the two zero codes; 256^-2 for the NaN codes (their sums are NaN whatever the alignment). A product of
# two is 2^(8L - 16), L = e_a + e_w in [-12, 16]: from 2^-112 to 2^112, normal float32. Over one step the sum S
# of those of the nonzero products lies in [2^(8E - 16), 32·2^(8E - 16)] (any rounding of a sum of positive terms
# keeps it below the next power 2^(8E - 8)), so E = (floor(log2 S) + 16) >> 3: the step's alignment exponent, for
# every output at once, from one matrix product.
with np.errstate(invalid="ignore"):
    _E4M3_EXPONENT = np.where(np.isnan(E4M3_VALUES), -1, np.maximum(np.frexp(E4M3_VALUES)[1] - 1, -6))
E4M3_POW256 = np.where(E4M3_VALUES == 0, 0, np.ldexp(np.float32(1), 8 * _E4M3_EXPONENT - 8)).astype(np.float32)
_ONES32 = np.ones(HOPPER_CHUNK, np.float32)


_E4M3_VALUE_PAIRS, _E4M3_POW256_PAIRS = pair_table(E4M3_VALUES), pair_table(E4M3_POW256)
HOPPER_FAST_ELEMENTS = 1 << 17  # products per step and chunk of hopper_block_sums (512 KiB of float32: in L2)
F32_BIAS, F32_FRACTION_BITS = 127, 23
_NO_EXPONENT = 100  # a biased float32 exponent below every alignment (all values here are multiples of 2^-18)


def _biased_exponent(x):
    """The biased exponent field of float32 x (floor log2 |x| + 127 for normal x; 0 for ±0)."""
    return (x.view(np.int32) >> F32_FRACTION_BITS) & 0xFF


def hopper_block_sums(aq, wq, block=128):
    """hopper_block_sums_reference on e4m3 codes aq [M, K], wq [N, K], bit for bit, in integer arithmetic: in
    units u = 2^(E-13) of a step, every truncated term is an integer below 2^15 (a product is below 2^(E+2)) and
    the carried-in sum one below 2^14, so their sum (< 2^20) is exact in float32 in any order. Per step, for
    all outputs at once: E from one matrix product (E4M3_POW256) and the carried sum's exponent; the terms
    trunc(a·w·u⁻¹) (u⁻¹ a power of two: exact); their sum by a product with ones; its truncation to 13
    fraction bits by clearing the low 10 of float32's 23. Steps run in order within a block; blocks and columns
    are independent. -> [M, N, K/block] float64."""
    if block % HOPPER_CHUNK:
        raise ValueError(f"block={block} must be a multiple of {HOPPER_CHUNK}")
    (m, k), n = aq.shape, wq.shape[0]
    steps, kb = block // HOPPER_CHUNK, -(-k // block)
    if kb * block != k:
        pad = ((0, 0), (0, kb * block - k))  # code 0 is +0: zero products leave a step unchanged
        aq, wq = np.pad(aq, pad), np.pad(wq, pad)
    sums = np.zeros((m, n, kb), np.float32)
    if not (m and n and kb):
        return sums.astype(np.float64)
    keep = np.int32(-1 << (F32_FRACTION_BITS - HOPPER_FRACTION_BITS))  # sign, exponent, 13 fraction bits
    a = E4M3_VALUES[aq.reshape(m, kb, steps, HOPPER_CHUNK).transpose(2, 0, 1, 3)]  # [step j, M, block, k]
    a_pow = E4M3_POW256[aq].reshape(m, kb * steps, HOPPER_CHUNK).transpose(1, 0, 2)  # [block·j, M, k]
    cols = min(n, max(1, HOPPER_FAST_ELEMENTS // (max(m, steps) * kb * HOPPER_CHUNK)))
    for n0 in range(0, n, cols):
        pairs = np.ascontiguousarray(wq[n0:n0 + cols]).view(np.uint16)  # two adjacent codes per gather
        nc = len(pairs)
        w = decode_pairs(_E4M3_VALUE_PAIRS, pairs.reshape(nc, kb, steps, HOPPER_CHUNK // 2).transpose(2, 0, 1, 3))
        w_pow = decode_pairs(_E4M3_POW256_PAIRS, pairs.reshape(nc, kb * steps, HOPPER_CHUNK // 2)).transpose(1, 2, 0)
        pow_sum = np.matmul(a_pow, w_pow).reshape(kb, steps, m, nc).transpose(1, 2, 3, 0)  # [j, M, nc, block]
        e_products = np.where(pow_sum == 0, _NO_EXPONENT,  # biased E of the products, for every step
                              ((_biased_exponent(pow_sum) - F32_BIAS + 16) >> 3) + F32_BIAS)
        c = np.zeros((m, nc, kb), np.float32)
        terms = np.empty((m, nc, kb, HOPPER_CHUNK), np.float32)
        for j in range(steps):
            e = np.maximum(e_products[j], _biased_exponent(c))  # c = 0: field 0, no part in E
            inv_u = ((2 * F32_BIAS + HOPPER_FRACTION_BITS - e) << F32_FRACTION_BITS).view(np.float32)  # 2^(13-E)
            np.multiply(a[j][:, None], w[j][None], out=terms)
            terms *= inv_u[..., None]
            np.trunc(terms, out=terms)
            s = (terms.reshape(-1, HOPPER_CHUNK) @ _ONES32).reshape(c.shape) + np.trunc(c * inv_u)
            c = (s.view(np.int32) & keep).view(np.float32) / inv_u
        sums[:, n0:n0 + nc] = c
    return sums.astype(np.float64)
