"""FlashInfer ``trtllm_bf16_moe`` (docs/semantics.md §5.1): trtllm-gen BF16 fused MoE from logits; SM100/SM103 only.

Weights: BlockMajorK only, shuffled: w13 [up; gate] -> gated row reorder -> ``shuffle_matrix_a(128)`` ->
``convert_to_block_layout``; w2 -> ``shuffle_matrix_a(128)`` -> block layout (docs/semantics.md §5.2).
"""

from . import _trtllm
from ._env import to_numpy, to_torch
from ._prep import block_major_k, reorder_gated, shuffle_rows, up_gate_rows

NAME = "flashinfer.trtllm_bf16_moe"
OP = "moe"
DETERMINISTIC = True
RECIPE = "flashinfer_trtllm_bf16"  # spec/recipes.py TRTLLM_BF16
ACTIVATIONS = ("swiglu", "relu2")
available = _trtllm.available

SPACE = _trtllm.space("bf16", ACTIVATIONS) | {"hidden_dtype": "bf16"}  # what unsupported() takes, field by field


def unsupported(config):
    problem = _trtllm.unsupported(config, quant="bf16", activations=ACTIVATIONS)
    if problem is None and config.hidden_dtype != "bf16":
        problem = f"hidden_dtype {config.hidden_dtype!r}: this entry point takes bf16 hidden states"
    return problem


def prepare_weights(w13, w2, *, gated=True, half_order="gate_up"):
    """bf16 w13 [E, N1, H] (N1 = 2I gated, rows in ``half_order``), w2 [E, H, I] -> BlockMajorK, shuffled.

    Per expert: w13 -> [up; gate] -> up0, gate0, … -> 32-row shuffle -> [H/64, N1, 64] (strides
    (64·N1, 64, 1)); w2 -> 32-row shuffle -> [I/64, H, 64]. Returns stacked [E, K/64, M, 64] bf16.
    """
    import torch

    if gated:
        w13 = up_gate_rows(w13, half_order)
    g1 = [block_major_k(shuffle_rows(reorder_gated(w) if gated else w, 128)) for w in w13]
    g2 = [block_major_k(shuffle_rows(w, 128)) for w in w2]
    return torch.stack(g1), torch.stack(g2)


def trtllm_bf16_moe(logits, bias, hidden, gemm1_weights, gemm2_weights, config):
    """hidden [T, H] bf16 contiguous; weights from prepare_weights; -> out [T, H] bf16."""
    import torch
    from flashinfer.fused_moe import WeightLayout
    from flashinfer.fused_moe import trtllm_bf16_moe as kernel

    if hidden.dtype != torch.bfloat16 or not hidden.is_contiguous():
        raise ValueError("hidden_states must be contiguous bfloat16")
    if hidden.shape[1] % 128:
        raise ValueError(f"hidden_size={hidden.shape[1]} is not a multiple of 128")
    return kernel(hidden_states=hidden, gemm1_weights=gemm1_weights, gemm2_weights=gemm2_weights,
                  use_shuffled_weight=True, weight_layout=WeightLayout.BlockMajorK, do_finalize=True,
                  activation_type=_trtllm.activation_type(config.activation),
                  **_trtllm.routing_args(config, logits, bias))


def run(config, inputs, device="cuda"):
    """inputs {"hidden", "logits", "bias"?, "w13", "w2"} (numpy, bf16 values as float32; weights of all E experts,
    of which the local shard's are passed) -> {"out"}."""
    w = _trtllm.local_weights(config, inputs)
    w13 = to_torch(w["w13"], "bf16", device)
    w2 = to_torch(w["w2"], "bf16", device)
    g1, g2 = prepare_weights(w13, w2, gated=config.gated, half_order=config.half_order)
    bias = inputs.get("bias")
    out = trtllm_bf16_moe(to_torch(inputs["logits"], config.routing.logits_dtype, device),
                          None if bias is None else to_torch(bias, "fp32", device),
                          to_torch(inputs["hidden"], "bf16", device), g1, g2, config)
    return {"out": to_numpy(out)}
