"""The measured Hopper (H200) device model: what the GPU computes where it is not IEEE round-to-nearest.

MUFU.RCP's reciprocal (what CUDA emits for x/y under -use_fast_math) as a table of its deviation from RN(1/x)
per bf16 significand, and the FP8 tensor core's WGMMA step (its truncating e8m13 accumulator) with the block
sums of a block-scaled GEMM built from it. Every fact here was measured bit-exactly on an H200
(campaigns/h200/results.md); spec/quant.py's quantizers and block_scaled_gemm(acc="hopper_fp8") use them.
"""

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


# MUFU.RCP (rcp.approx.ftz.f32, what CUDA emits for x/y under -use_fast_math) minus RN(1/x), in ulps, for each
# bf16 significand 1.m (m = 0..127): measured on an H200 for every positive bf16 x; it depends on the
# significand only (0 conflicts over 985,767 fp32 significands). campaigns/h200/div_probe.cu, results.md.
MUFU_RCP_BF16_ULPS = ("0000-0+0000-0+000000-0-00000000000000++000000000000+000000000+000++00000000000000+000000000+"
                      "00000000000000000+00000++0+00+00000-")


_MUFU_RCP_BF16_ULPS = np.array([{"-": -1, "0": 0, "+": 1}[c] for c in MUFU_RCP_BF16_ULPS], np.int32)


def hopper_rcp(x):
    """1/x as Hopper's MUFU.RCP returns it, for float32 x > 0 in the normal range: RN(1/x) moved by the
    measured deviation of x's significand when x is a bf16 value (exact there); RN(1/x) otherwise (the device
    is within ±1 ulp of it: 86.7 % equal, measured). -> float32."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    rn = (np.float32(1) / x).view(np.int32)
    dev = np.where(bits & 0xFFFF == 0, _MUFU_RCP_BF16_ULPS[(bits >> 16) & 0x7F], 0)
    return (rn + dev).astype(np.int32).view(np.float32)


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
