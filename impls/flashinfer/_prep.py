"""Weight preparation for the trtllm-gen MoE kernels, through FlashInfer's own helpers (docs/semantics.md §5.2).

Every function takes and returns torch tensors on any device (the helpers run on CPU tensors too) and
works per expert on a 2-D weight ``[M, K]`` unless stated. Row permutations act on the uint8 view, so
bf16 and fp8 weights are treated alike.
"""

import torch


def up_gate_rows(w13, half_order):
    """[.., 2I, K] in ``half_order`` -> [.., 2I, K] in [up; gate] (rows 0:I up), trtllm-gen's GEMM1 order."""
    if half_order == "up_gate":
        return w13
    if half_order != "gate_up":
        raise ValueError(f"half_order must be 'gate_up' or 'up_gate', got {half_order!r}")
    n = w13.shape[-2] // 2
    return torch.cat([w13[..., n:, :], w13[..., :n, :]], dim=-2)


def as_u8(w):
    return w.view(torch.uint8) if w.element_size() == 1 else w.contiguous().view(torch.uint8)


def reorder_gated(w):
    """[2I, K] [up; gate] -> [2I, K] rows up0, gate0, up1, gate1, … (``reorder_rows_for_gated_act_gemm``)."""
    from flashinfer.fused_moe.core import reorder_rows_for_gated_act_gemm

    return reorder_rows_for_gated_act_gemm(w)


def shuffle_rows(w, epilogue_tile_m):
    """[M, K] -> [M, K], rows permuted inside 32-row (tile 128) or 16-row blocks (``shuffle_matrix_a``)."""
    from flashinfer import shuffle_matrix_a

    return shuffle_matrix_a(as_u8(w), epilogue_tile_m).view(w.dtype)


def block_major_k(w, block_k_bytes=128):
    """[M, K] contiguous -> [K_bytes/128, M, 128 bytes] contiguous (WeightLayout.BlockMajorK).

    bf16: [K/64, M, 64], strides (64·M, 64, 1); fp8: [K/128, M, 128].
    """
    from flashinfer.fused_moe.core import convert_to_block_layout

    return convert_to_block_layout(as_u8(w).contiguous(), block_k_bytes).view(w.dtype)


def transposed_hidden_scale(scales_col_major):
    """[T, H/128] fp32 whose storage is column-major (strides (1, T)) -> its zero-copy [H/128, T] contiguous view.

    The trtllm-gen FP8 block kernel reads ``hidden_states_scale`` as [H/128, T] (docs/semantics.md §5.1); a row-major
    [T, H/128] would need a copy and is refused instead, so a transposed layout never passes silently.
    """
    T, G = scales_col_major.shape
    if scales_col_major.dtype != torch.float32:
        raise ValueError(f"hidden scales must be float32, got {scales_col_major.dtype}")
    if T > 1 and G > 1 and scales_col_major.stride() != (1, T):
        raise ValueError(f"hidden scales must be column-major [T, H/128] (strides (1, {T})), "
                         f"got strides {scales_col_major.stride()}")
    return scales_col_major.t()  # T == 1 or G == 1: torch calls both layouts contiguous
