"""A moe fixture and its reproducer keep the case's expert weights as the seed that regenerates them, not as arrays
(issue 34: the no-GEMM layer's E = 256 finding would have needed a 91 MB repro.npz): replay regenerates them bit for
bit, the files stay small, and a kernel script regenerates them with difftest's generator copied into it, without
this project on the path."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from difftest.checking import interface
from difftest.model import generate
from difftest.model.case import Case, MoEConfig, RoutingConfig
from difftest.readers import reproducer
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[3]
MOE_FIXTURE = ROOT / "fixtures" / "moe-torch-051d5a51d11b"
ADAPTER = "flashinfer.trtllm_gen_nogemm"
SMALL = 64 << 10  # bytes: every file of a fixture and of its reproducer's npz here
# E = 64 grouped DeepSeek-V3 routing on every weight path; nonneg and sparse change the weights (WEIGHT_DISTS)
CASES = [Case("moe", MoEConfig(RoutingConfig("deepseek_v3", 2, 64, 4, 4, 2, 2.5, bias_dtype="bf16"), 256, 128,
                               quant=quant, scale_fmt=scale_fmt), dist, seed)
         for quant, scale_fmt, dist, seed in (("fp8_block", "fp32", "normal", 5), ("fp8_block", "ue8m0", "sparse", 6),
                                              ("bf16", "fp32", "nonneg", 7), ("mxfp8", "fp32", "normal", 8),
                                              ("nvfp4", "fp32", "sparse", 9))]
# Imports the scripts with difftest and spec unimportable (not run: their kernel is not here) and saves the weights
# each regenerates.
REGENERATE = """import runpy, sys
import numpy as np
sys.modules["difftest"] = sys.modules["spec"] = sys.modules["impls"] = None
for script in sys.argv[1:]:
    ns = runpy.run_path(script, run_name="repro")
    np.savez(script + ".weights.npz", **ns["stacked_weights"](**ns["WEIGHTS"]))
"""


def stacked(case):
    return {k: np.array(v) for k, v in generate.weights(case).stacked().items()}


def fixture_of(case, tmp_path):
    """A moe fixture of `case` recorded against the no-GEMM adapter (not run: the observation is made up)."""
    expected = {"out": np.zeros((case.config.routing.num_tokens, case.config.hidden_size), np.float32)}
    observed = {"status": "fail", "ratio": 2.0, "message": "out[0, 0]=1 but spec=0", "failures": ["out"]}
    path = fixtures.write(tmp_path / "fixtures", case, ADAPTER, interface.load(ADAPTER), None, observed, expected)
    return fixtures.load(path)


def test_a_moe_fixture_round_trip_regenerates_its_weights_bit_for_bit(tmp_path):
    case = CASES[0]
    original = stacked(case)
    assert sum(a.nbytes for a in original.values()) > 8 * SMALL  # weights far larger than what is stored
    fx = fixture_of(case, tmp_path)
    again = {k: np.array(v) for k, v in generate.weights(fx.case).stacked().items()}
    assert sorted(again) == sorted(original)
    for k, a in original.items():
        assert again[k].dtype == a.dtype and again[k].tobytes() == a.tobytes(), k
    script, npz = reproducer.write_script(fx, fx.path / "repro.py")
    assert not any(k in np.load(npz).files for k in ("input.w13", "input.w2", "input.w13_scale"))
    for f in fx.path.iterdir():
        assert f.stat().st_size < (3 * SMALL if f == script else SMALL), (f.name, f.stat().st_size)


def test_a_kernel_script_regenerates_the_weights_difftest_gave_the_kernel_without_the_project(tmp_path):
    """Every weight path and weight distribution: the script's arrays (difftest, spec and impls unimportable) equal
    the project's, and with the expert weights the script hands the adapter exactly what difftest hands it."""
    base = fixtures.load(MOE_FIXTURE)
    scripts = []
    for i, case in enumerate(CASES):
        fx = base._replace(case=case, inputs=generate.inputs(case), impl_ref=ADAPTER, recipe=None)
        scripts.append(reproducer.write_script(fx, tmp_path / str(i) / "repro.py")[0])
        assert reproducer.script_weights(fx)["seed"] == case.seed
    r = subprocess.run([sys.executable, "-c", REGENERATE, *map(str, scripts)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr
    for case, script in zip(CASES, scripts, strict=True):
        want = interface.with_stacked_weights(case, generate.inputs(case))
        with np.load(str(script) + ".weights.npz") as got:
            assert sorted([*got.files, *generate.inputs(case)]) == sorted(want), case
            for k in got.files:
                assert got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes(), (case.quant, k)


def test_a_changed_generator_call_changes_the_regenerated_weights():
    """The comparison above can fail: another seed in WEIGHTS gives other arrays."""
    case = CASES[0]
    w = generate.weights(case)
    other = generate._expert_weights(w.seed + 1, w.quant, 0, w.N1, w.H, w.I, w.scale_fmt, w.given, w.form)
    assert other["w13"].tobytes() != stacked(case)["w13"][0].tobytes()


def test_scripts_of_other_fixtures_carry_no_generator():
    """Routing, quant and dev-kernel scripts, and moe scripts of the project's own implementations (which generate
    their weights from the case themselves), are as before: no WEIGHTS, no generator."""
    fx = fixtures.load(MOE_FIXTURE)
    assert reproducer.script_weights(fx) is None
    text = reproducer.script_text(fx, "repro.npz", MOE_FIXTURE)
    assert "WEIGHTS" not in text and "def stacked_weights" not in text
    assert json.loads(json.dumps(reproducer.script_weights(fx._replace(impl_ref=ADAPTER))))["E"] == 2
