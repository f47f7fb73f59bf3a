"""The fused-MoE plug-in example (examples/plugin_moe_example.py, issue 22 item 5) through the real CLI: it
passes on the bf16 and fp8 block paths with no skip (its `space`), and broken copies (gate and up swapped;
the fp8 intermediate not re-quantized; the inputs written into) fail."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.checking import interface

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugin_moe_example.py"


def fuzz(ref, out, n="40", *extra):
    return subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--impl", ref, "--op", "moe", "--max-examples",
                           n, "--workers", "1", "--seed", "0", "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_example_follows_the_protocol():
    impl = interface.load(f"{EXAMPLE}:FUSED_MOE")
    assert impl.ops == ("moe",) and impl.available() is None and impl.space["method"] == "renormalize"


def test_example_passes_on_both_quant_paths_without_skips(tmp_path):
    r = fuzz(f"{EXAMPLE}:FUSED_MOE", tmp_path / "run", "30")
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == {"pass": 60}, summary["status"]
    assert summary["by"]["quant"].get("moe:fp8_block", 0) == 30 and summary["by"]["quant"]["moe:bf16"] == 30
    assert 0 < summary["max_ratio_passing"] <= 1


# bug: (right, wrong, the quant path it is fuzzed on: each shows on that path, and one path is half the cost)
BUGS = {
    "gate_up_swapped": ("gate, up = h[:, :I], h[:, I:]", "up, gate = h[:, :I], h[:, I:]", "bf16"),
    "fp8_intermediate_not_requantized": ("aq = quantize_rows(a) if fp8 else",
                                         "aq = a.astype(np.float64) if fp8 else", "fp8_block"),
    "writes_into_its_inputs": ("x, I = inputs[\"hidden\"], c.intermediate_size",
                               "x, I = inputs[\"hidden\"], c.intermediate_size\n        x *= 1", "bf16"),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_broken_copy_fails(tmp_path, bug):
    right, wrong, quant = BUGS[bug]
    source = EXAMPLE.read_text()
    assert source.count(right) == 1
    broken = tmp_path / "broken.py"
    broken.write_text(source.replace(right, wrong))
    r = fuzz(f"{broken}:FUSED_MOE", tmp_path / "run", "20", "--where", f"quant={quant}")
    assert r.returncode == 1, r.stdout + r.stderr
    kind = "error" if bug == "writes_into_its_inputs" else "mismatch"
    assert f"FINDING [moe, example:fused_moe_numpy, {kind}]" in r.stdout, r.stdout
