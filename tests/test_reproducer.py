"""`show` and `show --script` (issue 22, item 3): the inputs in compact form, the implementation next to the
spec at the worst elements, and a standalone reproducer that runs without Hypothesis, fails while the bug is
there and passes once it is fixed."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
K1 = ROOT / "fixtures" / "routing-bug_deepseek_biased_weights-a601b764f199"
EXAMPLE = ROOT / "examples" / "plugin_example.py"
WEIGHTS_BUG = ("w = np.take_along_axis(s, ids, axis=-1)", "w = np.take_along_axis(keys, ids, axis=-1)")
# runs the script with hypothesis (and optionally difftest) unimportable
BLOCKED = ("import runpy, sys\nfor m in sys.argv[2:]:\n    sys.modules[m] = None\n"
           "sys.argv = sys.argv[:2]\nrunpy.run_path(sys.argv[1], run_name='__main__')\n")


def difftest(*args):
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def run_script(script, *blocked):
    return subprocess.run([sys.executable, "-c", BLOCKED, str(script), "hypothesis", *blocked],
                          cwd=script.parent, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_show_prints_inputs_and_the_worst_elements():
    r = difftest("show", str(K1))
    assert r.returncode == 0, r.stderr
    assert "input logits: float32 (1, 1) in [1.434, 1.434]: [1.4344]" in r.stdout
    assert "input bias: float32 (1,)" in r.stdout
    assert "worst elements (implementation vs spec at the spec's ids; 1 outside the bound):" in r.stdout
    assert "  weights[0, 0]=1.08061 but spec=0.807579: |diff| 0.273 > bound 1.06e-06" in r.stdout


@pytest.mark.parametrize("fixture", [K1.name, "K12_gate_up_read_as_up_gate", "K14_log2_ue8m0"])
def test_script_of_an_open_bug_model_fixture_fails_on_its_own(tmp_path, fixture):
    r = difftest("show", str(ROOT / "fixtures" / fixture), "--script", str(tmp_path / "repro.py"))
    assert r.returncode == 0 and (tmp_path / "repro.npz").is_file(), r.stderr
    run = run_script(tmp_path / "repro.py")
    assert run.returncode == 1 and "FAIL:" in run.stdout, run.stdout + run.stderr


def test_script_of_a_plugin_needs_neither_hypothesis_nor_difftest(tmp_path):
    plugin = tmp_path / "plugin.py"
    source = EXAMPLE.read_text()
    plugin.write_text(source.replace(*WEIGHTS_BUG))
    r = difftest("fuzz", "--impl", f"{plugin}:DEEPSEEK_V3", "--op", "routing", "--model", "deepseek-v3",
                 "--max-examples", "40", "--workers", "1", "--out", str(tmp_path / "run"))
    assert r.returncode == 1, r.stdout + r.stderr
    (fixture,) = (tmp_path / "run" / "fixtures").iterdir()
    script = tmp_path / "elsewhere" / "repro.py"
    assert difftest("show", str(fixture), "--script", str(script)).returncode == 0
    assert "plugin.py:DEEPSEEK_V3" in script.read_text() and str(tmp_path) not in script.read_text()
    run = run_script(script, "difftest")
    assert run.returncode == 1 and "weights[" in run.stdout and "FAIL:" in run.stdout, run.stdout + run.stderr
    plugin.write_text(source)  # the fix
    run = run_script(script, "difftest")
    assert run.returncode == 0 and "PASS" in run.stdout, run.stdout + run.stderr
