"""FlashInfer adapters, one module per kernel. Importing this package imports neither torch nor flashinfer.

Each adapter module exposes NAME, OP, DETERMINISTIC, RECIPE (a spec/recipes.py name), ``available()``,
``unsupported(config)``, weight preparation functions, the torch-level call named after the kernel, and
``run(config, inputs, device="cuda") -> dict`` on numpy arrays (docs/interfaces.md conventions).
"""

import importlib

ADAPTERS = ("fused_topk_deepseek", "mono_moe", "trtllm_gen_routing", "trtllm_gen_dev_ops", "trtllm_bf16_moe",
            "trtllm_fp8_block_scale_moe",
            "trtllm_fp4_block_scale_moe", "cutlass_fused_moe")


def adapter(name):
    if name not in ADAPTERS:
        raise ValueError(f"unknown FlashInfer adapter {name!r}; known: {ADAPTERS}")
    return importlib.import_module(f"{__name__}.{name}")
