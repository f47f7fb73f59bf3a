"""The files of a kernel adapter (impls/flashinfer/*.py, impls/sglang/*.py) as a reproducer embeds them.

A reproducer of a kernel fixture calls the kernel through the adapter's own ``available()`` and ``run(config,
inputs)``, so that it makes exactly the call the tester made, without this project installed: the script carries
the adapter module, every project module it imports (at the top or inside a function, packages' ``__init__``
included) and the non-Python files those modules name (the trtllm-gen dev kernels' binding,
impls/flashinfer/csrc/trtllm_gen_dev_kernels.cu), verbatim, and installs them in a private directory before
importing the adapter. Nothing is copied by hand, so the script cannot drift from the adapter it was written from.
"""

import ast
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "impls"  # the only project package an adapter may import (impls/ never imports spec/ or difftest/)


def module_file(name):
    """The source file of a project module or package (dotted name)."""
    path = ROOT / Path(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _is_module(name):
    return module_file(name).is_file()


def imports_of(name):
    """The project modules `name` imports, relative or absolute, at the top or inside a function."""
    is_package = module_file(name).name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(module_file(name).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module.split(".")[0] != PACKAGE:
                continue
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if _is_module(f"{module}.{a.name}")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
    return found


def closure(name):
    """`name`, the project modules it imports transitively, and the packages that hold them, sorted."""
    todo, seen = [name], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b.c runs a and a.b first
        todo += sorted(imports_of(module) - seen)
    return sorted(seen)


def data_files(modules):
    """The non-Python files under the modules' packages that a module's source names (by file name)."""
    texts = [module_file(m).read_text(encoding="utf-8") for m in modules]
    found = set()
    for m in modules:
        folder = module_file(m).parent
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix != ".py" and "__pycache__" not in path.parts \
                    and any(path.name in t for t in texts):
                found.add(path)
    return sorted(found)


def files(name):
    """{path relative to the repository (posix): text} of everything the adapter module `name` needs."""
    modules = closure(name)
    paths = sorted({module_file(m) for m in modules} | set(data_files(modules)))
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def digest(embedded):
    """A short content digest of the embedded files: the script installs them in a directory named by it, so
    that two scripts of the same files share one copy (and one JIT build of the sources) and different ones never
    mix."""
    h = hashlib.sha256()
    for rel, text in sorted(embedded.items()):
        h.update(rel.encode() + b"\0" + text.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def literal(text):
    """A Python literal of `text`: raw and triple-quoted where that reads back exactly, else escaped."""
    if "'''" not in text and not text.endswith(("\\", "'")) and "\r" not in text:
        return "r'''" + text + "'''"
    return repr(text)
