"""difftest/checking/bias.py, the bias test: its boundary is the mixture it claims, its false-alarm rate holds for
symmetric token statistics however heavy-tailed, elements of one token are not independent units (a correct
implementation moves a whole row one way), correct implementations give no evidence, and a truncating accumulator
that stays far below the hard bound is caught by its campaign cell."""

import json
import math
import sys

import numpy as np
import pytest
from planted_bugs import FP32_STORES, RNE_ACC, TRUNCATING_ACC

from difftest.checking import bias, impl_spec
from difftest.checking.check import run_case
from difftest.checking.impl_torch import TORCH
from difftest.cli import main
from difftest.model.case import Case, MoEConfig, RoutingConfig
from difftest.model.generate import ROUTING_DISTS
from difftest.running import campaign
from difftest.selftest import mutants
from spec.layer import StackedWeights, moe_layer
from spec.recipes import Recipe


def test_boundary_is_the_gaussian_mixture():
    """ln M = ln ∫ exp(λS − λ²V/2) N(λ; 0, 1/ρ) dλ, integrated numerically."""
    lam = np.linspace(-2, 2, 400001)
    for s, v in ((0.0, 0.0), (30.0, 400.0), (-250.0, 9000.0), (5.0, 1.0)):
        density = np.sqrt(bias.RHO / (2 * np.pi)) * np.exp(-bias.RHO * lam**2 / 2)
        integral = np.trapezoid(np.exp(lam * s - lam**2 * v / 2) * density, lam)
        assert bias.Evidence(s, v, 1).log_m() == pytest.approx(math.log(integral), abs=1e-6)


def test_false_alarm_rate_holds_for_symmetric_tokens():
    """Ville's inequality at a measurable level: with α = 0.02, 4000 streams of 300 symmetric token statistics
    (heavy-tailed: a token moves 0 to 1000 elements, all one way, with a random sign) reject at some point of the
    stream in at most α of them; streams whose tokens (of geometric sizes) go one way four times in five reject in
    nearly all."""
    rng = np.random.default_rng(0)
    alpha, streams, n = 0.02, 4000, 300
    size = np.floor(rng.pareto(1.2, (streams, n)) * 5)
    coin = rng.random((streams, n))
    d, pushed = np.where(coin < 0.5, 1, -1) * size, np.where(coin < 0.2, 1, -1) * rng.geometric(0.05, (streams, n))

    def rejected(d):
        s, v = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
        log_m = s * s / (2 * (bias.RHO + v)) - 0.5 * np.log1p(v / bias.RHO)
        return (log_m >= math.log(1 / alpha)).any(axis=1)

    assert rejected(d).mean() <= alpha
    assert rejected(pushed).mean() > 0.95


def test_a_correct_implementation_moves_a_token_one_way():
    """Why the unit is the token: one intermediate element that dominates its token and sits near a bf16
    midpoint. gate = 1 + 2^-8 + 2^-30 rounds to bf16 1 + 2^-7; summed in fp32 (a correct implementation) the 2^-30
    is lost, the sum is the midpoint and rounds to even, 1. Every one of the 64 outputs then moves toward zero:
    64 elements with one sign, p = 2^-63 if they were independent; one token, evidence e^-0.8 as one unit."""
    H = 64
    x = np.zeros((1, H), np.float32)
    x[0, :3] = [1, 2.0**-8, 2.0**-30]
    w13 = np.zeros((1, 2, H), np.float32)
    w13[0, 0, :3], w13[0, 1, 0] = 1, 1  # gate = x0 + x1 + x2, up = x0
    w2 = (np.where(np.arange(H) % 2, 1.0, -1.0) * (1 + np.arange(H) / 64)).reshape(1, H, 1)
    recipe = Recipe(name="plain")
    kw = dict(routing=dict(method="renormalize", top_k=1), activation="swiglu", recipe=recipe)
    weights = StackedWeights({"w13": w13, "w2": w2.astype(np.float32)})
    exact = moe_layer(x, np.zeros((1, 1), np.float32), None, weights, **kw)
    fp32 = moe_layer(x, np.zeros((1, 1), np.float32), None, weights, **kw, accumulate="fp32")
    d = bias.token_signs(fp32.out, exact.out)
    assert d.tolist() == [-H]
    assert np.all(np.abs(fp32.out - exact.out) <= bias_free_bound(exact, recipe))
    assert bias.case_evidence(d).log_m() < 0


def bias_free_bound(result, recipe):
    from spec import bounds

    return bounds.bound_vs_recipe(result, recipe)[0]


def cases(n, H=128, I=64, T=8, dists=ROUTING_DISTS[:3]):
    """n moe cases of the bf16 path: methods, activations and input distributions (`dists`) in turn."""
    methods = [("renormalize", 8, 2, 1, 1), ("deepseek_v3", 16, 4, 4, 2), ("default", 8, 2, 1, 1)]
    out = []
    for seed in range(n):
        method, E, k, G, tg = methods[seed % len(methods)]
        routing = RoutingConfig(method, T, E, k, G, tg, 2.5 if method == "deepseek_v3" else None,
                                bias_dtype="fp32" if method == "deepseek_v3" else None)
        activation = ["swiglu", "geglu", "relu2", "silu"][seed % 4]
        out.append(Case("moe", MoEConfig(routing, H, I, activation=activation), dists[seed % len(dists)], seed))
    return out


def cell_evidence(impl, n, dists=ROUTING_DISTS[:3]):
    monitor = bias.Monitor()
    statuses = []
    for case in cases(n, dists=dists):
        result = run_case(impl, case)
        statuses.append(result.status)
        monitor.add(campaign.case_row(impl.name, case, result))
    (evidence,) = monitor.cells.values() or [bias.Evidence()]
    return evidence, statuses


@pytest.mark.parametrize("dists", [ROUTING_DISTS[:3], ("nonneg",)], ids=["signed", "nonneg"])
@pytest.mark.parametrize("impl", [TORCH, RNE_ACC, impl_spec.summed_in("fp32", FP32_STORES),
                                  impl_spec.summed_in("fp32_pairwise", FP32_STORES)], ids=lambda i: i.name)
def test_correct_implementations_give_no_evidence(impl, dists):
    """The empirical side of the assumption: over 40 cases (fp32 stores: every element of every token differs
    from the recipe-exact spec), a correct implementation's evidence stays below e^3, far from e^20.7. Also on
    nonneg inputs, where no sum cancels: a round-to-nearest error of a positive sum is as likely up as down, so
    only a summation that errs one way (below) pushes every output toward zero there."""
    evidence, statuses = cell_evidence(impl, 40, dists)
    assert set(statuses) == {"pass"}
    assert evidence.log_m() < 3, evidence
    if impl is not TORCH:
        assert evidence.tokens > 200  # it compared something: fp32 outputs differ everywhere


def test_truncating_accumulator_is_caught_by_its_cell():
    """The issue's bug: an fp32 accumulator that truncates changes every case and stays under the hard bound of
    every one, but always pushes toward zero: the cell's bias test rejects within 20 cases (after 7 when
    measured)."""
    evidence, statuses = cell_evidence(TRUNCATING_ACC, 20)
    assert set(statuses) == {"pass"}
    assert evidence.rejects(), evidence
    assert evidence.s < 0


def test_a_tensor_core_recipe_is_not_held_to_symmetric_rounding():
    """The spec summed with additions that round toward zero: under a recipe that declares fp32 accumulation its
    cell rejects (the same one-way push as TRUNCATING_ACC); under one that declares tensor_core it is a correct
    implementation, within the bound, and its errors are not asked to be symmetric."""
    promised_nearest = impl_spec.summed_in("fp32_truncating", FP32_STORES)
    evidence, statuses = cell_evidence(promised_nearest, 20)
    assert set(statuses) == {"pass"} and evidence.rejects() and evidence.s < 0, evidence
    declared = FP32_STORES.but(name="fp32_stores_tensor_core", gemm_acc="tensor_core")
    assert "tensor core" in bias.not_applicable(declared)
    evidence, statuses = cell_evidence(impl_spec.summed_in("fp32_truncating", declared), 20)
    assert set(statuses) == {"pass"} and evidence.tokens == 0, evidence


@pytest.mark.heavy
def test_nonneg_inputs_carry_a_truncating_accumulator_through_bf16_stores():
    """The mutation self-test's fp32_accumulator_truncates (inside torch eager's bf16 pipeline) at H = 512: on
    signed inputs the bf16 flips it causes reach the outputs with either sign (16 cases, measured: 28 tokens
    toward zero, 25 away, no evidence); on nonneg inputs nothing cancels, every flip goes down, and the cell
    rejects within 16 cases (at the 14th when measured; after 8: 47 tokens toward zero, 0 away, e^11.6). The
    unpatched copy changes nothing that pushes one way. Heavy: about a minute on one core."""
    caught = mutants.detection("fp32_accumulator_truncates", 512, cases=16, dist="nonneg")
    assert caught.changed == 16 and caught.cell_cases is not None, caught
    assert mutants.detection("identity", 512, cases=8, dist="nonneg").cell_cases is None


def test_monitor_counts_a_token_once():
    row = {"impl": "x", "op": "moe", "quant": "bf16", "case": cases(1)[0].to_dict(), "bias": [[0, -5], [3, -7]]}
    monitor = bias.Monitor()
    monitor.add(row)
    monitor.add(row)  # a shrink step or repeat of the same example
    fewer = dict(row, case=json.loads(json.dumps(row["case"])))
    fewer["case"]["config"]["routing"]["num_tokens"] = 4  # the same seed with fewer tokens: the same rows
    monitor.add(fewer)
    assert monitor.cells[("x", "moe", "bf16")] == bias.Evidence(-12, 74, 2)


def test_fuzz_reports_a_biased_cell(tmp_path, capsys):
    """`difftest fuzz` of the truncating accumulator: no case fails, the moe cell's bias test makes it a finding
    (exit 1), in summary.json's bias_findings."""
    sys.path.insert(0, "tests")
    code = main(["fuzz", "--impl", "tests/planted_bugs.py:TRUNCATING_ACC", "--op", "moe", "--max-examples", "200",
                 "--workers", "1", "--seed", "3", "--out", str(tmp_path / "run")])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert code == 1 and not summary["findings"], summary["findings"]
    (finding,) = summary["bias_findings"]
    assert finding["quant"] == "bf16" and "toward zero" in finding["message"]
    assert "FINDING [moe, planted:truncating_fp32_accumulator, bias]" in capsys.readouterr().out
