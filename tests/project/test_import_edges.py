"""Import edges the layout forbids (docs/architecture.md): the torch adapter does not lean on the spec's adapter
(its keyword mappers are methods of the configs), and the command line does not import the self-test (it is
loaded by module name when `mutants` is asked for) nor hold the campaign runner (cli.py only parses and
dispatches). The subpackages of difftest/ import in the direction of the flow, model ← checking ← store ← running ←
readers ← selftest, with no exception, and no module reaches itself through its imports. Hypothesis is used through
its public API only (no hypothesis.internal, no private attribute of a Hypothesis object)."""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = [("difftest/checking/impl_torch.py", "difftest.checking.impl_spec"),
             ("difftest/cli.py", "difftest.selftest.mutants"), ("difftest/cli.py", "difftest.running.campaign"),
             ("difftest/cli.py", "difftest.running.isolation")]
# each imports only from itself and those before: store/ is the on-disk format the runner writes (fixtures, run
# directories, atomic files), readers/ what reads it back (replay, reproducer, bug report, report, merge)
LAYERS = ("model", "checking", "store", "running", "readers", "selftest")
LEAVES = {"difftest.usage"}  # the command line's argument helpers, shared by run and replay; import nothing of ours


def module_name(path):
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported(path):
    """Every difftest module `path` imports (full dotted names), at the top or inside a function."""
    path = ROOT / path
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module.split(".")[0] != "difftest":
                continue
            for a in node.names:  # `from difftest.x import y`: y is a module or a name in x
                full = f"{module}.{a.name}"
                path_of = ROOT / full.replace(".", "/")
                is_module = path_of.with_suffix(".py").is_file() or (path_of / "__init__.py").is_file()
                names.add(full if is_module else module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.split(".")[0] == "difftest"}
    return names


def layer(module):
    """The layer a module belongs to; a layer's package (difftest.model, whose init holds OPS) belongs to itself."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in LAYERS else None


def edges():
    for path in sorted((ROOT / "difftest").rglob("*.py")):
        for target in imported(path.relative_to(ROOT)):
            yield module_name(path), target


@pytest.mark.parametrize(("path", "module"), FORBIDDEN)
def test_forbidden_import_edge(path, module):
    assert module not in imported(path), f"{path} imports {module}"


def test_cli_only_parses_and_dispatches():
    n = len((ROOT / "difftest/cli.py").read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"difftest/cli.py has {n} lines: move what is not parsing or dispatch to its own module"


def test_every_module_sits_in_a_layer():
    top = {m for m in map(module_name, (ROOT / "difftest").rglob("*.py")) if layer(m) is None}
    entry = {"difftest", "difftest.__main__", "difftest.cli", "difftest.usage",
             "difftest.plugin"}  # the plug-in contract: a façade over the layers, like the CLI
    assert top == entry


def test_imports_follow_the_flow():
    against = set()
    for source, target in edges():
        if target in LEAVES or layer(source) is None:  # the entry point (cli, __main__) sits on top of everything
            continue
        if layer(target) is None:
            against.add((source, target))
        elif LAYERS.index(layer(target)) > LAYERS.index(layer(source)):
            against.add((source, target))
    assert against == set(), "imports against the flow (docs/architecture.md, 'Layout of difftest/')"


def circle(graph):
    """A list of modules each importing the next and the last the first, or None: depth first, in sorted order."""
    state, path = {}, []  # state: 1 on the current path, 2 done

    def visit(module):
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target):]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        path.pop()
        return None

    return next((found for module in sorted(graph) if module not in state and (found := visit(module))), None)


def test_circle_finds_a_circle():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c"]
    assert circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert circle({"a": {"a"}}) == ["a"]


def test_no_import_circle():
    """No difftest module imports one that imports it back, directly or through others, at the top or inside a
    function (the layers' flow does not see circles within a layer)."""
    graph = defaultdict(set)
    for source, target in edges():
        graph[source].add(target)
    assert circle(graph) is None, f"import circle: {' -> '.join(circle(graph))}"


def test_leaves_import_nothing_of_difftest():
    for leaf in LEAVES:
        assert imported(leaf.replace(".", "/") + ".py") == set(), leaf


def test_hypothesis_is_used_through_its_public_api():
    """No module imports hypothesis.internal or reads a _private attribute of anything imported from hypothesis."""
    private = []
    for path in sorted((ROOT / "difftest").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "hypothesis":
                if ".internal" in f".{node.module}." or any(a.name.startswith("_") for a in node.names):
                    private.append(f"{path.name}: from {node.module} import ...")
                names |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                private += [f"{path.name}: import {a.name}" for a in node.names
                            if a.name.startswith("hypothesis.internal")]
                names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("hypothesis")}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in names:
                    private.append(f"{path.name}: {root.id}...{node.attr}")
    assert not private, private
