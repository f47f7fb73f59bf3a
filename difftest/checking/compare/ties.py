"""The declared tie rule among bit-identical keys (recipe.tie_rule: lower_index, higher_index or unspecified), held
exactly among keys computed from bit-identical inputs, experts and groups alike."""

import numpy as np

from spec.numerics import round_to

from .keys import RAW_KEYS, SOFTMAX_KEYS, group_rule
from .validity import above, mask_value


def key_classes(config, inputs, recipe):
    """int64 [T, E]: experts of one token share a class iff their routing inputs are bit-identical (the logit's
    float32 bits, and the bias' as the recipe reads it), so that every implementation computes bit-identical keys
    for them, by the same arithmetic on the same bits; -1 for a NaN logit (never a tie). Inputs that merely round
    to equal keys (an underflowing softmax, a sigmoid saturating at 1) are not classed together: another correct
    implementation may compute them apart."""
    x = np.ascontiguousarray(inputs["logits"], np.float32)
    bits = x.view(np.uint32).astype(np.int64)
    if "bias" in inputs and config.method not in RAW_KEYS + SOFTMAX_KEYS:
        b = np.asarray(inputs["bias"], np.float32)
        if recipe is not None and recipe.bias != "fp32":
            b = round_to(b, recipe.bias).astype(np.float32)
        bits = (bits << 32) | np.ascontiguousarray(b).view(np.uint32).astype(np.int64)[None, :]
    _, classes = np.unique(bits, return_inverse=True)
    return np.where(np.isnan(x), -1, classes.reshape(x.shape))


def _ranks_first(a, b, rule):
    """Under a declared tie rule, does index a come before index b (a != b)?"""
    return a < b if rule == "lower_index" else a > b


def _score_inputs(keys, classes, m, tol):
    """The sorted classes of the m experts whose keys make a group score (top-2 sum: m = 2; max: 1), if every
    top-m an implementation within tol/2 of the float64 keys can take has those classes; else None."""
    n = len(keys)
    if m > n or np.isnan(keys).any() or (classes < 0).any():
        return None
    beats = above(keys[:, None], keys[None, :], tol)
    must = np.flatnonzero(beats.sum(axis=1) >= n - m)
    maybe = np.setdiff1d(np.flatnonzero(beats.sum(axis=0) < m), must)
    extra = m - len(must)
    if extra and len(set(classes[maybe].tolist())) != 1:
        return None
    return tuple(sorted(classes[must].tolist() + [int(classes[maybe[0]])] * extra)) if extra else tuple(
        sorted(classes[must].tolist()))


def tie_violation(t, ids, classes, keys, delta, config, recipe, biased, rule):
    """None, or why token t's valid selection `ids` breaks the declared tie rule among bit-identical keys.

    Experts: i selected and j rejected with bit-identical inputs (key_classes) hold bit-identical keys wherever
    both are unmasked, so the rule must have put i first. Both are unmasked when they share a group, or when j's
    group holds a selected expert and every selected key lies more than δ above the mask value (then no selected
    expert is a masked one, so every group holding one was kept). Groups: a kept group (holding a selected expert,
    same condition) and a dropped one whose scores come from bit-identical inputs (_score_inputs: the same classes
    however an implementation within δ orders each group) tie exactly, so the rule must have kept the first. A
    group is known dropped when it holds no selected expert but an expert that would have been selected before a
    selected one had the group been kept (a key above it by more than 2δ, or an identical one the rule puts
    first). `classes`: token t's key_classes."""
    E, G = config.num_experts, config.n_group
    chosen = np.zeros(E, bool)
    chosen[ids] = True
    group = np.arange(E) // (E // G)
    sel_keys = keys[t][ids]
    unmasked = G == 1 or bool(np.all(np.isfinite(sel_keys) & (sel_keys > mask_value(config) + delta[t])))
    kept = np.zeros(G, bool)
    kept[group[ids]] = True
    word = "lower" if rule == "lower_index" else "higher"
    for i in ids.tolist():
        for j in np.flatnonzero(~chosen & (classes == classes[i]) & (classes >= 0)).tolist():
            if (group[i] == group[j] or (unmasked and kept[group[j]])) and not _ranks_first(i, j, rule):
                return (f"experts {i} and {j} have bit-identical routing inputs, {i} selected over {j}, but the "
                        f"recipe declares ties to the {word} index ({rule})")
    if G == 1 or not unmasked:
        return None
    m = 2 if group_rule(config, recipe, biased) == "top2_sum" and E // G > 1 else 1
    tol = 2 * delta[t]
    grouped_keys, grouped_classes = keys[t].reshape(G, E // G), classes.reshape(G, E // G)
    score = [_score_inputs(grouped_keys[g], grouped_classes[g], m, tol) for g in range(G)]
    for b in np.flatnonzero(~kept).tolist():
        members = np.flatnonzero(group == b)
        dropped = any(above(keys[t][j], keys[t][i], tol) or (classes[j] == classes[i] >= 0 and _ranks_first(j, i, rule))
                      for j in members.tolist() for i in ids.tolist())
        if not dropped or score[b] is None:
            continue
        for a in np.flatnonzero(kept).tolist():
            if score[a] == score[b] and not _ranks_first(a, b, rule):
                return (f"groups {a} and {b} have bit-identical scores (from bit-identical inputs), {a} kept over "
                        f"{b}, but the recipe declares ties to the {word} index ({rule})")
    return None
