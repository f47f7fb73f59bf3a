"""The Implementation protocol and the registry of implementations under test.

An implementation is any object with these attributes (docs/interfaces.md):

    name: str; version: str; ops: tuple[str, ...]   # subset of case.OPS
    deterministic: bool      # repeat runs are bit-identical (checked)
    may_crash: bool          # run it in a separate process (difftest/running/isolation.py)
    available() -> str | None            # None, or why it cannot run here
    unsupported(case) -> str | None      # None, or why this case is outside its declared configurations
    recipe(case) -> Recipe | None        # where it rounds; None: compare against the ideal only
    run(case, inputs) -> dict[str, np.ndarray]
        routing -> {"ids", "weights"}; quant -> {"q", "scales", "scale_buffer"}; moe -> {"out"} (+ "ids", + "weights")
    space: dict (optional)   # the configurations it covers: fuzz draws only these (difftest/model/where.py)
    contract: int (optional, default 1)        # the plug-in contract it was written against (case.CONTRACT)
    capabilities: tuple (optional, default ()) # later fields it handles anyway (case.CAPABILITIES)
    known_as: str (optional, default None)     # the implementation whose open fixtures record this one's bugs too
                                               # (a variant under another recipe): `fuzz --known` counts them known

A field added to the case model after an implementation's contract is drawn at its neutral value for it, unless
its capabilities name the field's capability (case.neutral_fields): a plug-in written today keeps working tomorrow.

``Impl`` below is the plain NamedTuple the built-ins use; plug-ins may use any object of that shape.
Implementations are named by reference, so a fixture can name one it was found with:
``spec`` / ``torch`` (REGISTRY keys), the self-test's ``bug:K01`` / ``bug:<name>`` / ``tie_order:<name>``
(SELF_TEST), ``package.module:NAME`` or ``path/to/file.py:NAME`` (NAME an implementation, or an adapter-shaped
namespace such as ``impls.flashinfer.trtllm_gen_routing:AS_BUILT``, the adapter under another recipe).
"""

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import impls

from ..model.case import CAPABILITIES, CONTRACT, OPS


class ImplError(ValueError):
    """An implementation reference that cannot be resolved; the message says why."""


class HarnessError(RuntimeError):
    """The tester's own machinery failed around a kernel call (a JIT build racing another worker, a worker process
    that would not start, inputs that could not be made): the case was not tested, and its outcome is a tester
    error (check.TESTER_ERROR, a skip), never a finding or fixture against the implementation. Anything may
    raise it; a module that cannot import difftest (impls/ does not) raises its own exception class with
    ``difftest_harness = True`` instead (impls/flashinfer/_trtllm_gen_jit.py ``JitError``). Every other exception
    out of ``run`` stays the implementation's finding (status error)."""

    difftest_harness = True


def is_harness_error(e):
    """Whether exception `e` is a HarnessError: its class (or a base) sets ``difftest_harness = True``."""
    return getattr(type(e), "difftest_harness", False) is True


def failure_of(e):
    """The (field, check) pair that names an implementation's exception `e` in check.Result.failures, and so in
    its finding's signature: what `e` states as ``difftest_failure`` (an adapter that stops because it checked a
    kernel's output, say ``("permutation", "shard expert index")``: impls/ cannot import difftest, so the attribute
    is the contract), else its type, raised. Two bugs that raise the same type are then two signatures when their
    adapter names what it checked, never one parsed from the message."""
    named = getattr(e, "difftest_failure", None)
    if isinstance(named, tuple) and len(named) == 2 and all(isinstance(x, str) and x for x in named):
        return named
    return (type(e).__name__, "raised")


class Impl(NamedTuple):
    name: str
    version: str
    ops: tuple
    deterministic: bool
    may_crash: bool
    available: Callable
    unsupported: Callable
    recipe: Callable
    run: Callable
    contract: int = 1
    capabilities: tuple = ()
    known_as: str | None = None


# An Impl that also declares the configurations it covers (``space``, difftest/model/where.py): Impl's fields, then
# space.
class SpacedImpl(NamedTuple):
    name: str
    version: str
    ops: tuple
    deterministic: bool
    may_crash: bool
    available: Callable
    unsupported: Callable
    recipe: Callable
    run: Callable
    space: dict
    contract: int = 1
    capabilities: tuple = ()
    known_as: str | None = None


# Built-ins by name -> "module:attribute"; resolved on first use so that listing never imports torch.
REGISTRY = {
    "spec": "difftest.checking.impl_spec:SPEC",
    "torch": "difftest.checking.impl_torch:TORCH",
    "torch-cuda": "difftest.checking.impl_torch:TORCH_CUDA",
}
# The self-test's implementations by registry name, so that committed fixtures name them and not a module path:
# ``bug:K01`` ... the known-bug models (difftest/selftest/known_bugs.py K01 ...), any other ``bug:<name>`` or
# ``tie_order:<name>`` the implementation of that name in the kind's modules. Resolved on use.
SELF_TEST = {"bug": ("difftest.selftest.bug_models", "difftest.selftest.known_bugs"),
             "tie_order": ("difftest.selftest.tie_orders",)}

PROTOCOL = (
    "name",
    "version",
    "ops",
    "deterministic",
    "may_crash",
    "available",
    "unsupported",
    "recipe",
    "run",
)


def check_protocol(obj, ref):
    missing = [a for a in PROTOCOL if not hasattr(obj, a)]
    if missing:
        raise ImplError(f"{ref} is not an implementation: missing {missing}")
    if not set(obj.ops) <= set(OPS):
        raise ImplError(f"{ref}: ops {tuple(obj.ops)} not within {OPS}")
    contract, capabilities = contract_of(obj)
    if not (isinstance(contract, int) and not isinstance(contract, bool) and 1 <= contract <= CONTRACT):
        raise ImplError(f"{ref}: contract {contract!r} is not an integer in [1, {CONTRACT}] (difftest.plugin.CONTRACT)")
    unknown = [c for c in capabilities if c not in CAPABILITIES]
    if isinstance(capabilities, str) or unknown:
        raise ImplError(f"{ref}: capabilities must be a tuple of {sorted(CAPABILITIES)}, got {capabilities!r}")
    known_as = getattr(obj, "known_as", None)
    if known_as is not None and not (isinstance(known_as, str) and known_as and known_as != obj.name):
        raise ImplError(f"{ref}: known_as must be another implementation's name (a str), got {known_as!r}")
    return obj


def contract_of(impl):
    """(contract, capabilities) an implementation declares; 1 and () when it declares none."""
    return getattr(impl, "contract", 1), tuple(getattr(impl, "capabilities", ()) or ())


def _import_file(path):
    p = Path(path)
    if not p.is_file():
        raise ImplError(f"no such file {path}")
    name = f"difftest_plugin_{abs(hash(str(p.resolve())))}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, p)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # a syntax error or a raise at import: the plug-in's fault, one line
            del sys.modules[name]
            raise ImplError(f"cannot import {path}: {_one_line(e)}") from None
    return sys.modules[name]


def _one_line(e):
    """SyntaxError: invalid syntax (plugin.py, line 3); ImportError: its message; others: Type: message."""
    text = str(e).splitlines()[0] if str(e) else ""
    return text if isinstance(e, ImportError) else f"{type(e).__name__}: {text}"


def adapter_names():
    """The FlashInfer and SGLang adapters by name -> module, from impls.adapters() (the one registry: each adapter
    module declares itself; importing them never imports flashinfer or sgl_kernel)."""
    return {name: f"impls.{name}" for name in impls.adapters()}


def from_adapter_module(module):
    """An Impl from an impls/flashinfer or impls/sglang module (NAME, OP, DETERMINISTIC, RECIPE, available(),
    unsupported(config), run(config, inputs)): the adapters take the case's config, not the case. The adapters are
    kept with the case model, so they are of its contract (case.CONTRACT) unless one says otherwise (CONTRACT,
    CASE_CAPABILITIES; an adapter's CAPABILITIES are the devices it runs on); what they do not take they decline.
    A module
    whose recipe depends on the configuration defines ``recipe_for(config)``, returning a recipe name (impls/ never
    imports spec/), instead of naming one RECIPE. A module with ``version()`` names its own package version
    (otherwise flashinfer-python's); one with SPACE gives a SpacedImpl (the configurations it covers); KNOWN_AS
    names the adapter whose open fixtures record its bugs too (a variant such as trtllm_gen_routing.AS_BUILT)."""
    from spec.recipes import NAMED

    fixed = NAMED.get(getattr(module, "RECIPE", None))
    per_config = getattr(module, "recipe_for", None)
    recipe = (lambda case: NAMED[per_config(case.config)]) if per_config else (lambda case: fixed)
    fields = dict(
        name=module.NAME,
        version=module.version() if hasattr(module, "version") else _flashinfer_version(),
        ops=(module.OP,),
        deterministic=getattr(module, "DETERMINISTIC", False),
        may_crash=True,
        available=module.available,
        unsupported=lambda case: module.unsupported(case.config),
        recipe=recipe,
        run=lambda case, inputs: module.run(case.config, with_stacked_weights(case, inputs)),
        contract=getattr(module, "CONTRACT", CONTRACT),
        capabilities=tuple(getattr(module, "CASE_CAPABILITIES", ())),  # CAPABILITIES: the devices (SM x.y)
        known_as=getattr(module, "KNOWN_AS", None),  # a variant (AS_BUILT): the adapter whose fixtures it shares
    )
    space = getattr(module, "SPACE", None)
    return Impl(**fields) if space is None else SpacedImpl(**fields, space=space)


def with_stacked_weights(case, inputs):
    """The adapters of fused MoE kernels take every expert at once: the moe inputs plus the case's expert
    weights stacked [E, ...] (docs/interfaces.md keys), generated from (weight seed, expert id) like
    everyone's; the same read-only arrays while the weights stay the same (generate.stacked_weights)."""
    if case.op != "moe":
        return inputs
    from ..model.generate import weights

    return {**inputs, **weights(case).stacked()}


def _flashinfer_version():
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def self_test_ref(ref):
    """``module:ATTRIBUTE`` of a self-test registry name (SELF_TEST), or None when `ref` is not one: ``bug:Knn``
    is known_bugs.Knn, any other name the module attribute whose implementation carries that name."""
    kind, sep, rest = ref.partition(":")
    if not sep or kind not in SELF_TEST or not rest.replace("_", "").isalnum():
        return None
    for module_name in SELF_TEST[kind]:
        module = importlib.import_module(module_name)
        for attr, obj in vars(module).items():
            if attr == rest and attr[0] == "K" or getattr(obj, "name", None) == ref:
                return f"{module_name}:{attr}"
    return None


def load(ref):
    """Resolve a registry name, ``package.module:NAME`` or ``path/file.py:NAME`` to an implementation."""
    adapters = adapter_names()
    if ref in adapters:
        try:
            return check_protocol(from_adapter_module(importlib.import_module(adapters[ref])), ref)
        except ImportError as e:
            raise ImplError(f"cannot import {adapters[ref]}: {e}") from None
    ref_to_load = REGISTRY.get(ref) or self_test_ref(ref) or ref
    if ":" not in ref_to_load:
        raise ImplError(
            f"unknown implementation {ref!r}: not one of {sorted(names())} "
            "and not module:NAME or file.py:NAME"
        )
    where, attr = ref_to_load.rsplit(":", 1)
    if where.endswith(".py"):
        module = _import_file(where)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as e:  # ImportError, or the module's own SyntaxError / raise at import
            raise ImplError(f"cannot import {where}: {_one_line(e)}") from None
    if not hasattr(module, attr):
        raise ImplError(f"{where} has no attribute {attr!r}")
    found = getattr(module, attr)
    if not hasattr(found, "name") and all(hasattr(found, a) for a in impls.PROTOCOL):
        found = from_adapter_module(found)  # an adapter's variant (impls/ builds no Impl: trtllm_gen_routing.AS_BUILT)
    return check_protocol(found, ref)


def names():
    """Every implementation name known here: built-ins, FlashInfer and SGLang adapters."""
    return list(REGISTRY) + list(adapter_names())


def listing():
    """[(name, version, ops, reason or None)] for every known implementation, for `difftest impls`."""
    rows = []
    for name in names():
        try:
            impl = load(name)
            rows.append((name, impl.version, tuple(impl.ops), impl.available()))
        except Exception as e:  # an import failure is this implementation's unavailability reason
            rows.append((name, "?", (), f"{type(e).__name__}: {e}"))
    return rows
