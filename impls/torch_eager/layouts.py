"""Scale layouts as SGLang allocates them (per_token_group_quant._allocate_outputs), each with its inverse.

Every function takes row-major logical scales [..., M, G] and returns a tensor of the same logical shape
(packed: [..., M, ceil(G/4)] int32) whose strides are the real memory layout; ``scale_buffer`` exposes that
memory as the flat buffer a kernel reads.
"""

import torch


def ceil_div(a, b):
    return -(-a // b)


def row_major(scales):
    """fp32 [..., M, G], contiguous: strides (G, 1)."""
    return scales.contiguous()


def column_major(scales):
    """fp32 [..., M, G] viewing a contiguous [..., G, M] buffer: strides (1, M), no padding."""
    *lead, M, G = scales.shape
    buf = scales.new_empty(*lead, G, M)  # allocated, not .contiguous(): size-1 dims keep canonical strides
    buf.copy_(scales.transpose(-1, -2))
    return buf.transpose(-1, -2)


def column_major_tma(scales):
    """fp32 [..., M, G] viewing a [..., G, ceil(M/4)*4] buffer: strides (1, ceil(M/4)*4); pad rows zero."""
    *lead, M, G = scales.shape
    buf = scales.new_zeros(*lead, G, ceil_div(M, 4) * 4)
    buf[..., :M] = scales.transpose(-1, -2)
    return buf.transpose(-1, -2)[..., :M, :]


def ue8m0_packed(codes):
    """uint8 e8m0 codes [..., M, G] -> int32 [..., M, ceil(G/4)] in the column-major TMA layout.

    Byte b of element [t, j] is group 4j+b (little-endian host, the kernel's byte order); tail bytes are 0.
    Buffer [..., ceil(G/4), ceil(M/4)*4], strides (1, ceil(M/4)*4).
    """
    *lead, M, G = codes.shape
    padded = codes.new_zeros(*lead, M, ceil_div(G, 4) * 4)
    padded[..., :G] = codes
    return column_major_tma(padded.view(torch.int32))


def unpack_ue8m0(packed, num_groups):
    """int32 [..., M, ceil(G/4)] (any strides) -> uint8 e8m0 codes [..., M, G]."""
    dense = packed.new_empty(packed.shape).copy_(packed)  # canonical strides even for size-1 dims
    return dense.view(torch.uint8)[..., :num_groups]


def scale_buffer(scales):
    """The whole memory a layout view addresses, as a flat contiguous tensor (padding included)."""
    numel = scales.untyped_storage().nbytes() // scales.element_size()
    return torch.as_strided(scales, (numel,), (1,), 0)
