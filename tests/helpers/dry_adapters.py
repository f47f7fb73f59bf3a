"""Every FlashInfer and SGLang adapter as a CPU implementation: its own `unsupported`, contract and recipe, with the
spec's output under that recipe in place of the kernel's (``dry:<adapter>``). A campaign of one draws and declines
exactly as the adapter's would on its device, so the share of drawn cases it compares is measured here, without the
device (tests/impls/test_adapter_search_fit.py, benchmarks/search_fit.py)."""

from difftest.checking import impl_spec, interface

NAMES = sorted(interface.adapter_names())


def dry(name):
    impl = interface.load(name)
    return impl._replace(name=f"dry:{name}", available=lambda: None, may_crash=False, deterministic=True,
                         run=lambda case, inputs: impl_spec.expected(case, inputs, impl.recipe(case)))


DRY = {name: dry(name) for name in NAMES}
globals().update({name.replace(".", "_"): impl for name, impl in DRY.items()})
