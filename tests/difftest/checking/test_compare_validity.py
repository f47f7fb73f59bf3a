"""The comparator's tie-aware validity (difftest/checking/compare/validity.py docstring) against brute force.

Definition: ids are valid iff they are a top-k of the keys under some resolution of keys within 2δ of each other,
groups included. Brute force here: every set of topk_group groups and every set of top_k experts on E <= 8,
checked pair by pair in plain Python; compare.check_ids must accept exactly the valid ones, every method, both
deepseek_v2 mask values, exact and near ties, underflowing scores. Also: the spec's own ids and the spec's ids
under a relabelling of groups and experts (another tie order) are valid, and a robust token has one valid set.
"""

import itertools
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from difftest.checking import compare, impl_spec
from difftest.model.case import BIASED_METHODS, GROUPED_METHODS, ROUTING_METHODS, RoutingConfig
from spec.recipes import GROUP_SCORES, Recipe

PALETTE = (-1000.0, -200.0, -120.0, -3.0, -1.0, 0.0, 0.5, 1.0, 2.0, 30.0)  # repeats give exact ties
# added to a palette value: near ties below and above 2δ
NEAR = (0.0, 0.0, 1e-9, 3e-8, 1e-7, 2e-7, 4e-7, 8e-7, 2e-6, 1e-3)
BIASES = (0.0, -0.1, 0.1, 1e-8, -2.0)


def beats(a, b, tol):
    """a beats b beyond tol: NaN loses to every number; equal values (infinities too) tie."""
    if math.isnan(a):
        return False
    return math.isnan(b) or (a > b and a - b > tol)


def no_outsider_beats(values, chosen, tol):
    return not any(beats(values[j], values[i], tol) for i in chosen for j in range(len(values)) if j not in chosen)


def brute_force_valid(config, keys, gkeys, delta, gdelta):
    """Every valid id set (frozensets) of one token by enumeration."""
    E, G, tg, k = config.num_experts, config.n_group, config.topk_group, config.top_k
    per = E // G
    masked_value = config.group_mask_value if config.method == "deepseek_v2" else -math.inf
    group_sets = ([None] if gkeys is None else
                  [set(K) for K in itertools.combinations(range(G), tg)
                   if no_outsider_beats(list(gkeys), set(K), 2 * gdelta)])
    valid = set()
    for K in group_sets:
        masked = [float(v) if K is None or e // per in K else masked_value for e, v in enumerate(keys)]
        for S in itertools.combinations(range(E), k):
            if no_outsider_beats(masked, set(S), 2 * delta):
                valid.add(frozenset(S))
    return valid


@st.composite
def routing_problems(draw):
    method = draw(st.sampled_from(ROUTING_METHODS), label="method")
    grouped = method in GROUPED_METHODS
    G = draw(st.sampled_from((1, 2, 4)), label="n_group") if grouped else 1
    per = draw(st.integers(1, 8 // G), label="experts_per_group")
    E = G * per
    tg = draw(st.integers(1, G), label="topk_group")
    k = 1 if method == "llama4" else draw(st.integers(1, tg * per), label="top_k")
    config = RoutingConfig(method=method, num_tokens=1, num_experts=E, top_k=k, n_group=G, topk_group=tg,
                           bias_dtype=draw(st.sampled_from((None, "fp32")), label="bias_dtype")
                           if method in BIASED_METHODS else None,
                           group_mask_value=draw(st.sampled_from((0.0, -np.inf)), label="group_mask_value")
                           if method == "deepseek_v2" else -np.inf)
    values = [draw(st.sampled_from(PALETTE)) + draw(st.sampled_from(NEAR)) for _ in range(E)]
    inputs = {"logits": np.array([values], np.float32)}
    if config.bias_dtype:
        inputs["bias"] = np.array([draw(st.sampled_from(BIASES)) for _ in range(E)], np.float32)
    rule = draw(st.sampled_from(GROUP_SCORES), label="group_score")
    return config, inputs, Recipe(name="validity", group_score=rule)


def _accepted(config, inputs, recipe, spec, S):
    ids = np.array([sorted(S)], np.int64)
    v, _, _ = compare.check_ids(config, inputs, ids, recipe, "validity", spec=spec)
    return v.ok


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=routing_problems())
def test_check_ids_accepts_exactly_the_brute_force_valid_sets(problem):
    config, inputs, recipe = problem
    spec = impl_spec.route(config, inputs, recipe)
    keys, gkeys, delta, gdelta = compare.keys64(config, inputs, recipe)
    valid = brute_force_valid(config, keys[0], None if gkeys is None else gkeys[0], delta[0], gdelta[0])
    own = frozenset(spec.ids[0, :config.top_k].tolist())
    assert own in valid, f"the spec's own ids {sorted(own)} are not valid"
    for S in itertools.combinations(range(config.num_experts), config.top_k):
        got = _accepted(config, inputs, recipe, spec, S)
        assert got == (frozenset(S) in valid), f"check_ids {'accepts' if got else 'rejects'} {list(S)}"
    if compare.robust(spec, delta, gdelta)[0]:
        assert valid == {own}, f"robust token with {len(valid)} valid sets"


@settings(max_examples=150, deadline=None)
@given(problem=routing_problems(), data=st.data())
def test_spec_ids_under_another_tie_order_are_accepted(problem, data):
    """Relabel groups and the experts inside each group (the spec breaks ties by index, so this is another
    resolution of the same ties); the spec's ids on the relabelled input, mapped back, must be accepted."""
    config, inputs, recipe = problem
    E, G = config.num_experts, config.n_group
    per = E // G
    groups = data.draw(st.permutations(range(G)), label="group_order")
    within = [data.draw(st.permutations(range(per)), label="expert_order") for _ in range(G)]
    order = np.array([g * per + within[i][j] for i, g in enumerate(groups) for j in range(per)])
    relabelled = {name: a[..., order] for name, a in inputs.items()}
    ids = order[impl_spec.route(config, relabelled, recipe).ids[:, :config.top_k]]
    v, _, _ = compare.check_ids(config, inputs, ids, recipe, "validity")
    assert v.ok, v.message


def test_validity_can_reject():
    """Not vacuous: a selection that leaves out a clearly larger key, or takes a clearly worse group, fails."""
    config = RoutingConfig(method="deepseek_v3", num_tokens=1, num_experts=4, top_k=1, n_group=2, topk_group=1)
    inputs = {"logits": np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)}
    recipe = Recipe(name="validity")
    spec = impl_spec.route(config, inputs, recipe)
    assert [S for S in range(4) if _accepted(config, inputs, recipe, spec, (S,))] == [3]


# ---- the declared tie rule (Recipe.tie_rule) against a model of every correct implementation of it


def model_selection(config, inputs, keys, delta, shifts, rule):
    """One correct implementation of `rule`: keys moved by shifts·δ per class of bit-identical inputs (so equal
    inputs keep equal keys), group scores the exact top-2 sum (or max) of those keys, groups then experts
    selected by (key desc, index by the rule). -> frozenset of ids."""
    E, G, tg, k = config.num_experts, config.n_group, config.topk_group, config.top_k
    per = E // G
    bits = inputs["logits"][0].view(np.uint32).tolist()
    bias = inputs["bias"].view(np.uint32).tolist() if "bias" in inputs else [0] * E
    classes = {c: n for n, c in enumerate(sorted(set(zip(bits, bias, strict=True))))}
    moved = [float(keys[e]) + shifts[classes[(bits[e], bias[e])] % len(shifts)] * delta for e in range(E)]
    order = (lambda i: i) if rule == "lower_index" else (lambda i: -i)
    masked = moved
    if G > 1:
        top2 = config.method == "deepseek_v3" and per > 1  # the recipe's group_score "method"
        scores = [sum(sorted(moved[g * per:(g + 1) * per], reverse=True)[:2 if top2 else 1]) for g in range(G)]
        kept = sorted(range(G), key=lambda g: (-scores[g], order(g)))[:tg]
        masked = [v if e // per in kept else (config.group_mask_value if config.method == "deepseek_v2" else -math.inf)
                  for e, v in enumerate(moved)]
    return frozenset(sorted(range(E), key=lambda e: (-masked[e], order(e)))[:k])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=routing_problems(), shifts=st.lists(st.sampled_from((-1.0, -0.5, 0.0, 0.5, 1.0)), min_size=8,
                                                     max_size=8), rule=st.sampled_from(("lower_index", "higher_index")))
def test_a_declared_tie_rule_accepts_every_correct_implementation_of_it(problem, shifts, rule):
    """No false positive: whatever a correct implementation of the declared rule selects (its keys within δ of the
    float64 ones, bit-identical inputs giving bit-identical keys) passes check_ids with that rule."""
    config, inputs, recipe = problem
    recipe = recipe.but(group_score="method")
    keys, _, delta, _ = compare.keys64(config, inputs, recipe)
    S = model_selection(config, inputs, keys[0], delta[0], shifts, rule)
    ids = np.array([sorted(S)], np.int64)
    v, _, _ = compare.check_ids(config, inputs, ids, recipe.but(tie_rule=rule), "tie rule")
    assert v.ok, v.message


def test_a_declared_tie_rule_rejects_the_other_order():
    """Bit-identical experts, and bit-identical groups, taken in the order the recipe does not declare."""
    sigmoid = RoutingConfig(method="sigmoid", num_tokens=1, num_experts=4, top_k=1)
    x = {"logits": np.array([[1.0, 0.0, 1.0, 0.0]], np.float32)}
    grouped = RoutingConfig(method="deepseek_v3", num_tokens=1, num_experts=4, top_k=1, n_group=2, topk_group=1)
    for config, first, second in ((sigmoid, 0, 2), (grouped, 0, 2)):  # grouped: groups {0, 1} and {2, 3} tie
        lower, higher = Recipe(name="t", tie_rule="lower_index"), Recipe(name="t", tie_rule="higher_index")
        assert compare.check_ids(config, x, np.array([[first]]), lower, "t")[0].ok
        v, _, _ = compare.check_ids(config, x, np.array([[second]]), lower, "t")
        assert not v.ok and "bit-identical" in v.message and ("groups" in v.message) == (config is grouped), v.message
        assert compare.check_ids(config, x, np.array([[second]]), higher, "t")[0].ok
        assert not compare.check_ids(config, x, np.array([[first]]), higher, "t")[0].ok
        assert compare.check_ids(config, x, np.array([[second]]), Recipe(name="t"), "t")[0].ok  # unspecified


def test_keys_that_merely_round_equal_are_no_declared_tie():
    """Logits 0 and −300 / −200 give fp32 softmax keys 1, 0, 0 (kernels ranking by logit pick expert 2): not
    bit-identical inputs, so the rule does not apply to them (tests/spec/test_reference_semantics.py)."""
    config = RoutingConfig(method="renormalize_naive", num_tokens=1, num_experts=3, top_k=2)
    x = {"logits": np.array([[0.0, -300.0, -200.0]], np.float32)}
    v, _, _ = compare.check_ids(config, x, np.array([[0, 2]]), Recipe(name="t", tie_rule="lower_index"), "t")
    assert v.ok, v.message
