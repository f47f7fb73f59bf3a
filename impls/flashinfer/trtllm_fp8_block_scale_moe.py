"""FlashInfer ``trtllm_fp8_block_scale_moe`` with DeepSeekFp8 (docs/semantics.md §5.1): SM100/SM103 only.

The caller quantizes the hidden states per (token, 128 columns) and passes the scales as the
zero-copy [H/128, T] transpose of column-major [T, H/128] scales (SGLang after PR #28555, docs/semantics.md §5.5).
Weights stay in the natural MajorK layout, unshuffled (SGLang's choice: ``use_shuffled_weight=False``),
with w13 rows [up; gate] and no gated row reorder (DeepSeekFp8 does not fuse the activation).
"""

from . import _trtllm
from ._env import to_numpy, to_torch
from ._prep import transposed_hidden_scale, up_gate_rows

NAME = "flashinfer.trtllm_fp8_block_scale_moe"
OP = "moe"
DETERMINISTIC = True
RECIPE = "flashinfer_trtllm_fp8_block"  # spec/recipes.py TRTLLM_FP8_BLOCK
available = _trtllm.available

SPACE = _trtllm.space("fp8_block", ("swiglu",))  # what unsupported() takes, field by field


def unsupported(config):
    return _trtllm.unsupported(config, quant="fp8_block", activations=("swiglu",))


def quantize_hidden(hidden):
    """bf16 [T, H] -> (e4m3 [T, H], fp32 [T, H/128] column-major, strides (1, T)).

    SGLang's JIT quantizer (docs/semantics.md §2.2): amax = max(|x|, 1e-10), s = amax·fl(1/448),
    q = satfinite(x·fl(448·fl(1/amax))); the clamp to ±448 is the satfinite of the CUDA cast.
    """
    import torch

    T, H = hidden.shape
    x = hidden.float().view(T, H // 128, 128)
    amax = x.abs().amax(-1, keepdim=True).clamp_min(1e-10)
    q = (x * (448.0 * (1.0 / amax))).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(T, H)
    scales = torch.empty(H // 128, T, dtype=torch.float32, device=hidden.device)
    scales.copy_((amax.squeeze(-1) * torch.tensor(1.0 / 448.0, dtype=torch.float32)).t())
    return q, scales.t()


def prepare_weights(w13, w13_scale, w2, w2_scale, *, half_order="gate_up"):
    """e4m3 w13 [E, 2I, H], fp32 w13_scale [E, 2I/128, H/128], w2 [E, H, I], w2_scale [E, H/128, I/128]
    -> the same shapes, w13 rows and scale row-blocks in [up; gate] order, all contiguous (MajorK)."""
    return (up_gate_rows(w13, half_order).contiguous(), up_gate_rows(w13_scale, half_order).contiguous(),
            w2.contiguous(), w2_scale.contiguous())


def trtllm_fp8_block_scale_moe(logits, bias, hidden_q, hidden_scale_col_major, weights, config):
    """hidden_q e4m3 [T, H]; scales [T, H/128] column-major; weights from prepare_weights -> out [T, H] bf16."""
    import torch
    from flashinfer.fused_moe import Fp8QuantizationType, WeightLayout
    from flashinfer.fused_moe import trtllm_fp8_block_scale_moe as kernel

    T, H = hidden_q.shape
    if hidden_q.dtype != torch.float8_e4m3fn or not hidden_q.is_contiguous():
        raise ValueError("hidden_states must be contiguous float8_e4m3fn (the launcher checks 'must be fp8')")
    if H % 128 or config.intermediate_size % 128:
        raise ValueError(f"K % 128: hidden_size={H} and intermediate_size={config.intermediate_size} "
                         "must be multiples of 128")
    if hidden_scale_col_major.shape != (T, H // 128):
        raise ValueError(f"hidden scales must be [T, H/128]=[{T}, {H // 128}], "
                         f"got {list(hidden_scale_col_major.shape)}")
    w13, w13_scale, w2, w2_scale = weights
    return kernel(hidden_states=hidden_q, hidden_states_scale=transposed_hidden_scale(hidden_scale_col_major),
                  gemm1_weights=w13, gemm1_weights_scale=w13_scale, gemm2_weights=w2,
                  gemm2_weights_scale=w2_scale, use_shuffled_weight=False, weight_layout=WeightLayout.MajorK,
                  do_finalize=True, fp8_quantization_type=Fp8QuantizationType.DeepSeekFp8,
                  activation_type=_trtllm.activation_type(config.activation),
                  **_trtllm.routing_args(config, logits, bias))


def run(config, inputs, device="cuda"):
    """inputs {"hidden" bf16 values, "logits", "bias"?, "w13", "w13_scale", "w2", "w2_scale"} -> {"out"}."""
    w = _trtllm.local_weights(config, inputs)
    weights = prepare_weights(to_torch(w["w13"], "e4m3fn", device), to_torch(w["w13_scale"], "fp32", device),
                              to_torch(w["w2"], "e4m3fn", device), to_torch(w["w2_scale"], "fp32", device),
                              half_order=config.half_order)
    q, s = quantize_hidden(to_torch(inputs["hidden"], "bf16", device))
    bias = inputs.get("bias")
    out = trtllm_fp8_block_scale_moe(to_torch(inputs["logits"], config.routing.logits_dtype, device),
                                     None if bias is None else to_torch(bias, "fp32", device), q, s, weights, config)
    return {"out": to_numpy(out)}
