"""Routing: the float64 ideal (spec.routing) and its error analysis (spec.bounds), what the validity rule
(validity.py) and the router weights' bounds are made of.

δ, the uncertainty of one routing key, follows from the recipe: keys are computed in fp32 from exactly given logits
(and the bias rounded as ``recipe.bias`` says); spec.bounds.routing_key_delta gives the formula per key class,
routing_group_delta the group scores' (a top-2 sum 2δ + u·|g|, a max δ). The float64 keys, scores and weights they
bound are spec.routing's ideal evaluation (ideal_keys, ideal_scores, route(ideal=True, ids=...))."""

from dataclasses import replace

import numpy as np

from spec import bounds
from spec import routing as spec_routing
from spec.numerics import FP32, round_to
from spec.recipes import DEFAULT

SOFTMAX_KEYS = spec_routing.SOFTMAX_METHODS  # key classes: spec.routing.METHODS
SIGMOID_KEYS = spec_routing.SIGMOID_METHODS
RAW_KEYS = spec_routing.RAW_KEY_METHODS


def group_rule(config, recipe, biased):
    """"top2_sum" or "max": the recipe's group_score resolved for this config (spec.routing.group_rule)."""
    return spec_routing.group_rule(config.method, (recipe or DEFAULT).group_score, biased)


def _bias_as_read(inputs, recipe):
    """The correction bias as the recipe reads it (rounded to recipe.bias), float64; None without one."""
    if "bias" not in inputs:
        return None
    b = inputs["bias"].astype(np.float64)
    return b if recipe.bias == "fp32" else round_to(b, recipe.bias).astype(np.float64)


def keys64(config, inputs, recipe):
    """(keys [T, E], group scores [T, G] or None, δ [T], group δ [T]): the float64 keys the method selects on
    (spec.routing.ideal_keys) and their uncertainties (spec.bounds.routing_key_delta, routing_group_delta)."""
    used = recipe or DEFAULT
    method, G, x = config.method, config.n_group, inputs["logits"]
    if method not in spec_routing.METHODS:
        raise ValueError(f"routing method {method!r} has no key class in spec.routing.METHODS")
    b = _bias_as_read(inputs, used) if method in SIGMOID_KEYS else None
    rule = group_rule(config, recipe, "bias" in inputs)
    keys, gkeys = spec_routing.ideal_keys(x, b, method=method, n_group=G, group_score=rule)
    key_class = spec_routing.METHODS[method].keys
    scores = keys if b is None else spec_routing.ideal_keys(x, method=method)[0]
    delta = bounds.routing_key_delta(x, scores, key_class, used, None if b is None else keys)
    if G == 1:
        return keys, None, delta, np.zeros(len(keys))
    summed = rule == "top2_sum" and config.num_experts // G > 1
    return keys, gkeys, delta, bounds.routing_group_delta(gkeys, delta, summed, used)


def robust(spec, delta, gdelta):
    """Tokens whose every valid selection is the spec's: the spec's fp32 keys are within δ of the float64 keys,
    so an fp32 margin above 4δ is a float64 margin above 2δ, which no other selection is within (same for
    groups)."""
    return (spec.expert_margin > 4 * delta) & (spec.group_margin > 4 * gdelta)


def _ideal_scores(config, inputs, ids):
    """(s [T, k] float64 scores at the routed ids before any renormalization or rsf, renormalizes?)."""
    s = spec_routing.ideal_scores(inputs["logits"], method=config.method, ids=ids)
    return s, spec_routing.renormalizes(config.method, config.renormalize)


# The fp32 min normal, widened by the fast-math scores' relative error near it (2^fl(t) with |t| < 150 rounded
# to 2^-17: 2^-17·ln 2 ≈ 5.3e-6, plus MUFU.EX2/RCP's few ulp): the ideal score may sit that far on the other side.
FTZ_EDGE = FP32.min_normal * (1 + 2.0**-16)


def flushed_to_nan(config, inputs, ids, recipe):
    """[T] rows whose renormalized weights may be NaN under recipe.subnormals "flush": every selected score is
    below the fp32 min normal, so FTZ may store each as 0 (fast-math σ = MUFU.RCP(1 + 2^t) flushes its subnormal
    result: logits in (-88.7, -87.3]) and, with eps = 0, w = 0·rcp(0) = NaN (measured on the H200: SGLang's
    moe_fused_gate, docs/device-results.md "SGLang kernels")."""
    if (recipe or DEFAULT).subnormals != "flush" or config.eps != 0.0:
        return np.zeros(ids.shape[0], bool)
    s, renorm = _ideal_scores(config, inputs, ids)
    return renorm & (s < FTZ_EDGE).all(axis=-1)


def shared_flushed(config, inputs, ids, recipe):
    """[T] rows whose fused shared-expert weight may be 0 under recipe.subnormals "flush": its value before the
    renormalizing division, Σ(selected scores)/rsf, is below the fp32 min normal, so FTZ may store it as 0 and
    0/Σ·rsf = 0 (measured on the H200: SGLang's moe_fused_gate, as flushed_to_nan). None where the recipe's
    shared weight is the constant 1 (shared_weight "one"). Where Σ itself may be 0 (flushed_to_nan's rows) the
    shared slot's 0/Σ is NaN like the routed ones (moe_fused_gate.cu divides every slot by output_sum)."""
    r = recipe or DEFAULT
    if r.subnormals != "flush" or r.shared_weight == "one":
        return np.zeros(ids.shape[0], bool)
    s, _ = _ideal_scores(config, inputs, ids)
    rsf = 1.0 if config.routed_scaling_factor is None else config.routed_scaling_factor
    return s.sum(axis=-1) / rsf < FTZ_EDGE


def ideal_weights(config, inputs, ids):
    """float64 weights of the routed ids [T, k]: spec.routing.route(..., ideal=True, ids=ids), ungrouped (the
    method's formula at valid ids gathers unmasked scores)."""
    c = ungrouped(config)
    return spec_routing.route(inputs["logits"], inputs.get("bias"), **c.route_kwargs(), ideal=True,
                              ids=ids).weights[:, :ids.shape[1]]


def underflow_term(config, inputs, ids, recipe):
    """(absolute allowance [T, k], degenerate [T]) of fp32 routing weights vs the float64 ideal below the fp32
    min normal: spec.bounds.routing_underflow at the ideal scores of `ids`."""
    s, renorm = _ideal_scores(config, inputs, ids)
    rsf = 1.0 if config.routed_scaling_factor is None else config.routed_scaling_factor
    return bounds.routing_underflow(s, spec_routing.METHODS[config.method].scores, renorm,
                                    recipe or DEFAULT, config.num_experts, rsf, config.eps)


def weight_bound(config, recipe, w, vs_ideal=False, inputs=None, ids=None):
    """spec.bounds.routing_weight_bound for this config: the hard bound between two implementations of `recipe`,
    plus the recipe's own error vs the float64 ideal when comparing with the ideal (or when no recipe is
    declared); with the weights' ids [T, k] (and `inputs`) where the bound depends on them."""
    vs_ideal, recipe = vs_ideal or recipe is None, recipe or DEFAULT
    rsf = 1.0 if config.routed_scaling_factor is None else config.routed_scaling_factor
    at = {} if ids is None else dict(logits=inputs["logits"], method=config.method, ids=ids,
                                     renormalize=config.renormalize, eps=config.eps)
    return bounds.routing_weight_bound(w, recipe, config.num_experts, config.top_k, rsf, vs_ideal, **at)


def ungrouped(config):
    """The routing config for a recomputation at forced ids. spec deepseek_v2 gathers forced ids from its
    group-masked q (group_mask_value outside the spec's own kept groups), so ids in a tied group the spec did
    not keep would weigh -inf; its formula at valid ids is p[ids], which n_group = 1 gives exactly. Other
    methods gather unmasked scores."""
    if config.method != "deepseek_v2" or config.n_group == 1:
        return config
    return replace(config, n_group=1, topk_group=1)
