"""Differential tester: spec vs implementations, with derived error bounds.

Plug-ins import ``difftest.plugin`` (docs/plugins.md): it is the contract, versioned, and everything else here is
private and may move. Plug-ins written before it imported the modules of the flat layout of 2026-11 by their
names then (``difftest.case``, ``from difftest import campaign, interface``): those names still resolve, each to
the module it became (MOVED), so such a plug-in keeps working.
"""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "case": "model.case", "generate": "model.generate", "presets": "model.presets", "strategies": "model.strategies",
    "where": "model.where", "interface": "checking.interface", "check": "checking.check",
    "compare": "checking.compare", "impl_spec": "checking.impl_spec", "impl_torch": "checking.impl_torch",
    "bias": "checking.bias", "campaign": "running.campaign", "isolation": "running.isolation",
    "pipeline": "running.pipeline", "run": "running.run", "fixtures": "store.fixtures",
    "merge": "readers.merge", "replay": "readers.replay", "report": "readers.report",
    "reproducer": "readers.reproducer", "rundir": "store.rundir", "bug_models": "selftest.bug_models",
    "known_bugs": "selftest.known_bugs", "mutants": "selftest.mutants", "tie_orders": "selftest.tie_orders",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import difftest.<old name>`` gives the module it moved to (the same object, not a copy)."""

    def find_spec(self, fullname, path, target=None):
        package, _, name = fullname.partition(".")
        if package == __name__ and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(f"{__name__}.{MOVED[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__  # the import system sets the alias's spec on it: put back in exec_module
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state


def __getattr__(name):
    """``from difftest import campaign``: an old module name, resolved on use."""
    if name in MOVED:
        return importlib.import_module(f"{__name__}.{MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.append(_Moved())
