"""Every committed fixture under fixtures/ replays as recorded: "fixed" must pass; "open" must still fail as
recorded (a strict xfail: if it passes, the test fails, so a silently fixed bug is noticed and its status
updated). Replay re-derives the spec's output and fails when it changed since recording, and the spec and
torch must pass the case (unless the fixture was recorded against torch). A fixture whose recorded
implementation is unavailable here (the GPU ones on a CPU machine) is skipped with its reason; one whose
implementation cannot run at all (a plug-in file not found from the fixture) fails. The command line does the
same from outside the repository with --skip-unavailable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.checking import interface
from difftest.readers import replay
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[3]
FOUND = fixtures.discover(ROOT / "fixtures")


@pytest.mark.parametrize("path", FOUND, ids=[p.name for p in FOUND])
def test_fixture_replays_as_recorded(path):
    fx = fixtures.load(path)
    rows = replay.replay_fixture(fx, ["spec", "torch"])
    recorded = replay.recorded_outcome(fx, rows)
    wrong = [r for r in rows if r is not recorded and r[1] in ("spec-changed", "fail", "error")]
    assert not wrong, f"{fx.id}: {wrong[0][0]} {wrong[0][1]}: {wrong[0][2]}"
    assert recorded[1] != replay.CANNOT_RUN, f"{fx.id}: {fx.meta['impl']['ref']} cannot run: {recorded[2]}"
    if recorded[1] == "n/a":
        pytest.skip(f"{fx.meta['impl']['ref']}: unavailable here: {recorded[2]}")
    how = f"replay: python -m difftest replay {path}"
    if fx.status == "fixed":
        assert recorded[1] == "pass", f"{fx.id} was fixed but now: {recorded[2]}\n{how}"
        return
    assert recorded[1] != "pass", (
        f"{fx.id} is recorded open but passes now: set its status to fixed\n{how}"
    )
    assert recorded[1] == fx.meta["observed"]["status"], (
        f"{fx.id} fails differently: {recorded[1]} ({recorded[2]}) instead of {fx.meta['observed']}"
    )
    pytest.xfail(f"open finding: {recorded[2]}")


def test_fixture_ids_are_unique_directory_names():
    assert len({p.name for p in FOUND}) == len(FOUND)


def _unavailable_here(fx):
    """The recorded implementation is unavailable on this machine or declines the case (what replay skips
    with --skip-unavailable); it must load (a reference that does not is a failure, not a skip)."""
    impl = interface.load(fx.impl_ref)
    return bool(impl.available() or impl.unsupported(fx.case))


def test_fixtures_replay_from_another_directory(tmp_path):
    """`replay fixtures/ --skip-unavailable` from outside the repository, as a user's CI would run it: the
    fixtures whose implementation runs here replay as recorded (R01 and R03 find their plug-in file from the
    fixture), exactly the others are skipped, each on its line, and counted. Without the flag those exit 2."""
    fxs = [fixtures.load(p) for p in FOUND]
    skipped = {fx.id for fx in fxs if _unavailable_here(fx)}
    argv = [sys.executable, "-m", "difftest", "replay", str(ROOT / "fixtures"), "--impl", "spec", "--impl", "torch"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([*argv, "--skip-unavailable"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {line.split(" ")[0]: line for line in r.stdout.splitlines()[:-1]}
    assert sorted(lines) == sorted(fx.id for fx in fxs), r.stdout
    for fx in fxs:
        verdict = replay.SKIPPED if fx.id in skipped else replay.AS_RECORDED
        assert f"): {verdict}: " in lines[fx.id], lines[fx.id]
    for fid in ("R01_deepseek_gate_group_max_without_bias", "R03_bf16_routing_arithmetic"):
        assert ": as recorded: example:grouped_topk_bf16 pass" in lines[fid], lines[fid]
    ran = len(fxs) - len(skipped)
    assert r.stdout.splitlines()[-1] == f"replayed {len(fxs)} fixtures: {ran} as recorded" + (
        f", {len(skipped)} skipped (--skip-unavailable)" if skipped else ""), r.stdout
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == (2 if skipped else 0), r.stdout + r.stderr
