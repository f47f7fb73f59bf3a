"""Fixture lifecycle (issue 22, item 4): ``replay --update`` marks an open fixture fixed once its recorded
implementation passes (one confirmation line), hints at it without --update, never turns a regression back
to open; plug-in references are stored relative to the working directory."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.artifacts import fixtures

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin_example.py"
WEIGHTS_BUG = ("w = np.take_along_axis(s, ids, axis=-1)", "w = np.take_along_axis(keys, ids, axis=-1)")


def difftest(cwd, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.fixture
def found(tmp_path):
    """(working directory, plug-in file, fixture) of a broken copy of the example, fuzzed from tmp_path."""
    plugin = tmp_path / "plugins" / "broken.py"
    plugin.parent.mkdir()
    plugin.write_text(EXAMPLE.read_text().replace(*WEIGHTS_BUG))
    r = difftest(tmp_path, "fuzz", "--impl", f"{plugin}:DEEPSEEK_V3", "--op", "routing", "--model",
                 "deepseek-v3", "--max-examples", "40", "--workers", "1", "--out", "run")
    assert r.returncode == 1, r.stdout + r.stderr
    (fixture,) = fixtures.discover(tmp_path / "run" / "fixtures")
    return tmp_path, plugin, fixture


def test_plugin_reference_is_stored_relative_to_the_working_directory(found):
    _, _, fixture = found
    assert json.loads((fixture / "case.json").read_text())["impl"]["ref"] == "plugins/broken.py:DEEPSEEK_V3"


def test_portable_ref(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert fixtures.portable_ref("torch") == "torch"
    assert fixtures.portable_ref("difftest.selftest.bug_models:RSF_TWICE") == "difftest.selftest.bug_models:RSF_TWICE"
    assert fixtures.portable_ref(f"{EXAMPLE}:X") == "examples/plugin_example.py:X"
    assert fixtures.portable_ref("examples/../examples/plugin_example.py:X") == "examples/plugin_example.py:X"
    assert fixtures.portable_ref("/nowhere/else/p.py:X") == "/nowhere/else/p.py:X"


def test_update_marks_a_fixed_bug_fixed_and_a_regression_stays_visible(found):
    cwd, plugin, fixture = found
    r = difftest(cwd, "replay", str(fixture), "--impl", "torch")
    assert r.returncode == 0 and ": as recorded" in r.stdout, r.stdout + r.stderr
    plugin.write_text(EXAMPLE.read_text())  # the fix
    r = difftest(cwd, "replay", str(fixture), "--impl", "torch")
    assert r.returncode == 1 and "NOT as recorded" in r.stdout and "replay --update" in r.stdout, r.stdout
    assert fixtures.load(fixture).status == "open"
    r = difftest(cwd, "replay", "--update", str(fixture), "--impl", "torch")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"updated: {fixture} open -> fixed" in r.stdout or "open -> fixed" in r.stdout, r.stdout
    assert fixtures.load(fixture).status == "fixed"
    r = difftest(cwd, "replay", str(fixture), "--impl", "torch")
    assert r.returncode == 0 and "(fixed mismatch" in r.stdout and "updated" not in r.stdout, r.stdout
    plugin.write_text(EXAMPLE.read_text().replace(*WEIGHTS_BUG))  # the bug comes back
    r = difftest(cwd, "replay", "--update", str(fixture), "--impl", "torch")
    assert r.returncode == 1 and "NOT as recorded" in r.stdout and "updated" not in r.stdout, r.stdout
    assert fixtures.load(fixture).status == "fixed"


def test_set_status_checks_the_status(found):
    _, _, fixture = found
    with pytest.raises(fixtures.FixtureError, match="is not one of"):
        fixtures.set_status(fixture, "closed")
