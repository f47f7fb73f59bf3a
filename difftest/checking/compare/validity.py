"""Validity of routing ids (one definition, tests/difftest/checking/test_compare_validity.py proves it against brute
force): ids are valid iff they are a top-k of the keys under some resolution of keys within 2δ of each other (keys.py),
groups included: there is a set K of topk_group groups that no group outside K beats by more than 2·gδ, and no expert
outside ids beats one inside by more than 2δ in the keys masked to K (masked experts hold the method's mask value:
-inf, or deepseek_v2's group_mask_value 0.0, at which they tie with underflowed softmax values). NaN ranks below
every number. The spec's own ids are valid (its fp32 keys are within δ of the float64 ones); every token whose ids
differ from the spec's must be valid (routing.check_ids), and its weights must match the float64 ideal weights at
its own ids, within the recipe's relative bound plus the absolute allowance of fp32 underflow
(keys.underflow_term); where the fp32 renormalizing denominator can vanish the ideal bounds nothing, and those
tokens are held to the recipe at their own ids (routing.compare_routing).

The functions here are copied by their source into a fixture's reproducer (difftest/readers/reproducer.py,
VALIDITY): numpy and itertools only, and each other."""

import itertools

import numpy as np


def above(a, b, tol):
    """a beats b by more than tol: a > b + tol between numbers (equal infinities tie), any number beats NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore"):
        return ~np.isnan(a) & (np.isnan(b) | ((a > b) & (a - b > tol)))


def _beaten(values, chosen, tol):
    """(j, i): indices of an unchosen value beating a chosen one by more than tol (above), the largest unchosen
    and the smallest chosen (NaN smallest), so the widest margin; None if no unchosen value beats a chosen one."""
    out, inside = np.flatnonzero(~chosen), np.flatnonzero(chosen)
    out = out[~np.isnan(values[out])]  # a NaN beats nothing
    if not out.size or not inside.size:
        return None
    j = out[np.argmax(values[out])]
    nan_inside = inside[np.isnan(values[inside])]
    i = nan_inside[0] if nan_inside.size else inside[np.argmin(values[inside])]
    return (j, i) if above(values[j], values[i], tol) else None


def kept_group_sets(gkeys, topk_group, tol):
    """Every set of topk_group groups that no other group beats by more than tol (above). A group beaten by
    topk_group others is in none; one that beats n_group - topk_group others is in all."""
    G = len(gkeys)
    beats = above(gkeys[:, None], gkeys[None, :], tol)  # [a, b]: a beats b
    must = np.flatnonzero(beats.sum(axis=1) >= G - topk_group)
    maybe = np.setdiff1d(np.flatnonzero(beats.sum(axis=0) < topk_group), must)
    for extra in itertools.combinations(maybe.tolist(), topk_group - len(must)):
        kept = np.zeros(G, bool)
        kept[list(must) + list(extra)] = True
        if _beaten(gkeys, kept, tol) is None:
            yield kept


def mask_value(config):
    """What the method writes into the experts of dropped groups: deepseek_v2's group_mask_value, else -inf."""
    return config.group_mask_value if config.method == "deepseek_v2" else -np.inf


def _margin(values, hit, tol, what="expert", value="key", verb="selected"):
    """'expert j (key v_j) rejected while expert i (key v_i) selected: margin m > 2δ=tol' for a hit of _beaten."""
    j, i = hit
    gap = (f"a NaN is {verb}, and NaN ranks below every number" if np.isnan(values[i])
           else f"margin {values[j] - values[i]:.3g} > 2δ={tol:.2g}")
    return f"{what} {j} ({value} {values[j]:.9g}) rejected while {what} {i} ({value} {values[i]:.9g}) {verb}: {gap}"


def _groups(g, which):
    """'[group (score), ...]'."""
    return "[" + ", ".join(f"{x} ({g[x]:.9g})" for x in which) + "]"


def _best_groups(g, n):
    """The n groups of the highest scores (NaN last), best first."""
    return sorted(range(len(g)), key=lambda x: (bool(np.isnan(g[x])), -g[x] if not np.isnan(g[x]) else 0.0))[:n]


def _valid_selection(t, ids, keys, gkeys, delta, gdelta, config):
    """None if ids (routed, one token) are valid (module docstring: a top-k within 2δ of the float64 keys,
    under a set of kept groups within 2·gδ); else (check, reason): the experts or groups chosen and rejected,
    with their keys or group scores and the margin."""
    E, tg = config.num_experts, config.topk_group
    if len(set(ids.tolist())) != len(ids) or ids.min() < 0 or ids.max() >= E:
        return "range", f"ids {sorted(ids.tolist())} are not {len(ids)} distinct experts in [0, {E})"
    chosen = np.zeros(E, bool)
    chosen[ids] = True
    if gkeys is None:
        hit = _beaten(keys[t], chosen, 2 * delta[t])
        return None if hit is None else ("mismatch", _margin(keys[t], hit, 2 * delta[t]))
    sets = list(kept_group_sets(gkeys[t], tg, 2 * gdelta[t]))
    for kept in sets:
        if _beaten(_masked(keys[t], kept, config), chosen, 2 * delta[t]) is None:
            return None
    return _group_reason(t, ids, keys, gkeys, delta, gdelta, config, sets)


def _masked(keys, kept, config):
    """One token's keys with the experts of the groups not kept at the method's mask value."""
    return np.where(np.repeat(kept, config.num_experts // config.n_group), keys, mask_value(config))


def _group_reason(t, ids, keys, gkeys, delta, gdelta, config, sets):
    """(check, reason) of a grouped selection that no set of kept groups makes valid: a chosen group that
    topk_group others beat beyond 2·gδ ("groups": both groups with their scores and the margin), else an expert
    rejected inside groups that may be kept ("mismatch": both experts with their keys and the margin)."""
    E, G, tg = config.num_experts, config.n_group, config.topk_group
    g, tol_g, tol = gkeys[t], 2 * gdelta[t], 2 * delta[t]
    used = sorted(set((ids // (E // G)).tolist()))
    best = _best_groups(g, tg)
    chosen_groups = f"ids use groups {_groups(g, used)}, the best {tg} are {_groups(g, best)}"
    if len(used) > tg:
        return "groups", f"{chosen_groups}: {len(used)} groups but topk_group={tg}"
    in_use = np.zeros(G, bool)
    in_use[used] = True
    beaten_by = above(g[:, None], g[None, :], tol_g).sum(axis=0)  # [b]: how many groups beat b beyond 2·gδ
    if (beaten_by[used] >= tg).any():  # then a group not in use beats the lowest one in use
        hit = _beaten(g, in_use, tol_g)
        return "groups", f"{chosen_groups}: {_margin(g, hit, tol_g, 'group', 'score', 'kept')}"
    fits = [k for k in sets if k[in_use].all()]
    if not fits:
        return "groups", (f"{chosen_groups}: no set of {tg} groups within 2δ={tol_g:.2g} of the best holds "
                          f"groups {used}")
    kept = next((k for k in fits if k[best].all()), fits[0])
    chosen = np.zeros(E, bool)
    chosen[ids] = True
    hit = _beaten(_masked(keys[t], kept, config), chosen, tol)
    return "mismatch", (f"{chosen_groups}; in the kept groups {np.flatnonzero(kept).tolist()}, "
                        f"{_margin(keys[t], hit, tol)}")
