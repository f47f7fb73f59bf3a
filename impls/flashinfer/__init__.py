"""FlashInfer adapters, one module per kernel. Importing this package imports neither torch nor flashinfer.

Each adapter module exposes NAME, OP, DETERMINISTIC, RECIPE (a spec/recipes.py name), ``available()``,
``unsupported(config)``, weight preparation functions, the torch-level call named after the kernel, and
``run(config, inputs, device="cuda") -> dict`` on numpy arrays (docs/interfaces.md conventions).
"""

from .. import adapter as _adapter


def adapter(name):
    """impls.flashinfer.<name>, one of the "flashinfer." names of impls.adapters(), imported."""
    return _adapter(f"flashinfer.{name}")
