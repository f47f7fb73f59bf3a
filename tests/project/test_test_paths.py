"""Every test path the repository names exists: a ``tests/....py`` path (a test file, a helper, a plug-in, with or
without ``::test`` or ``:NAME`` after it; a ``*`` glob must match at least one file) and a ``tests.<package>.<module>``
name in the docs, the README, tox.ini, pyproject.toml, tools/, difftest/, spec/, impls/, campaigns/, benchmarks/,
examples/ and tests/ itself. Moving or renaming a test (tests/README.md says where each goes) fails here until every
mention follows. CHANGELOG.md is left out (history may name what is gone), fixtures/ (generated: the committed
reproducers embed sources that are checked here) and this file (its examples of stale names)."""

import re
from pathlib import Path

from tests.project.test_docs_self_contained import ROOT, tracked

# not preceded by a word, a dot or a slash: other projects' "…/tests/x.py" are not ours
PATH = re.compile(r"(?<![\w./-])tests/[\w./*-]*\.py\b")
MODULE = re.compile(r"(?<![\w./-])tests(?:\.[A-Za-z_]\w*)+(?=[:\s`'\",;)]|$)")
SKIP = {"CHANGELOG.md"}


def files():
    this = Path(__file__).resolve()
    return [p for p in tracked() if p.relative_to(ROOT).parts[0] != "fixtures"
            and p.relative_to(ROOT).as_posix() not in SKIP and p.resolve() != this]


def missing_paths(text):
    """The tests/....py paths (globs: patterns) of text that name no file."""
    return [m.group(0) for m in PATH.finditer(text)
            if not (any(ROOT.glob(m.group(0))) if "*" in m.group(0) else (ROOT / m.group(0)).is_file())]


def missing_modules(text):
    """The tests.a.b names of text that are neither a module nor a package of tests/ (a trailing attribute allowed:
    tests.helpers.within.assert_within names tests/helpers/within.py)."""
    out = []
    for m in MODULE.finditer(text):
        parts = m.group(0).split(".")
        if not any((ROOT.joinpath(*parts[:k]).with_suffix(".py")).is_file() or
                   (ROOT.joinpath(*parts[:k]) / "__init__.py").is_file() for k in range(2, len(parts) + 1)):
            out.append(m.group(0))
    return out


def test_every_named_test_path_exists():
    named, stale = 0, []
    for path in files():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            named += len(PATH.findall(line)) + len(MODULE.findall(line))
            stale += [f"{path.relative_to(ROOT)}:{n}: {name}" for name in missing_paths(line) + missing_modules(line)]
    assert named > 100, f"only {named} test paths found: the pattern no longer matches how the repository names them"
    assert not stale, "names of tests that do not exist (moved or renamed? tests/README.md):\n" + "\n".join(stale)


def test_a_stale_path_is_caught():
    assert missing_paths("see tests/test_h200_records.py::test_x and tests/spec/test_quant.py") == [
        "tests/test_h200_records.py"]
    assert missing_paths("tests/impls/test_trtllm_gen_*.py") == []
    assert missing_paths("tests/impls/test_nothing_*.py") == ["tests/impls/test_nothing_*.py"]
    assert missing_paths("flashinfer/tests/test_fused_moe.py") == []
    assert missing_modules("python -c 'from tests.spec.test_layer import problem'") == []
    assert missing_modules('plugin.fuzz("tests.test_plugin_contract:WRITTEN_TODAY")') == ["tests.test_plugin_contract"]
