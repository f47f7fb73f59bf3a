"""The moe layer: its output against the recipe-exact spec layer within the hard bound, at the implementation's own
ids where it exposes them; the spec's own recipe-vs-ideal check; the bias test's per-token signs."""

from dataclasses import replace

import numpy as np

from spec import bounds
from spec.recipes import DEFAULT

from .. import bias, impl_spec
from .keys import ideal_weights, keys64, robust, underflow_term, ungrouped, weight_bound
from .routing import check_ids, compare_routing
from .verdict import PASS, SPEC_FIELD, elementwise, failed, worst


def compare_moe(case, inputs, out, recipe, tag):
    """Layer output element-wise against the recipe-exact spec with the spec's hard bound; with exposed ids
    the spec recomputes with the implementation's ids (after checking them, the declared tie rule included; the
    tokens decided as near ties are counted in the verdict), else tokens whose routing is not robust are excluded
    and counted; so are tokens whose router weights the recipe leaves open (open_weights). Also the recipe-vs-ideal
    check of the spec result itself."""
    c = case.config
    T, H, k = c.routing.num_tokens, c.hidden_size, c.routing.top_k
    got = np.asarray(out["out"])
    if got.shape != (T, H):
        return failed("out", "shape", f"out has shape {got.shape} but expected ({T}, {H}) [{tag}]")
    used = recipe or DEFAULT
    keep = np.ones(T, bool)
    ids, near_ties = out.get("ids"), 0
    if ids is not None:
        rule = recipe.tie_rule if recipe is not None else "unspecified"
        v, _, _ = check_ids(c.routing, inputs, np.asarray(ids), used, tag, tie_rule=rule)
        if not v.ok:
            return v
        near_ties = v.near_ties
        spec = layer_at(case, inputs, used, np.asarray(ids)[:, :k])
    else:
        spec = impl_spec.layer(case, inputs, used)
        _, _, delta, gdelta = keys64(c.routing, inputs, used)
        keep = robust(spec, delta, gdelta)
    keep = keep & ~open_weights(case, inputs, spec, used)
    hard, _ = bounds.bound_vs_recipe(spec, used)
    if recipe is None:
        hard = hard + bounds.bound_vs_ideal(spec, used)
    rows = keep[:, None]
    v = elementwise("out", np.where(rows, got, 0), np.where(rows, spec.out, 0), np.where(rows, hard, 0), tag)
    v_ideal = recipe_vs_ideal(case, inputs, spec, used)
    v_weights = PASS
    if ids is not None and "weights" in out:  # exposed router weights: as the routing op's, at the same ids
        v_weights = compare_routing(replace(case, op="routing", config=moe_routing(c), weight_seed=None), inputs,
                                    {"ids": ids, "weights": out["weights"]}, recipe, tag)
    v_bias, pairs = PASS, ()
    given = out.get("weights") if ids is not None and v_weights.ok else None
    if bias.not_applicable(recipe, c, given is not None) is None:  # a correct implementation's errors are symmetric
        reference = spec
        if bias.approximate_scores(recipe, c.routing.method):  # d_t given the implementation's router weights
            reference = weighted_at(case, inputs, recipe, np.asarray(ids)[:, :k], np.asarray(given)[:, :k], spec)
        d = bias.token_signs(got, reference.out, keep)
        pairs = tuple((int(t), int(d[t])) for t in np.flatnonzero(d))
        e = bias.case_evidence(d)
        v_bias = failed("out", "bias", f"{e.describe()} [{tag}]", v.ratio) if e.rejects() else PASS
    return worst(v, *v_ideal, v_weights, v_bias)._replace(
        excluded=int((~keep).sum()), near_ties=near_ties, bias=pairs
    )


def open_weights(case, inputs, spec, recipe):
    """[T] tokens whose router weights the recipe leaves open: their bound is +inf (bounds.routing_weights: a
    tanh.approx sigmoid renormalized over a score sum within k·η̄ of 0, where the computed scores may sum to 0 or
    below). The layer's output bound on such a token comes out of the output's bf16 write saturated, about 3.4e38,
    and would compare nothing while counting as compared; the token is excluded and counted instead, as
    bounded_rows does for the routing op's weights."""
    c = moe_routing(case.config)
    k = c.top_k
    ids = spec.ids[:, :k].astype(np.int64)
    return np.isposinf(weight_bound(c, recipe, spec.weights[:, :k], inputs=inputs, ids=ids)).any(axis=1)


def moe_routing(c):
    """The RoutingConfig of a moe case's router weights as the layer returns them (rsf left out when the combine
    applies it)."""
    return c.routing if c.rsf_placement == "routing" else replace(c.routing, routed_scaling_factor=None)


def recipe_vs_ideal(case, inputs, spec, recipe):
    """The spec's own recipe-exact layer vs the float64 ideal at the same ids, within bounds.bound_vs_ideal.

    That bound carries the router weights' relative error (bounds.routing_weights). Rows where fp32 routing
    leaves the relative model are not held to it: rows whose fp32 routing degenerates (every selected score
    underflows: 0/0 = NaN, 0/eps = 0, or underflow_term's denominator may vanish), and rows where a weight's
    absolute underflow allowance (underflow_term: subnormal scores, flushed expf sigmoids) exceeds its relative
    ideal bound; a relative 2^-24 model would there claim e.g. 1e-40 for a renormalized weight built from
    subnormal scores that fp32 holds to one bit. Those rows' weights are checked instead against the float64
    ideal weights within the relative bound plus underflow_term (degenerate rows: not at all — implementations
    are held to the recipe there, the recipe is not); the layer check keeps every other row. Rows whose weight
    bound is infinite count as degenerate: the recipe's own weights are not determined there (tanh.approx
    sigmoids renormalized over a score sum within k·η̄ of 0, bounds.routing_weights)."""
    c, k = case.config.routing, case.config.routing.top_k
    if case.config.rsf_placement == "combine":  # spec.weights then exclude rsf (applied at the combine)
        c = replace(c, routed_scaling_factor=None)
    tag = f"{case.op}, spec {recipe.name} vs ideal"
    ids = spec.ids[:, :k].astype(np.int64)
    want_w = ideal_weights(c, inputs, ids)
    absolute, degenerate = underflow_term(c, inputs, ids, recipe)
    rel = weight_bound(c, recipe, want_w, True, inputs, ids)
    finite = np.isfinite(spec.weights).all(axis=1) & (spec.weights != 0).any(axis=1)
    # rows whose weights no finite bound holds (a tanh.approx sigmoid renormalized over scores whose sum is within
    # k·η̄ of 0: bounds.routing_weights gives ∞): the recipe does not determine them, so they are not held either
    degenerate = degenerate | ~np.isfinite(rel).all(axis=1)
    underflowing = degenerate | ~finite | (absolute > rel).any(axis=1)
    sane = (~underflowing)[:, None]
    ideal = layer_at(case, inputs, None, ids)
    bound_ideal = bounds.bound_vs_ideal(spec, recipe)
    v_out = elementwise("spec out (recipe) vs ideal", np.where(sane, spec.out, 0),
                        np.where(sane, ideal.out, 0), np.where(sane, bound_ideal, 0), tag, SPEC_FIELD)
    held = (underflowing & ~degenerate & finite)[:, None]
    v_w = elementwise("spec weights (underflow rows) vs ideal", np.where(held, spec.weights[:, :k], 0),
                      np.where(held, want_w, 0), np.where(held, rel + absolute, 0), tag, SPEC_FIELD)
    return v_out, v_w


def weighted_at(case, inputs, recipe, ids, weights, spec):
    """The spec layer at the implementation's `ids` and router `weights` [T, k] (difftest/checking/bias.py, What H0
    needs); `spec` (the layer at those ids) where its weights are the same."""
    weights = np.asarray(weights, np.float32)
    if np.array_equal(spec.ids[:, :ids.shape[1]], ids) and np.array_equal(spec.weights[:, :ids.shape[1]], weights):
        return spec
    return _forced_layer(case, inputs, recipe, ids, router_weights=weights)


def layer_at(case, inputs, recipe, ids):
    """The spec layer with the routed ids forced to `ids` [T, k]; the spec's own selection when it is the same
    set for every token (the common case, and one routing pass fewer)."""
    own = impl_spec.layer(case, inputs, recipe)
    k = ids.shape[1]
    if (np.sort(own.ids[:, :k], axis=1) == np.sort(ids, axis=1)).all():
        return own
    return _forced_layer(case, inputs, recipe, ids)


def _forced_layer(case, inputs, recipe, ids, router_weights=None):
    """The spec layer recomputed at forced `ids` (and `router_weights`), its routing ungrouped (ungrouped says why)."""
    forced = replace(case, config=replace(case.config, routing=ungrouped(case.config.routing)))
    return impl_spec.layer(forced, inputs, recipe, ids=ids, router_weights=router_weights)
