"""SGLang's own CUDA kernels (the sglang-kernel package, import name sgl_kernel), one adapter module per kernel.
Importing this package imports neither torch nor sgl_kernel.

Each adapter module exposes NAME, OP, DETERMINISTIC, RECIPE (a spec/recipes.py name, or None for quantizers, whose
formulation is the configuration's), SPACE (the configurations it covers, difftest/model/where.py), ``version()``,
``available()``, ``unsupported(config)``, the torch-level call named after the kernel, and
``run(config, inputs, device="cuda") -> dict`` on numpy arrays (docs/interfaces.md conventions). docs/sglang.md
says which sglang-kernel build they load, why that one, and how each recipe was read off the kernel sources and
the SASS of the shipped library.
"""

import importlib

ADAPTERS = ("moe_fused_gate", "moe_fused_gate_bf16", "per_token_group_quant_8bit", "per_token_group_quant_8bit_v1",
            "topk_softmax")


def adapter(name):
    if name not in ADAPTERS:
        raise ValueError(f"unknown SGLang adapter {name!r}; known: {ADAPTERS}")
    return importlib.import_module(f"{__name__}.{name}")
