"""SGLang's own CUDA kernels (the sglang-kernel package, import name sgl_kernel), one adapter module per kernel.
Importing this package imports neither torch nor sgl_kernel.

Each adapter module exposes NAME, OP, DETERMINISTIC, RECIPE (a spec/recipes.py name, or None for quantizers, whose
formulation is the configuration's), SPACE (the configurations it covers, difftest/model/where.py), ``version()``,
``available()``, ``unsupported(config)``, the torch-level call named after the kernel, and
``run(config, inputs, device="cuda") -> dict`` on numpy arrays (docs/interfaces.md conventions). docs/sglang.md
says which sglang-kernel build they load, why that one, and how each recipe was read off the kernel sources and
the SASS of the shipped library.
"""

from .. import adapter as _adapter


def adapter(name):
    """impls.sglang.<name>, one of the "sglang." names of impls.adapters(), imported."""
    return _adapter(f"sglang.{name}")
