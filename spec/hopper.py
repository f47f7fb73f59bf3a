"""The measured Hopper (H200) device model: what the GPU computes where it is not IEEE round-to-nearest.

MUFU.RCP's reciprocal (what CUDA emits for x/y under -use_fast_math) as a table of its deviation from RN(1/x)
per fp32 significand (spec/data/), and the FP8 tensor core's WGMMA step (its truncating e8m13 accumulator) with
the block sums of a block-scaled GEMM built from it. Every fact here was measured bit-exactly on an H200
(campaigns/h200/results.md); spec/quant.py's quantizers and block_scaled_gemm(acc="hopper_fp8") use them.
"""

import functools
import lzma
from pathlib import Path

import numpy as np

HOPPER_CHUNK = 32  # K of one FP8 WGMMA instruction
HOPPER_FRACTION_BITS = 13  # the Hopper FP8 tensor-core accumulator is e8m13 (campaigns/h200/results.md, 4th call)


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
# for each of the 2^23 fp32 significands: measured on an H200 (campaigns/h200/mufu_rcp_table.cu; it agrees with the
# session-2 bf16 probe at the 128 bf16 significands). The deviation is a function of the significand alone, -1, 0
# or +1 (every normal x of both signs whose 1/x is normal: 0 conflicts, campaigns/h200/mufu_exhaustive.cu). Stored
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
    (2,097,152 of 2,097,152 cuBLASLt block sums, campaigns/h200/results.md): products are exact; with
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


def _hopper_block_sums(a, w, block):
    """[M, N, K/block] block sums of a [M, K], w [N, K] (e4m3 values, float64), each block a chain of
    hopper_fp8_step from 0 in ascending K; columns in chunks that bound the products' memory."""
    (m, k), n = a.shape, w.shape[0]
    kb = -(-k // block)
    pad = ((0, 0), (0, kb * block - k))  # zero products leave a step unchanged
    a, w = np.pad(a, pad).reshape(m, kb, block), np.pad(w, pad).reshape(n, kb, block)
    cols = max(1, HOPPER_CHUNK_ELEMENTS // (m * kb * HOPPER_CHUNK))
    sums = []
    for n0 in range(0, n, cols):
        c = np.zeros((m, min(cols, n - n0), kb))
        for j in range(0, block, HOPPER_CHUNK):
            c = hopper_fp8_step(c, a[..., j:j + HOPPER_CHUNK], w[n0:n0 + cols, :, j:j + HOPPER_CHUNK])
        sums.append(c)
    return np.concatenate(sums, axis=1)
