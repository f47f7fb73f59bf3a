"""MoE routing: FlashInfer's RoutingMethodType methods and SGLang's grouped softmax, as executable math.

Every method maps logits [T, E] (and a correction bias [E] where the method has one) to a ``Routing``:
int32 ids [T, k + S], weights, and two decision margins. Semantics: docs/semantics.md §1 and
§5.3; each method's docstring gives its formula.

Precision. Where the method rounds is the recipe's (``route(..., recipe=R)``, spec.recipes.Recipe: the fields
OPTIONS lists as "recipe", read by their own names). By default (recipes.DEFAULT) every step is float32, rounded
where the kernels round: logits and bias are read as fp32 (the bias first rounded to bf16 with a recipe's
``bias="bf16"``, SGLang before #28555 / #33591); exp
is the float64 exp rounded once to fp32; sums run left to right in selection order; divisions are true
divisions. ``ideal=True`` evaluates the same formulas in float64 with no rounding after the given inputs:
the recipe's rounding choices (``bias``, ``sigmoid``, ``routing_weights``, ``renorm_order``, ...) do not
apply there. Sigmoid ``"exact"`` is the float64 value rounded once to fp32, hence 0 below x = -150 ln 2 ≈ -103.97;
``"expf"`` is 1/(1 + fl(exp(-x))) in fp32, which is 0 once exp(-x) overflows, below x ≈ -88.72 (``"torch_cpu"`` /
``"torch_cuda"``, torch's sigmoid, is evaluated by the same formula); ``"tanh"`` is 0.5·fl(tanh(0.5x)) + 0.5 in fp32
(fused_topk_deepseek), 0 below x ≈ -18.02. When every selected sigmoid is 0 the renormalizing eps decides:
0/(0 + 0) = NaN, 0/(0 + 1e-20) = 0. ``exp="ex2"`` evaluates the exponentials of "expf" and of the softmax as CUDA's
fast-math ``__expf``: 2^fl(x·fl(log2 e)), the power of two of the rounded argument rounded once to fp32 (MUFU.EX2
is within 2 ulps of that; the rounded argument moves e^x by up to 2|x|·u, which ``exp_exponents`` bounds).

Routing arithmetic. The recipe's ``routing_scores`` stores σ / softmax (evaluated as above, then rounded),
``routing_bias_add`` s + b, ``routing_group_scores`` a top-2 group sum, ``routing_renorm`` each of Σw (the fp32
left-to-right sum rounded once, as torch's bf16 sum), Σw + eps, the divide and the rsf multiply.
All "fp32" by default, which leaves the fp32 arithmetic above unchanged; ideal ignores them.

Group scores (``group_score``, recipes.GROUP_SCORES): "top2_sum" adds a group's two largest keys (a one-expert
group: its only key); "max" takes the largest; "top2_sum_if_biased" is top2_sum when a bias is given and max
without (DeepSeek-V3 inference/model.py Gate, vLLM grouped_topk); "method": the method's own rule, its METHODS
row's group_score: deepseek_v3 top2_sum (FlashInfer), deepseek_v2 max (SGLang grouped_topk).

Ties. Selection is a stable sort on -key: equal keys → lower expert index first, equal group scores →
lower group index first (trtllm-gen TopKRedType, moe_fused_gate). Columns of ids are in selection order.

Special values follow IEEE arithmetic of the formulas as written, without warnings. A NaN key ranks below
every number, -inf included (decided for spec and impls/torch_eager alike: the CUDA routing kernels select
by iterated `>` argmax, docs/semantics.md §1.3: moe_fused_gate, topk_softmax, which a NaN never wins), so a NaN expert
(or group) is chosen only when too few others remain; a selected NaN weight makes its token's renormalized
weights NaN. σ(+inf) = 1 and σ(-inf) = 0. A softmax row whose maximum is not finite (a NaN or +inf logit,
or all -inf) is all NaN, and its ids are 0..k-1. Group scores rank NaN last as well: the top-2 sum and the
max take the largest non-NaN keys first.

Forced ids. ``ids`` (int [T, top_k], distinct per token) replaces a method's selection: the weights are its
formula at those ids, gathered from the same (masked) scores, summed in the given column order; the margins
still describe the spec's own selection (spec/layer.py recomputes a layer with an implementation's ids).

Margins (float64 [T]): key of the last selected expert minus key of the first rejected expert of the kept
groups (of any group with deepseek_v2's group_mask_value 0.0, where dropped experts tie with underflowed
softmax values at 0; inf when none is rejected; 0 for equal keys, infinite ones included; NaN when either key is NaN);
``group_margin`` likewise for group scores (inf when topk_group == n_group, e.g. n_group == 1).

Scaling. Weights are multiplied by ``routed_scaling_factor`` (None → 1) whether or not they are
renormalized, as in DeepSeek's reference gate, FlashInfer and vLLM; SGLang's torch paths apply it only
inside ``renormalize`` and otherwise in the combine. ``renormalize`` is read by deepseek_v3, deepseek_v2
and sigmoid_renorm (FlashInfer's always-normalizing DeepSeekV3 kernels are ``renormalize=True``); every
other method's normalization is fixed by its name, and ``eps`` is read wherever a method renormalizes
(FlashInfer's sigmoid_renorm and minimax2 kernels use eps = 1e-20). Fused shared experts: S extra columns
with ids E, E+1, ..., E+S-1 and weight exactly 1 (``shared_weight="one"``, the default: DeepSeek-V3's model,
trtllm-gen) or Σ(routed weights)/rsf (``"routed_sum_over_rsf"``: SGLang's fused gate; its torch path draws the shared
id at random); they differ where every routed weight vanishes and without renormalization (docs/semantics.md §1.5).
"""

from collections import namedtuple
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from spec.numerics import round_to
from spec.recipes import DEFAULT, FIELD_VALUES, Recipe

KEY_CLASSES = ("raw", "softmax", "sigmoid")  # what a method ranks: the logits, a softmax over all E, σ(x) (+ bias)
SCORES = ("raw", "softmax", "sigmoid", "softmax_of_selected")  # what its weights are made of (before normalizing)
NORMALIZATIONS = ("none", "always", "if_renormalize")  # selected scores over their sum (+ eps): never, always, per flag


def renormalizes(method, renormalize=True):
    """Whether `method`'s weights are its selected scores over their sum (+ eps): always for renormalize_naive
    and minimax2, per ``renormalize`` for deepseek_v3, deepseek_v2 and sigmoid_renorm (METHODS)."""
    how = METHODS[method].normalizes
    return how == "always" or (renormalize and how == "if_renormalize")


class Routing(NamedTuple):
    ids: np.ndarray            # int32 [T, k + S], columns in selection order (key desc, id asc)
    weights: np.ndarray        # float32 (float64 when ideal) [T, k + S]
    expert_margin: np.ndarray  # float64 [T]: key of last selected - key of first rejected (inf if none)
    group_margin: np.ndarray   # float64 [T]: same for group scores (inf if no group is rejected)


class Option(NamedTuple):
    """One option of a routing call (route and the method functions), where its value comes from."""
    default: object      # the value when not given; top_k has none (None: it must be given)
    source: str          # OPTION_SOURCES
    values: tuple | None  # the values it takes; None: a range, held by check_options


# "case": a keyword, named as the difftest RoutingConfig field that holds it; "recipe": a spec.recipes.Recipe field of
# that name, which route(..., recipe=R) reads from R (its default and values are the Recipe's: recipes.FIELD_VALUES);
# "call": a keyword of one call only (the float64 ideal, forced ids).
OPTION_SOURCES = ("case", "recipe", "call")


def _from_recipe(name):
    return Option(Recipe.__dataclass_fields__[name].default, "recipe", FIELD_VALUES[name])


# Every option a routing call reads, in one place: difftest's RoutingConfig.route_kwargs, the case checks, the
# recipe's rounding points and the spec's own arithmetic read their names here (tests/project/test_routing_options.py).
OPTIONS = {
    "top_k": Option(None, "case", None),
    "n_group": Option(1, "case", None),
    "topk_group": Option(1, "case", None),
    "routed_scaling_factor": Option(None, "case", None),  # None: 1
    "renormalize": Option(True, "case", (True, False)),
    "eps": Option(0.0, "case", None),
    "num_fused_shared_experts": Option(0, "case", None),
    "group_mask_value": Option(-np.inf, "case", None),  # deepseek_v2 only; NaN never
    "bias": _from_recipe("bias"),  # the format the correction bias is read in
    "sigmoid": _from_recipe("sigmoid"),
    "exp": _from_recipe("exp"),
    "routing_weights": _from_recipe("routing_weights"),  # the weights' format as written
    "renorm_order": _from_recipe("renorm_order"),
    "group_score": _from_recipe("group_score"),
    "routing_scores": _from_recipe("routing_scores"),  # σ / softmax stored in
    "routing_bias_add": _from_recipe("routing_bias_add"),  # s + b stored in
    "routing_group_scores": _from_recipe("routing_group_scores"),  # a top-2 group sum stored in
    "routing_renorm": _from_recipe("routing_renorm"),  # Σw, + eps, the divide and the rsf multiply in
    "shared_weight": _from_recipe("shared_weight"),
    "ideal": Option(False, "call", (True, False)),
    "ids": Option(None, "call", None),  # forced routed ids [T, top_k]
}
CASE_OPTIONS = tuple(name for name, row in OPTIONS.items() if row.source == "case")
RECIPE_OPTIONS = tuple(name for name, row in OPTIONS.items() if row.source == "recipe")
KEYWORD_OPTIONS = tuple(name for name, row in OPTIONS.items() if row.source != "recipe")
_KEYWORD_DEFAULTS = {name: OPTIONS[name].default for name in KEYWORD_OPTIONS}


class _Options(namedtuple("_Options", tuple(OPTIONS))):
    """One call's options: the keywords given, the recipe's fields, the table's defaults."""
    __slots__ = ()

    @property
    def dtype(self):
        return np.float64 if self.ideal else np.float32

    @property
    def rsf(self):
        return self.dtype(1.0 if self.routed_scaling_factor is None else self.routed_scaling_factor)


def _options(recipe=DEFAULT, **given):
    """_Options of keywords `given` (checked by check_options) and `recipe`'s rounding points."""
    _require(isinstance(recipe, Recipe), f"recipe must be a spec.recipes.Recipe, got {type(recipe).__name__}")
    return _Options(**(_KEYWORD_DEFAULTS | given),
                    **{name: getattr(recipe, name) for name in RECIPE_OPTIONS})


def _require(ok, message):
    if not ok:
        raise ValueError(message)


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_options(method, num_experts, *, biased=False, **options):
    """Raise ValueError naming the first violated constraint of a routing call: `method` (METHODS) over
    `num_experts` experts with the keyword `options` (OPTIONS "case" and "call" rows), `biased` whether a correction
    bias is given. One message per constraint; difftest's case model raises them as its own (CaseError)."""
    _require(method in METHODS, f"method={method!r} is not one of {ROUTING_METHODS}")
    for name in options:
        _require(name not in RECIPE_OPTIONS,
                 f"{name} is a recipe field: route(..., recipe=R) reads it from R (spec.recipes.Recipe)")
        _require(name in OPTIONS, f"routing option {name!r} is not one of {KEYWORD_OPTIONS}")
    o = _KEYWORD_DEFAULTS | options
    E, k, G, tg, S = num_experts, o["top_k"], o["n_group"], o["topk_group"], o["num_fused_shared_experts"]
    _require(_is_int(E) and E >= 1, f"num_experts={E!r} must be an integer >= 1")
    _require(_is_int(k) and 1 <= k <= E, f"top_k={k!r} must be an integer in [1, num_experts={E}]")
    _require(_is_int(G) and G >= 1 and E % G == 0, f"n_group={G!r} must be an integer >= 1 dividing num_experts={E}")
    _require(_is_int(tg) and 1 <= tg <= G, f"topk_group={tg!r} must be an integer in [1, n_group={G}]")
    _require(G == 1 or METHODS[method].grouped,
             f"n_group={G} > 1 needs a grouped method {GROUPED_METHODS}: {method} has no expert groups")
    _require(k <= tg * (E // G), f"top_k={k} exceeds the {tg * (E // G)} experts of topk_group={tg} groups of "
                                 f"{E // G} (the kept groups)")
    _require(method != "llama4" or k == 1, f"top_k={k} must be 1: llama4 routes to exactly one expert")
    _require(not biased or METHODS[method].biased,
             f"a correction bias needs a biased method {BIASED_METHODS}: {method} takes none")
    for name in ("renormalize", "ideal"):
        _require(o[name] in OPTIONS[name].values, f"{name}={o[name]!r} must be a bool")
    rsf = o["routed_scaling_factor"]
    _require(rsf is None or (np.isfinite(rsf) and rsf > 0), f"routed_scaling_factor={rsf!r} must be None or finite "
                                                             "and > 0")
    _require(np.isfinite(o["eps"]) and o["eps"] >= 0, f"eps={o['eps']!r} must be finite and >= 0")
    _require(_is_int(S) and S >= 0, f"num_fused_shared_experts={S!r} must be an integer >= 0")
    mask = o["group_mask_value"]
    _require(not np.isnan(mask), "group_mask_value=nan: a dropped group's experts need a value that ranks")
    _require(method == "deepseek_v2" or mask == -np.inf,
             f"group_mask_value={mask} applies to deepseek_v2 only; {method} masks dropped groups with -inf")
    if o["ids"] is not None:
        ids = np.asarray(o["ids"])
        _require(ids.dtype.kind in "iu" and ids.ndim == 2 and ids.shape[1] == k,
                 f"ids (forced) must be an integer array [T, top_k={k}], got {ids.dtype} {ids.shape}")
        _require(ids.size == 0 or (ids.min() >= 0 and ids.max() < E), f"ids (forced) must lie in [0, {E})")
        _require(k == 1 or not (np.diff(np.sort(ids, axis=1), axis=1) == 0).any(),
                 "ids (forced) must be distinct within a token")


def _read(method, logits, bias, options):
    """Validate one call; return logits and bias in the working dtype (fp32; fp64 if ideal) + options."""
    recipe = options.pop("recipe", DEFAULT)
    logits = np.asarray(logits)
    _require(logits.dtype.kind == "f", f"logits must be a floating-point array, got dtype {logits.dtype}")
    _require(logits.ndim == 2 and logits.shape[1] >= 1,
             f"logits must be 2-D [T, E] with E >= 1, got shape {logits.shape}")
    E = logits.shape[1]
    check_options(method, E, biased=bias is not None, **options)
    o = _options(recipe, **options)
    _require(o.ids is None or len(o.ids) == logits.shape[0],
             f"ids (forced) have {0 if o.ids is None else len(o.ids)} rows, logits {logits.shape[0]}")
    if not METHODS[method].biased:
        return logits.astype(o.dtype), None, o
    bias = np.zeros(E, o.dtype) if bias is None else np.asarray(bias)
    _require(bias.dtype.kind == "f", f"bias must be a floating-point array, got dtype {bias.dtype}")
    _require(bias.shape == (E,), f"bias must have shape [E] = ({E},), got {bias.shape}")
    bias = bias.astype(o.dtype)
    if not o.ideal:
        bias = round_to(bias, o.bias)
    return logits.astype(o.dtype), bias, o


def _at(v, fmt, o):
    """v rounded to fmt: a routing step the recipe computes in a narrower format than fp32 (never when ideal)."""
    return v if o.ideal or fmt == "fp32" else round_to(v, fmt)


def _sum_in_order(x):
    """Σ_j x[:, j], left to right in x's dtype (the kernels accumulate in selection order)."""
    total = np.zeros(x.shape[0], x.dtype)
    for j in range(x.shape[1]):
        total = total + x[:, j]
    return total


LOG2E = np.float32(np.log2(np.e))  # fl(log2 e), the constant __expf multiplies by


def _exp(x, dtype, how="rn"):
    """fl(exp(x)): "rn" the float64 exponential rounded once to dtype; "ex2" fast-math __expf, 2^fl(x·fl(log2 e))
    with the fp32 product, then the power of two rounded once (overflow → inf, underflow → 0)."""
    with np.errstate(over="ignore"):
        if how == "ex2" and dtype == np.float32:
            return np.exp2((x.astype(np.float32) * LOG2E).astype(np.float64)).astype(dtype)
        return np.exp(x.astype(np.float64)).astype(dtype)


def _sigmoid(x, o):
    """σ(x) = 1/(1 + exp(-x)); "exact": the float64 value rounded once; "expf": exp, sum and quotient each
    rounded to fp32; "torch_cpu", "torch_cuda": the same formula (torch's exp is not correctly rounded:
    bounds.TORCH_CPU_SIGMOID_REL, TORCH_CUDA_SIGMOID_REL); "tanh": 0.5·t + 0.5, t = tanhf(0.5x) modelled correctly
    rounded (fp32 0.5x and 0.5t are exact), so σ = 0 exactly once t rounds to -1: x < -26·ln 2 ≈ -18.02."""
    if o.ideal or o.sigmoid == "exact":
        return _at((1 / (1 + np.exp(-x.astype(np.float64)))).astype(o.dtype), o.routing_scores, o)
    one, half = o.dtype(1), o.dtype(0.5)
    if o.sigmoid == "tanh":
        return _at(half * np.tanh((half * x).astype(np.float64)).astype(o.dtype) + half, o.routing_scores, o)
    return _at(one / (one + _exp(-x, o.dtype, o.exp)), o.routing_scores, o)


def _softmax(x, o):
    """p = exp(x - max x) / Σ exp(x - max x) per row: difference and exp rounded, Σ left to right, true
    division; stored in routing_scores."""
    e = _exp(x - x.max(axis=-1, keepdims=True), o.dtype, o.exp)
    return _at(e / _sum_in_order(e)[:, None], o.routing_scores, o)


def _gather(a, ids):
    return np.take_along_axis(a, ids, axis=-1)


def _difference(a, b):
    """a - b in float64, 0 where a == b (so equal infinite keys are a tie, not NaN)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.where(a == b, 0.0, a - b)


def _top_k(keys, k, candidates=None):
    """ids = first k of a stable sort on -keys (ties → lower index, NaN last); margin = key of the last id
    minus key of the first rejected candidate (inf when every candidate is selected)."""
    order = np.argsort(-keys, axis=-1, kind="stable")
    ids, rest = order[:, :k], order[:, k:]
    if rest.shape[1] == 0:
        return ids, np.full(len(keys), np.inf)
    eligible = np.ones(rest.shape, bool) if candidates is None else _gather(candidates, rest)
    first_rejected = _gather(rest, eligible.argmax(axis=-1)[:, None])
    margin = _difference(_gather(keys, ids[:, -1:]), _gather(keys, first_rejected))[:, 0]
    return ids, np.where(eligible.any(axis=-1), margin, np.inf)


def _select(keys, o, candidates=None):
    """_top_k of the method's keys; forced ``o.ids`` replace the ids, the margins stay the spec's own."""
    ids, margin = _top_k(keys, o.top_k, candidates)
    return (ids if o.ids is None else np.asarray(o.ids, np.int64)), margin


def _top2_sum(grouped, o):
    """Group score: the two largest keys of the group added, rounded in routing_group_scores (a one-expert group:
    its key); NaN ranks last."""
    top = -np.sort(-grouped, axis=-1)
    return top[..., 0] if top.shape[-1] == 1 else _at(top[..., 0] + top[..., 1], o.routing_group_scores, o)


def _group_max(grouped, o):
    """Group score: the largest key of the group; NaN ranks last."""
    return -np.sort(-grouped, axis=-1)[..., 0]


def _kept_groups(keys, o, group_score):
    """Mask [T, E] of the experts in the topk_group groups with the highest score (ties → lower group) and
    the group margin."""
    T, E = keys.shape
    if o.n_group == 1:  # no group score at all (FlashInfer's n_group=1 path): nothing to rank or reject
        return np.ones(keys.shape, bool), np.full(T, np.inf)
    groups, margin = _top_k(group_score(keys.reshape(T, o.n_group, E // o.n_group), o), o.topk_group)
    kept = np.zeros((T, o.n_group), bool)
    np.put_along_axis(kept, groups, True, axis=-1)
    return np.repeat(kept, E // o.n_group, axis=-1), margin


def group_rule(method, group_score, biased):
    """"top2_sum" or "max": what recipes.GROUP_SCORES' `group_score` means for `method` (module docstring),
    `biased` whether a correction bias is given."""
    return {"method": METHODS[method].group_score,
            "top2_sum_if_biased": "top2_sum" if biased else "max"}.get(group_score, group_score)


def _group_rule(method, o, biased):
    """The group score function of group_score for this call (module docstring)."""
    return _top2_sum if group_rule(method, o.group_score, biased) == "top2_sum" else _group_max


def _scale(w, o):
    """w · rsf, rounded in routing_renorm."""
    return _at(w * o.rsf, o.routing_renorm, o)


def _renormalized(w, o):
    """w/(Σw + eps)·rsf ("divide_then_scale"), or w·rsf/(Σw + eps) ("scale_then_divide", trtllm-gen); every
    step rounded in routing_renorm."""
    r = lambda v: _at(v, o.routing_renorm, o)
    denominator = r(r(_sum_in_order(w)) + o.dtype(o.eps))[:, None]
    if o.renorm_order == "scale_then_divide" and not o.ideal:
        return r(r(w * o.rsf) / denominator)
    return r(r(w / denominator) * o.rsf)


def _routing(ids, w, expert_margin, group_margin, num_experts, o):
    """Append S fused shared experts (ids E, E+1, ...; weight Σ routed w / rsf, or 1 with shared_weight "one"),
    then write the weights in routing_weights."""
    T, S = len(ids), o.num_fused_shared_experts
    each = np.ones(T, w.dtype) if o.shared_weight == "one" else _sum_in_order(w) / o.rsf
    shared = np.repeat(each[:, None], S, axis=1)
    ids = np.concatenate([ids, np.broadcast_to(num_experts + np.arange(S), (T, S))], axis=1)
    w = np.concatenate([w, shared], axis=1)
    if not o.ideal:
        w = round_to(w, o.routing_weights)
    return Routing(ids.astype(np.int32), w, expert_margin, group_margin)


_METHODS = {}


def _method(fn):
    """Register a routing method under its name; IEEE special values are results here, not warnings."""
    _METHODS[fn.__name__] = np.errstate(all="ignore")(fn)
    return _METHODS[fn.__name__]


def _no_groups(x):
    return np.full(len(x), np.inf)


@_method
def default(logits, bias=None, **options):
    """p = softmax(x) over all E; ids = top-k of p; w = p[ids]·rsf (no renormalization)."""
    x, _, o = _read("default", logits, bias, options)
    p = _softmax(x, o)
    ids, margin = _select(p, o)
    return _routing(ids, _scale(_gather(p, ids), o), margin, _no_groups(x), x.shape[1], o)


@_method
def renormalize(logits, bias=None, **options):
    """ids = top-k of the raw logits x; w = softmax(x[ids]) over the k picks, ·rsf (Mixtral / Qwen3)."""
    x, _, o = _read("renormalize", logits, bias, options)
    ids, margin = _select(x, o)
    return _routing(ids, _scale(_softmax(_gather(x, ids), o), o), margin, _no_groups(x), x.shape[1], o)


@_method
def renormalize_naive(logits, bias=None, **options):
    """p = softmax(x); ids = top-k of p; w = p[ids]/(Σ p[ids] + eps)·rsf."""
    x, _, o = _read("renormalize_naive", logits, bias, options)
    p = _softmax(x, o)
    ids, margin = _select(p, o)
    return _routing(ids, _renormalized(_gather(p, ids), o), margin, _no_groups(x), x.shape[1], o)


@_method
def deepseek_v3(logits, bias=None, **options):
    """s = σ(x), c = s + b; keep the topk_group groups with the largest group score of c (top-2 sum by default);
    ids = top-k of c in them; w = s[ids]/(Σ s[ids] + eps)·rsf if renormalize else s[ids]·rsf (weights from the
    unbiased s). No bias: b = 0."""
    x, b, o = _read("deepseek_v3", logits, bias, options)
    s = _sigmoid(x, o)
    c = _at(s + b, o.routing_bias_add, o)
    kept, group_margin = _kept_groups(c, o, _group_rule("deepseek_v3", o, bias is not None))
    ids, margin = _select(np.where(kept, c, o.dtype(-np.inf)), o, kept)
    w = _renormalized(_gather(s, ids), o) if o.renormalize else _scale(_gather(s, ids), o)
    return _routing(ids, w, margin, group_margin, x.shape[1], o)


@_method
def llama4(logits, bias=None, **options):
    """id = argmax x (top_k must be 1; first maximum wins); w = σ(x[id])·rsf."""
    x, _, o = _read("llama4", logits, bias, options)
    ids, margin = _select(x, o)
    return _routing(ids, _scale(_sigmoid(_gather(x, ids), o), o), margin, _no_groups(x), x.shape[1], o)


@_method
def topk(logits, bias=None, **options):
    """ids = top-k of the raw logits x; w = x[ids]·rsf (no softmax)."""
    x, _, o = _read("topk", logits, bias, options)
    ids, margin = _select(x, o)
    return _routing(ids, _scale(_gather(x, ids), o), margin, _no_groups(x), x.shape[1], o)


@_method
def sigmoid_renorm(logits, bias=None, **options):
    """s = σ(x); ids = top-k of s; w = s[ids]/(Σ s[ids] + eps)·rsf if renormalize (norm_topk_prob), else
    s[ids]·rsf."""
    x, _, o = _read("sigmoid_renorm", logits, bias, options)
    s = _sigmoid(x, o)
    ids, margin = _select(s, o)
    w = _renormalized(_gather(s, ids), o) if o.renormalize else _scale(_gather(s, ids), o)
    return _routing(ids, w, margin, _no_groups(x), x.shape[1], o)


@_method
def sigmoid(logits, bias=None, **options):
    """s = σ(x); ids = top-k of s (saturated sigmoids tie); w = s[ids]·rsf (no renormalization)."""
    x, _, o = _read("sigmoid", logits, bias, options)
    s = _sigmoid(x, o)
    ids, margin = _select(s, o)
    return _routing(ids, _scale(_gather(s, ids), o), margin, _no_groups(x), x.shape[1], o)


@_method
def topk_sigmoid(logits, bias=None, **options):
    """ids = top-k of the raw logits x; w = σ(x[ids])·rsf (no renormalization)."""
    x, _, o = _read("topk_sigmoid", logits, bias, options)
    ids, margin = _select(x, o)
    return _routing(ids, _scale(_sigmoid(_gather(x, ids), o), o), margin, _no_groups(x), x.shape[1], o)


@_method
def minimax2(logits, bias=None, **options):
    """s = σ(x); ids = top-k of s + b; w = s[ids]/(Σ s[ids] + eps)·rsf (weights from the unbiased s)."""
    x, b, o = _read("minimax2", logits, bias, options)
    s = _sigmoid(x, o)
    ids, margin = _select(_at(s + b, o.routing_bias_add, o), o)
    return _routing(ids, _renormalized(_gather(s, ids), o), margin, _no_groups(x), x.shape[1], o)


@_method
def deepseek_v2(logits, bias=None, **options):
    """p = softmax(x); keep the topk_group groups with the largest max p; q = p there, group_mask_value
    elsewhere (SGLang 0.0, vLLM -inf); ids = top-k of q; w = q[ids]/(Σ q[ids] + eps)·rsf if renormalize
    else q[ids]·rsf."""
    x, _, o = _read("deepseek_v2", logits, bias, options)
    p = _softmax(x, o)
    kept, group_margin = _kept_groups(p, o, _group_rule("deepseek_v2", o, False))
    q = np.where(kept, p, o.dtype(o.group_mask_value))
    ids, margin = _select(q, o, kept if o.group_mask_value == -np.inf else None)  # 0.0: dropped experts compete
    w = _renormalized(_gather(q, ids), o) if o.renormalize else _scale(_gather(q, ids), o)
    return _routing(ids, w, margin, group_margin, x.shape[1], o)



class Method(NamedTuple):
    """The facts of one routing method; every other module reads them from METHODS."""
    function: Callable  # the method's formula (its docstring)
    keys: str           # KEY_CLASSES: what selection ranks
    grouped: bool       # ranks expert groups first (n_group, topk_group)
    biased: bool        # adds a correction bias to the selection keys (weights stay unbiased)
    scores: str         # SCORES: the selected values weights are made of (softmax_of_selected: over the k picks)
    normalizes: str     # NORMALIZATIONS: whether those scores are divided by their sum (+ eps), before rsf
    group_score: str    # what recipe field group_score="method" means: "top2_sum" or "max" (ungrouped: max, moot)


# One row per method, in the order campaigns draw them (FlashInfer RoutingMethodType order, then SGLang's
# grouped softmax).
METHODS = {
    #                                        keys       grouped biased scores                 normalizes  group_score
    "default": Method(_METHODS["default"], "softmax", False, False, "softmax", "none", "max"),
    "renormalize": Method(_METHODS["renormalize"], "raw", False, False, "softmax_of_selected", "none", "max"),
    "renormalize_naive": Method(_METHODS["renormalize_naive"], "softmax", False, False, "softmax", "always", "max"),
    "deepseek_v3": Method(_METHODS["deepseek_v3"], "sigmoid", True, True, "sigmoid", "if_renormalize", "top2_sum"),
    "llama4": Method(_METHODS["llama4"], "raw", False, False, "sigmoid", "none", "max"),
    "topk": Method(_METHODS["topk"], "raw", False, False, "raw", "none", "max"),
    "sigmoid_renorm": Method(_METHODS["sigmoid_renorm"], "sigmoid", False, False, "sigmoid", "if_renormalize", "max"),
    "sigmoid": Method(_METHODS["sigmoid"], "sigmoid", False, False, "sigmoid", "none", "max"),
    "topk_sigmoid": Method(_METHODS["topk_sigmoid"], "raw", False, False, "sigmoid", "none", "max"),
    "minimax2": Method(_METHODS["minimax2"], "sigmoid", False, True, "sigmoid", "always", "max"),
    "deepseek_v2": Method(_METHODS["deepseek_v2"], "softmax", True, False, "softmax", "if_renormalize", "max"),
}
ROUTING_METHODS = tuple(METHODS)
GROUPED_METHODS = tuple(m for m, row in METHODS.items() if row.grouped)
BIASED_METHODS = tuple(m for m, row in METHODS.items() if row.biased)
SOFTMAX_METHODS = tuple(m for m, row in METHODS.items() if row.keys == "softmax")  # select on a softmax over all E
SIGMOID_METHODS = tuple(m for m, row in METHODS.items() if row.keys == "sigmoid")  # select on σ(x) (+ bias)
RAW_KEY_METHODS = tuple(m for m, row in METHODS.items() if row.keys == "raw")  # select on the logits


def route(logits, bias=None, *, method, recipe=DEFAULT, **options):
    """Route with the named method of ROUTING_METHODS. Keyword options (OPTIONS' "case" and "call" rows): top_k,
    n_group=1, topk_group=1, routed_scaling_factor=None, renormalize=True, eps=0.0, num_fused_shared_experts=0,
    group_mask_value=-inf, ideal=False, ids=None (forced routed ids [T, top_k]). The rounding points are the
    recipe's own fields (OPTIONS' "recipe" rows: bias, sigmoid, exp, routing_weights, renorm_order, group_score,
    routing_scores, routing_bias_add, routing_group_scores, routing_renorm, shared_weight), read from `recipe`
    (spec.recipes.Recipe; DEFAULT: fp32 routing); ideal=True ignores them."""
    _require(method in METHODS, f"method={method!r} is not one of {ROUTING_METHODS}")
    return METHODS[method].function(logits, bias, recipe=recipe, **options)


_IDEAL = _options(top_k=1, ideal=True)


@np.errstate(all="ignore")
def ideal_keys(logits, bias=None, *, method, n_group=1, group_score="max"):
    """(keys [T, E], group scores [T, n_group] or None when n_group is 1) in float64, evaluated as ``ideal=True``
    evaluates them: what `method` ranks (METHODS[method].keys: the logits, a softmax over all E, or σ(x) + b with
    the bias as given) and, per group, its "top2_sum" or "max" (group_rule)."""
    x = np.asarray(logits, np.float64)
    kind = METHODS[method].keys
    if kind == "raw":
        keys = x
    elif kind == "softmax":
        keys = _softmax(x, _IDEAL)
    else:
        keys = _sigmoid(x, _IDEAL) + (0.0 if bias is None else np.asarray(bias, np.float64))
    if n_group == 1:
        return keys, None
    T, E = keys.shape
    score = _top2_sum if group_score == "top2_sum" else _group_max
    return keys, score(keys.reshape(T, n_group, E // n_group), _IDEAL)


@np.errstate(all="ignore")
def ideal_scores(logits, *, method, ids):
    """float64 [T, k]: the scores `method` makes its weights of (METHODS[method].scores) at `ids` [T, k], before
    any normalization and rsf, evaluated as ``ideal=True`` evaluates them."""
    x, ids = np.asarray(logits, np.float64), np.asarray(ids, np.int64)
    kind = METHODS[method].scores
    if kind == "softmax_of_selected":
        return _softmax(_gather(x, ids), _IDEAL)
    if kind == "softmax":
        return _gather(_softmax(x, _IDEAL), ids)
    return _sigmoid(_gather(x, ids), _IDEAL) if kind == "sigmoid" else _gather(x, ids)


def expert_parallel_ids(ids, local_expert_offset, local_num_experts):
    """ids where local_expert_offset <= id < local_expert_offset + local_num_experts, else -1; ids stay
    global."""
    ids = np.asarray(ids)
    _require(ids.dtype.kind in "iu", f"ids must be an integer array, got dtype {ids.dtype}")
    _require(_is_int(local_expert_offset) and local_expert_offset >= 0,
             f"local_expert_offset must be an integer >= 0, got {local_expert_offset!r}")
    _require(_is_int(local_num_experts) and local_num_experts >= 0,
             f"local_num_experts must be an integer >= 0, got {local_num_experts!r}")
    local = (ids >= local_expert_offset) & (ids < local_expert_offset + local_num_experts)
    return np.where(local, ids, -1).astype(np.int32)


def exp_exponents(logits, method, ids, renormalize=True, sigmoid="expf"):
    """The relative error, in units of u, that fast-math exponentials (exp="ex2") add to the weights at `ids`
    [T, k] through their rounded arguments; None where no exponential of the recipe is evaluated so. e^x computed
    as 2^fl(x·fl(log2 e)) carries 2|x|·u relatively (the product and the constant each round once). Softmax
    methods: 2·softmax_exponents (z = x − max exponentiated). Sigmoid methods with sigmoid "expf":
    σ' = 1/(1 + e^{-x}(1 + ε)) moves by ε(1 − σ) relatively, a = 2|x|(1 − σ); renormalized weights
    s_i/Σ_j s_j over the k ids carry a_i + Σ_j q_j·a_j (q = s/Σ s), unrenormalized a_i."""
    if method in (*SOFTMAX_METHODS, "renormalize"):
        return 2 * softmax_exponents(logits, method, ids)
    if method not in (*SIGMOID_METHODS, "llama4", "topk_sigmoid") or sigmoid != "expf":
        return None
    x = np.take_along_axis(np.asarray(logits, np.float64), np.asarray(ids, np.int64), axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        s = 1 / (1 + np.exp(-x))
        a = np.where(np.isfinite(x), 2 * np.abs(x) * (1 - s), 0.0)
        if not renormalizes(method, renormalize):
            return a
        q = s / s.sum(axis=-1, keepdims=True)
        weighted = np.where(q > 0, q * a, 0.0).sum(axis=-1, keepdims=True)
    return a + np.where(np.isfinite(weighted), weighted, 0.0)


def softmax_exponents(logits, method, ids):
    """|z_i| + Σ_j p_j·|z_j| [T, k] at `ids`, z = x − max x over the terms a softmax of `method` exponentiates
    (all E for default, renormalize_naive, deepseek_v2; the k routed logits for renormalize), p the float64
    softmax; None for the methods without a softmax. An fp32 softmax rounds z before exp: each e^z then carries
    relative error u·|z|, so a weight e^z_i/Σ e^z_j moves by u·(|z_i| + Σ p_j|z_j|) relatively beyond the γ of
    spec.bounds.routing_weights (bounds.routing_weights' softmax_exponents)."""
    if method not in (*SOFTMAX_METHODS, "renormalize"):
        return None
    x = np.asarray(logits, np.float64)
    ids = np.asarray(ids, np.int64)
    if method == "renormalize":
        x = np.take_along_axis(x, ids, axis=-1)
        ids = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        z = x - x.max(axis=-1, keepdims=True, initial=-np.inf)
        p = np.exp(z)
        p = p / p.sum(axis=-1, keepdims=True)
        weighted = np.where(p > 0, p * np.abs(z), 0.0).sum(axis=-1, keepdims=True)
    own = np.abs(np.take_along_axis(z, ids, axis=-1))
    return np.where(np.isfinite(own), own, 0.0) + np.where(np.isfinite(weighted), weighted, 0.0)
