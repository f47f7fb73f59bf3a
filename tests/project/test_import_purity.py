"""spec/ imports numpy and the standard library only; impls/ never imports spec/; nothing imports jax."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: stays inside its package
                yield node.lineno, "." * node.level + (node.module or "")
            else:
                yield node.lineno, node.module


def python_files(*dirs):
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


# spec/data/probes/ holds the device scripts that measured spec/data's facts (torch, CUDA, difftest): run by hand on
# a GPU host, never imported by the spec, so outside this rule. Everything else under spec/ is the spec.
PROBES = ROOT / "spec" / "data" / "probes"


def test_only_the_device_probes_are_outside_the_spec_import_rule():
    """The exemption is the probes folder and nothing else, and no module of the spec imports from spec/data."""
    spec = [p for p in python_files("spec") if PROBES not in p.parents]
    exempt = sorted(set(python_files("spec")) - set(spec))
    assert len(spec) > 10 and exempt and all(p.parent == PROBES for p in exempt), exempt
    for path in spec:
        for lineno, name in imported_modules(path):
            into_data = (name.startswith(".") and name.lstrip(".").split(".")[0] == "data"
                         or name.split(".")[:2] == ["spec", "data"])
            assert not into_data, f"{path.relative_to(ROOT)}:{lineno} imports {name}"


@pytest.mark.parametrize("path", [p for p in python_files("spec") if PROBES not in p.parents],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_spec_imports_numpy_and_stdlib_only(path):
    for lineno, name in imported_modules(path):
        top = name.split(".")[0]
        allowed = name.startswith(".") or top in ("numpy", "spec") or top in sys.stdlib_module_names
        assert allowed, f"{path.relative_to(ROOT)}:{lineno} imports {name!r}; spec/ may import numpy + stdlib only"


@pytest.mark.parametrize("path", python_files("impls"), ids=lambda p: str(p.relative_to(ROOT)))
def test_impls_do_not_import_spec_or_difftest(path):
    for lineno, name in imported_modules(path):
        top = name.split(".")[0]
        assert top not in ("spec", "difftest"), (
            f"{path.relative_to(ROOT)}:{lineno} imports {name!r}; impls/ must stay independent of spec/")


@pytest.mark.parametrize("path", python_files("spec", "impls", "difftest", "tests", "benchmarks"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_jax_anywhere(path):
    for lineno, name in imported_modules(path):
        assert name.split(".")[0] not in ("jax", "jaxlib"), f"{path.relative_to(ROOT)}:{lineno} imports {name}"
