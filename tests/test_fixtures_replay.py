"""Every committed fixture under fixtures/ replays as recorded: "fixed" must pass; "open" must still fail as
recorded (a strict xfail: if it passes, the test fails, so a silently fixed bug is noticed and its status
updated). Replay re-derives the spec's output and fails when it changed since recording, and the spec and
torch must pass the case (unless the fixture was recorded against torch)."""

from pathlib import Path

import pytest

from difftest.artifacts import fixtures, replay

ROOT = Path(__file__).resolve().parents[1]
FOUND = fixtures.discover(ROOT / "fixtures")


@pytest.mark.parametrize("path", FOUND, ids=[p.name for p in FOUND])
def test_fixture_replays_as_recorded(path):
    fx = fixtures.load(path)
    rows = replay.replay_fixture(fx, ["spec", "torch"])
    recorded = replay.recorded_outcome(fx, rows)
    wrong = [r for r in rows if r is not recorded and r[1] in ("spec-changed", "fail", "error")]
    assert not wrong, f"{fx.id}: {wrong[0][0]} {wrong[0][1]}: {wrong[0][2]}"
    if recorded is None or recorded[1] == "n/a":
        pytest.skip(f"{fx.meta['impl']['ref']}: {recorded[2] if recorded else 'not loadable'}")
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
