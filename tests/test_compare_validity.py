"""The comparator's tie-aware validity (difftest/compare.py module docstring) against brute force.

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

from difftest import compare, impl_spec
from difftest.case import BIASED_METHODS, GROUPED_METHODS, ROUTING_METHODS, RoutingConfig
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
