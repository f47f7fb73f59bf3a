"""Implementations under test: an independent torch eager implementation and the kernel adapters (FlashInfer,
SGLang), one module per kernel in a vendor folder (impls/<vendor>/).

The adapters' one registry is ``adapters()``: an adapter module declares itself by binding ``NAME =
"<vendor>.<module>"`` at module level beside the rest of the adapter protocol (``PROTOCOL``); it is found by reading
the vendor folders' sources, never by importing them (importing an adapter may import torch), so a new adapter is
registered by being written, not by editing a list.
"""

import ast
import functools
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROTOCOL = ("NAME", "OP", "available", "unsupported", "run")  # what every adapter module binds at module level


def _bound(tree):
    """The names a module binds at module level: assignments, definitions, imports."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _declared_name(tree):
    """The string a module-level ``NAME = "..."`` binds, or None."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets):
            value = node.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    return None


@functools.lru_cache(maxsize=256)
def _read(path, mtime_ns, size):
    """(names bound at module level, NAME's string) of one source file, parsed once per version of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(_bound(tree)), _declared_name(tree)


def adapters(root=ROOT):
    """The sorted "vendor.module" names of every adapter module under `root`'s vendor folders (its subpackages):
    the public modules that bind NAME. One whose NAME is not its own "vendor.module", or that lacks part of
    PROTOCOL, is an error naming the file and what it violates."""
    found = []
    for path in sorted(Path(root).glob("*/*.py")):
        if path.name.startswith("_") or not (path.parent / "__init__.py").is_file():
            continue
        stat = path.stat()
        bound, declared = _read(path, stat.st_mtime_ns, stat.st_size)
        if "NAME" not in bound:
            continue
        expected = f"{path.parent.name}.{path.stem}"
        rel = path.relative_to(Path(root).parent).as_posix()
        if declared != expected:
            raise ValueError(f"{rel}: an adapter module binds NAME = {expected!r} (its vendor folder and file name)")
        missing = [a for a in PROTOCOL if a not in bound]
        if missing:
            raise ValueError(f"{rel}: adapter {expected} does not bind {', '.join(missing)} at module level")
        found.append(expected)
    return sorted(found)


def adapter(name):
    """The adapter module of "vendor.module" (one of adapters()), imported; an unknown name is an error listing them."""
    known = adapters()
    if name not in known:
        raise ValueError(f"unknown adapter {name!r}; known: {', '.join(known)}")
    return importlib.import_module(f"{__name__}.{name}")
