"""`python -m difftest merge`: a CPU run made here and a run recorded on an H200 (tests/data/h200_tg_asbuilt.tar.gz:
587 routing cases of flashinfer.trtllm_gen_routing, its 4 fixtures, summary.json and a host.json with the device's
versions) merge into one run directory that `report` renders with one row per host; merging again is idempotent;
the same fixture name with other content is kept twice."""

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from difftest.readers import merge
from difftest.store import host, rundir

ROOT = Path(__file__).resolve().parents[3]
H200_CASES, H200_FIXTURES = 587, 4


def difftest(*args):
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(cpu run directory, h200 run directory): a short torch routing campaign, the recorded H200 run."""
    tmp = tmp_path_factory.mktemp("runs")
    r = difftest("fuzz", "--impl", "torch", "--op", "routing", "--max-examples", "5", "--workers", "1",
                 "--out", str(tmp / "cpu"))
    assert r.returncode == 0, r.stdout + r.stderr
    with tarfile.open(ROOT / "tests" / "data" / "h200_tg_asbuilt.tar.gz") as t:
        t.extractall(tmp, filter="data")
    return tmp / "cpu", tmp / "h200_tg_asbuilt"


def cases(run_dir):
    return [json.loads(line) for line in rundir.read_lines(run_dir)]


def test_merge_two_hosts_renders_one_report_with_a_row_per_host(runs, tmp_path):
    cpu, h200 = runs
    out = tmp_path / "merged"
    r = difftest("merge", str(cpu), str(h200), "--out", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    rows = cases(out)
    assert len(rows) == len(cases(cpu)) + H200_CASES
    assert {row["host"] for row in rows} == {merge.label(cpu, host.host_info()), "h200/h200_tg_asbuilt"}
    assert len(list(out.glob("fixtures/*/case.json"))) == H200_FIXTURES

    report = json.loads((out / "report.json").read_text())
    hosts = {h["host"]: h for h in report["hosts"]}
    gpu = hosts["h200/h200_tg_asbuilt"]
    assert gpu["gpu"] == "NVIDIA H200 (driver 580.159.04)" and gpu["torch"] == "2.11.0+cu130"
    assert gpu["cases"] == H200_CASES and gpu["status"] == {"pass": 253, "error": 306, "fail": 28}
    here = hosts[merge.label(cpu, host.host_info())]
    assert here["cases"] == len(cases(cpu)) and here["findings"] == 0
    assert report["totals"]["cases"] == len(rows) and len(report["findings"]) == H200_FIXTURES
    assert all(f["host"] == "h200/h200_tg_asbuilt" and f["fixture"] for f in report["findings"])
    merged_findings = json.loads((out / "summary.json").read_text())["findings"]
    assert all(f"replay: python -m difftest replay {f['fixture']}" in f["message"] for f in merged_findings)
    page = (out / "report.html").read_text()
    assert "NVIDIA H200 (driver 580.159.04)" in page and 'id="hosts"' in page


def test_merging_again_is_idempotent_and_fixtures_are_kept_by_content(runs, tmp_path):
    cpu, h200 = runs
    first = tmp_path / "first"
    assert difftest("merge", str(cpu), str(h200), "--out", str(first)).returncode == 0
    again = tmp_path / "again"
    r = difftest("merge", str(first), str(h200), str(cpu), "--out", str(again))
    assert r.returncode == 0, r.stdout + r.stderr
    assert cases(again) == cases(first)
    names = [sorted(p.name for p in (d / "fixtures").iterdir()) for d in (first, again)]
    assert names[0] == names[1]

    # another host recorded the same fixture name with another observed message: both stay, hosts apart
    other = tmp_path / "other"
    shutil.copytree(h200, other)
    meta_path = next(other.glob("fixtures/*/case.json"))
    meta = json.loads(meta_path.read_text())
    meta["observed"]["message"] += " (seen on another driver)"
    meta_path.write_text(json.dumps(meta))
    both = tmp_path / "both"
    assert difftest("merge", str(h200), str(other), "--out", str(both)).returncode == 0
    assert len(list(both.glob("fixtures/*/case.json"))) == H200_FIXTURES + 1
    index = json.loads((both / "merge.json").read_text())["fixtures"]
    assert sorted(len(v["hosts"]) for v in index.values()) == [1, 1] + [2] * (H200_FIXTURES - 1)


def test_merge_refuses_an_existing_run_as_out_and_a_bad_run_writing_nothing(runs, tmp_path):
    cpu, h200 = runs
    r = difftest("merge", str(h200), "--out", str(cpu))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "holds a run directory already" in r.stderr, r.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text("{")
    r = difftest("merge", str(h200), str(bad), "--out", str(tmp_path / "merged"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "summary.json: not valid JSON" in r.stderr, r.stderr
    assert not (tmp_path / "merged").exists()


def test_a_summary_only_run_merges_with_its_counts_and_a_single_run_reports_its_host(runs, tmp_path):
    """GPU sessions copied back summary.json alone (tests/data/h200_nogemm_dsv3.summary.json, 2026-12-01): it
    merges as a host row with the summary's counts and no case rows; a single fuzz run's report has its own host as
    the one row."""
    cpu, _ = runs
    only = tmp_path / "nogemm_dsv3"
    only.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "h200_nogemm_dsv3.summary.json", only / "summary.json")
    summary = json.loads((only / "summary.json").read_text())
    out = tmp_path / "merged"
    r = difftest("merge", str(cpu), str(only), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(cases(out)) == len(cases(cpu))
    hosts = {h["host"]: h for h in json.loads((out / "report.json").read_text())["hosts"]}
    assert hosts["nogemm_dsv3"]["cases"] == summary["cases"] and hosts["nogemm_dsv3"]["status"] == summary["status"]

    single = json.loads((cpu / "report.json").read_text())["hosts"]
    assert [h["host"] for h in single] == [host.host_info()["hostname"]] and single[0]["cases"] == len(cases(cpu))
