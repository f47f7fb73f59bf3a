"""The routing op: ids valid up to the decision margins (validity.py) and the declared tie rule (ties.py), router
weights by expert id within the recipe's bound (keys.py), fused shared experts, and the padded permutation."""

import numpy as np

from spec import permutation
from spec.numerics import as_format
from spec.recipes import DEFAULT

from .. import impl_spec
from .contract import PERMUTATION_KEYS
from .keys import flushed_to_nan, ideal_weights, keys64, shared_flushed, underflow_term, ungrouped, weight_bound
from .ties import key_classes, tie_violation
from .validity import _valid_selection
from .verdict import PASS, bounded_rows, elementwise, failed, worst


def check_ids(config, inputs, ids, recipe, tag, spec=None, tie_rule=None):
    """(Verdict, spec Routing, same [T]): every token's ids the spec's set or a valid one (validity.py's docstring), and
    ordered among bit-identical keys as `tie_rule` (default: the recipe's; no recipe: unspecified) declares."""
    k = config.top_k
    spec = spec if spec is not None else impl_spec.route(config, inputs, recipe)
    keys, gkeys, delta, gdelta = keys64(config, inputs, recipe)
    same = (np.sort(ids[:, :k], axis=1) == np.sort(spec.ids[:, :k], axis=1)).all(axis=1)
    rule = tie_rule or (recipe.tie_rule if recipe is not None else "unspecified")
    # the spec's own selection follows the lower-index rule: only a token that differs from it can break that rule
    tokens = np.flatnonzero(~same | (rule == "higher_index"))
    classes = key_classes(config, inputs, recipe) if rule != "unspecified" and tokens.size else None
    for t in tokens:
        reason = None if same[t] else _valid_selection(t, ids[t, :k], keys, gkeys, delta, gdelta, config)
        if reason is None and classes is not None:
            tie = tie_violation(t, ids[t, :k], classes[t], keys, delta, config, recipe, "bias" in inputs, rule)
            reason = None if tie is None else ("tie", tie)
        if reason:
            check, text = reason
            return (
                failed("ids", check, f"ids[{t}]={sorted(ids[t, :k].tolist())} but spec="
                       f"{sorted(spec.ids[t, :k].tolist())}: {text} [{tag}]"),
                spec,
                same,
            )
    return PASS._replace(near_ties=int((~same).sum())), spec, same


def compare_permutation(c, ids, out, tag):
    """The padded per-expert layout (spec/permutation.py) at the implementation's own ids: counts, offsets,
    CTA tables and the token map exactly; the order of rows inside an expert is the implementation's."""
    missing = [k for k in PERMUTATION_KEYS if k not in out]
    if missing:
        return failed("permutation", "missing",
                      f"the case has tile_tokens_dim={c.tile_tokens_dim} but no {missing} [{tag}]")
    L = c.num_local_experts
    S = c.num_fused_shared_experts
    local = permutation.local_expert_ids(ids, c.num_experts, c.local_expert_offset, L, S)
    problems = permutation.check_permutation(local, L + S, c.tile_tokens_dim,
                                             **{k: np.asarray(out[k]) for k in PERMUTATION_KEYS})
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return failed("permutation", "mismatch", f"permutation: {problems[0]}{more} [{tag}]")
    return PASS


def compare_routing(case, inputs, out, recipe, tag):
    c = case.config
    T, k, S = c.num_tokens, c.top_k, c.num_fused_shared_experts
    ids, w = np.asarray(out["ids"]), np.asarray(out["weights"])
    if ids.shape != (T, k + S) or w.shape != (T, k + S):
        return failed("ids" if ids.shape != (T, k + S) else "weights", "shape",
                      f"ids {ids.shape} / weights {w.shape} but expected ({T}, {k + S}) [{tag}]")
    v, spec, same = check_ids(c, inputs, ids, recipe, tag)
    if not v.ok:
        return v
    order_i, order_s = np.argsort(ids[:, :k], axis=1), np.argsort(spec.ids[:, :k], axis=1)
    w_i = np.take_along_axis(w[:, :k], order_i, axis=1)[same]
    w_s = np.take_along_axis(spec.weights[:, :k], order_s, axis=1)[same]
    ids_s = np.sort(spec.ids[:, :k], axis=1)[same].astype(np.int64)
    sub = {"logits": inputs["logits"][same]}
    # Below the fp32 min normal both sides may each be underflow_term from the ideal (its relative part is in
    # the hard bound): 2·term apart. Degenerate rows (the fp32 denominator may vanish) keep the recipe's bound.
    absolute, degenerate = underflow_term(c, sub, ids_s, recipe)
    absolute = np.where(degenerate[:, None], 0.0, 2 * absolute)
    bound = weight_bound(c, recipe, w_s, inputs=sub, ids=ids_s) + absolute
    w_i = np.where(flushed_to_nan(c, sub, ids_s, recipe)[:, None] & np.isnan(w_i), w_s, w_i)
    verdicts = [v, bounded_rows("weights(by id)", w_i, w_s, bound, tag, "weights")]
    differ = np.flatnonzero(~same)
    if differ.size:  # near ties decided differently: weights against the float64 ideal at the own ids
        own = ids[differ, :k].astype(np.int64)
        sub = {"logits": inputs["logits"][differ]}
        ideal = ideal_weights(c, sub, own)
        absolute, degenerate = underflow_term(c, sub, own, recipe)
        sane = ~degenerate[:, None]
        verdicts.append(
            bounded_rows(
                f"weights(near-tie tokens {differ.tolist()[:4]}, vs ideal at own ids)",
                np.where(sane, w[differ, :k], 0),
                np.where(sane, ideal, 0),
                np.where(sane, weight_bound(c, recipe, ideal, True, sub, own) + absolute, 0),
                tag,
                "weights",
            )
        )
        if degenerate.any():  # the fp32 denominator may vanish: held to the recipe at the own ids
            t = differ[degenerate]
            sub = {**inputs, "logits": inputs["logits"][t]}
            at_own = impl_spec.route(ungrouped(c), sub, recipe, ids=own[degenerate])
            want = at_own.weights[:, :k]
            ulp = as_format((recipe or DEFAULT).routing_weights).min_subnormal
            verdicts.append(
                bounded_rows(
                    f"weights(degenerate near-tie tokens {t.tolist()[:4]}, vs recipe at own ids)",
                    w[t, :k],
                    want,
                    weight_bound(c, recipe, want, inputs=sub, ids=own[degenerate]) + ulp,
                    tag,
                    "weights",
                )
            )
    if S:
        shared_ids = c.num_experts + np.arange(S)
        if not (ids[:, k:] == shared_ids).all():
            return failed("ids", "shared",
                          f"shared expert ids {ids[:, k:].tolist()[:1]} but spec={shared_ids.tolist()} [{tag}]")
        want = spec.weights[:, k:].copy()
        if differ.size:  # Σ(routed weights)/rsf at the implementation's own ids, where those are another valid set
            sub = {"logits": inputs["logits"][differ], **({"bias": inputs["bias"]} if "bias" in inputs else {})}
            own = ids[differ, :k].astype(np.int64)
            want[differ] = impl_spec.route(ungrouped(c), sub, recipe, ids=own).weights[:, k:]
        got = np.where(shared_flushed(c, inputs, ids[:, :k], recipe)[:, None] & (w[:, k:] == 0), want, w[:, k:])
        exact = (recipe or DEFAULT).shared_weight == "one"  # a constant: nothing to round
        if not exact:  # the shared slot goes through the routed slots' division by Σ: where Σ may be 0, 0/0 = NaN
            got = np.where(flushed_to_nan(c, inputs, ids[:, :k], recipe)[:, None] & np.isnan(got), want, got)
        verdicts.append(elementwise("weights[:, shared]", got, want, 0.0 if exact else weight_bound(c, recipe, want),
                                    tag, "weights"))
    if c.tile_tokens_dim is not None:
        verdicts.append(compare_permutation(c, ids, out, tag))
    return worst(*verdicts)
