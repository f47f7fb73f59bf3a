"""spec/routing.py: a hand-worked example for every method, the tie, underflow and special-value rules, the
validation errors, and properties drawn by hypothesis (an independent plain-Python DeepSeek-V3 selection,
permutation equivariance, shift invariance, normalization, fp32 against the float64 ideal)."""

import math
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from spec import routing
from spec.recipes import DEFAULT
from spec.routing import ROUTING_METHODS, expert_parallel_ids, route

U32 = 2.0**-24  # fp32 unit roundoff
HAND_RTOL = 8 * U32  # a hand value vs the fp32 path: logit, σ or exp, Σ, ÷ and ×rsf each round once
LN3, LN7 = math.log(3), math.log(7)
RENORMALIZING = ("renormalize", "renormalize_naive", "sigmoid_renorm", "minimax2", "deepseek_v3",
                 "deepseek_v2")
SOFTMAX = ("default", "renormalize", "renormalize_naive", "deepseek_v2")
FULL_SOFTMAX = ("default", "renormalize_naive", "deepseek_v2")  # a softmax over all E experts
BIASED = routing.BIASED_METHODS
GROUPED = routing.GROUPED_METHODS
SETTINGS = settings(max_examples=100, deadline=None)


def token(*logits):
    """One token's logits, fp32 [1, E]."""
    return np.array([logits], np.float32)


def vec(*values):
    """fp32 [E] (a bias)."""
    return np.array(values, np.float32)


def logit(p):
    """x with σ(x) = p."""
    return math.log(p / (1 - p))


def sigmoid32(x):
    """Test-side σ: the float64 value rounded once to fp32."""
    return (1 / (1 + np.exp(-np.asarray(x, np.float64)))).astype(np.float32)


def small_call(method, logits, **options):
    """A valid call of any method on E = 8 experts: a bias where it has one, 4 groups where grouped."""
    kw = {"top_k": 1 if method == "llama4" else 2}
    if method in GROUPED:
        kw.update(n_group=4, topk_group=2)
    bias = np.linspace(-0.5, 0.5, logits.shape[1], dtype=np.float32) if method in BIASED else None
    return route(logits, bias, method=method, **{**kw, **options})


@pytest.mark.parametrize("method", ROUTING_METHODS)
def test_route_dispatches_to_the_method_of_that_name(method):
    x = token(0.3, -1.2, 2.0, 0.7, -0.1, 1.1, 0.0, -2.5)
    by_route = small_call(method, x, routed_scaling_factor=2.0)
    bias = np.linspace(-0.5, 0.5, 8, dtype=np.float32) if method in BIASED else None
    kw = {"top_k": 1 if method == "llama4" else 2}
    kw.update({"n_group": 4, "topk_group": 2} if method in GROUPED else {})
    direct = getattr(routing, method)(x, bias, routed_scaling_factor=2.0, **kw)
    for a, b in zip(by_route, direct, strict=True):
        np.testing.assert_array_equal(a, b)


# Hand-worked examples, one per method. Logits are logs of small integers (softmax) or logit(p) (sigmoid),
# so every expected weight is a rational number worked out in the comment.

def test_default():
    # p = [1, 2, 3, 4]/10; top-2 = experts 3, 2 with p = 0.4, 0.3; margin 0.3 - 0.2
    r = routing.default(token(*[math.log(i) for i in (1, 2, 3, 4)]), top_k=2)
    np.testing.assert_array_equal(r.ids, [[3, 2]])
    np.testing.assert_allclose(r.weights, [[0.4, 0.3]], rtol=HAND_RTOL)
    np.testing.assert_allclose(r.expert_margin, [0.1], rtol=1e-6)
    assert r.group_margin[0] == np.inf


def test_renormalize():
    # top-2 of the raw logits ln 4, ln 3 → softmax over them = [4, 3]/7; margin ln 3 - ln 2 on logits
    r = routing.renormalize(token(*[math.log(i) for i in (1, 2, 3, 4)]), top_k=2, routed_scaling_factor=2.0)
    np.testing.assert_array_equal(r.ids, [[3, 2]])
    np.testing.assert_allclose(r.weights, [[8 / 7, 6 / 7]], rtol=HAND_RTOL)
    np.testing.assert_allclose(r.expert_margin, [math.log(1.5)], rtol=1e-6)


def test_renormalize_naive():
    # p = [1, 2, 3, 4]/10 → picks 0.4, 0.3 → divided by 0.7 = [4, 3]/7
    r = routing.renormalize_naive(token(*[math.log(i) for i in (1, 2, 3, 4)]), top_k=2)
    np.testing.assert_array_equal(r.ids, [[3, 2]])
    np.testing.assert_allclose(r.weights, [[4 / 7, 3 / 7]], rtol=HAND_RTOL)
    np.testing.assert_allclose(r.expert_margin, [0.1], rtol=1e-6)


# DeepSeek-V3 example: E = 8 in 4 groups of 2, topk_group = 2, top_k = 2.
DSV3_S = [0.75, 0.25, 0.5, 0.5, 0.875, 0.125, 0.25, 0.25]
DSV3_X = token(*[logit(p) for p in DSV3_S])
DSV3_B = vec(0, 0, 0.25, 0.125, 0, 0, 0.5, 0.25)
# c = s + b = [.75, .25 | .75, .625 | .875, .125 | .75, .5]; group top-2 sums [1.0, 1.375, 1.0, 1.25]
# → keep groups 1, 3 (group margin 1.375... last kept 1.25 - first dropped 1.0 = 0.25).
# Candidates 2, 3, 6, 7 with c = .75, .625, .75, .5 → ids 2, 6 (tie at .75: lower index first; expert 4
# has the largest c but sits in a dropped group); expert margin .75 - .625 = .125.
# Weights from the unbiased s: [.5, .25]/.75·2.5 = [5/3, 5/6]; biased c would give [1.25, 1.25].


def test_deepseek_v3():
    r = routing.deepseek_v3(DSV3_X, DSV3_B, top_k=2, n_group=4, topk_group=2, routed_scaling_factor=2.5)
    np.testing.assert_array_equal(r.ids, [[2, 6]])
    np.testing.assert_allclose(r.weights, [[5 / 3, 5 / 6]], rtol=HAND_RTOL)
    np.testing.assert_allclose(r.expert_margin, [0.125], rtol=1e-6)
    np.testing.assert_allclose(r.group_margin, [0.25], rtol=1e-6)
    assert r.ids.dtype == np.int32 and r.weights.dtype == np.float32
    assert r.expert_margin.dtype == r.group_margin.dtype == np.float64


def test_deepseek_v3_without_renormalization_scales_the_unbiased_sigmoid():
    # s[[2, 6]]·2.5 = [1.25, 0.625] (DeepSeek / vLLM: rsf applied whether or not renormalized)
    r = routing.deepseek_v3(DSV3_X, DSV3_B, top_k=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                            renormalize=False)
    np.testing.assert_allclose(r.weights, [[1.25, 0.625]], rtol=HAND_RTOL)


def test_deepseek_v3_ideal_is_float64_and_agrees():
    r = routing.deepseek_v3(DSV3_X, DSV3_B, top_k=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                            ideal=True)
    assert r.weights.dtype == np.float64
    np.testing.assert_array_equal(r.ids, [[2, 6]])
    # float64 from the fp32 logits: only the logits' own rounding (rel 2^-24 in x) separates it from 5/3
    np.testing.assert_allclose(r.weights, [[5 / 3, 5 / 6]], rtol=2 * U32)


def test_llama4():
    # argmax of [ln 3, ln 7, 0, -ln 3] is expert 1; σ(ln 7) = 7/8; margin ln 7 - ln 3
    r = routing.llama4(token(LN3, LN7, 0, -LN3), top_k=1)
    np.testing.assert_array_equal(r.ids, [[1]])
    np.testing.assert_allclose(r.weights, [[0.875]], rtol=HAND_RTOL)
    np.testing.assert_allclose(r.expert_margin, [LN7 - LN3], rtol=1e-6)


def test_topk():
    # weights are the raw logits (exact): top-2 of [0.5, -1, 2, 0.25] = 2.0, 0.5, times rsf 2
    r = routing.topk(token(0.5, -1.0, 2.0, 0.25), top_k=2, routed_scaling_factor=2.0)
    np.testing.assert_array_equal(r.ids, [[2, 0]])
    np.testing.assert_array_equal(r.weights, [[4.0, 1.0]])
    np.testing.assert_array_equal(r.expert_margin, [0.25])


SIG_X = token(LN3, 0, LN7, -LN3)  # σ = [3/4, 1/2, 7/8, 1/4]


def test_sigmoid_renorm():
    # top-2 σ = 7/8, 3/4 → divided by 13/8 = [7, 6]/13; without renormalization [7/8, 3/4]
    r = routing.sigmoid_renorm(SIG_X, top_k=2)
    np.testing.assert_array_equal(r.ids, [[2, 0]])
    np.testing.assert_allclose(r.weights, [[7 / 13, 6 / 13]], rtol=HAND_RTOL)
    r = routing.sigmoid_renorm(SIG_X, top_k=2, renormalize=False)
    np.testing.assert_allclose(r.weights, [[0.875, 0.75]], rtol=HAND_RTOL)


@pytest.mark.parametrize("method", ["sigmoid", "topk_sigmoid"])
def test_sigmoid_and_topk_sigmoid(method):
    # both: top-2 σ = 7/8, 3/4, no renormalization
    r = route(SIG_X, method=method, top_k=2)
    np.testing.assert_array_equal(r.ids, [[2, 0]])
    np.testing.assert_allclose(r.weights, [[0.875, 0.75]], rtol=HAND_RTOL)


def test_sigmoid_ranks_on_sigmoid_and_topk_sigmoid_on_logits():
    # σ(20) and σ(30) both round to 1.0 in fp32: the sigmoid keys tie (lower index wins, margin 0),
    # the raw logits do not (30 wins by 10).
    x = token(20.0, 30.0, 0.0, -1.0)
    r = routing.sigmoid(x, top_k=1)
    assert (r.ids.tolist(), r.weights.tolist(), r.expert_margin.tolist()) == ([[0]], [[1.0]], [0.0])
    r = routing.topk_sigmoid(x, top_k=1)
    assert (r.ids.tolist(), r.weights.tolist(), r.expert_margin.tolist()) == ([[1]], [[1.0]], [10.0])


def test_minimax2():
    # s = [3/4, 1/2, 7/8, 1/4], b = [0, 1/2, -1/4, 5/8] → c = [3/4, 1, 5/8, 7/8] → ids 1, 3 (margin 7/8 - 3/4)
    # w = [1/2, 1/4]/(3/4)·2 = [4/3, 2/3] from the unbiased s
    r = routing.minimax2(SIG_X, vec(0, 0.5, -0.25, 0.625), top_k=2, routed_scaling_factor=2.0)
    np.testing.assert_array_equal(r.ids, [[1, 3]])
    np.testing.assert_allclose(r.weights, [[4 / 3, 2 / 3]], rtol=HAND_RTOL)
    np.testing.assert_allclose(r.expert_margin, [0.125], rtol=1e-6)


def test_deepseek_v2():
    # p = [4, 1, 3, 2]/10; group maxima [0.4, 0.3] → keep group 0 (group margin 0.1) → ids 0, 1, every
    # candidate taken (expert margin inf); w = [0.4, 0.1], renormalized [0.8, 0.2]
    x = token(*[math.log(i) for i in (4, 1, 3, 2)])
    r = routing.deepseek_v2(x, top_k=2, n_group=2, topk_group=1, renormalize=False)
    np.testing.assert_array_equal(r.ids, [[0, 1]])
    np.testing.assert_allclose(r.weights, [[0.4, 0.1]], rtol=HAND_RTOL)
    np.testing.assert_allclose(r.group_margin, [0.1], rtol=1e-6)
    assert r.expert_margin[0] == np.inf
    r = routing.deepseek_v2(x, top_k=2, n_group=2, topk_group=1)
    np.testing.assert_allclose(r.weights, [[0.8, 0.2]], rtol=HAND_RTOL)


def test_deepseek_v2_group_mask_value_zero_lets_a_dropped_expert_win_a_tie():
    # fp32 softmax of [-200, -200, 0, -200] is [0, 0, 1, 0] (e^-200 underflows). Group 1 is kept; expert 3
    # (kept, p = 0) ties with the dropped experts 0, 1 when they are masked with 0.0 (SGLang), and expert 0
    # wins by index; masked with -inf (vLLM) they cannot.
    x = token(-200.0, -200.0, 0.0, -200.0)
    r = routing.deepseek_v2(x, top_k=2, n_group=2, topk_group=1, renormalize=False, group_mask_value=0.0)
    assert (r.ids.tolist(), r.weights.tolist()) == ([[2, 0]], [[1.0, 0.0]])
    r = routing.deepseek_v2(x, top_k=2, n_group=2, topk_group=1, renormalize=False)
    assert (r.ids.tolist(), r.weights.tolist()) == ([[2, 3]], [[1.0, 0.0]])


# Ties, bias precision, underflow, special values.

def test_exact_ties_go_to_the_lower_expert_and_group():
    # all keys equal: groups 0, 1 are kept and experts 0, 1, 2 chosen; both margins 0
    r = routing.deepseek_v3(np.zeros((1, 8), np.float32), np.zeros(8, np.float32), top_k=3, n_group=4,
                            topk_group=2)
    assert (r.ids.tolist(), r.expert_margin.tolist(), r.group_margin.tolist()) == ([[0, 1, 2]], [0.0], [0.0])
    np.testing.assert_allclose(r.weights, [[1 / 3] * 3], rtol=HAND_RTOL)


def test_tie_between_groups_goes_to_the_lower_group():
    # group 2 = experts 4, 5 has the best key; groups 1 and 3 tie for the second place → group 1 is kept
    b = vec(0, 0, 0.25, 0.25, 1.0, 1.0, 0.25, 0.25)
    r = routing.deepseek_v3(np.zeros((1, 8), np.float32), b, top_k=4, n_group=4, topk_group=2)
    assert (r.ids.tolist(), r.group_margin.tolist()) == ([[4, 5, 2, 3]], [0.0])


def test_bf16_bias_changes_the_selection():
    # s = σ(0.01) ≈ 0.5025, 0.5. fp32 bias 1.0035 gives c1 = 1.5035 > c0 = 1.5025 → expert 1; bf16 rounds
    # 1.0035 to 1.0 (spacing 2^-7 at 1), so c1 = 1.5 < c0 → expert 0 (SGLang before #28555).
    assert float(np.float32(1.0035).astype(ml_dtypes.bfloat16)) == 1.0
    x, b = token(0.01, 0.0), vec(1.0, 1.0035)
    fp32 = routing.deepseek_v3(x, b, top_k=1)
    bf16 = routing.deepseek_v3(x, b, top_k=1, recipe=DEFAULT.but(bias="bf16"))
    assert (fp32.ids.tolist(), bf16.ids.tolist()) == ([[1]], [[0]])
    np.testing.assert_allclose(fp32.expert_margin, [0.0035 - (float(sigmoid32(0.01)) - 0.5)], atol=1e-6)
    np.testing.assert_array_equal(fp32.weights, bf16.weights)  # weights come from the unbiased s


def test_weights_dtype_bf16_rounds_the_final_weights():
    kw = dict(top_k=2, n_group=4, topk_group=2, routed_scaling_factor=2.5, num_fused_shared_experts=1)
    fp32 = routing.deepseek_v3(DSV3_X, DSV3_B, **kw)
    bf16 = routing.deepseek_v3(DSV3_X, DSV3_B, recipe=DEFAULT.but(routing_weights="bf16"), **kw)
    expected = fp32.weights.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(bf16.weights, expected)
    assert not np.array_equal(bf16.weights, fp32.weights)


def test_renorm_orders_are_the_two_fp32_formulas():
    # k = 8 as in DeepSeek-V3, where a left-to-right Σ and numpy's pairwise sum round differently
    x = np.linspace(-3, 3, 64 * 16, dtype=np.float32).reshape(64, 16)[:, ::-1] * np.float32(0.37)
    rsf = np.float32(2.5)
    a = routing.sigmoid_renorm(x, top_k=8, routed_scaling_factor=2.5)
    b = routing.sigmoid_renorm(x, top_k=8, routed_scaling_factor=2.5,
                               recipe=DEFAULT.but(renorm_order="scale_then_divide"))
    np.testing.assert_array_equal(a.ids, b.ids)
    s = np.take_along_axis(sigmoid32(x), a.ids, axis=1)
    total = np.zeros(64, np.float32)
    for j in range(8):  # fp32, in selection order
        total = total + s[:, j]
    np.testing.assert_array_equal(a.weights, s / total[:, None] * rsf)
    np.testing.assert_array_equal(b.weights, s * rsf / total[:, None])
    assert not np.array_equal(a.weights, b.weights)  # the order is visible in the last bit somewhere


@pytest.mark.parametrize("how, alive, dead", [("expf", -88.72, -88.73), ("exact", -103.9, -104.0)])
def test_sigmoid_underflow_points(how, alive, dead):
    # expf: fl32(exp(88.73)) overflows to inf → σ = 0; exact: e^-104 < 2^-150 rounds to 0, e^-103.9 to 2^-149
    r = routing.sigmoid(token(alive, dead), top_k=2, recipe=DEFAULT.but(sigmoid=how))
    assert r.weights[0, 0] > 0 and r.weights[0, 1] == 0
    assert routing.sigmoid(token(alive, dead), top_k=2, recipe=DEFAULT.but(sigmoid=how), ideal=True).weights.min() > 0


@pytest.mark.parametrize("method", ["deepseek_v3", "minimax2", "sigmoid_renorm"])
@pytest.mark.parametrize("how, x", [("expf", -95.0), ("exact", -110.0)])
def test_underflowed_sigmoids_make_eps_decide(method, how, x):
    # every σ is 0: 0/(0 + 0) = NaN, 0/(0 + 1e-20) = 0; the float64 ideal (σ = e^x > 0) normalizes with eps 0
    logits = np.full((1, 8), x, np.float32)
    bias = np.zeros(8, np.float32) if method in BIASED else None
    kw = dict(method=method, top_k=4, recipe=DEFAULT.but(sigmoid=how), routed_scaling_factor=2.0)
    assert np.isnan(route(logits, bias, eps=0.0, **kw).weights).all()
    np.testing.assert_array_equal(route(logits, bias, eps=1e-20, **kw).weights, np.zeros((1, 4)))
    np.testing.assert_allclose(route(logits, bias, ideal=True, **kw).weights, [[0.5] * 4], rtol=1e-12)


def test_subnormal_sigmoids_normalize_without_eps_but_not_with_it():
    # exact σ(-95) = e^-95 ≈ 5.5e-42 is a subnormal: four equal ones sum exactly, so w = s/(4s) = 1/4; with
    # eps 1e-20 the denominator rounds to fl(1e-20) and w = s/1e-20 ≈ 5.5e-22 (defined, not normalized)
    logits = np.full((1, 8), -95.0, np.float32)
    r = routing.deepseek_v3(logits, np.zeros(8, np.float32), top_k=4)
    np.testing.assert_array_equal(r.weights, [[0.25] * 4])
    r = routing.deepseek_v3(logits, np.zeros(8, np.float32), top_k=4, eps=1e-20)
    np.testing.assert_allclose(r.weights, [[math.exp(-95) / 1e-20] * 4], rtol=1e-3)  # subnormal s: ~1e-3 rel


def test_negative_bias_keys_below_minus_one_stay_selectable():
    # K2: s = 1/2, b + 1/2 = [-2.5, -2, -3.5, -1, -4.5, -1.5, -3, -5.5] → ids 3, 5, 1, 0 (keys ≤ -1 all valid)
    b = vec(-3, -2.5, -4, -1.5, -5, -2, -3.5, -6)
    r = routing.deepseek_v3(np.zeros((1, 8), np.float32), b, top_k=4, routed_scaling_factor=2.5)
    np.testing.assert_array_equal(r.ids, [[3, 5, 1, 0]])
    np.testing.assert_array_equal(r.weights, [[0.625] * 4])
    np.testing.assert_array_equal(r.expert_margin, [0.5])


def test_glm_bias_swamps_the_sigmoid_but_weights_come_from_it():
    # K5/K6: b ≈ 11.2 with duplicates, x ≈ -30 → σ ≈ 1e-13 < ulp(11.2)/2, so s + b == b in fp32: the keys are
    # the biases and ties among duplicates go to the lower index (ids 5, 11, 4, 10 although σ_11 > σ_5).
    # Weights are σ/Σσ·rsf: nonzero, summing to rsf.
    j = np.arange(16)
    b = (np.float32(11.2) + np.float32(2.0**-6) * (j % 6)).astype(np.float32)
    x = (-30 + 0.1 * j).astype(np.float32)[None]
    s = 1 / (1 + np.exp(-x[0].astype(np.float64)))
    assert np.array_equal(sigmoid32(x[0]) + b, b)
    r = routing.deepseek_v3(x, b, top_k=4, routed_scaling_factor=2.5, eps=1e-20)
    np.testing.assert_array_equal(r.ids, [[5, 11, 4, 10]])
    assert r.expert_margin[0] == 2.0**-6  # last pick 10 (offset 4/64) vs first rejected 3 (offset 3/64)
    expected = s[[5, 11, 4, 10]] / s[[5, 11, 4, 10]].sum() * 2.5
    np.testing.assert_allclose(r.weights[0], expected, rtol=HAND_RTOL)


def test_nan_logit_is_chosen_only_when_forced():
    # s = [NaN, 1/2, 3/4, 1/4]: top-2 skips the NaN → [3/5, 2/5]; top-3 leaves the NaN as first rejected
    # (margin NaN); top-4 must take it, and the NaN sum poisons every weight of the token.
    x = token(np.nan, 0.0, LN3, -LN3)
    r = routing.deepseek_v3(x, None, top_k=2)
    np.testing.assert_array_equal(r.ids, [[2, 1]])
    np.testing.assert_allclose(r.weights, [[0.6, 0.4]], rtol=HAND_RTOL)
    assert np.isnan(routing.deepseek_v3(x, None, top_k=3).expert_margin[0])
    r = routing.deepseek_v3(x, None, top_k=4)
    assert r.ids.tolist() == [[2, 1, 3, 0]] and np.isnan(r.weights).all() and r.expert_margin[0] == np.inf


def test_expert_margin_ignores_experts_of_dropped_groups():
    # Both groups score 1/2 + NaN = NaN: group 0 is kept by index and the group margin is NaN. Expert 0
    # (σ = 1/2) is taken; the dropped experts 2, 3 (-inf) rank above the kept NaN expert 1, yet the margin
    # is taken against expert 1 (NaN), not against a masked -inf (which would give inf).
    x = token(0.0, np.nan, -LN3, np.nan)
    r = routing.deepseek_v3(x, None, top_k=1, n_group=2, topk_group=1)
    assert r.ids.tolist() == [[0]] and np.isnan(r.group_margin[0]) and np.isnan(r.expert_margin[0])


def test_infinite_logits_through_sigmoid_and_raw_keys():
    # σ(+inf) = 1, σ(-inf) = 0
    r = routing.sigmoid(token(np.inf, 0.0, -np.inf, 0.0), top_k=4)
    assert (r.ids.tolist(), r.weights.tolist()) == ([[0, 1, 3, 2]], [[1.0, 0.5, 0.5, 0.0]])
    # equal infinite keys are a tie (margin 0, not NaN)
    r = routing.topk(token(-np.inf, -np.inf, 1.0, -np.inf), top_k=2)
    assert (r.ids.tolist(), r.weights.tolist()) == ([[2, 0]], [[1.0, -np.inf]])
    assert r.expert_margin.tolist() == [0.0]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_softmax_row_with_nan_or_inf_is_nan(bad):
    # x - max is NaN somewhere (NaN - NaN, inf - inf), so the whole row of p is NaN and ids are 0..k-1
    r = routing.default(token(1.0, bad, 2.0, 3.0), top_k=2)
    assert r.ids.tolist() == [[0, 1]] and np.isnan(r.weights).all()
    # renormalize ranks raw logits: a NaN is skipped, +inf is taken first and makes its softmax NaN
    r = routing.renormalize(token(1.0, bad, 2.0, 3.0), top_k=2)
    if np.isnan(bad):
        assert r.ids.tolist() == [[3, 2]] and np.isfinite(r.weights).all()
    else:
        assert r.ids.tolist() == [[1, 3]] and np.isnan(r.weights).all()


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("method", ROUTING_METHODS)
def test_special_values_raise_no_warnings(method):
    x = token(np.nan, np.inf, -np.inf, -200.0, 200.0, 0.0, -1e30, 1e30)
    assert small_call(method, x, recipe=DEFAULT.but(sigmoid="expf")).ids.shape == (1, 1 if method == "llama4" else 2)


@pytest.mark.parametrize("method", ROUTING_METHODS)
def test_zero_and_one_token_shapes(method):
    for T in (0, 1):
        r = small_call(method, np.zeros((T, 8), np.float32), num_fused_shared_experts=2)
        k = 1 if method == "llama4" else 2
        assert r.ids.shape == r.weights.shape == (T, k + 2)
        assert r.expert_margin.shape == r.group_margin.shape == (T,)
        assert (r.ids.dtype, r.weights.dtype) == (np.int32, np.float32)


def test_fused_shared_experts():
    # ids 8, 9 after the routed ones; weight Σ routed / rsf = (5/3 + 5/6)/2.5 = 1
    r = routing.deepseek_v3(DSV3_X, DSV3_B, top_k=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                            num_fused_shared_experts=2)
    np.testing.assert_array_equal(r.ids, [[2, 6, 8, 9]])
    np.testing.assert_allclose(r.weights[:, 2:], [[1.0, 1.0]], rtol=HAND_RTOL)
    # unnormalized: 1 by default (shared_weight "one"); Σ of 0.4, 0.3 over rsf None (= 1) = 0.7 with Σ/rsf
    x = token(*[math.log(i) for i in (1, 2, 3, 4)])
    r = routing.default(x, top_k=2, num_fused_shared_experts=1)
    np.testing.assert_array_equal(r.ids, [[3, 2, 4]])
    np.testing.assert_allclose(r.weights, [[0.4, 0.3, 1.0]], rtol=HAND_RTOL)
    r = routing.default(x, top_k=2, num_fused_shared_experts=1,
                        recipe=DEFAULT.but(shared_weight="routed_sum_over_rsf"))
    np.testing.assert_allclose(r.weights, [[0.4, 0.3, 0.7]], rtol=HAND_RTOL)


def test_expert_parallel_ids():
    ids = np.array([[0, 5, 8], [3, 7, 4]], np.int32)
    local = expert_parallel_ids(ids, local_expert_offset=4, local_num_experts=4)
    assert local.dtype == np.int32 and local.tolist() == [[-1, 5, -1], [-1, 7, 4]]
    assert expert_parallel_ids(ids, 0, 0).tolist() == [[-1] * 3] * 2


X8 = np.zeros((2, 8), np.float32)
B8 = np.zeros(8, np.float32)


@pytest.mark.parametrize("method, logits, bias, options, message", [
    ("deepseek_v3", X8, B8, dict(top_k=2, n_group=3, topk_group=1), r"n_group=3 must be an integer >= 1 dividing num_"),
    ("deepseek_v3", X8, B8, dict(top_k=2, n_group=4, topk_group=5), r"topk_group=5 must be an integer in \[1, n_"),
    ("deepseek_v3", X8, B8, dict(top_k=5, n_group=4, topk_group=2), "top_k=5 exceeds the 4 experts of topk_group=2"),
    ("deepseek_v3", X8, B8, dict(top_k=9), r"top_k=9 must be an integer in \[1, num_experts=8\]"),
    ("deepseek_v3", X8, B8, dict(top_k=0), "top_k=0 must be an integer in"),
    ("deepseek_v3", X8, B8, dict(top_k=2.0), "top_k=2.0 must be an integer in"),
    ("deepseek_v3", X8, B8, dict(top_k=2, group_mask_value=0.0), "deepseek_v2 only"),
    ("deepseek_v3", X8[0], B8, dict(top_k=2), "2-D"),
    ("deepseek_v3", X8, B8[:4], dict(top_k=2), r"bias must have shape \[E\]"),
    ("deepseek_v3", X8.astype(np.int32), B8, dict(top_k=2), "floating-point"),
    ("deepseek_v3", X8, B8.astype(np.int64), dict(top_k=2), "floating-point"),
    ("deepseek_v3", X8, B8, dict(top_k=2, routed_scaling_factor=0.0), "routed_scaling_factor=0.0 must be"),
    ("deepseek_v3", X8, B8, dict(top_k=2, eps=-1e-20), "eps=-1e-20 must be"),
    ("deepseek_v3", X8, B8, dict(top_k=2, num_fused_shared_experts=-1), "num_fused_shared_experts=-1 must be"),
    ("deepseek_v3", X8, B8, dict(top_k=2, renormalize="yes"), "renormalize='yes' must be a bool"),
    ("deepseek_v3", X8, B8, dict(top_k=2, sigmoid="expf"), "sigmoid is a recipe field"),  # recipe=R's, by its name
    ("deepseek_v3", X8, B8, dict(top_k=2, bias_dtype="bf16"), "routing option 'bias_dtype' is not one of"),
    ("deepseek_v3", X8, B8, dict(top_k=2, recipe="fp32"), "recipe must be a spec.recipes.Recipe"),
    ("llama4", X8, None, dict(top_k=2), "top_k=2 must be 1"),
    ("default", X8, B8, dict(top_k=2), "a correction bias needs a biased method"),
    ("renormalize", X8, None, dict(top_k=2, n_group=2, topk_group=1), "renormalize has no expert groups"),
    ("deepseek_v2", X8, None, dict(top_k=2, n_group=2, topk_group=1, group_mask_value=np.nan), "nan"),
    ("softmax", X8, None, dict(top_k=2), "is not one of"),
    ("topk", X8, None, dict(top_k=2, ids=np.array([[0, 0], [1, 2]])), r"ids \(forced\) must be distinct"),
])
def test_invalid_calls_raise_one_line_value_errors(method, logits, bias, options, message):
    with pytest.raises(ValueError, match=message) as info:
        route(logits, bias, method=method, **options)
    assert "\n" not in str(info.value)


def test_expert_parallel_ids_validation():
    with pytest.raises(ValueError, match="integer array"):
        expert_parallel_ids(np.zeros((1, 2)), 0, 4)
    with pytest.raises(ValueError, match="local_expert_offset"):
        expert_parallel_ids(np.zeros((1, 2), np.int32), -1, 4)


# Properties.

class Problem(NamedTuple):
    logits: np.ndarray  # fp32 [T, E]
    bias: np.ndarray    # fp32 [E]
    top_k: int
    n_group: int
    topk_group: int


def tie_prone(lo, hi, ties):
    """fp32 values in [lo, hi]; with ties, a handful of repeated values mixed in so that exact ties occur."""
    values = st.floats(lo, hi, width=32)
    return st.one_of(values, st.sampled_from([lo, 0.0, hi / 4, hi])) if ties else values


@st.composite
def problems(draw, max_group_size=4, group_counts=(1, 2, 4), logit_range=8.0, ties=True):
    G = draw(st.sampled_from(group_counts), label="n_group")
    E = G * draw(st.integers(2, max_group_size), label="group_size")
    tg = draw(st.integers(1, G), label="topk_group")
    k = draw(st.integers(1, tg * E // G), label="top_k")
    T = draw(st.integers(1, 4), label="num_tokens")
    logits = draw(hnp.arrays(np.float32, (T, E), elements=tie_prone(-logit_range, logit_range, ties)),
                  label="logits")
    bias = draw(hnp.arrays(np.float32, (E,), elements=tie_prone(-1.0, 1.0, ties)), label="bias")
    return Problem(logits, bias, k, G, tg)


def deepseek_v3_ids_by_hand(c, n_group, topk_group, top_k):
    """Plain-Python DeepSeek-V3 selection on one token's fp32 keys c: sort (-key, index) tuples."""
    size = len(c) // n_group
    groups = list(range(n_group))
    if n_group > 1:
        score = [sum(sorted(c[g * size:(g + 1) * size], reverse=True)[:2], np.float32(0)) for g in groups]
        groups = sorted(groups, key=lambda g: (-score[g], g))[:topk_group]
    candidates = [e for e in range(len(c)) if e // size in groups]
    return sorted(candidates, key=lambda e: (-c[e], e))[:top_k]


@SETTINGS
@given(p=problems(), rsf=st.sampled_from([None, 1.0, 2.5]), renormalize=st.booleans())
def test_deepseek_v3_matches_a_plain_python_selection(p, rsf, renormalize):
    r = routing.deepseek_v3(p.logits, p.bias, top_k=p.top_k, n_group=p.n_group, topk_group=p.topk_group,
                            routed_scaling_factor=rsf, renormalize=renormalize)
    s = sigmoid32(p.logits)
    c = s + p.bias
    for t in range(len(c)):
        assert r.ids[t].tolist() == deepseek_v3_ids_by_hand(list(c[t]), p.n_group, p.topk_group, p.top_k)
    picked = np.take_along_axis(s, r.ids, axis=1).astype(np.float64)
    expected = (picked / picked.sum(axis=1, keepdims=True) if renormalize else picked) * (rsf or 1.0)
    np.testing.assert_allclose(r.weights, expected, rtol=(p.top_k + 4) * U32)
    assert np.all(r.expert_margin >= 0) and np.all(r.group_margin >= 0)


def by_id(ids, values):
    """values [T, k] with each row's columns reordered by ascending id."""
    return np.take_along_axis(values, np.argsort(ids, axis=1), axis=1)


def permutation_of_groups_and_experts(draw, n_group, size):
    """A permutation of E = n_group·size experts that moves whole groups and experts within each group."""
    group_order = draw(st.permutations(range(n_group)), label="group_order")
    inner = [draw(st.permutations(range(size)), label="inner_order") for _ in range(n_group)]
    return np.array([g * size + inner[i][j] for i, g in enumerate(group_order) for j in range(size)])


@pytest.mark.parametrize("method", ROUTING_METHODS)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_permuting_groups_and_experts_permutes_the_routing(method, data):
    grouped = method in GROUPED
    p = data.draw(problems(group_counts=(1, 2, 4) if grouped else (1,), ties=False), label="problem")
    k = 1 if method == "llama4" else p.top_k
    perm = permutation_of_groups_and_experts(data.draw, p.n_group, p.logits.shape[1] // p.n_group)
    bias = p.bias if method in BIASED else None
    kw = dict(method=method, top_k=k, n_group=p.n_group, topk_group=p.topk_group)
    r = route(p.logits, bias, **kw)
    # a softmax over all E sums in index order, so a permutation perturbs p by rounding: demand margins
    # well above it there; elsewhere the keys are unchanged and any nonzero margin decides alike
    floor = 1e-5 if method in FULL_SOFTMAX else 0.0
    assume(np.all(r.expert_margin > floor) and np.all(r.group_margin > floor))
    q = route(p.logits[:, perm], None if bias is None else bias[perm], **kw)
    # the margins decide the set; ties inside it may reorder columns, and with them the fp32 Σ: compare by id
    q_ids = perm[q.ids]
    np.testing.assert_array_equal(by_id(q_ids, q_ids), by_id(r.ids, r.ids))
    extra = p.logits.shape[1] if method in FULL_SOFTMAX else 0
    np.testing.assert_allclose(by_id(q_ids, q.weights), by_id(r.ids, r.weights), rtol=(extra + k + 4) * U32)


@pytest.mark.parametrize("method", SOFTMAX)
@SETTINGS
@given(data=st.data())
def test_softmax_methods_are_invariant_to_a_row_shift(method, data):
    # logits on a 2^-10 grid in [-8, 8] and an integer shift: x + c and (x + c) - max(x + c) are exact, so
    # the shifted routing is bitwise the same
    G = data.draw(st.sampled_from([2, 4] if method in GROUPED else [1]), label="n_group")
    E = G * 2
    x = data.draw(hnp.arrays(np.float32, (3, E), elements=st.integers(-8192, 8192).map(lambda i: i / 1024)),
                  label="logits")
    c = data.draw(hnp.arrays(np.float32, (3, 1), elements=st.integers(-16, 16).map(float)),
                  label="shift")
    kw = dict(method=method, top_k=2, n_group=G, topk_group=G // 2 if method in GROUPED else 1)
    a, b = route(x, **kw), route(x + c, **kw)
    for u, v in zip(a, b, strict=True):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("method", RENORMALIZING)
@SETTINGS
@given(p=problems(logit_range=20.0), rsf=st.sampled_from([None, 2.5, 16.0]),
       order=st.sampled_from(["divide_then_scale", "scale_then_divide"]))
def test_renormalized_weights_sum_to_the_scaling_factor(method, p, rsf, order):
    grouped = method in GROUPED
    kw = dict(method=method, top_k=p.top_k, n_group=p.n_group if grouped else 1,
              topk_group=p.topk_group if grouped else 1, routed_scaling_factor=rsf,
              recipe=DEFAULT.but(renorm_order=order))
    bias = p.bias if method in BIASED else None
    total = route(p.logits, bias, **kw).weights.astype(np.float64).sum(axis=1)
    # each weight carries ≤ 2 roundings and shares the denominator's ≤ k - 1 roundings
    np.testing.assert_allclose(total, rsf or 1.0, rtol=(p.top_k + 3) * U32)
    ideal = route(p.logits, bias, ideal=True, **kw).weights.sum(axis=1)
    np.testing.assert_allclose(ideal, rsf or 1.0, rtol=1e-14)


@SETTINGS
@given(p=problems(), rsf=st.sampled_from([None, 2.5]))
def test_deepseek_v3_fp32_is_within_its_rounding_of_the_ideal(p, rsf):
    kw = dict(top_k=p.top_k, n_group=p.n_group, topk_group=p.topk_group, routed_scaling_factor=rsf)
    r = routing.deepseek_v3(p.logits, p.bias, **kw)
    ideal = routing.deepseek_v3(p.logits, p.bias, ideal=True, **kw)
    assume(np.array_equal(r.ids, ideal.ids))
    # σ (twice: the picked one and, through Σ, the others), k - 1 additions, ÷ and ×rsf each round once:
    # (k + 3)·u per weight to first order, plus room for the second-order terms
    np.testing.assert_allclose(r.weights, ideal.weights, rtol=(p.top_k + 4) * U32)


@pytest.mark.parametrize("method", [m for m in ROUTING_METHODS if m != "llama4"])  # llama4: top_k is 1
def test_top_k_equal_to_num_experts_takes_every_expert(method):
    x = np.linspace(2, -2, 8, dtype=np.float32)[None] * np.float32(1.3)
    r = small_call(method, x, top_k=8, **({"topk_group": 4} if method in GROUPED else {}))
    assert sorted(r.ids[0].tolist()) == list(range(8)) and r.expert_margin[0] == np.inf


@SETTINGS
@given(p=problems(group_counts=(1,)), eps=st.sampled_from([0.0, 1e-20]))
def test_one_group_deepseek_v3_is_minimax2_and_without_bias_sigmoid_renorm(p, eps):
    kw = dict(top_k=p.top_k, routed_scaling_factor=2.5, eps=eps)
    a = routing.deepseek_v3(p.logits, p.bias, **kw)
    for u, v in zip(a, routing.minimax2(p.logits, p.bias, **kw), strict=True):
        np.testing.assert_array_equal(u, v)
    a = routing.deepseek_v3(p.logits, None, **kw)
    for u, v in zip(a, routing.sigmoid_renorm(p.logits, **kw), strict=True):
        np.testing.assert_array_equal(u, v)
    assert np.all(a.group_margin == np.inf)


@SETTINGS
@given(p=problems(group_counts=(1,)))
def test_deepseek_v2_with_one_expert_per_group_is_default(p):
    # group score = the expert's own p, so keeping topk_group groups keeps the topk_group best experts
    E = p.logits.shape[1]
    tg = max(p.top_k, min(E, p.topk_group + 1))
    a = routing.deepseek_v2(p.logits, top_k=p.top_k, n_group=E, topk_group=tg, renormalize=False)
    b = routing.default(p.logits, top_k=p.top_k)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.weights, b.weights)
