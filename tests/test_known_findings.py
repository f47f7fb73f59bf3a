"""Known findings (issue 22, item 2): a finding's signature (op, implementation, kind, field, slice) is recorded and
the campaign goes on searching for different failures; ``fuzz --known DIR`` treats the open fixtures of DIR
as known; the summary counts distinct findings and the failing cases of each."""

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

from difftest.checking import interface
from difftest.model import presets
from difftest.running import campaign
from difftest.running.campaign import Signature, field_of

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin_example.py"
WEIGHTS_BUG = ("w = np.take_along_axis(s, ids, axis=-1)", "w = np.take_along_axis(keys, ids, axis=-1)")
TOKENS_BUG = ("        T, E = x.shape\n",
              "        T, E = x.shape\n        if T > 2:\n            raise ValueError('planted: T > 2')\n")
WEIGHTS_SIG = ["routing", "example:deepseek_v3_numpy", "mismatch", "weights", "deepseek_v3"]
TOKENS_SIG = ["routing", "example:deepseek_v3_numpy", "error", "ValueError", "deepseek_v3"]


def two_bugs(tmp_path):
    """The worked example with two planted bugs: weights gathered from the biased keys (a mismatch in
    weights), and a ValueError for more than two tokens."""
    source = EXAMPLE.read_text()
    for right, wrong in (WEIGHTS_BUG, TOKENS_BUG):
        assert source.count(right) == 1
        source = source.replace(right, wrong)
    path = tmp_path / "two_bugs.py"
    path.write_text(source)
    return f"{path}:DEEPSEEK_V3"


def fuzz(ref, out, *extra):
    return subprocess.run(
        [sys.executable, "-m", "difftest", "fuzz", "--impl", ref, "--op", "routing", "--model", "deepseek-v3",
         "--out", str(out), "--max-examples", "40", "--workers", "1", "--seed", "0", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_field_of_names_the_output_or_the_exception():
    impl = "torch"
    assert field_of("mismatch", "weights(by id)[0, 2]=0.27 but spec=0.18: |diff| ... [routing, torch]", impl) \
        == "weights"
    assert field_of("mismatch", "ids[3]=[1, 2] but spec=[1, 4]: ... [routing, torch]", impl) == "ids"
    assert field_of("mismatch", "torch declares deterministic but two runs differ [moe, torch]", impl) \
        == "declares"
    assert field_of("error", "torch raised ValueError: planted [routing, torch]", impl) == "ValueError"
    assert field_of("error", "comparison raised KeyError: 'x' (spec or difftest, not torch)", impl) \
        == "comparison KeyError"
    assert field_of("crash", "torch crash: worker killed by SIGSEGV [routing, torch]", impl) == "worker"


def test_a_known_signature_is_counted_not_reported(tmp_path):
    ref = two_bugs(tmp_path)
    impl = interface.load(ref)
    known = {Signature(*WEIGHTS_SIG), Signature(*TOKENS_SIG)}
    configs = presets.configs("deepseek-v3", "routing")
    res = campaign.fuzz_cell(impl, ref, "routing", configs=configs, fixtures_root=tmp_path / "fx", known=set(known),
                             hypothesis_settings=settings(max_examples=60, database=None, derandomize=True))
    assert res.finding is None and not list((tmp_path / "fx").glob("*"))
    assert set(res.known) <= known and sum(res.known.values()) > 0


def test_a_known_failure_of_another_method_hides_nothing(tmp_path):
    """The same two failures known for the renormalize method: the deepseek_v3 cell reports its own."""
    ref = two_bugs(tmp_path)
    known = {Signature(*WEIGHTS_SIG[:4], "renormalize"), Signature(*TOKENS_SIG[:4], "renormalize")}
    res = campaign.fuzz_cell(interface.load(ref), ref, "routing", configs=presets.configs("deepseek-v3", "routing"),
                             fixtures_root=tmp_path / "fx", known=set(known),
                             hypothesis_settings=settings(max_examples=60, database=None, derandomize=True))
    assert res.finding is not None and res.signature.slice == "deepseek_v3" and not res.known


def test_two_planted_bugs_are_both_reported_in_one_run(tmp_path):
    r = fuzz(two_bugs(tmp_path), tmp_path / "run")
    assert r.returncode == 1, r.stdout + r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    distinct = {tuple(d["signature"]): d for d in summary["distinct_findings"]}
    assert set(distinct) == {tuple(WEIGHTS_SIG), tuple(TOKENS_SIG)}, r.stdout
    assert all(d["cases"] >= 1 for d in distinct.values())
    assert "2 distinct findings (op, implementation, kind, field, slice):" in r.stdout


def test_known_fixtures_are_not_reported_again(tmp_path):
    ref = two_bugs(tmp_path)
    assert fuzz(ref, tmp_path / "first").returncode == 1
    r = fuzz(ref, tmp_path / "again", "--known", str(tmp_path / "first" / "fixtures"))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert not summary["findings"] and summary["known_failures"], summary
    assert "not reported again" in r.stdout


def test_fixed_fixtures_are_not_known(tmp_path):
    ref = two_bugs(tmp_path)
    assert fuzz(ref, tmp_path / "first").returncode == 1
    for case_json in (tmp_path / "first" / "fixtures").glob("*/case.json"):
        meta = json.loads(case_json.read_text())
        case_json.write_text(json.dumps({**meta, "status": "fixed"}))
    assert campaign.known_signatures(tmp_path / "first" / "fixtures") == set()
    assert len(campaign.known_signatures(ROOT / "fixtures")) > 0


def test_the_two_bugs_example_reports_both(tmp_path):
    r = fuzz(str(ROOT / "examples" / "plugin_two_bugs.py") + ":TWO_BUGS", tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert r.returncode == 1 and len(summary["distinct_findings"]) == 2, r.stdout + r.stderr


def test_known_must_be_a_directory(tmp_path):
    r = fuzz(two_bugs(tmp_path), tmp_path / "run", "--known", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--known" in r.stderr, r.stderr


def test_past_the_deadline_a_cell_ends_with_its_failure_so_far_or_interrupted(tmp_path, monkeypatch):
    """The time budget is honoured inside a cell (issue 22, item 6): a failure being shrunk is recorded as
    shrunk so far; without one the cell stops."""
    import time
    from types import SimpleNamespace

    ref = two_bugs(tmp_path)
    impl = interface.load(ref)
    configs = presets.configs("deepseek-v3", "routing")
    quick = settings(max_examples=200, database=None, derandomize=True)
    res = campaign.fuzz_cell(impl, ref, "routing", configs=configs, hypothesis_settings=quick,
                             deadline=time.monotonic() - 1)
    assert res.examples == 0 and res.finding is None
    failed, rows = [], []

    def record(row):
        rows.append(row)
        if row["kind"]:
            failed.append(row)

    # the budget runs out right after the first failure
    monkeypatch.setattr(campaign, "time", SimpleNamespace(monotonic=lambda: 1e12 if failed else time.monotonic()))
    res = campaign.fuzz_cell(impl, ref, "routing", configs=configs, hypothesis_settings=quick, record=record,
                             fixtures_root=tmp_path / "fx", deadline=1e11)
    assert res.finding and res.fixture and len(failed) == 1 and rows[-1]["kind"], (len(rows), len(failed))

