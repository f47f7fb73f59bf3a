"""The worked plug-in (examples/plugin_example.py) through the real CLI: it passes, and a copy with one seeded
bug (K1: weights from the biased keys) fails with exit 1 and leaves a replayable fixture. The bf16-arithmetic
plug-in (examples/plugin_bf16_routing.py) fails while it claims fp32 routing and passes with its recipe."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from difftest.checking import interface
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[2]
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


BF16_EXAMPLE = ROOT / "examples" / "plugin_bf16_routing.py"
BF16_CASES = [(bias, dist, seed) for bias in ("fp32", None) for dist in ("normal", "near_ties", "underflow")
              for seed in (0, 1)]


def _bf16_case(bias, dist, seed, logits_dtype="bf16"):
    from difftest.model.case import Case, RoutingConfig

    config = RoutingConfig(method="deepseek_v3", num_tokens=64, num_experts=64, top_k=6, n_group=8, topk_group=3,
                           routed_scaling_factor=2.5, logits_dtype=logits_dtype, bias_dtype=bias)
    return Case("routing", config, dist, seed)


@pytest.mark.parametrize("bias,dist,seed", BF16_CASES)
def test_bf16_arithmetic_plugin_passes_with_its_recipe(bias, dist, seed):
    from difftest.checking import check

    r = check.run_case(interface.load(f"{BF16_EXAMPLE}:GROUPED_TOPK_BF16"), _bf16_case(bias, dist, seed))
    assert r.status == "pass", r.message


@pytest.mark.parametrize("bias,dist,seed", BF16_CASES)
def test_bf16_arithmetic_plugin_fails_claiming_fp32(bias, dist, seed):
    from difftest.checking import check

    r = check.run_case(interface.load(f"{BF16_EXAMPLE}:UNDECLARED"), _bf16_case(bias, dist, seed))
    assert r.status == "fail" and r.ratio > 100, (r.status, r.ratio, r.message)


@pytest.mark.parametrize("bias", ["fp32", None])
def test_bf16_arithmetic_plugin_is_fp32_exact_on_fp32_logits(bias):
    from difftest.checking import check

    r = check.run_case(interface.load(f"{BF16_EXAMPLE}:UNDECLARED"), _bf16_case(bias, "normal", 0, "fp32"))
    assert r.status == "pass", r.message


# issue 36: the example computes σ with torch's `.sigmoid()` (vLLM grouped_topk's torch path), so it passes only under
# a recipe that declares torch's sigmoid ("torch_cpu"): its underflow below -88.72, its merged near-ties, T = 0.
ISSUE_36 = [
    (dict(num_tokens=1, num_experts=1, top_k=1, renormalize=False), [[-100.80398559570312]], "fp32"),
    (dict(num_tokens=1, num_experts=6, top_k=1, n_group=2, topk_group=1),
     [[0.5078125, 0.5078128576278687, 0.5078125, 0.5078125, 0.5078128576278687, 0.5078127384185791]], "fp32"),
    (dict(num_tokens=1, num_experts=2, top_k=1, renormalize=False), [[-26.0, -30.0]], "fp16"),
    (dict(num_tokens=0, num_experts=8, top_k=2, n_group=4, topk_group=2), np.zeros((0, 8)), "bf16"),
]


@pytest.mark.parametrize("sizes,logits,dtype", ISSUE_36, ids=["underflow", "merged_tie", "fp16_underflow", "T0"])
def test_bf16_arithmetic_plugin_passes_issue_36_cases(sizes, logits, dtype):
    from difftest.checking import check
    from difftest.model.case import Case, RoutingConfig

    case = Case("routing", RoutingConfig(method="deepseek_v3", logits_dtype=dtype, **sizes), "normal", 0)
    r = check.run_case(interface.load(f"{BF16_EXAMPLE}:GROUPED_TOPK_BF16"), case,
                       {"logits": np.asarray(logits, np.float32)})
    assert r.status == "pass", r.message
