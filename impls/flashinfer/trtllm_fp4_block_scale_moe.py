"""FlashInfer ``trtllm_fp4_block_scale_moe`` with NVFP4 weights and activations (docs/semantics.md §5.1):
SM100/SM103 only.

Weights and their e4m3 block scales (one per 16 elements) are permuted with FlashInfer's own cached
index helpers (gated reorder + 32-row shuffle for GEMM1, shuffle only for GEMM2, epilogue tile 128), and
the scales are then swizzled 128×4 with ``block_scale_interleave``. Hidden states are quantized by
``fp4_quantize`` with a linear scale layout. Global scales follow the quantization-multiplier
convention (x_q = x·g): ``output1_scale_scalar = g_c/(g_x·g_w13)``, ``output1_scale_gate_scalar =
1/(g_x·g_w13)``, ``output2_scale_scalar = 1/(g_c·g_w2)``, with g_c the intermediate's global scale.
g_x and g_c are calibrated constants that the case model does not carry yet (docs/interfaces.md has no such
keys), so unsupported() declines every case and run() takes them only from inputs that hold them
(tests/impls/test_sm100_contract.py passes them).
"""

from . import _trtllm
from ._env import to_numpy, to_torch
from ._prep import up_gate_rows

NAME = "flashinfer.trtllm_fp4_block_scale_moe"
OP = "moe"
DETERMINISTIC = True
RECIPE = "flashinfer_trtllm_fp4_block"  # not yet in spec/recipes.py
ACTIVATIONS = ("swiglu", "geglu", "relu2", "identity")
SF_VEC = 16
available = _trtllm.available

SPACE = _trtllm.space("nvfp4", ACTIVATIONS)  # what unsupported() takes, field by field

CALIBRATION = ("hidden_global", "intermediate_global")  # the activations' NVFP4 global scales, calibrated constants


def unsupported(config):
    return _trtllm.unsupported(config, quant="nvfp4", activations=ACTIVATIONS) or (
        f"the case carries no NVFP4 activation calibration ({', '.join(CALIBRATION)}; docs/interfaces.md), "
        "which the kernel takes as inputs")


def prepare_weights(w13, w13_scale, w2, w2_scale, *, gated=True, half_order="gate_up"):
    """uint8 packed e2m1 w13 [E, N1, H/2] + e4m3 scales [E, N1, H/16]; w2 [E, H, I/2] + [E, H, I/16]
    -> (w13, w13_sf, w2, w2_sf): weights row-permuted [E, N1, H/2] / [E, H, I/2]; scales row-permuted,
    128×4-interleaved, reshaped back to [E, N1, H/16] / [E, H, I/16] (float8_e4m3fn)."""
    import torch
    from flashinfer import block_scale_interleave
    from flashinfer.fused_moe.core import _maybe_get_cached_w3_w1_permute_indices, get_w2_permute_indices_with_cache

    if gated:
        w13, w13_scale = up_gate_rows(w13, half_order), up_gate_rows(w13_scale, half_order)
    cache, out = {}, ([], [], [], [])
    for e in range(w13.shape[0]):
        s13, s2 = w13_scale[e].view(torch.uint8), w2_scale[e].view(torch.uint8)
        i13 = _maybe_get_cached_w3_w1_permute_indices(cache, w13[e], 128, is_gated_act_gemm=gated)
        i13s = _maybe_get_cached_w3_w1_permute_indices(cache, s13, 128, num_elts_per_sf=SF_VEC,
                                                       is_gated_act_gemm=gated)
        i2 = get_w2_permute_indices_with_cache(cache, w2[e], 128)
        i2s = get_w2_permute_indices_with_cache(cache, s2, 128, num_elts_per_sf=SF_VEC)
        out[0].append(w13[e][i13.to(w13.device)].contiguous())
        out[1].append(block_scale_interleave(s13[i13s.to(s13.device)].contiguous()))
        out[2].append(w2[e][i2.to(w2.device)].contiguous())
        out[3].append(block_scale_interleave(s2[i2s.to(s2.device)].contiguous()))
    return (torch.stack(out[0]), torch.stack(out[1]).view(torch.float8_e4m3fn).reshape(w13_scale.shape),
            torch.stack(out[2]), torch.stack(out[3]).view(torch.float8_e4m3fn).reshape(w2_scale.shape))


def trtllm_fp4_block_scale_moe(logits, bias, hidden, hidden_global, weights, globals_, config):
    """hidden bf16 [T, H]; hidden_global fp32 [1]; ``weights`` from prepare_weights; ``globals_`` =
    (g_w13 [E], g_w2 [E], g_c scalar) fp32 -> out [T, H] bf16."""
    import torch
    from flashinfer import SfLayout, fp4_quantize
    from flashinfer.fused_moe import trtllm_fp4_block_scale_moe as kernel

    if hidden.dtype != torch.bfloat16 or not hidden.is_contiguous():
        raise ValueError("hidden_states must be contiguous bfloat16 before NVFP4 quantization")
    if hidden.shape[1] % 128:
        raise ValueError(f"hidden_size={hidden.shape[1]} is not a multiple of 128")
    hq, hs = fp4_quantize(hidden, hidden_global, sf_vec_size=SF_VEC, sf_use_ue8m0=False,
                          is_sf_swizzled_layout=False, nvfp4_4over6=None)  # None: not FLASHINFER_NVFP4_4OVER6*
    g_w13, g_w2, g_c = globals_
    w13, w13_sf, w2, w2_sf = weights
    out = kernel(hidden_states=hq, hidden_states_scale=hs.view(torch.float8_e4m3fn).reshape(hidden.shape[0], -1),
                 gemm1_weights=w13, gemm1_weights_scale=w13_sf, gemm1_bias=None, gemm1_alpha=None,
                 gemm1_beta=None, gemm1_clamp_limit=None, gemm2_weights=w2, gemm2_weights_scale=w2_sf,
                 gemm2_bias=None, output1_scale_scalar=g_c / (hidden_global * g_w13),
                 output1_scale_gate_scalar=1.0 / (hidden_global * g_w13), output2_scale_scalar=1.0 / (g_c * g_w2),
                 do_finalize=True, activation_type=_trtllm.activation_type(config.activation),
                 hidden_states_scale_layout=SfLayout.layout_linear, **_trtllm.routing_args(config, logits, bias))
    return out[0]


def run(config, inputs, device="cuda"):
    """inputs {"hidden", "hidden_global", "logits", "bias"?, "w13", "w13_scale", "w13_global", "w2", "w2_scale",
    "w2_global", "intermediate_global"} (numpy; codes uint8, globals fp32; weights of all E experts, of which the
    local shard's are passed) -> {"out"}."""
    import numpy as np
    import torch

    missing = [k for k in CALIBRATION if k not in inputs]
    if missing:
        raise ValueError(f"inputs lack the NVFP4 activation global scales {missing}")
    w = _trtllm.local_weights(config, inputs)
    codes = lambda k, dtype: to_torch(w[k], "e4m3fn", device).view(dtype)
    weights = prepare_weights(codes("w13", torch.uint8), codes("w13_scale", torch.float8_e4m3fn),
                              codes("w2", torch.uint8), codes("w2_scale", torch.float8_e4m3fn),
                              gated=config.gated, half_order=config.half_order)
    L = w["w13"].shape[0]
    g = lambda k: to_torch(np.broadcast_to(np.float32(w[k]), (L,)), "fp32", device)
    globals_ = (g("w13_global"), g("w2_global"), float(inputs["intermediate_global"]))
    bias = inputs.get("bias")
    out = trtllm_fp4_block_scale_moe(to_torch(inputs["logits"], config.routing.logits_dtype, device),
                                     None if bias is None else to_torch(bias, "fp32", device),
                                     to_torch(inputs["hidden"], "bf16", device),
                                     to_torch(np.float32([inputs["hidden_global"]]), "fp32", device),
                                     weights, globals_, config)
    return {"out": to_numpy(out)}
