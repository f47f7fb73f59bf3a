"""The documentation is self-contained: every fact the docs, docstrings and comments rely on lives in the
repository. Nothing points at the notes the project was first written from (they are not shipped: a user of
the published project does not have them), every relative Markdown link and every ``docs/*.md`` path resolves,
and every ``docs/semantics.md §N`` citation names a section that exists."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Names of the unshipped notes and the abbreviations once used to cite them ("sem §1.2", "fi §3"). Spelled in
# pieces so that this file does not match itself.
OUTSIDE = re.compile("|".join([r"known_bugs\.md", "moe_" + "semantics", "testing_" + "anchors", r"flashinfer_api\.md",
                               r"\.\./shared", "shared/" + "reference", r"\b(?:sem|fi|style) " + "§"]))
TEXT = (".py", ".md", ".toml", ".ini", ".cfg", ".txt", ".sh", ".json", ".cu")


def tracked():
    """The repository's text files (git's list; a tree without git: every file but build and tool caches)."""
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True,
                               timeout=60).stdout.splitlines()
        files = [ROOT / n for n in names]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".tox", ".venv", "build", "dist", "__pycache__", ".hypothesis", ".pytest_cache", "runs"}
        files = [p for p in ROOT.rglob("*") if not skip & set(p.relative_to(ROOT).parts)]
    return [p for p in files if p.suffix in TEXT and p.is_file() and p.stat().st_size < 2_000_000]


FILES = tracked()


def lines_matching(pattern, files):
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in pattern.finditer(line):
                yield path, n, m


def test_nothing_points_outside_the_repository():
    assert len(FILES) > 100, "the file list is empty: the check would pass vacuously"
    this = Path(__file__).resolve()
    hits = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)!r}" for p, n, m in lines_matching(OUTSIDE, FILES)
            if p.resolve() != this]
    assert not hits, "points outside the repository (cite docs/ instead):\n" + "\n".join(hits)


def test_relative_markdown_links_resolve():
    markdown = [p for p in FILES if p.suffix == ".md"]
    link = re.compile(r"\]\(([^)\s]+)\)")
    broken, checked = [], 0
    for path, n, m in lines_matching(link, markdown):
        target = m.group(1).split("#")[0]
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):  # an anchor, a URL
            continue
        checked += 1
        if not (path.parent / target).exists():
            broken.append(f"{path.relative_to(ROOT)}:{n}: {m.group(1)}")
    assert checked > 10 and not broken, broken


def test_every_docs_path_exists():
    mention = re.compile(r"\bdocs/[A-Za-z0-9_.-]+\.md\b")
    missing = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for p, n, m in lines_matching(mention, FILES)
               if not (ROOT / m.group(0)).is_file()]
    assert not missing, missing


def semantics_sections():
    heads = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", (ROOT / "docs" / "semantics.md").read_text(), re.M)
    return set(heads)


def test_semantics_citations_name_existing_sections():
    sections = semantics_sections()
    assert {"1", "1.3", "2.2", "5.1", "6"} <= sections, sorted(sections)
    # "docs/semantics.md §2.3", "docs/semantics.md §4.3-§4.5", "docs/semantics.md §2, §3, §5", "§1.1-§1.2"
    cite = re.compile(r"semantics\.md((?:[ ,;-]+(?:and )?§\d+(?:\.\d+)?(?:-§?\d+(?:\.\d+)?)?)+)")
    bad, cited = [], 0
    for path, n, m in lines_matching(cite, FILES):
        for number in re.findall(r"§?(\d+(?:\.\d+)?)", m.group(1)):
            cited += 1
            if number not in sections:
                bad.append(f"{path.relative_to(ROOT)}:{n}: §{number}")
    assert cited > 40 and not bad, bad


@pytest.mark.parametrize("text, ok", [("see known_bugs.md K5", False), ("(sem §2.4)", False),
                                      ("../shared/reference/x.md", False), ("docs/semantics.md §2.4", True)])
def test_the_outside_pattern_itself(text, ok):
    assert (OUTSIDE.search(text) is None) == ok
