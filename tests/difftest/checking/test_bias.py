"""difftest/checking/bias.py, the bias test: its boundary is the mixture it claims, its false-alarm rate holds for
symmetric token statistics however heavy-tailed, elements of one token are not independent units (a correct
implementation moves a whole row one way), correct implementations give no evidence, and a truncating accumulator
that stays far below the hard bound is caught by its campaign cell; under an expf recipe too, where the sigmoid
cases are taken at the implementation's own router weights (bias.not_applicable, What H0 needs)."""

import json
import math
import sys
from dataclasses import replace

import numpy as np
import pytest

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
from tests.plugins.planted_bugs import (
    EXPF_STORES,
    FP32_STORES,
    RNE_ACC,
    RNE_ACC_EXPF,
    TRUNCATING_ACC,
    TRUNCATING_ACC_EXPF,
    WEIGHTS_LOW,
    WEIGHTS_LOW_EXPF,
)


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


METHODS = [("renormalize", 8, 2, 1, 1), ("deepseek_v3", 16, 4, 4, 2), ("default", 8, 2, 1, 1)]
SIGMOID = METHODS[1:2]  # the method whose router weights an expf recipe's approximation reaches


def cases(n, H=128, I=64, T=8, dists=ROUTING_DISTS[:3], methods=METHODS):
    """n moe cases of the bf16 path: methods, activations and input distributions (`dists`) in turn."""
    out = []
    for seed in range(n):
        method, E, k, G, tg = methods[seed % len(methods)]
        routing = RoutingConfig(method, T, E, k, G, tg, 2.5 if method == "deepseek_v3" else None,
                                bias_dtype="fp32" if method == "deepseek_v3" else None)
        activation = ["swiglu", "geglu", "relu2", "silu"][seed % 4]
        out.append(Case("moe", MoEConfig(routing, H, I, activation=activation), dists[seed % len(dists)], seed))
    return out


def cell_evidence(impl, n, dists=ROUTING_DISTS[:3], methods=METHODS):
    monitor = bias.Monitor()
    statuses = []
    for case in cases(n, dists=dists, methods=methods):
        result = run_case(impl, case)
        statuses.append(result.status)
        monitor.add(campaign.case_row(impl.name, case, result))
    (evidence,) = monitor.cells.values() or [bias.Evidence()]
    print(f"{impl.name}, {n} cases of {[m[0] for m in methods]} on {list(dists)}: {evidence}, "
          f"ln M = {evidence.log_m():.2f}")  # the figures of docs/comparisons.md (pytest -s)
    return evidence, statuses


TORCH_EXPF = TORCH._replace(name="torch_expf", recipe=lambda case: TORCH.recipe(case).but(sigmoid="expf"))
CORRECT = [TORCH, RNE_ACC, impl_spec.summed_in("fp32", FP32_STORES), impl_spec.summed_in("fp32_pairwise", FP32_STORES)]
CORRECT_EXPF = [TORCH_EXPF, RNE_ACC_EXPF, WEIGHTS_LOW_EXPF, *(impl_spec.summed_in(a, EXPF_STORES)._replace(
    name=f"spec:{a}_expf") for a in ("fp32", "fp32_pairwise"))]


@pytest.mark.parametrize("dists", [ROUTING_DISTS[:3], ("nonneg",)], ids=["signed", "nonneg"])
@pytest.mark.parametrize("impl", [*CORRECT, *(pytest.param(i, marks=pytest.mark.heavy) for i in CORRECT_EXPF)],
                         ids=lambda i: i.name)
def test_correct_implementations_give_no_evidence(impl, dists):
    """The empirical side of the assumption: over 40 cases (fp32 stores: every element of every token differs
    from the recipe-exact spec), a correct implementation's evidence stays below e^3, far from e^20.7. Also on
    nonneg inputs, where no sum cancels: a round-to-nearest error of a positive sum is as likely up as down, so
    only a summation that errs one way (below) pushes every output toward zero there. Heavy (about two minutes):
    the same under an expf recipe, whose deepseek_v3 tokens are taken at the implementation's router weights:
    torch's sigmoid, the spec's expf formula, and weights one ulp low (an exp one ulp high)."""
    evidence, statuses = cell_evidence(impl, 40, dists)
    assert set(statuses) == {"pass"}
    assert evidence.log_m() < 3, evidence
    if impl not in (TORCH, TORCH_EXPF):
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
    assert "tensor core" in bias.not_applicable(declared, cases(1)[0].config, weights_given=True)
    evidence, statuses = cell_evidence(impl_spec.summed_in("fp32_truncating", declared), 20)
    assert set(statuses) == {"pass"} and evidence.tokens == 0, evidence


def test_the_rule_follows_what_reaches_the_outputs():
    """difftest/checking/bias.py, What H0 needs: an approximate sigmoid (or exp) matters only for the methods whose
    router weights it makes, and not at all once the implementation's own weights are given; the tensor core's
    one-way accumulator and a missing recipe matter always; the quantizers are reproduced bit for bit."""
    softmax, sigmoid, default = (case.config for case in cases(3))
    for recipe in (EXPF_STORES, FP32_STORES.but(name="tanh", sigmoid="tanh")):
        assert recipe.sigmoid in bias.not_applicable(recipe, sigmoid)
        assert bias.not_applicable(recipe, sigmoid, weights_given=True) is None
        assert bias.not_applicable(recipe, softmax) is None and bias.not_applicable(recipe, default) is None
    ex2 = FP32_STORES.but(name="ex2", exp="ex2")
    assert "'ex2'" in bias.not_applicable(ex2, softmax) and "'ex2'" in bias.not_applicable(ex2, default)
    assert bias.not_applicable(ex2, sigmoid) is None  # σ "exact" ignores exp
    assert bias.not_applicable(ex2, softmax, weights_given=True) is None
    tensor_core = EXPF_STORES.but(name="tc", gemm_acc="tensor_core")
    assert "tensor core" in bias.not_applicable(tensor_core, softmax, weights_given=True)
    assert "no recipe" in bias.not_applicable(None, softmax, weights_given=True)
    rcp = FP32_STORES.but(name="rcp", act_quant_variant="mul_448_div_amax", requant_variant="mul_448_div_amax")
    assert bias.not_applicable(rcp, replace(softmax, quant="fp8_block")) is None  # Hopper's MUFU.RCP, reproduced


def test_truncating_accumulator_is_caught_under_an_expf_recipe():
    """The issue's bug under a recipe whose sigmoid is expf, on deepseek_v3 cases (σ makes their router weights):
    the layer exposes its ids and weights, its outputs are taken at those, and the cell rejects within 8 cases
    (e^74 after 20 when measured, every token toward zero)."""
    evidence, statuses = cell_evidence(TRUNCATING_ACC_EXPF, 8, methods=SIGMOID)
    assert set(statuses) == {"pass"}
    assert evidence.rejects() and evidence.s < 0 and evidence.tokens > 50, evidence


def test_an_expf_recipe_is_held_at_the_implementations_router_weights(monkeypatch):
    """Why the weights are given: WEIGHTS_LOW_EXPF writes every router weight one ulp low, as an exp one ulp high
    does to an expf sigmoid; a correct implementation of the expf recipe (inside its weight bound). Taken at its own
    weights it gives no evidence over 8 nonneg deepseek_v3 cases; taken at the spec's expf weights, as before
    the rule, the same outputs reject (every weighted term one ulp toward zero). torch's sigmoid against the spec's expf
    formula: test_correct_implementations_give_no_evidence (heavy)."""
    nonneg = ("nonneg",)
    evidence, statuses = cell_evidence(WEIGHTS_LOW_EXPF, 8, nonneg, SIGMOID)
    assert set(statuses) == {"pass"} and evidence.log_m() < 3 and evidence.tokens > 50, evidence
    monkeypatch.setattr(bias, "approximate_scores", lambda recipe, method: None)  # the spec's weights
    evidence, statuses = cell_evidence(WEIGHTS_LOW_EXPF, 8, nonneg, SIGMOID)
    assert set(statuses) == {"pass"} and evidence.rejects() and evidence.s < 0, evidence


def test_one_way_router_weights_are_caught_where_sigma_is_rounded_once():
    """Why the weights are not always given: under FP32_STORES (σ "exact", rounded to nearest) the same weights
    one ulp low are a one-way routing bug inside the hard bound, and the cell's bias test, taken at the spec's
    weights, rejects within 8 nonneg deepseek_v3 cases."""
    evidence, statuses = cell_evidence(WEIGHTS_LOW, 8, ("nonneg",), SIGMOID)
    assert set(statuses) == {"pass"} and evidence.rejects() and evidence.s < 0, evidence


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
    """`difftest fuzz` of the truncating accumulator: the moe cell's bias test makes it a finding (exit 1), in
    summary.json's bias_findings. Layers of at most 16 tokens and 1,024 wide keep it short (the planted accumulator is
    a Python loop over K); single cases fail it too now and then, where truncation moves a subnormal output a whole
    ulp or a layer has tokens enough for its own bias test (on seed 3 they did, and shrinking them and searching on
    took 27 CPU s; seed 1, 14 CPU s, as the test cost before the case space reached the kernels' limits)."""
    sys.path.insert(0, "tests/plugins")
    code = main(["fuzz", "--impl", "tests/plugins/planted_bugs.py:TRUNCATING_ACC", "--op", "moe",
                 "--max-examples", "200", "--workers", "1", "--seed", "1", "--where", "T=..16",
                 "--where", "hidden_size=..1024", "--out", str(tmp_path / "run")])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert code == 1
    (finding,) = summary["bias_findings"]
    assert finding["quant"] == "bf16" and "toward zero" in finding["message"]
    assert "FINDING [moe, planted:truncating_fp32_accumulator, bias]" in capsys.readouterr().out
