"""Fixture lifecycle (issue 22, item 4): ``replay --update`` marks an open fixture fixed once its recorded
implementation passes (one confirmation line), hints at it without --update, never turns a regression back
to open. Issue 34, item 4: plug-in references are stored relative to the fixture directory and resolved from it
(replay from any directory runs the plug-in; a missing one is one line and exit 2, never a pass), and
``fuzz --out`` refuses a directory that holds a run unless ``--resume``."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from difftest import cli
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "plugin_example.py"
WEIGHTS_BUG = ("w = np.take_along_axis(s, ids, axis=-1)", "w = np.take_along_axis(keys, ids, axis=-1)")


def difftest(cwd, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def fuzz(cwd, plugin, out, *extra):
    return difftest(cwd, "fuzz", "--impl", f"{plugin}:DEEPSEEK_V3", "--op", "routing", "--model", "deepseek-v3",
                    "--max-examples", "40", "--workers", "1", "--out", out, *extra)


@pytest.fixture(scope="module")
def found_once(tmp_path_factory):
    """A broken copy of the example, fuzzed once per module (and xdist worker): the campaign is most of this
    file's cost, and every test below works on its own copy of the tree (found)."""
    root = tmp_path_factory.mktemp("found")
    plugin = root / "plugins" / "broken.py"
    plugin.parent.mkdir()
    plugin.write_text(EXAMPLE.read_text().replace(*WEIGHTS_BUG))
    r = fuzz(root, plugin, "run")
    assert r.returncode == 1, r.stdout + r.stderr
    (fixture,) = fixtures.discover(root / "run" / "fixtures")
    return root, fixture.relative_to(root)


@pytest.fixture
def found(found_once, tmp_path):
    """(working directory, plug-in file, fixture) of a broken copy of the example, fuzzed from tmp_path: a copy of
    found_once's tree, so that a test may edit, move or delete any of it."""
    root, fixture = found_once
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    (tmp_path / "elsewhere").mkdir()  # a working directory that holds neither the plug-in nor the run
    return tmp_path, tmp_path / "plugins" / "broken.py", tmp_path / fixture


def test_plugin_reference_is_stored_relative_to_the_fixture_directory(found):
    _, _, fixture = found
    assert json.loads((fixture / "case.json").read_text())["impl"]["ref"] == "../../../plugins/broken.py:DEEPSEEK_V3"


def test_portable_ref(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    fixture = ROOT / "runs" / "r" / "fixtures" / "f"  # written into (need not exist yet)
    assert fixtures.portable_ref("torch", fixture) == "torch"
    assert fixtures.portable_ref("difftest.selftest.bug_models:RSF_TWICE", fixture) == \
        "difftest.selftest.bug_models:RSF_TWICE"
    assert fixtures.portable_ref(f"{EXAMPLE}:X", fixture) == "../../../../examples/plugin_example.py:X"
    assert fixtures.portable_ref("examples/../examples/plugin_example.py:X", fixture) == \
        "../../../../examples/plugin_example.py:X"
    assert fixtures.portable_ref("examples/plugin_example.py:X", ROOT / "fixtures" / "f") == \
        "../../examples/plugin_example.py:X"
    # sharing no directory but the root: absolute (no ../ up to /)
    assert fixtures.portable_ref("/nowhere/else/p.py:X", tmp_path / "f") == "/nowhere/else/p.py:X"


def test_resolution_order(tmp_path, monkeypatch):
    """fixtures.resolve_ref: where the reference says, relative to the fixture directory; else its path without
    the leading ../ in the nearest directory above; else relative to the working directory; else as stored."""
    fixture = tmp_path / "tree" / "run" / "fixtures" / "f"
    fixture.mkdir(parents=True)
    near, far, cwd_only = (tmp_path / "tree" / "run" / "plugins" / "p.py", tmp_path / "tree" / "plugins" / "p.py",
                           tmp_path / "cwd" / "only" / "q.py")
    for f in (near, far, cwd_only):
        f.parent.mkdir(parents=True)
        f.write_text("")
    monkeypatch.chdir(tmp_path / "cwd")
    assert fixtures.resolve_ref(fixture, "../../../plugins/p.py:X") == f"{far.resolve()}:X"  # exactly there
    assert fixtures.resolve_ref(fixture, "plugins/p.py:X") == f"{near.resolve()}:X"  # the nearest above
    assert fixtures.resolve_ref(fixture, "only/q.py:X") == f"{cwd_only.resolve()}:X"  # the working directory
    assert fixtures.resolve_ref(fixture, "gone/p.py:X") == "gone/p.py:X"  # nowhere: as stored
    for ref in ("torch", "difftest.selftest.bug_models:RSF_TWICE", "/abs/p.py:X"):
        assert fixtures.resolve_ref(fixture, ref) == ref


def test_replay_from_another_directory_runs_the_plugin(found):
    cwd, _, fixture = found
    r = difftest(cwd / "elsewhere", "replay", str(fixture), "--impl", "torch")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ": as recorded: example:deepseek_v3_numpy fail, torch pass" in r.stdout, r.stdout


def test_a_missing_plugin_file_is_one_line_and_exit_2_from_any_directory(found):
    """Issue 34, done when: replaying, from another directory, a fixture whose plug-in file is missing exits
    non-zero with one line (before: "as recorded: torch pass", exit 0, the plug-in never ran)."""
    cwd, plugin, fixture = found
    plugin.unlink()
    for where in (cwd, cwd / "elsewhere"):
        for extra in ((), ("--skip-unavailable",)):  # a missing file is no "unavailable here"
            r = difftest(where, "replay", str(fixture), "--impl", "torch", *extra)
            assert r.returncode == 2 and r.stderr == "", r.stdout + r.stderr
            (line,) = r.stdout.splitlines()
            assert line.startswith(f"{fixture.name} (open mismatch, recorded with example:deepseek_v3_numpy)")
            assert ": cannot run: " in line and "no such file ../../../plugins/broken.py" in line, line


def test_a_copied_fixture_and_an_older_reference_resolve_from_the_fixture(found):
    """A fixture copied to another depth of the same tree (RUN/fixtures/<id> into fixtures/), and a fixture
    written before references were fixture-relative (relative to the directory its campaign ran in), replay
    their plug-in from any working directory."""
    cwd, _, fixture = found
    copied = cwd / "fixtures" / fixture.name
    shutil.copytree(fixture, copied)
    meta = json.loads((fixture / "case.json").read_text())
    meta["impl"]["ref"] = "plugins/broken.py:DEEPSEEK_V3"  # as written before
    (fixture / "case.json").write_text(json.dumps(meta))
    for path in (copied, fixture):
        r = difftest(cwd / "elsewhere", "replay", str(path), "--impl", "torch")
        assert r.returncode == 0 and "as recorded: example:deepseek_v3_numpy fail" in r.stdout, r.stdout + r.stderr


def test_fuzz_refuses_an_out_directory_that_holds_a_run_unless_resumed(found):
    """Issue 34: a clean run of the fixed plug-in into the old --out reported the old finding (exit 1). It is
    refused now (one line, exit 2, nothing written); another --out runs clean; --resume continues the old run."""
    cwd, plugin, _ = found
    plugin.write_text(EXAMPLE.read_text())  # the fix
    before = sorted((p, p.stat().st_mtime_ns) for p in (cwd / "run").rglob("*"))
    r = fuzz(cwd, plugin, "run")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert "--out run holds a run already" in r.stderr and "--resume" in r.stderr, r.stderr
    assert sorted((p, p.stat().st_mtime_ns) for p in (cwd / "run").rglob("*")) == before
    r = fuzz(cwd, plugin, "fresh")
    assert r.returncode == 0 and "FINDING" not in r.stdout, r.stdout + r.stderr
    r = fuzz(cwd, plugin, "run", "--resume")
    assert r.returncode == 1 and "mismatch, earlier] " in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("left", ["cases.jsonl.gz", "cases-0.jsonl", "summary.json", "fixtures/f/case.json",
                                  "difftest-workers/wal-1.jsonl"])
def test_what_a_run_leaves_is_refused_before_anything_loads(tmp_path, capsys, left):
    """A finished or killed run (its worker parts, its crash log) makes --out a used directory; the check comes
    before any implementation loads (no_such_impl is never looked up). An empty directory is fine."""
    out = tmp_path / "run"
    (out / left).parent.mkdir(parents=True, exist_ok=True)
    (out / left).write_text("")
    argv = ["fuzz", "--impl", "no_such_impl", "--max-examples", "1", "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a run already" in err and left.split("/")[0] in err, err
    shutil.rmtree(out)
    out.mkdir()
    assert cli.main(argv) == 2 and "unknown implementation" in capsys.readouterr().err


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
