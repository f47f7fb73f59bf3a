"""The documentation is self-contained: every fact the docs, docstrings and comments rely on lives in the
repository. Nothing points at the notes the project was first written from (they are not shipped: a user of
the published project does not have them), every relative Markdown link and every ``docs/*.md`` path resolves,
and every ``docs/semantics.md §N`` citation names a section that exists."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


def test_readme_is_an_entry_page_that_links_every_doc():
    """Issue 37: the README stays short (what and why, install, the two commands, a walkthrough, the layout) and
    leads to every page of docs/, where the details live."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.count("\n")
    assert 60 < lines <= 250, f"README.md has {lines} lines (issue 37: at most 250; details go to docs/)"
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert len(pages) >= 10, pages
    unlinked = [p for p in pages if f"]({p})" not in readme]
    assert not unlinked, f"README.md does not link {unlinked}"


def measured_rows():
    """The rows of docs/measured.md's one table of current figures (the first table of the page)."""
    text = (ROOT / "docs" / "measured.md").read_text(encoding="utf-8")
    table = text[text.index("| what | figure | date | command |"):].split("\n\n")[0].splitlines()
    table = table[:next((i for i, line in enumerate(table) if not line.startswith("|")), len(table))]
    return [re.split(r"(?<!\\)\|", line)[1:-1] for line in table[2:]]


def test_every_measured_figure_has_a_date_and_a_command():
    """docs/measured.md: one row per measure, each with its figure, the date it was measured and the command that
    measures it (the rule that numbers in docs are measured, with the command)."""
    rows = measured_rows()
    assert len(rows) >= 20, len(rows)
    bad = [r[0].strip() for r in rows if len(r) != 4 or not re.search(r"\d", r[1])
           or not re.search(r"\b20\d\d-\d\d-\d\d\b", r[2]) or "`" not in r[3]]
    assert not bad, f"rows without a figure, a date or a command: {bad}"


@pytest.mark.parametrize("row, ok", [("| a | 3 cases | 2026-12-01 | `python -m difftest fuzz` |", True),
                                     ("| a | 3 cases | yesterday | `python -m difftest fuzz` |", False),
                                     ("| a | 3 cases | 2026-12-01 | by hand |", False),
                                     ("| a \\| b | 3 cases | 2026-12-01 | `x` |", True)])
def test_the_measured_row_check_itself(row, ok, monkeypatch, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "measured.md").write_text("# M\n\n| what | figure | date | command |\n|---|---|---|---|\n"
                                                    + (row + "\n") * 20 + "\nafter\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    if ok:
        test_every_measured_figure_has_a_date_and_a_command()
    else:
        with pytest.raises(AssertionError):
            test_every_measured_figure_has_a_date_and_a_command()
