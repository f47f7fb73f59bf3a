"""difftest.checking.compare / difftest.checking.check: each check can fail, and ties decided another valid way pass."""

import itertools
from pathlib import Path

import numpy as np
import pytest

from difftest.checking import check, compare, impl_spec
from difftest.checking.impl_spec import SPEC
from difftest.model import generate
from difftest.model.case import Case, DevKernelConfig, MoEConfig, QuantConfig, RoutingConfig
from difftest.selftest import bug_models
from spec import bounds

DS = RoutingConfig("deepseek_v3", 8, 16, 4, 4, 2, 2.5, bias_dtype="fp32")


def impl(run, ops=("routing", "quant", "moe"), deterministic=True):
    return SPEC._replace(name="test-impl", ops=ops, deterministic=deterministic, run=run)


def test_elementwise_message_names_element_values_bound_ratio():
    got, want = np.zeros((4, 20)), np.zeros((4, 20))
    got[3, 17], want[3, 17] = 0.512, 0.498
    v = compare.elementwise("out", got, want, np.full((4, 20), 3.1e-3), "moe, torch")
    assert not v.ok and v.ratio == pytest.approx(0.014 / 3.1e-3)
    assert v.message == "out[3, 17]=0.512 but spec=0.498: |diff| 0.014 > bound 0.0031 (4.52x) [moe, torch]"


def test_elementwise_nan_only_where_spec_is_nan():
    assert compare.elementwise("w", [np.nan, 1.0], [np.nan, 1.0], [0.0, 0.0], "t").ok
    assert not compare.elementwise("w", [np.nan, 1.0], [0.5, 1.0], [1.0, 1.0], "t").ok


@pytest.mark.parametrize("bad", [np.inf, np.nan, -1.0])
def test_elementwise_fails_a_bound_that_is_not_a_finite_number(bad):
    """A bound of inf would pass any difference: where the values differ it fails, whatever the difference."""
    bound = np.array([1e-3, bad, 1e-3])
    v = compare.elementwise("out", [0.0, 1.0 + 1e-9, 2.0], [0.0, 1.0, 2.0], bound, "t")
    assert not v.ok and v.ratio == np.inf
    assert v.message == (f"out[1]=1 but spec=1: the derived bound is {bad}, not a finite number >= 0, so it "
                         f"compares nothing (1 such elements) [t]")
    assert compare.elementwise("out", [0.0, 1.0, 2.0], [0.0, 1.0, 2.0], bound, "t").ok  # equal: compared exactly


def test_bounded_rows_excludes_and_counts_rows_the_derivation_cannot_bound():
    got, want = np.array([[0.5, 0.25], [0.1, 0.9], [0.3, 0.3]]), np.array([[0.5, 0.25], [0.2, 0.8], [0.3, 0.3]])
    bound = np.array([[1e-6, 1e-6], [np.inf, 1e-6], [1e-6, 1e-6]])
    v = compare.bounded_rows("w", got, want, bound, "t")
    assert v.ok and v.excluded == 1
    assert not compare.bounded_rows("w", got, want, np.where(np.isinf(bound), np.nan, bound), "t").ok


def _reversed_ties(case, inputs):
    """Routing that breaks ties toward the higher expert id (a valid kernel choice): flip, route, map back."""
    c = case.config
    E = c.num_experts
    flipped = {"logits": inputs["logits"][:, ::-1].copy()}
    if "bias" in inputs:
        flipped["bias"] = inputs["bias"][::-1].copy()
    r = impl_spec.route(c, flipped, impl_spec.DEFAULT)  # groups reverse too: group g <-> G-1-g
    ids = np.where(r.ids < E, E - 1 - r.ids, r.ids).astype(np.int32)
    return {"ids": ids, "weights": r.weights}


def declaring(rule, run):
    """impl(run) whose recipe declares the tie rule `rule`."""
    return impl(run)._replace(recipe=lambda case: impl_spec.DEFAULT.but(tie_rule=rule))


@pytest.mark.parametrize("rule", ["higher_index", "unspecified"])
@pytest.mark.parametrize("method", ["sigmoid", "deepseek_v3", "renormalize_naive", "topk"])
def test_ties_broken_the_other_way_pass_as_near_ties(method, rule):
    """Reversed ties are valid where the recipe declares them (exactly) or promises no order."""
    cfg = RoutingConfig(method, 16, 16, 4, *((4, 2) if method == "deepseek_v3" else (1, 1)))
    r = check.run_case(declaring(rule, _reversed_ties), Case("routing", cfg, "exact_ties", 3))
    assert r.status == "pass", r.message
    assert r.near_ties > 0


@pytest.mark.parametrize("method", ["sigmoid", "deepseek_v3", "renormalize_naive", "topk"])
def test_ties_broken_the_other_way_fail_a_declared_lower_index_rule(method):
    """The same selections, declared "lower_index" (the spec, torch, trtllm-gen): bit-identical keys are
    compared exactly against the rule."""
    cfg = RoutingConfig(method, 16, 16, 4, *((4, 2) if method == "deepseek_v3" else (1, 1)))
    r = check.run_case(declaring("lower_index", _reversed_ties), Case("routing", cfg, "exact_ties", 3))
    assert r.status == "fail" and "bit-identical" in r.message and "lower index" in r.message, r.message


def test_a_clearly_worse_expert_fails():
    def worse(case, inputs):
        out = SPEC.run(case, inputs)
        ids = out["ids"].copy()
        keys = inputs["logits"]
        ids[0, -1] = np.setdiff1d(np.argsort(keys[0]), ids[0])[0]  # the smallest key not already chosen
        return {"ids": ids, "weights": out["weights"]}

    r = check.run_case(impl(worse), Case("routing", RoutingConfig("topk", 4, 16, 4), "normal", 1))
    assert r.status == "fail" and "ids[0]" in r.message


def test_k1_weights_from_biased_scores_fail():
    r = check.run_case(bug_models.DEEPSEEK_BIASED_WEIGHTS, Case("routing", DS, "normal", 1))
    assert r.status == "fail" and "weights" in r.message and r.ratio > 1


def test_rsf_applied_twice_fails():
    r = check.run_case(bug_models.RSF_TWICE, Case("routing", DS, "normal", 1))
    assert r.status == "fail" and "weights" in r.message


def test_shared_expert_weight_checked():
    def wrong_shared(case, inputs):
        out = SPEC.run(case, inputs)
        w = out["weights"].copy()
        w[:, -1] *= 2
        return {"ids": out["ids"], "weights": w}

    cfg = RoutingConfig("deepseek_v3", 4, 16, 4, 4, 2, 2.5, bias_dtype="fp32", num_fused_shared_experts=1)
    r = check.run_case(impl(wrong_shared), Case("routing", cfg, "normal", 1))
    assert r.status == "fail" and "shared" in r.message


def test_quant_code_and_layout_are_bit_exact():
    case = Case("quant", QuantConfig("fp8_group", 5, 256, layout="col"), "normal", 1)

    def flipped_code(case, inputs):
        out = SPEC.run(case, inputs)
        q = out["q"].copy()
        q[2, 7] ^= 1
        return {**out, "q": q}

    def row_major_buffer(case, inputs):
        out = SPEC.run(case, inputs)
        return {**out, "scale_buffer": np.ascontiguousarray(out["scales"]).view(np.uint8).ravel()}

    assert check.run_case(SPEC, case).status == "pass"
    r = check.run_case(impl(flipped_code), case)
    assert r.status == "fail" and r.message.startswith("q[2, 7]=")
    r = check.run_case(impl(row_major_buffer), case)
    assert r.status == "fail" and "scale_buffer as col" in r.message


def test_nondeterminism_is_caught_when_declared_deterministic():
    counter = itertools.count()

    def jitter(case, inputs):
        out = SPEC.run(case, inputs)
        return {**out, "weights": out["weights"] + np.float32(next(counter) * 1e-7)}

    r = check.run_case(impl(jitter), Case("routing", DS, "normal", 1), repeat=True)
    assert r.status == "fail" and "two runs differ" in r.message


def test_writing_into_inputs_is_an_error():
    def scribble(case, inputs):
        inputs["logits"][0, 0] = 0
        return SPEC.run(case, inputs)

    r = check.run_case(impl(scribble), Case("routing", DS, "normal", 1))
    assert r.status == "error" and "read-only" in r.message


def test_unsupported_case_is_a_skip_with_reason():
    r = check.run_case(impl(SPEC.run, ops=("routing",)), Case("quant", QuantConfig("fp8_group", 1, 128)))
    assert r.status == "skip" and "does not implement op quant" in r.message


def test_moe_output_beyond_bound_fails_and_within_passes():
    case = Case("moe", MoEConfig(DS, 64, 32), "normal", 2)

    def nudged(scale):
        def run(case, inputs):
            out = SPEC.run(case, inputs)
            o = out["out"].copy()
            o[1, 5] = o[1, 5] * (1 + scale) + scale
            return {**out, "out": o}

        return run

    assert check.run_case(SPEC, case).status == "pass"
    r = check.run_case(impl(nudged(0.05)), case)
    assert r.status == "fail" and r.message.startswith("out[1, 5]=")


def test_routing_validity_uses_groups():
    """The best expert sits in a group with a poor top-2 sum: taking it ignores the group mask, not a tie."""
    case = Case("routing", RoutingConfig("deepseek_v3", 1, 16, 2, 4, 1), "normal", 0)
    logits = np.full((1, 16), -5.0, np.float32)
    logits[0, 0], logits[0, 4:6] = 5.0, 2.0  # group 0: σ(5)+σ(-5) ≈ 1.0 < group 1: 2σ(2) ≈ 1.76

    def ignore_groups(case, inputs):
        ids = np.argsort(-inputs["logits"], axis=1, kind="stable")[:, :2].astype(np.int32)
        return {"ids": ids, "weights": SPEC.run(case, inputs)["weights"]}

    assert SPEC.run(case, {"logits": logits})["ids"].tolist() == [[4, 5]]
    r = check.run_case(impl(ignore_groups), case, {"logits": logits})
    assert r.status == "fail" and "ids[0]=[0, 4]" in r.message


def test_poisoned_output_buffer_left_unwritten_fails():
    """An implementation that writes into given buffers (run_into) must write every element."""
    case = Case("routing", DS, "normal", 1)

    def run_into(skip_last_row):
        def write(case, inputs, buffers):
            out = SPEC.run(case, inputs)
            rows = slice(0, -1) if skip_last_row else slice(None)
            for k in buffers:
                buffers[k][rows] = out[k][rows]
        return write
    def into(skip_last_row):  # a plug-in object: the Impl fields plus run_into
        return type("Into", (), {**SPEC._asdict(), "run_into": staticmethod(run_into(skip_last_row))})
    assert check.run_case(into(False), case).status == "pass"
    r = check.run_case(into(True), case)
    assert r.status == "fail" and "NaN-poisoned buffer" in r.message and "[7, 0]" in r.message


UNDERFLOW = [  # (config, seed of a near tie)
    (RoutingConfig("sigmoid_renorm", 1, 31, 1, renormalize=False), 16),  # subnormal weights, ~4 % apart
    (RoutingConfig("sigmoid_renorm", 8, 2, 1, renormalize=True), 0),  # every selected sigmoid 0 in fp32: 0/0
    (RoutingConfig("sigmoid_renorm", 8, 4, 2, renormalize=True, eps=1e-20), 0),
    (RoutingConfig("sigmoid", 8, 31, 3, routed_scaling_factor=2.5), 0),
]


@pytest.mark.parametrize("cfg, seed", UNDERFLOW, ids=["subnormal", "all-zero-0/0", "eps", "sigmoid-rsf"])
def test_underflowing_ties_broken_the_other_way_pass(cfg, seed):
    """fp32 subnormal and flushed sigmoids (x < -88) tie in fp32 but not in float64: the other valid choice
    passes, its weights within the underflow allowance of the ideal, or held to the recipe where 0/0."""
    r = check.run_case(impl(_reversed_ties), Case("routing", cfg, "underflow", seed))
    assert r.status == "pass", r.message
    assert r.near_ties > 0


def test_underflow_allowance_is_absolute_and_small():
    cfg = UNDERFLOW[0][0]
    ids = np.array([[30]])
    logits = np.full((1, 31), -101.0, np.float32)
    term, degenerate = compare.underflow_term(cfg, {"logits": logits}, ids, None)
    assert not degenerate.any() and term.shape == (1, 1)
    assert 2.0**-150 < term[0, 0] < 2.0**-147  # a few halves of the subnormal spacing, nothing relative
    renorm = RoutingConfig("sigmoid_renorm", 1, 31, 2, renormalize=True)
    _, degenerate = compare.underflow_term(renorm, {"logits": logits - 10}, np.array([[0, 1]]), None)
    assert degenerate.all()  # σ(-111) ≈ 6e-49 < 2^-150: the fp32 denominator is 0


def test_wrong_weights_at_underflowing_near_ties_still_fail():
    def doubled(case, inputs):
        out = _reversed_ties(case, inputs)
        return {"ids": out["ids"], "weights": out["weights"] * np.float32(2)}

    cfg, seed = UNDERFLOW[0]
    r = check.run_case(impl(doubled), Case("routing", cfg, "underflow", seed))
    assert r.status == "fail" and "vs ideal at own ids" in r.message, r.message


def test_same_id_subnormal_weights_get_the_underflow_allowance_and_no_more():
    """torch-CUDA finding routing-torch-cuda-c8aaa583a44e: softmax weights ~1e-42 one subnormal spacing apart
    pass; eight spacings (beyond 2·underflow_term = 2·(2η₀ softmax + 2η₀ divide, rsf + η₀ write) = 5 spacings)
    still fail."""
    cfg = RoutingConfig("renormalize_naive", 1, 60, 3)
    logits = np.zeros((1, 60), np.float32)
    logits[0, :2], logits[0, 2] = 100.0, 100.0 - 96.0  # third weight exp(-96) ≈ 2e-42, subnormal
    case = Case("routing", cfg, "normal", 0)
    spec = SPEC.run(case, {"logits": logits})

    def nudged(spacings):
        w = spec["weights"].copy()
        w[0, 2] = np.float32(float(w[0, 2]) + spacings * 2.0**-149)
        return {"ids": spec["ids"], "weights": w}

    assert 1e-45 < spec["weights"][0, 2] < 2.0**-126
    assert compare.compare_routing(case, {"logits": logits}, nudged(1), None, "t").ok
    assert not compare.compare_routing(case, {"logits": logits}, nudged(8), None, "t").ok


def test_tanh_sigmoid_keys_and_weights_carry_the_tanh_approx_error():
    """Recipe sigmoid "tanh" (fused_topk_deepseek, tanh.approx.f32 ≤ R = bounds.TANH_APPROX_REL relative): δ and
    the weight bound carry η = R/2·|t| per sigmoid; the exact-sigmoid recipe does not; a weight 1e-3 off still
    fails."""
    from spec.bounds import TANH_APPROX_REL as R
    from spec.recipes import FUSED_TOPK_DEEPSEEK

    cfg = RoutingConfig("deepseek_v3", 4, 16, 2, 4, 2, 1.0, renormalize=True, eps=1e-20)
    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)
    _, _, delta, _ = compare.keys64(cfg, {"logits": x}, FUSED_TOPK_DEEPSEEK)
    _, _, delta_exact, _ = compare.keys64(cfg, {"logits": x}, None)
    assert (delta > R / 2 * np.tanh(0.5 * np.abs(x)).max(axis=1)).all() and (delta_exact < 1e-6).all()
    ids = np.argsort(-x, axis=1)[:, :2]
    w = compare.ideal_weights(cfg, {"logits": x}, ids)
    tanh_b = compare.weight_bound(cfg, FUSED_TOPK_DEEPSEEK, w, inputs={"logits": x}, ids=ids)
    exact_b = compare.weight_bound(cfg, None, w)
    assert (tanh_b > R).all() and (exact_b < R / 4).all() and (tanh_b < 4e-3).all()


def test_spec_vs_ideal_excludes_only_underflowing_rows():
    """The recipe-vs-ideal layer check skips rows built from subnormal scores (fixture
    moe-torch-cuda-c3f4958df23a) but still fails a spec whose normal rows are off."""
    case = Case("moe", MoEConfig(RoutingConfig("sigmoid_renorm", 3, 4, 2), 16, 16), "underflow", 0)
    inputs = generate_inputs(case)
    spec = impl_spec.layer(case, inputs, impl_spec.DEFAULT)
    assert all(v.ok for v in compare.recipe_vs_ideal(case, inputs, spec, impl_spec.DEFAULT))
    normal = Case("moe", MoEConfig(RoutingConfig("sigmoid_renorm", 3, 4, 2), 16, 16), "normal", 0)
    inputs = generate_inputs(normal)
    good = impl_spec.layer(normal, inputs, impl_spec.DEFAULT)
    bad = good._replace(out=good.out * np.float32(1.2))
    assert not compare.recipe_vs_ideal(normal, inputs, bad, impl_spec.DEFAULT)[0].ok


def test_spec_vs_ideal_does_not_hold_rows_whose_weights_the_recipe_leaves_open():
    """A tanh.approx sigmoid renormalized over scores whose sum is within k·η̄ of 0 has no finite weight bound
    (bounds.routing_weights: ∞): the H200 campaign of 2026-12-03 reported "the derived bound is inf" for the spec
    itself on such rows (trtllm-gen no-GEMM bf16, sigmoid_renorm, `large` logits, x ≈ -14.9). Those rows are not
    held to the ideal; a row with a finite bound still is (its output 20 % off fails)."""
    from spec.recipes import TRTLLM_GEN_NOGEMM_BF16 as recipe

    case = Case("moe", MoEConfig(RoutingConfig("sigmoid_renorm", 2, 1, 1, eps=1e-20), 16, 16, activation="relu2"),
                "normal", 0)
    inputs = dict(generate_inputs(case), logits=np.array([[-14.904198], [0.5]], np.float32))
    spec = impl_spec.layer(case, inputs, recipe)
    assert np.isinf(bounds.bound_vs_ideal(spec, recipe)[0]).all() and np.isfinite(spec.out[0]).all()
    assert np.isfinite(bounds.bound_vs_ideal(spec, recipe)[1]).all()
    assert all(v.ok for v in compare.recipe_vs_ideal(case, inputs, spec, recipe))
    off = spec._replace(out=spec.out * np.float32([[1.0], [1.2]]))
    assert not compare.recipe_vs_ideal(case, inputs, off, recipe)[0].ok


def test_moe_tokens_whose_weights_the_recipe_leaves_open_are_excluded_and_counted():
    """Such a token's output bound comes out of the bf16 write saturated (about 3.4e38): compared within it, any
    output passes and the token counts as compared. It is excluded and counted instead; the other token is still
    held (its output 20 % off fails). The case of the H200 no-GEMM campaign of 2026-12-03."""
    from spec.recipes import TRTLLM_GEN_NOGEMM_BF16 as recipe

    case = Case("moe", MoEConfig(RoutingConfig("sigmoid_renorm", 2, 1, 1, eps=1e-20), 16, 16, activation="relu2"),
                "normal", 0)
    inputs = dict(generate_inputs(case), logits=np.array([[-14.904198], [0.5]], np.float32))
    spec = impl_spec.layer(case, inputs, recipe)
    assert bounds.bound_vs_recipe(spec, recipe)[0][0].max() > 1e37  # the saturated bound, what the exclusion avoids
    assert compare.open_weights(case, inputs, spec, recipe).tolist() == [True, False]
    far = spec.out * np.float32([[10.0], [1.0]])
    v = compare.compare_moe(case, inputs, {"out": far}, recipe, "t")
    assert v.ok and v.excluded == 1, v
    off = spec.out * np.float32([[1.0], [1.2]])
    assert not compare.compare_moe(case, inputs, {"out": off}, recipe, "t").ok


def generate_inputs(case):
    from difftest.model import generate

    return generate.inputs(case)


def test_e4m3_nan_sign_is_free_but_other_bits_are_not():
    codes = np.array([0x7F, 0xFF, 0x7E, 0xFE, 0x00, 0x80], np.uint8)
    assert compare.nan_sign_free(codes).tolist() == [0x7F, 0x7F, 0x7E, 0xFE, 0x00, 0x80]


def test_softmax_weights_carry_the_rounded_exponent():
    """Fixtures routing-torch-90310c704275 / -eb818553aeb7 (session 3): x - max rounded to fp32 before exp (the spec)
    vs computed in float64 (torch) moves e^z by u·|z|; with z = -35 the weights differ by ~1.8e-6 relatively. The
    bound now carries u·(|z_i| + Σ p_j|z_j|): both sides pass, a weight ten times further off fails (ratio 2.1)."""
    cfg = RoutingConfig("renormalize_naive", 1, 3, 2, renormalize=False)
    logits = np.array([[-5968.6978, -22.987984, 12.141027]], np.float32)
    case = Case("routing", cfg, "large", 0)
    spec = SPEC.run(case, {"logits": logits})
    w = spec["weights"].copy()
    i = int(np.argmin(w[0]))
    exact = np.exp(np.float64(logits[0, 1]) - np.float64(logits[0, 2]))
    exact = exact / (1 + exact)
    for factor, ok in ((1.0, True), (10.0, False)):
        w2 = w.copy()
        w2[0, i] = np.float32(w[0, i] + factor * (exact - float(w[0, i])))
        out = {"ids": spec["ids"], "weights": w2}
        assert compare.compare_routing(case, {"logits": logits}, out, None, "t").ok is ok


def test_packed_scale_words_are_compared_as_integers_not_through_float32():
    """Two UE8M0 words one code apart in the low byte are the same float32 value (2^30 + 1 rounds to 2^30): the
    bit-exact check must still see them differ, and name the words in hex."""
    got, want = np.array([[0x7A7A7A7A]], np.int32), np.array([[0x7A7A7A7B]], np.int32)
    assert np.float32(got[0, 0]) == np.float32(want[0, 0])
    v = compare.verdict._bit_exact("scale_buffer as ue8m0_packed", got, want, "t")
    assert not v.ok and "0x7a7a7a7a but spec=0x7a7a7a7b" in v.message


@pytest.mark.parametrize("rule", ["routed_sum_over_rsf", "one"])
def test_shared_expert_weight_follows_the_declared_convention(rule):
    """Every selected sigmoid underflows ("underflow" logits): the fused shared expert weighs Σ(routed)/rsf = 0
    under "routed_sum_over_rsf" and exactly 1 under "one" (trtllm-gen). Each convention's output passes its own
    recipe and fails the other's; on ordinary logits both conventions give 1 to within rounding."""
    from spec import recipes

    cfg = RoutingConfig("deepseek_v3", 6, 16, 4, 4, 2, 2.5, eps=1e-20, bias_dtype="fp32", num_fused_shared_experts=1)
    case = Case("routing", cfg, "underflow", 3)
    inputs = generate.inputs(case)
    other_rule = "routed_sum_over_rsf" if rule == "one" else "one"
    mine, other = (recipes.TRTLLM_GEN_ROUTING.but(shared_weight=r) for r in (rule, other_rule))
    out = impl_spec.route(cfg, inputs, mine)
    shared = out.weights[:, -1]
    assert (shared == (1.0 if rule == "one" else 0.0)).any()
    got = {"ids": out.ids, "weights": out.weights}
    assert compare.COMPARE["routing"](case, inputs, got, mine, "t").ok
    v = compare.COMPARE["routing"](case, inputs, got, other, "t")
    assert not v.ok and "shared" in v.message
    normal = Case("routing", cfg, "normal", 3)
    w = impl_spec.route(cfg, generate.inputs(normal), mine).weights
    np.testing.assert_allclose(w[:, -1], 1.0, rtol=2.0**-7)


# ---- what a finding names (issue 34 item 5, issue 38 item 4): the failing outputs and checks, messages a kernel
# author reads, contract errors blamed on the implementation


def test_grouped_routing_failure_names_the_groups_their_scores_and_the_margin():
    """Experts of a group that the other groups beat far beyond 2δ: the message names the group kept and the
    group rejected with their scores and the margin (it read "(e.g. -inf selected, 2.0 not)")."""
    case = Case("routing", RoutingConfig("deepseek_v3", 1, 16, 2, 4, 1), "normal", 0)
    logits = np.full((1, 16), -5.0, np.float32)
    logits[0, 0], logits[0, 4:6] = 5.0, 2.0  # group 0: σ(5)+σ(-5) ≈ 1.0 < group 1: 2σ(2) ≈ 1.76

    def group_zero(case, inputs):
        return {"ids": np.array([[0, 1]], np.int32), "weights": SPEC.run(case, inputs)["weights"]}

    r = check.run_case(impl(group_zero), case, {"logits": logits})
    g0, g1 = 1 / (1 + np.exp(-5.0)) + 1 / (1 + np.exp(5.0)), 2 / (1 + np.exp(-2.0))
    assert r.status == "fail" and r.failures == (("ids", "groups"),), r
    assert (f"ids use groups [0 ({g0:.9g})], the best 1 are [1 ({g1:.9g})]: group 1 (score {g1:.9g}) rejected "
            f"while group 0 (score {g0:.9g}) kept: margin {g1 - g0:.3g} > 2δ=") in r.message, r.message
    assert "-inf" not in r.message


def test_a_rejected_expert_is_named_with_both_keys_and_the_margin():
    def worse(case, inputs):
        out = SPEC.run(case, inputs)
        ids = out["ids"].copy()
        ids[0, -1] = np.argmin(inputs["logits"][0])
        return {"ids": ids, "weights": out["weights"]}

    case = Case("routing", RoutingConfig("topk", 4, 16, 4), "normal", 1)
    x = generate.inputs(case)["logits"][0].astype(np.float64)
    lost = int(np.argsort(-x, kind="stable")[3])
    r = check.run_case(impl(worse), case)
    assert r.status == "fail" and r.failures == (("ids", "mismatch"),)
    assert (f"expert {lost} (key {x[lost]:.9g}) rejected while expert {np.argmin(x)} (key {x.min():.9g}) selected: "
            f"margin {x[lost] - x.min():.3g} > 2δ=") in r.message, r.message


@pytest.mark.parametrize("config, shown", [
    (QuantConfig("fp8_group", 2, 256), "0x3d800000 (0.0625 = 2^-4)"),
    (QuantConfig("mxfp8", 2, 64), "0x7b (2^-4)"),
    (QuantConfig("fp8_group", 2, 256, scale_fmt="ue8m0", layout="ue8m0_packed"),
     "0x7a7b (bytes 2^-4, 2^-5, 2^-127, 2^-127) but spec=0x7a7a (bytes 2^-5,"),
])
def test_a_scale_finding_shows_the_scales_as_numbers(config, shown):
    """Wrong scales are shown as the numbers they stand for beside their bits (fp32, e8m0, packed UE8M0 bytes)."""
    case = Case("quant", config, "normal", 1)

    def first_scale(case, inputs):  # the first scale 2^-4; packed: its byte in the buffer alone
        out = SPEC.run(case, inputs)
        s, buf = out["scales"].copy(), out["scale_buffer"].copy()
        if config.layout == "ue8m0_packed":
            buf[0] = 0x7B
            return {**out, "scale_buffer": buf}
        s.flat[0] = 0x7B if s.dtype == np.uint8 else 2.0**-4
        buf[:s.itemsize] = s.ravel()[:1].view(np.uint8)
        return {**out, "scales": s, "scale_buffer": buf}

    r = check.run_case(impl(first_scale), case)
    assert r.status == "fail" and shown in r.message, r.message
    assert r.failures[0][0] in ("scales", "scale_buffer") and "spec=0x" in r.message


def _without(name):
    def run(case, inputs):
        return {k: v for k, v in SPEC.run(case, inputs).items() if k != name}
    return run


def _as(name, dtype=None, shape=None):
    def run(case, inputs):
        out = SPEC.run(case, inputs)
        a = out[name].astype(dtype) if dtype else out[name]
        return {**out, name: a if shape is None else a[tuple(slice(n) for n in shape)]}
    return run


MOE = Case("moe", MoEConfig(DS, 64, 32), "normal", 2)
ACT = Case("trtllm_ops", DevKernelConfig("activation_deepseek_fp8", 4, 128, 2, 4, dtype="e4m3"), "normal", 3)
QUANT = Case("quant", QuantConfig("mxfp8", 2, 64), "normal", 1)


@pytest.mark.parametrize("case, run, failure, words", [
    (Case("routing", DS, "normal", 1), _without("weights"), ("weights", "missing"),
     "returned no weights (outputs ['ids']); the contract is float32 [T, k + S] = [8, 4] (docs/plugins.md)"),
    (Case("routing", DS, "normal", 1), _as("ids", np.float64), ("ids", "dtype"),
     "returned ids float64; the contract is int32 [T, k + S] = [8, 4] (docs/plugins.md)"),
    (Case("routing", DS, "normal", 1), _as("weights", np.float16), ("weights", "dtype"),
     "returned weights float16; the contract is float32 [T, k + S] = [8, 4] (docs/plugins.md)"),
    (Case("routing", DS, "normal", 1), _as("ids", shape=(8, 3)), ("ids", "shape"),
     "returned ids of shape [8, 3]; the contract is int32 [T, k + S] = [8, 4] (docs/plugins.md)"),
    (MOE, _without("out"), ("out", "missing"), "returned no out (outputs ['ids']); the contract is float32 [T, H]"),
    (MOE, _as("ids", np.float32), ("ids", "dtype"), "returned ids float32; the contract is int32 [T, k] = [8, 4], if"),
    (QUANT, _as("scales", np.float32), ("scales", "dtype"), "returned scales float32; the contract is uint8 codes"),
    # a dev kernel: the spec's outputs by name; a wrong shape once broke the arithmetic (blamed on difftest)
    (ACT, _as("out", shape=(3, 128)), ("out", "shape"), "returned out of shape [3, 128]; the contract is uint8 codes "
                                                        "[24, 128] (docs/plugins.md)"),
    (ACT, _as("out", np.float16), ("out", "dtype"), "returned out float16; the contract is uint8 codes [24, 128]"),
    (ACT, _without("out_scale"), ("out_scale", "missing"), "returned no out_scale (outputs ['out']); the contract "
                                                           "is float32 [1, 24]"),
])
def test_contract_errors_are_the_implementations_with_the_contract_stated(case, run, failure, words):
    """A missing output, a wrong dtype (float64 ids, fp16 weights) or shape is the implementation's finding,
    stated with the contract it breaks; not "comparison raised KeyError (spec or difftest)", not a 36x mismatch."""
    r = check.run_case(impl(run, ops=(case.op,)), case)
    assert r.status == "fail" and r.failures == (failure,), r
    who = "the implementation" if case.op == "trtllm_ops" else "test-impl"  # compare_trtllm_ops: the tag names it
    assert r.message.startswith(f"{who} {words}"), r.message
    assert "spec or difftest" not in r.message


def test_every_failing_output_is_listed_first_in_output_order():
    """A zero scale and the NaN it made (the dev kernels' finalize on a zero block): both outputs are named,
    the scale first (compare.OUTPUT_ORDER), and the message is the scale's."""
    from difftest.store import fixtures

    fx = fixtures.load(Path(__file__).resolve().parents[3] / "fixtures"
                       / "flashinfer-trtllm_gen_dev_ops-finalize_deepseek_fp8_zero_block")
    want = impl_spec.expected(fx.case, fx.inputs, None)
    nan_out = {**want, "out": np.full_like(want["out"], np.nan)}
    both = {**nan_out, "out_scale": np.zeros_like(want["out_scale"])}
    v = check.compared(fx.case, fx.inputs, both, None, "t")
    assert v.failures == (compare.Failure("out_scale", "bound"), compare.Failure("out", "nan"))
    assert v.message.startswith("out_scale[0, 0]=0 outside")
    v = check.compared(fx.case, fx.inputs, nan_out, None, "t")  # the scale right, the codes NaN
    assert v.failures == (compare.Failure("out", "nan"),) and v.message.startswith("out (bf16 value)[0, 0]=nan")
    assert check.compared(fx.case, fx.inputs, want, None, "t").ok


def _fused_gate_case(shared_nan_row):
    """SGLang's moe_fused_gate (bf16) on the H200 (fixture routing-sglang.moe_fused_gate_bf16-ffe3dc67a210, row 18):
    logits [-88.5, -4928, -1336, -1056], top-1 plus one fused shared expert, eps 0. σ(-88.5) ≈ 3.6e-39 is an fp32
    subnormal, flushed to 0 by the fast-math sigmoid, so output_sum = 0 and the kernel's rescale divides every slot,
    the shared one (output_sum / rsf = 0) included, by 0: NaN in both. Row 1 is an ordinary token."""
    from spec.recipes import SGLANG_MOE_FUSED_GATE_BF16 as recipe

    cfg = RoutingConfig("deepseek_v3", 2, 4, 1, logits_dtype="bf16", num_fused_shared_experts=1)
    logits = np.array([[-88.5, -4928.0, -1336.0, -1056.0], [1.0, -2.0, 0.5, 0.0]], np.float32)
    inputs = {"logits": logits}
    spec = impl_spec.route(cfg, inputs, recipe)
    w = spec.weights.astype(np.float32).copy()
    w[0] = np.nan  # the kernel's row 0: routed 0·rcp(0) and shared 0/0
    if shared_nan_row is not None:
        w[shared_nan_row, -1] = np.nan
    out = {"ids": spec.ids.astype(np.int32), "weights": w}
    return compare.compare_routing(Case("routing", cfg, "large", 0), inputs, out, recipe, "t")


def test_shared_weight_nan_accepted_only_where_every_routed_score_flushes():
    assert _fused_gate_case(None).ok  # row 0: the recipe's FTZ 0/0, routed and shared alike
    v = _fused_gate_case(1)  # a NaN shared weight where the routed score is normal is still a failure
    assert not v.ok and "weights[:, shared][1, 0]=nan" in v.message, v.message


def test_constant_shared_weight_never_nan():
    """shared_weight "one" (trtllm-gen, DeepSeek-V3): no division reaches the shared slot, so a NaN there fails
    even on a row whose routed scores all flush."""
    from spec.recipes import SGLANG_MOE_FUSED_GATE_BF16

    recipe = SGLANG_MOE_FUSED_GATE_BF16.but(name="one", shared_weight="one")
    cfg = RoutingConfig("deepseek_v3", 1, 4, 1, logits_dtype="bf16", num_fused_shared_experts=1)
    inputs = {"logits": np.array([[-88.5, -4928.0, -1336.0, -1056.0]], np.float32)}
    spec = impl_spec.route(cfg, inputs, recipe)
    w = np.full(spec.weights.shape, np.nan, np.float32)
    v = compare.compare_routing(Case("routing", cfg, "large", 0), inputs, {"ids": spec.ids.astype(np.int32),
                                "weights": w}, recipe, "t")
    assert not v.ok and "shared" in v.message, v.message
