"""The worked plug-in (examples/plugin_example.py) through the real CLI: it passes, and a copy with one seeded
bug (K1: weights from the biased keys) fails with exit 1 and leaves a replayable fixture."""

import json
import subprocess
import sys
from pathlib import Path

from difftest import fixtures, interface

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin_example.py"
BUDGET = ["--max-examples", "40", "--workers", "1", "--seed", "0"]


def fuzz(ref, out):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "difftest",
            "fuzz",
            "--impl",
            ref,
            "--op",
            "routing",
            "--model",
            "deepseek-v3",
            "--out",
            str(out),
            *BUDGET,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_example_follows_the_protocol():
    impl = interface.load(f"{EXAMPLE}:DEEPSEEK_V3")
    assert impl.ops == ("routing",) and impl.available() is None


def test_example_passes(tmp_path):
    r = fuzz(f"{EXAMPLE}:DEEPSEEK_V3", tmp_path / "run")
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"].get("pass", 0) > 0 and not summary["findings"]


def test_broken_copy_fails_with_a_fixture(tmp_path):
    source = EXAMPLE.read_text()
    right = "w = np.take_along_axis(s, ids, axis=-1)"
    assert source.count(right) == 1
    broken = tmp_path / "broken_plugin.py"
    broken.write_text(source.replace(right, "w = np.take_along_axis(keys, ids, axis=-1)"))
    r = fuzz(f"{broken}:DEEPSEEK_V3", tmp_path / "run")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FINDING [routing, example:deepseek_v3_numpy, mismatch]" in r.stdout
    (path,) = fixtures.discover(tmp_path / "run" / "fixtures")
    fx = fixtures.load(path)
    assert fx.impl_ref == f"{broken}:DEEPSEEK_V3" and fx.case.config.method == "deepseek_v3"
