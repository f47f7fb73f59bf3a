"""Independent torch eager MoE: routing, quantization, scale layouts, the layer (CPU and CUDA, one code path).

Written from the documented math (docs/semantics.md), never from spec/.
"""

from .layer import ACTIVATIONS, MoEOutput, moe_layer, quantize_expert_weights, swap_w13_halves
from .layouts import column_major, column_major_tma, row_major, scale_buffer, ue8m0_packed, unpack_ue8m0
from .quant import (
    e2m1_decode,
    e2m1_encode,
    e8m0_to_float,
    mxfp8_dequant,
    mxfp8_quant,
    nvfp4_dequant,
    nvfp4_global_scale,
    nvfp4_quant,
    per_token_group_dequant,
    per_token_group_quant_fp8,
    ue8m0_ceil,
    weight_block_quant,
    weight_dequant,
)
from .recipe import RECIPE
from .routing import ROUTING_METHODS, expert_permutation, route

__all__ = [
    "ACTIVATIONS", "MoEOutput", "RECIPE", "ROUTING_METHODS", "column_major", "column_major_tma", "expert_permutation",
    "e2m1_decode", "e2m1_encode", "e8m0_to_float", "moe_layer", "mxfp8_dequant", "mxfp8_quant",
    "nvfp4_dequant", "nvfp4_global_scale", "nvfp4_quant", "per_token_group_dequant",
    "per_token_group_quant_fp8", "quantize_expert_weights", "route", "row_major", "scale_buffer",
    "swap_w13_halves", "ue8m0_ceil", "ue8m0_packed", "unpack_ue8m0", "weight_block_quant", "weight_dequant",
]
