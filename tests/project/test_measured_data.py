"""docs/measured.md's tables are generated from committed data (issue 37): docs/measured/rows.toml and the run
outputs beside it, by tools/measured.py. The page cannot drift from its data, a sourced figure cannot drift from the
run it quotes, and a figure that is not finite fails."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("measured", ROOT / "tools" / "measured.py")
measured = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measured)
pytestmark = pytest.mark.skipif(measured.tomllib is None, reason="Python 3.10 without tomli: rows.toml is TOML")


def test_the_page_is_what_the_data_gives():
    page = measured.PAGE.read_text(encoding="utf-8")
    assert measured.render(page, measured.load_rows()) == page, (
        "docs/measured.md differs from docs/measured/: edit the data, then run python tools/measured.py")


def test_every_file_of_the_data_is_read_and_every_source_is_committed():
    data = measured.load_rows()
    sources = {r["source"] for r in data["row"] if "source" in r} | {t["source"] for t in data.get("table", [])}
    files = {p.name for p in measured.DATA.iterdir()} - {"rows.toml"}
    assert files == sources, f"read by no row: {sorted(files - sources)}; missing: {sorted(sources - files)}"
    assert len(sources) >= 3, sources
    for name in sources:
        assert measured.load_source(name)["measured"]["date"]


def test_sourced_rows_quote_their_run():
    """A sourced row's figure is computed from the file: change a number in the file and the figure changes."""
    data = measured.load_rows()
    row = next(r for r in data["row"] if "source" in r and "cases" in r.get("take", {}))
    source = measured.load_source(row["source"])
    before = measured.row_cells(row)[1]
    assert f"{measured.evaluate(row['take']['cases'], source):,}" in before
    changed = dict(source, cases=source["cases"] + 1)
    original = measured.load_source
    try:
        measured.load_source = lambda name: changed
        assert measured.row_cells(row)[1] != before
    finally:
        measured.load_source = original


@pytest.mark.parametrize("expression, data, want", [
    ("cases", {"cases": 3}, 3),
    ("cases / seconds", {"cases": 3, "seconds": 2.0}, 1.5),
    ('status["pass"] + status.fail', {"status": {"pass": 2, "fail": 1}}, 3),
    ("-a * 2 - 1", {"a": 2}, -5),
    ('join(keys_with(by, "moe:"))', {"by": {"moe:a": 1200, "quant:b": 2}}, "a 1,200"),
    ('pct(min(values(per(cells, "share"))))', {"cells": {"x": {"share": 0.997}, "y": {"share": 1.0}}}, "99.7 %"),
    ('len(rows_where(items, op="moe"))', {"items": [{"op": "moe"}, {"op": "quant"}]}, 1),
])
def test_take_expressions(expression, data, want):
    assert measured.evaluate(expression, data) == want


@pytest.mark.parametrize("expression, message", [
    ("missing", "not a key of the source"),
    ('status["nope"]', "no 'nope' there"),
    ("__import__('os')", "not allowed"),
    ("(lambda: 1)()", "not allowed"),
    ("a.__class__", "no '__class__' there"),
    ("a ** 2", "not allowed"),
    ("a +", "not an expression"),
])
def test_take_expressions_refuse_what_they_cannot_read(expression, message):
    with pytest.raises(measured.DataError, match=message) as e:
        measured.evaluate(expression, {"a": {"b": 1}, "status": {}})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("values, message", [
    ({"x": float("nan")}, "not finite"),
    ({"x": float("inf")}, "not finite"),
    ({}, "lacks"),
    ({"x": 1, "y": 2}, "does not use"),
])
def test_a_figure_that_is_not_a_number_or_misses_a_name_fails(values, message):
    with pytest.raises(measured.DataError, match=message):
        measured.fill("{x} cases", values, "row 'r'")


def test_record_keeps_a_real_run_and_the_page_quotes_it(tmp_path, monkeypatch):
    """The loop a maintainer runs: a campaign, ``record``, and the page's row quotes that campaign's summary."""
    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--op", "routing", "--max-examples", "20",
                    "--workers", "1", "--out", str(run)], cwd=ROOT, check=True, capture_output=True)
    summary = json.loads((run / "summary.json").read_text())
    data = tmp_path / "measured"
    data.mkdir()
    (data / "rows.toml").write_text(
        '[[row]]\nid = "r"\nwhat = "w"\nfigure = "{cases:,} cases, {passed} pass"\ncommand = "`c`"\n'
        'source = "r.json.gz"\ntake = { cases = "cases", passed = \'status["pass"]\' }\n')
    page = tmp_path / "measured.md"
    page.write_text("# M\n\n" + measured.BEGIN.format("rows") + "\nold\n" + measured.END.format("rows") + "\n\nafter\n")
    monkeypatch.setattr(measured, "DATA", data)
    monkeypatch.setattr(measured, "PAGE", page)
    monkeypatch.setattr(measured, "ROOT", tmp_path)
    assert measured.main(["record", "r", str(run / "summary.json"), "--load", "1-2", "--date", "2026-12-03"]) == 0
    text = page.read_text()
    assert f"| w | {summary['cases']:,} cases, {summary['status']['pass']} pass | 2026-12-03, load 1-2" in text
    assert text.endswith("\n\nafter\n")
    assert measured.main(["--check"]) == 0
    page.write_text(text.replace("pass |", "pass! |"))
    assert measured.main(["--check"]) == 1
    assert measured.main(["record", "nope", str(run / "summary.json")]) == 2


def test_the_suite_log_gives_its_counts(tmp_path):
    """``record tox .ci/run's log``: pytest's last result line and tox's time (the format both print)."""
    log = tmp_path / "ci.log"
    log.write_text("...\n===== 3194 passed, 81 skipped, 18 xfailed in 473.10s (0:07:53) =====\n"
                   "  py: OK (546.50=setup 30.70+cmd 515.80 seconds)\n  congratulations :) (546.50 seconds)\n")
    assert measured.trimmed(log) == {"pytest": {"passed": 3194, "skipped": 81, "xfailed": 18},
                                     "pytest_seconds": 473.1, "tox_seconds": 546.5}
    log.write_text("===== 2 failed, 3 passed in 1.0s =====\n")  # no tox line: not a .ci/run log
    with pytest.raises(measured.DataError, match="result lines"):
        measured.trimmed(log)
