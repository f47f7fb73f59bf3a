"""Comparison of an implementation's outputs with the spec: tie-aware routing, bit-exact quantization, bounded
layer outputs. Every verdict carries the largest error/bound ratio (fed to hypothesis.target) and, on failure,
one message naming the element, both values, the bound and the ratio.

Routing. δ, the uncertainty of one routing key, follows from the recipe: keys are computed in fp32 from exactly
given logits (and the bias rounded as ``recipe.bias`` says); spec.bounds.routing_key_delta gives the formula per key
class, routing_group_delta the group scores' (a top-2 sum 2δ + u·|g|, a max δ). The float64 keys, scores and
weights they bound are spec.routing's ideal evaluation (ideal_keys, ideal_scores, route(ideal=True, ids=...)).

Validity (one definition, tests/test_compare_validity.py proves it against brute force): ids are valid iff
they are a top-k of the keys under some resolution of keys within 2δ of each other, groups included: there is
a set K of topk_group groups that no group outside K beats by more than 2·gδ, and no expert outside ids beats
one inside by more than 2δ in the keys masked to K (masked experts hold the method's mask value: -inf, or
deepseek_v2's group_mask_value 0.0, at which they tie with underflowed softmax values). NaN ranks below every
number. The spec's own ids are valid (its fp32 keys are within δ of the float64 ones); every token whose ids
differ from the spec's must be valid, and its weights must match the float64 ideal weights at its own ids, within
the recipe's relative bound plus the
absolute allowance of fp32 underflow (``underflow_term``); where the fp32 renormalizing denominator can vanish
the ideal bounds nothing, and those tokens are held to the recipe at their own ids.
"""

import itertools
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from spec import bounds, permutation, trtllm_ops
from spec import routing as spec_routing
from spec.numerics import E2M1, E4M3FN, E8M0, FP32, SCALE_BLOCKS, as_format, decode, round_to
from spec.recipes import DEFAULT

from . import bias, impl_spec

U32 = FP32.unit_roundoff
SOFTMAX_KEYS = spec_routing.SOFTMAX_METHODS  # key classes: spec.routing.METHODS
SIGMOID_KEYS = spec_routing.SIGMOID_METHODS
RAW_KEYS = spec_routing.RAW_KEY_METHODS


class Failure(NamedTuple):
    """One failing output of a comparison, as the comparison found it (never parsed from a message): the
    output (``field``) and the check it failed. A finding's signature takes its field from here
    (difftest/running/campaign.py)."""

    field: str  # an output (OUTPUT_ORDER), or SPEC_FIELD for the spec's own recipe-vs-ideal check
    check: str  # CHECKS


# The checks a Failure names: a contract violation (missing output, wrong dtype or shape), a selection beyond 2δ
# or a bit pattern that differs (mismatch), a value outside its bound (bound), NaN where the spec has a number
# (nan), a derived bound that bounds nothing (unbounded), a broken declared tie rule (tie), ids that are not
# distinct experts in range (range), a group kept beyond 2δ (groups), fused shared-expert ids (shared), rows that
# must stay untouched (unwritten), errors that push one way (bias).
CHECKS = ("missing", "dtype", "shape", "mismatch", "bound", "nan", "unbounded", "tie", "range", "groups", "shared",
          "unwritten", "bias")
# The fixed order of the outputs a finding is named by (its signature's field: the first failing one). A cause
# comes before what it corrupts: ids before the weights and layouts made from them, scales before the codes
# made with them. Outputs not listed follow in the order found, the spec's own check (SPEC_FIELD) last.
OUTPUT_ORDER = ("ids", "weights", "permutation", "scales", "scale_buffer", "q", "out_scale", "out")
SPEC_FIELD = "spec"


class Verdict(NamedTuple):
    ok: bool
    ratio: float  # max |error| / bound over the compared elements (0: exact)
    message: str  # "" when ok
    excluded: int = 0  # tokens not compared: routing not robust and ids not exposed, or weights unbounded
    near_ties: int = 0  # tokens decided by the tie-aware validity check
    # moe: ((token, d_t), ...) of difftest/checking/bias.py, tokens with d_t != 0; () where it does not apply
    bias: tuple = ()
    failures: tuple = ()  # (Failure, ...) of every output that failed, in OUTPUT_ORDER; () when ok


PASS = Verdict(True, 0.0, "")


def failed(field, check, message, ratio=np.inf):
    """A failing Verdict of one output and check."""
    return Verdict(False, ratio, message, failures=(Failure(field, check),))


def in_output_order(failures):
    """Failures without repeats, sorted by OUTPUT_ORDER (outputs not in it after, as found)."""
    n = len(OUTPUT_ORDER)
    unique = list(dict.fromkeys(failures))
    rank = {f: OUTPUT_ORDER.index(f.field) if f.field in OUTPUT_ORDER else n + (f.field == SPEC_FIELD)
            for f in unique}
    return tuple(sorted(unique, key=lambda f: rank[f]))


def fmt_index(idx):
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def elementwise(name, got, want, bound, tag, field=None):
    """|got - want| <= bound everywhere (NaN only where both are NaN, equal infinities equal). Where the values
    differ, a bound that is not a finite number >= 0 fails: an infinite bound would pass anything, so it
    compares nothing. Callers exclude (and count) the elements a derivation cannot bound before calling.
    ``field``: the output a failure names (default: name)."""
    field = field or name
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return failed(field, "shape", f"{name} has shape {got.shape} but spec has {want.shape} [{tag}]")
    bound = np.broadcast_to(np.asarray(bound, np.float64), want.shape)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    unbounded = np.argwhere(~same & ~(np.isfinite(bound) & (bound >= 0)))
    if unbounded.size:
        at = tuple(unbounded[0])
        return failed(
            field,
            "unbounded",
            f"{name}{fmt_index(at)}={got[at]:.6g} but spec={want[at]:.6g}: the derived bound is {bound[at]}, "
            f"not a finite number >= 0, so it compares nothing ({len(unbounded)} such elements) [{tag}]",
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(same, 0.0, np.abs(got - want))
        ratio = np.where(same, 0.0, np.where(bound > 0, err / bound, np.inf))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    if ratio.size == 0:
        return PASS
    worst = np.unravel_index(np.argmax(ratio), ratio.shape)
    r = float(ratio[worst])
    if r <= 1.0:
        return Verdict(True, r, "")
    check = "nan" if np.isnan(got[worst]) and not np.isnan(want[worst]) else "bound"
    return failed(
        field,
        check,
        f"{name}{fmt_index(worst)}={got[worst]:.6g} but spec={want[worst]:.6g}: "
        f"|diff| {err[worst]:.2g} > bound {bound[worst]:.2g} ({r:.3g}x) [{tag}]",
        r,
    )


def bounded_rows(name, got, want, bound, tag, field=None):
    """elementwise over the rows [T, k] whose bound is finite. A row where the derivation bounds nothing (+inf:
    bounds.routing_weights' tanh.approx term over a score sum that may vanish) is excluded and counted in
    Verdict.excluded; a NaN bound is no such signal and still fails in elementwise."""
    rows = ~np.isposinf(bound).any(axis=-1, keepdims=True)
    v = elementwise(name, np.where(rows, got, 0), np.where(rows, want, 0), np.where(rows, bound, 0), tag, field)
    return v._replace(excluded=v.excluded + int((~rows).sum()))


def worst(*verdicts):
    """Every failure of the failing verdicts (in OUTPUT_ORDER) with the message of the one whose output comes
    first in that order (of those, the largest ratio), so that the message names the output the finding is
    named by; the largest ratio of all. All passing: the passing one with the largest ratio."""
    failing = [v for v in verdicts if not v.ok]
    ratio = max((v.ratio for v in verdicts), default=0.0)
    if failing:
        failures = in_output_order(f for v in failing for f in v.failures)
        first = failures[0] if failures else None
        v = max((x for x in failing if first is None or first in x.failures), key=lambda x: x.ratio)
        v = v._replace(ratio=ratio, failures=failures)
    else:
        v = max(verdicts, key=lambda v: v.ratio)
    return v._replace(
        excluded=sum(x.excluded for x in verdicts), near_ties=sum(x.near_ties for x in verdicts)
    )


# ---- the plug-in contract: which outputs, of which dtype and shape (docs/plugins.md "Inputs and outputs per op")

CONTRACT_DOC = "docs/plugins.md"
INTEGERS = tuple(np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))
# float64 holds every float32 value exactly; a narrower float (fp16, bf16) has lost the bits the bound is made of
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))  # one-byte codes: the same bits either way


class Output(NamedTuple):
    """One output of the plug-in contract for a case: required or optional, the dtypes and shapes accepted (()
    any), and the contract in the words of CONTRACT_DOC with the case's sizes."""

    required: bool
    dtypes: tuple
    shapes: tuple
    contract: str


def contract(case, expected=None):
    """{output name: Output} of what run() returns for this case: routing, quant and moe from the case; a trtllm_ops
    dev kernel's from the spec's outputs (``expected``, impl_spec.dev_kernel: compare_trtllm_ops has them), each of
    its shape as float32 values, uint8 codes or integers (narrow floats as float32, fp8 as uint8 codes)."""
    if case.op == "trtllm_ops":
        return {} if expected is None else {name: _dev_output(np.asarray(a)) for name, a in expected.items()}
    c = case.config
    if case.op == "routing":
        T, n = c.num_tokens, c.top_k + c.num_fused_shared_experts
        sizes = f"[T, k + S] = [{T}, {n}]"
        out = {"ids": Output(True, INTEGERS, ((T, n),), f"int32 {sizes}"),
               "weights": Output(True, FLOATS, ((T, n),), f"float32 {sizes}")}
        if c.tile_tokens_dim is not None:  # the padded permutation (docs/trtllm_gen_routing.md)
            out.update({k: Output(True, INTEGERS, (), "int32 (tile_tokens_dim is set)") for k in PERMUTATION_KEYS})
        return out
    if case.op == "quant":
        T, H = c.num_tokens, c.hidden_size
        G = H // (c.group_size if c.scheme == "fp8_group" else SCALE_BLOCKS[c.scheme])
        q = (T, H // 2) if c.scheme == "nvfp4" else (T, H)
        codes = c.scheme != "fp8_group"
        return {"q": Output(True, BYTES, (q,), f"uint8 codes {list(q)}"),
                "scales": Output(True, BYTES if codes else FLOATS, ((T, G),),
                                 f"{'uint8 codes' if codes else 'float32'} [T, H/g] = [{T}, {G}]"),
                "scale_buffer": Output(True, (), (), f"the scales' memory in the {c.layout} layout")}
    if case.op == "moe":
        T, H, k = c.routing.num_tokens, c.hidden_size, c.routing.top_k
        return {"out": Output(True, FLOATS, ((T, H),), f"float32 [T, H] = [{T}, {H}]"),
                "ids": Output(False, INTEGERS, ((T, k),), f"int32 [T, k] = [{T}, {k}], if returned"),
                "weights": Output(False, FLOATS, ((T, k),), f"float32 [T, k] = [{T}, {k}], if returned")}
    return {}


def _dev_output(a):
    """The contract of one output of a trtllm_ops dev kernel whose spec output is `a`."""
    if a.dtype == np.uint8:
        return Output(True, BYTES, (a.shape,), f"uint8 codes {list(a.shape)}")
    if a.dtype.kind == "f":
        return Output(True, FLOATS, (a.shape,), f"float32 {list(a.shape)}")
    return Output(True, INTEGERS, (a.shape,), f"int32 {list(a.shape)}")


def contract_violation(case, outputs, impl_name="the implementation", tag=None, expected=None):
    """None, or the failing Verdict of the first output of `outputs` that breaks the plug-in contract (missing,
    dtype, shape): the implementation's finding, stated with the contract it broke (``expected``: contract's)."""
    tag = tag or case.op
    for name, want in contract(case, expected).items():
        field = "permutation" if name in PERMUTATION_KEYS else name
        if name not in outputs:
            if want.required:
                return failed(field, "missing", f"{impl_name} returned no {name} (outputs {sorted(outputs)}); the "
                                               f"contract is {want.contract} ({CONTRACT_DOC}) [{tag}]")
            continue
        a = np.asarray(outputs[name])
        if want.dtypes and a.dtype not in want.dtypes:
            return failed(field, "dtype", f"{impl_name} returned {name} {a.dtype}; the contract is {want.contract} "
                                         f"({CONTRACT_DOC}) [{tag}]")
        if want.shapes and a.shape not in want.shapes:
            return failed(field, "shape", f"{impl_name} returned {name} of shape {list(a.shape)}; the contract is "
                                         f"{want.contract} ({CONTRACT_DOC}) [{tag}]")
    return None


# ---- routing: the float64 ideal (spec.routing) and its error analysis (spec.bounds)


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


def check_ids(config, inputs, ids, recipe, tag, spec=None, tie_rule=None):
    """(Verdict, spec Routing, same [T]): every token's ids the spec's set or a valid one (module docstring), and
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


# ---- the declared tie rule among bit-identical keys


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


PERMUTATION_KEYS = ("total_num_padded_tokens", "expanded_idx_to_permuted_idx", "permuted_idx_to_token_idx",
                    "cta_idx_xy_to_batch_idx", "cta_idx_xy_to_mn_limit", "num_non_exiting_ctas")


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


# ---- quantization: bit-exact codes and scales, layouts as memory


def _bits(a):
    """The bit patterns to compare: uint8 codes as they are, integer words (packed UE8M0 scales) as unsigned
    integers of their width (never through float32, which cannot hold a 32-bit word), values as fp32 bits."""
    a = np.asarray(a)
    if a.dtype == np.uint8:
        return a
    if a.dtype.kind in "iu":
        return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _bit_exact(name, got, want, tag, field=None, value=None):
    """got and want bit for bit (_bits). ``field``: the output a failure names (default: name); ``value``:
    bits -> the number they stand for, shown beside the hex bits of the first difference."""
    field = field or name
    got, want = _bits(got), _bits(want)
    if got.shape != want.shape:
        return failed(field, "shape", f"{name} has shape {got.shape} but spec has {want.shape} [{tag}]")
    diff = np.argwhere(got != want)
    if diff.size:
        at = tuple(diff[0])
        shown = (lambda b: f"{b:#x}") if value is None else (lambda b: f"{b:#x} ({value(b)})")
        return failed(
            field,
            "mismatch",
            f"{name}{fmt_index(at)}={shown(got[at])} but spec={shown(want[at])}: {len(diff)} of "
            f"{got.size} differ (bit-exact required) [{tag}]",
        )
    return PASS


def _number(v):
    """A decoded scale: its value, and 2^e where it is a power of two."""
    v = float(v)
    mantissa, e = np.frexp(v)
    return f"{v:.9g} = 2^{e - 1}" if np.isfinite(v) and mantissa == 0.5 else f"{v:.9g}"


def _e8m0(code):
    """An e8m0 code as the power of two it stands for (0xff: NaN)."""
    return "NaN" if int(code) == 0xFF else f"2^{int(code) - E8M0.bias}"


def scale_value(config, packed=False):
    """bits -> the scale they stand for, as text (the _bits of a quant case's scales, or of its scale buffer read
    through the layout): fp32 bits, e8m0 (mxfp8) or e4m3 (nvfp4) codes, or (``packed``, UE8M0 words) the four e8m0
    bytes of an int32 word, low byte first (bytes past the last group are padding)."""
    if packed:
        return lambda w: "bytes " + ", ".join(_e8m0((int(w) >> 8 * b) & 0xFF) for b in range(4))
    if config.scheme == "mxfp8":
        return _e8m0
    if config.scheme == "nvfp4":
        return lambda b: _number(decode(np.uint8(b), E4M3FN))
    return lambda b: _number(np.uint32(b).view(np.float32))


def code_value(config):
    """bits -> the value a quant case's q code stands for, as text: e4m3 (fp8_group, mxfp8), or nvfp4's two e2m1
    codes of a byte, low nibble (the even element) first."""
    if config.scheme == "nvfp4":
        return lambda b: ", ".join(f"{float(decode(np.uint8((int(b) >> s) & 0xF), E2M1)):g}" for s in (0, 4))
    return lambda b: f"{float(decode(np.uint8(b), E4M3FN)):g}"


def nan_sign_free(codes):
    """e4m3fn codes with every NaN (0x7f, 0xff) as 0x7f: a NaN's sign is no contract (PTX cvt writes 0x7f
    whatever the input, torch keeps the input's sign bit), every other bit is."""
    codes = np.asarray(codes)
    return np.where((codes & 0x7F) == 0x7F, np.uint8(0x7F), codes).astype(np.uint8)


def compare_quant(case, inputs, out, recipe, tag):
    """Codes (NaN sign aside) and logical scales bit-exact; the scale buffer read through the spec layout's
    strides."""
    c = case.config
    want = impl_spec.quantize(c, inputs)
    q, ref = out["q"], want["q"]
    if c.scheme in ("fp8_group", "mxfp8"):
        q, ref = nan_sign_free(q), nan_sign_free(ref)
    verdicts = [_bit_exact("q", q, ref, tag, value=code_value(c)),
                _bit_exact("scales", out["scales"], want["scales"], tag, value=scale_value(c))]
    layout = want["layout"]
    data = np.ascontiguousarray(out["scale_buffer"]).view(np.uint8).ravel()
    if data.nbytes != layout.data.nbytes:
        verdicts.append(failed("scale_buffer", "shape", f"scale_buffer holds {data.nbytes} bytes but the {c.layout} "
                                                        f"layout needs {layout.data.nbytes} [{tag}]"))
    else:
        read = impl_spec.layouts.view(layout._replace(data=data.view(layout.data.dtype)))
        verdicts.append(_bit_exact(f"scale_buffer as {c.layout}", read, impl_spec.layouts.view(layout), tag,
                                   "scale_buffer", scale_value(c, packed=c.layout == "ue8m0_packed")))
    return worst(*verdicts)


# ---- moe layer


def compare_moe(case, inputs, out, recipe, tag):
    """Layer output element-wise against the recipe-exact spec with the spec's hard bound; with exposed ids
    the spec recomputes with the implementation's ids (after checking them, the declared tie rule included; the
    tokens decided as near ties are counted in the verdict), else tokens whose routing is not robust are excluded
    and counted. Also the recipe-vs-ideal check of the spec result itself."""
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
    are held to the recipe there, the recipe is not); the layer check keeps every other row."""
    c, k = case.config.routing, case.config.routing.top_k
    if case.config.rsf_placement == "combine":  # spec.weights then exclude rsf (applied at the combine)
        c = replace(c, routed_scaling_factor=None)
    tag = f"{case.op}, spec {recipe.name} vs ideal"
    ids = spec.ids[:, :k].astype(np.int64)
    want_w = ideal_weights(c, inputs, ids)
    absolute, degenerate = underflow_term(c, inputs, ids, recipe)
    rel = weight_bound(c, recipe, want_w, True, inputs, ids)
    finite = np.isfinite(spec.weights).all(axis=1) & (spec.weights != 0).any(axis=1)
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


def ungrouped(config):
    """The routing config for a recomputation at forced ids. spec deepseek_v2 gathers forced ids from its
    group-masked q (group_mask_value outside the spec's own kept groups), so ids in a tied group the spec did
    not keep would weigh -inf; its formula at valid ids is p[ids], which n_group = 1 gives exactly. Other
    methods gather unmasked scores."""
    if config.method != "deepseek_v2" or config.n_group == 1:
        return config
    return replace(config, n_group=1, topk_group=1)


# ---- trtllm-gen dev kernels


def stored_bound(v, delta, dtype):
    """(the spec's stored value, its hard bound) for an output stored once (RNE; e4m3 saturating) from a value
    within delta of the exact v: the rounding rule."""
    fmt = {"e4m3": E4M3FN}.get(dtype, dtype)
    want = round_to(v, fmt, saturate=True).astype(np.float64)
    return want, bounds.rounded(v, want, bounds.Err(delta, delta, delta), fmt).hard


def _stored(name, got, v, delta, dtype, tag):
    """An output stored once from a value within delta of the exact v, by the rounding rule (stored_bound)."""
    want, hard = stored_bound(v, delta, dtype)
    return elementwise(name, impl_spec.dev_values(got, dtype), want, hard, tag, "out")


def _zero_rows(name, got, rows, tag):
    """Rows no (t, k) maps to are not written: they stay the zeros the adapters allocate."""
    got = np.asarray(got)
    v = _bit_exact(f"{name} (unmapped rows)", got[~rows], np.zeros_like(got[~rows]), tag, name)
    return v if v.ok else v._replace(failures=(Failure(name, "unwritten"),))


def _interval(name, got, lo, hi, tag, field=None):
    """lo <= got <= hi everywhere (one message naming the first element outside). A NaN is outside."""
    bad = np.argwhere(~((lo <= got) & (got <= hi)))
    if not bad.size:
        return PASS
    at = tuple(bad[0])
    return failed(field or name, "nan" if np.isnan(got[at]) else "bound",
                  f"{name}{fmt_index(at)}={got[at]:.9g} outside [{lo[at]:.9g}, {hi[at]:.9g}], what the allowance "
                  f"reaches ({len(bad)} of {got.size}) [{tag}]")


def deepseek_fp8_scales(y, delta, floor=FP32.min_normal):
    """(lo, hi) float64 [I/128, P]: amax within [max(|y| - δ), max(|y| + δ)] per 128-column block gives the scales
    deepseek_scale can reach (lo 0: a scale below the min normal, which FTZ may flush to 0)."""
    P, I = y.shape
    a, d = np.abs(y).reshape(P, I // 128, 128), delta.reshape(P, I // 128, 128)
    s_lo = trtllm_ops.deepseek_scale(np.max(np.maximum(a - d, 0), axis=-1), floor).T.astype(np.float64)
    s_hi = trtllm_ops.deepseek_scale(np.max(a + d, axis=-1), floor).T.astype(np.float64)
    return np.where(s_lo < FP32.min_normal, 0.0, s_lo), s_hi


def deepseek_fp8_values(y, delta, s, dtype="e4m3"):
    """(lo, hi) float64 [P, I]: with scales s [I/128, P] (> 0), y'·rcp(s) within (y ± δ)·(1/s)·(1 ± ε) (ε: MUFU.RCP
    and the fp32 product) gives, by monotone rounding, the values a requantization can store."""
    fmt = as_format(impl_spec.DEV_FORMATS[dtype])
    s_el = np.repeat(np.asarray(s, np.float64).T, 128, axis=1)
    eps = bounds.MUFU_RCP_REL + 2 * U32
    ends = [(y + sign * delta) / np.where(s_el > 0, s_el, 1.0) * (1 + e) for sign in (-1, 1) for e in (-eps, eps)]
    lo = round_to(np.minimum.reduce(ends), fmt, saturate=True).astype(np.float64)
    return lo, round_to(np.maximum.reduce(ends), fmt, saturate=True).astype(np.float64)


def _requant_deepseek_fp8(out, y, delta, rows, tag, floor=FP32.min_normal, dtype="e4m3"):
    """Scales and stored values by the interval rule (deepseek_fp8_scales, then deepseek_fp8_values at the
    implementation's own scale s). A block with s = 0 (floor 0) stores y'·inf: NaN, ±inf or ±max; where the interval
    does not reach 0 (the floor), every scale it allows stores a number, so a NaN stored with a zero scale fails too
    (both outputs are named: the scale and the NaN it made)."""
    fmt = as_format(impl_spec.DEV_FORMATS[dtype])
    s_lo, s_hi = deepseek_fp8_scales(y, delta, floor)
    s = np.asarray(out["out_scale"], np.float64)
    if s.shape != s_lo.shape:
        return failed("out_scale", "shape", f"out_scale has shape {s.shape} but spec has {s_lo.shape} [{tag}]")
    v_scale = _interval("out_scale", np.where(rows.T, s, 0), np.where(rows.T, s_lo, 0), np.where(rows.T, s_hi, 0),
                        tag)
    got = impl_spec.dev_values(out["out"], dtype)
    if got.shape != y.shape:
        return worst(v_scale, failed("out", "shape", f"out has shape {got.shape} but spec has {y.shape} [{tag}]"))
    lo, hi = deepseek_fp8_values(y, delta, s, dtype)
    r, zero = rows[:, None], np.repeat(s.T, 128, axis=1) == 0
    with np.errstate(invalid="ignore"):
        special = np.isnan(got) | (np.abs(got) >= fmt.max)
    verdicts = [v_scale]
    bad = np.argwhere(r & zero & ~special)
    if bad.size:
        at = tuple(bad[0])
        verdicts.append(failed("out", "bound", f"out{fmt_index(at)}={got[at]:.9g} in a block whose scale is 0: "
                                               f"y·rcp(0) is NaN, ±inf or ±max [{tag}]"))
    floored = np.repeat((s_lo > 0).T, 128, axis=1)  # blocks whose allowed scales exclude 0
    bad = np.argwhere(r & zero & floored & np.isnan(got))
    if bad.size:
        at = tuple(bad[0])
        least = s_lo.T[at[0], at[1] // 128]
        verdicts.append(failed("out", "nan", f"out{fmt_index(at)}=nan for y={y[at]:.9g} in a block stored with scale "
                                             f"0, where every allowed scale (>= {least:.9g}) stores a number "
                                             f"({len(bad)} NaN of {got.size}) [{tag}]"))
    keep = r & ~zero
    return worst(*verdicts, _interval(f"out ({dtype} value)", np.where(keep, got, 0), np.where(keep, lo, 0),
                                      np.where(keep, hi, 0), tag, "out"),
                 _zero_rows("out", out["out"], rows, tag), _zero_rows("out_scale", np.asarray(s).T, rows, tag))


def dev_allowance(c, inputs):
    """(v, δ, rows) of a rounding trtllm_ops kernel: the exact value it stores or requantizes, the allowance δ
    around it, and the rows it writes (finalize: every token; the activations: the mapped permuted rows)."""
    if c.kernel in ("finalize", "finalize_deepseek_fp8"):
        e2p, w = inputs["expanded_idx_to_permuted_idx"], inputs.get("expert_weights")
        x = impl_spec.dev_values(inputs["gemm2_out"], c.dtype)
        if c.kernel == "finalize_deepseek_fp8":
            scale = inputs["gemm2_out_scale"]
            v = trtllm_ops.finalize_deepseek_fp8(x, scale, e2p, w)
            terms = trtllm_ops.finalize_deepseek_fp8(np.abs(x), scale, e2p, np.abs(w))
        else:
            v = trtllm_ops.finalize(x, e2p, w, c.hidden_size)
            terms = trtllm_ops.finalize(np.abs(x), e2p, None if w is None else np.abs(w), c.hidden_size)
        return v, bounds.fp32_accumulation(terms, c.top_k), np.ones(v.shape[0], bool)
    x, controls = impl_spec.activation_args(c, inputs)
    y, half = trtllm_ops.gated_activation(x, **controls), x.shape[1] // 2
    delta = bounds.gated_activation(x[:, half:], x[:, :half], y, controls.get("alpha", 1.0), controls.get("beta", 0.0))
    return y, delta, impl_spec.mapped_rows(inputs, x.shape[0])


def compare_trtllm_ops(case, inputs, out, recipe, tag):
    """permute, convertsf: bit-exact. activation: the rounding rule around the exact y with
    bounds.gated_activation's fp32 MUFU allowance, unmapped rows 0; DeepSeek FP8: scales and codes by the
    interval rule (_requant_deepseek_fp8). finalize: the rounding rule around the exact Σ_k w·x with
    bounds.fp32_accumulation (any fp32 order: the small-batch k-split and the in-order kernels alike);
    finalize_deepseek_fp8: that sum's δ through the interval rule of its unfloored requantization."""
    c = case.config
    want = impl_spec.dev_kernel(c, inputs)
    broken = contract_violation(case, out, tag=tag, expected=want)  # before a wrong shape can break the arithmetic
    if broken is not None:
        return broken
    if c.kernel in ("permute", "convertsf"):
        return worst(*(_bit_exact(name, out[name], want[name], tag) for name in want))
    v, delta, rows = dev_allowance(c, inputs)
    if c.kernel == "finalize_deepseek_fp8":
        return _requant_deepseek_fp8(out, v, delta, rows, tag, dtype=c.dtype)
    if c.kernel == "finalize":
        return _stored("out", out["out"], v, delta, c.dtype, tag)
    if c.kernel == "activation_deepseek_fp8":
        return _requant_deepseek_fp8(out, v, delta, rows, tag)
    r = rows[:, None]
    got = np.asarray(out["out"])
    return worst(_stored("out", np.where(r, got, 0), np.where(r, v, 0), np.where(r, delta, 0), c.dtype, tag),
                 _zero_rows("out", got, rows, tag))


COMPARE = {"routing": compare_routing, "quant": compare_quant, "moe": compare_moe, "trtllm_ops": compare_trtllm_ops}
