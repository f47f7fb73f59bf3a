"""Import edges the layout forbids (docs/architecture.md): the torch adapter does not lean on the spec's adapter
(its keyword mappers are methods of the configs), and the command line does not import the self-test (it is
loaded by module name when `mutants` is asked for) nor hold the campaign runner (cli.py only parses and
dispatches)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = [("difftest/impl_torch.py", "impl_spec"), ("difftest/cli.py", "mutants"), ("difftest/cli.py", "campaign"),
             ("difftest/cli.py", "isolation")]


def imported(path):
    """Every difftest module name `path` imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = (node.module or "").removeprefix("difftest.").lstrip(".")
            names |= {base} if base else {a.name for a in node.names}
            names |= {f"{base}.{a.name}".strip(".") for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name.removeprefix("difftest.") for a in node.names}
    return {n.split(".")[0] for n in names}


@pytest.mark.parametrize(("path", "module"), FORBIDDEN)
def test_forbidden_import_edge(path, module):
    assert module not in imported(path), f"{path} imports {module}"


def test_cli_only_parses_and_dispatches():
    n = len((ROOT / "difftest/cli.py").read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"difftest/cli.py has {n} lines: move what is not parsing or dispatch to its own module"
