"""FlashInfer ``cutlass_fused_moe`` (docs/semantics.md §5.4), the MoE that runs on Hopper: BF16 and DeepSeek FP8 block.

Opt-in only (``DIFFTEST_ENABLE_CUTLASS=1``): its SM90 JIT module ``fused_moe_90`` compiles 248 objects,
about an hour on 16 cores (docs/semantics.md §5.4). Routing is precomputed by the caller (ids + fp32 weights); w13 rows
are [up; gate]; in FP8-block mode the input stays bf16 and the kernel quantizes it 1×128 internally.
``use_fused_finalize=False`` keeps the combine deterministic.
"""

import os

from ._env import cuda_problem, first_problem, flashinfer_problem, prepared_inputs_problem, to_numpy, to_torch
from ._prep import up_gate_rows

NAME = "flashinfer.cutlass_fused_moe"
OP = "moe"
DETERMINISTIC = True
RECIPE = "flashinfer_cutlass_sm90"  # not yet in spec/recipes.py
CAPABILITIES = ((9, 0),)  # the FP8 block path is SM90-only; BF16 also runs on SM10x, not offered here


def available():
    if os.environ.get("DIFFTEST_ENABLE_CUTLASS") != "1":
        return "cutlass_fused_moe is opt-in (about 1 h of JIT build): set DIFFTEST_ENABLE_CUTLASS=1"
    return first_problem(flashinfer_problem, lambda: cuda_problem(CAPABILITIES))


def unsupported(config):
    c = config
    if prepared_inputs_problem(c):
        return prepared_inputs_problem(c)
    if c.quant not in ("bf16", "fp8_block"):
        return f"quant={c.quant!r} not in ('bf16', 'fp8_block')"
    if c.activation != "swiglu":
        return f"activation {c.activation!r}: only swiglu is adapted"
    if c.local_expert_offset != 0 or c.local_num_experts not in (None, c.routing.num_experts):
        return "expert parallelism is not adapted"
    if c.quant == "fp8_block" and (c.hidden_size % 128 or c.intermediate_size % 128):
        return "K % 128: hidden_size and intermediate_size must be multiples of 128 for fp8_block"
    return None


def cutlass_fused_moe(hidden, ids, weights, w13, w2, *, quant_scales=None):
    """hidden [T, H] bf16; ids [T, k] int32 global ids; weights [T, k] fp32; w13 [E, 2I, H] [up; gate]
    (bf16 or e4m3); w2 [E, H, I]; quant_scales None (bf16) or [w13_scale [E, 2I/128, H/128], w2_scale
    [E, H/128, I/128]] fp32 (FP8 block) -> out [T, H] bf16."""
    import torch
    from flashinfer.fused_moe import cutlass_fused_moe as kernel

    if hidden.dtype != torch.bfloat16 or not hidden.is_contiguous():
        raise ValueError("input must be contiguous bfloat16 (FP8 block mode quantizes it internally)")
    if ids.dtype != torch.int32 or weights.dtype != torch.float32 or ids.shape != weights.shape:
        raise ValueError("token_selected_experts must be int32 and token_final_scales float32, same [T, k] shape")
    fp8 = quant_scales is not None
    out = torch.empty_like(hidden)
    kernel(hidden, ids, weights, w13, w2, torch.bfloat16, quant_scales=quant_scales, output=out,
           use_deepseek_fp8_block_scale=fp8, use_fused_finalize=False)
    return out


def run(config, inputs, device="cuda"):
    """inputs {"hidden", "ids", "weights", "w13", "w2", ["w13_scale", "w2_scale"]} -> {"out"}."""
    fmt = "e4m3fn" if config.quant == "fp8_block" else "bf16"
    w13 = up_gate_rows(to_torch(inputs["w13"], fmt, device), config.half_order).contiguous()
    scales = None
    if config.quant == "fp8_block":
        scales = [up_gate_rows(to_torch(inputs["w13_scale"], "fp32", device), config.half_order).contiguous(),
                  to_torch(inputs["w2_scale"], "fp32", device)]
    out = cutlass_fused_moe(to_torch(inputs["hidden"], "bf16", device), to_torch(inputs["ids"], "int32", device),
                            to_torch(inputs["weights"], "fp32", device), w13, to_torch(inputs["w2"], fmt, device),
                            quant_scales=scales)
    return {"out": to_numpy(out)}
