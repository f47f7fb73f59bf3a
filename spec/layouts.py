"""Scale layouts as real memory: what a kernel reads, not just the logical values (docs/semantics.md §2.4, §5.1).

A layout turns logical per-token-group scales s [M, G] (as per_token_group_quant_fp8 returns them) into a
`ScaleBuffer`: a flat 1-D buffer plus the logical shape and strides (in elements, as torch's .stride())
through which a kernel reads it. Each layout has an inverse `from_<layout>(data, m, g)` that reads a flat
buffer as that layout's consumer does, so reading a buffer under the wrong layout gives wrong scales.
Token padding (to a multiple of 4) is zero here; kernels leave it uninitialized, so it is not a contract.
"""

from typing import NamedTuple

import numpy as np

from .numerics import E8M0, decode
from .quant import ue8m0_ceil

TMA_ALIGN = 4  # token dim padded to 4 elements = 16 bytes of fp32 / int32 (TMA alignment)
UE8M0_PER_INT32 = 4


class ScaleBuffer(NamedTuple):
    data: np.ndarray  # 1-D: the memory
    shape: tuple  # logical shape
    strides: tuple  # element strides of the logical view


def view(buf):
    """The logical array of `buf`, a zero-copy strided view of its flat memory."""
    if buf.data.ndim != 1:
        raise ValueError("ScaleBuffer.data must be 1-D")
    last = sum((n - 1) * st for n, st in zip(buf.shape, buf.strides, strict=True)) if all(buf.shape) else -1
    if last >= buf.data.size:
        raise ValueError(f"shape {buf.shape}, strides {buf.strides} read past a buffer of {buf.data.size}")
    itemsize = buf.data.itemsize
    return np.lib.stride_tricks.as_strided(buf.data, buf.shape, tuple(st * itemsize for st in buf.strides),
                                           writeable=False)


def transpose(buf):
    """Zero-copy transpose of a 2-D buffer: same memory, shape and strides swapped (torch .t())."""
    return ScaleBuffer(buf.data, buf.shape[::-1], buf.strides[::-1])


def is_contiguous(buf):
    """True if `buf` is a row-major (C-contiguous) view of the start of its memory."""
    expected, stride = [], 1
    for n in reversed(buf.shape):
        expected.insert(0, stride)
        stride *= n
    return tuple(buf.strides) == tuple(expected)


def _scales_2d(s, dtype=np.float32):
    s = np.asarray(s)
    if s.ndim != 2 or s.dtype != dtype:
        raise ValueError(f"scales must be 2-D {np.dtype(dtype).name} [M, G], got {s.dtype} {s.shape}")
    return s


def _read(data, size, shape, strides, dtype=np.float32):
    data = np.asarray(data)
    if data.ndim != 1 or data.dtype != dtype or data.size != size:
        raise ValueError(f"buffer must be 1-D {np.dtype(dtype).name} of {size} elements, "
                         f"got {data.dtype} {data.shape}")
    return view(ScaleBuffer(data, shape, strides)).copy()


def _tma_rows(m):
    return -(-m // TMA_ALIGN) * TMA_ALIGN


def row_major(s):
    """fp32 [M, G], strides (G, 1): SGLang's default output, the Triton fused_moe input (docs/semantics.md §2.4)."""
    s = _scales_2d(s)
    return ScaleBuffer(s.ravel().copy(), s.shape, (s.shape[1], 1))


def from_row_major(data, m, g):
    """Inverse of row_major: s[t, j] = data[t·G + j]."""
    return _read(data, m * g, (m, g), (g, 1))


def column_major(s):
    """fp32 [M, G] stored as a contiguous [G, M] buffer: strides (1, M), no padding (SGLang
    column_major_scales, vLLM). Its transpose() is FlashInfer's contiguous hidden_states_scale [G, M]."""
    s = _scales_2d(s)
    m, g = s.shape
    return ScaleBuffer(s.T.ravel().copy(), (m, g), (1, m))


def from_column_major(data, m, g):
    """Inverse of column_major: s[t, j] = data[j·M + t]."""
    return _read(data, m * g, (m, g), (1, m))


def column_major_tma(s):
    """fp32 [M, G] in a [G, ceil(M/4)·4] buffer: strides (1, ceil(M/4)·4), token dim padded to a multiple of 4
    (SGLang scale_tma_aligned=True, DeepGEMM)."""
    s = _scales_2d(s)
    m, g = s.shape
    buffer = np.zeros((g, _tma_rows(m)), np.float32)
    buffer[:, :m] = s.T
    return ScaleBuffer(buffer.ravel(), (m, g), (1, _tma_rows(m)))


def from_column_major_tma(data, m, g):
    """Inverse of column_major_tma: s[t, j] = data[j·ceil(M/4)·4 + t]."""
    return _read(data, g * _tma_rows(m), (m, g), (1, _tma_rows(m)))


def pack_ue8m0(codes):
    """e8m0 codes [M, G] -> int32 [M, ceil(G/4)]: byte b (little-endian) of word [t, j] = code of group 4j+b,
    missing tail groups 0 (docs/semantics.md §2.4, DeepGEMM)."""
    m, g = codes.shape
    padded = np.zeros((m, -(-g // UE8M0_PER_INT32) * UE8M0_PER_INT32), np.uint32)
    padded[:, :g] = codes
    b = padded.reshape(m, padded.shape[1] // UE8M0_PER_INT32, UE8M0_PER_INT32)  # no -1: M may be 0
    return (b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16 | b[..., 3] << 24).view(np.int32)


def unpack_ue8m0(words, g):
    """Inverse of pack_ue8m0: int32 [M, ceil(G/4)] -> e8m0 codes uint8 [M, G]."""
    u = words.view(np.uint32)
    return np.stack([(u >> (8 * b)) & 0xFF for b in range(UE8M0_PER_INT32)], axis=-1).reshape(
        u.shape[0], u.shape[1] * UE8M0_PER_INT32)[:, :g].astype(np.uint8)


def _power_of_two_codes(s):
    s = _scales_2d(s)
    codes = ue8m0_ceil(s)
    if not np.array_equal(decode(codes, E8M0), s):
        raise ValueError("UE8M0 scales must be powers of two in [2^-127, 2^127] (per_token_group_quant_fp8 "
                         "with scale_fmt='ue8m0')")
    return codes


def ue8m0_packed(s, *, tma_aligned=True):
    """Power-of-two fp32 scales [M, G] as packed int32 [M, ceil(G/4)] (pack_ue8m0). tma_aligned: column-major,
    a [ceil(G/4), ceil(M/4)·4] buffer with strides (1, ceil(M/4)·4) (SGLang/DeepGEMM); else row-major."""
    words = pack_ue8m0(_power_of_two_codes(s))
    m, w = words.shape
    if not tma_aligned:
        return ScaleBuffer(words.ravel().copy(), (m, w), (w, 1))
    buffer = np.zeros((w, _tma_rows(m)), np.int32)
    buffer[:, :m] = words.T
    return ScaleBuffer(buffer.ravel(), (m, w), (1, _tma_rows(m)))


def from_ue8m0_packed(data, m, g, *, tma_aligned=True):
    """Inverse of ue8m0_packed: the fp32 power-of-two scales [M, G]."""
    w = -(-g // UE8M0_PER_INT32)
    if tma_aligned:
        words = _read(data, w * _tma_rows(m), (m, w), (1, _tma_rows(m)), np.int32)
    else:
        words = _read(data, m * w, (m, w), (w, 1), np.int32)
    return decode(unpack_ue8m0(words, g), E8M0)
