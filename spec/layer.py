"""The MoE layer: routing → activation quantization → GEMM1 → activation → re-quantization → GEMM2 → combine.

Semantics: docs/semantics.md §3-§5. Two modes. ``recipe=None`` is the float64 ideal:
the given inputs (bf16 hidden values, weight codes × scales) in exact float64 arithmetic, with no activation
quantization and no rounding anywhere; it is spec.recipes.IDEAL, every rounding an identity. A ``Recipe``
gives the recipe-exact result: activations quantized by the declared quantizer, GEMMs summed exactly, and one
``round_to`` at each recipe field. Next to every value runs its error shadow (spec/bounds.py), so the result
carries the bounds of bound_vs_recipe and bound_vs_ideal.

Scale: only experts that received tokens are visited, one at a time, each decoded from its codes on its own
(a DeepSeek-V3 layer never holds more than one expert in float64).
"""

from typing import NamedTuple

import numpy as np

from . import bounds
from .bounds import Err
from .hopper import hopper_block_sums
from .mlp import GATED_ACTIVATIONS, NONLINEARITY, check_activation, split_halves
from .numerics import E2M1, E4M3_VALUES, decode, decode_pairs, pair_table, round_to
from .quant import (
    FP8_BLOCK,
    MX_BLOCK,
    NVFP4_BLOCK,
    QUANT_PATHS,
    QUANT_TABLE,
    block_scaled_gemm,
    block_scales,
    mxfp8_quant,
    nvfp4_global_scale,
    nvfp4_quant,
    quantize,
    unpack_nibbles,
    w13_block_quant,
    weight_block_quant,
)
from .recipes import IDEAL, Recipe
from .routing import SIGMOID_METHODS, expert_parallel_ids, ideal_scores, renormalizes, route, softmax_exponents

RSF_PLACEMENTS = ("routing", "combine")
SCALE_FMTS = ("fp32", "ue8m0")  # fp8_block activation / intermediate scales (quant.per_token_group_quant_fp8)
ACCUMULATIONS = ("exact", "fp32", "fp32_pairwise", "fp32_truncating", "fp32_blocked", "hopper_fp8")
BLOCKED = ("fp32_blocked", "hopper_fp8")  # accumulations emulated on FP8 codes by block_scaled_gemm
SLAB = 16  # weight rows decoded at a time (divides FP8_BLOCK): a [16, 7168] float64 slab (0.9 MiB) stays in L2
E4M3_FLOAT64 = E4M3_VALUES.astype(np.float64)  # one gather and a same-dtype multiply decode a slab
E4M3_ABS_FLOAT64 = np.abs(E4M3_FLOAT64)
E4M3_FLOAT64_PAIRS, E4M3_ABS_FLOAT64_PAIRS = pair_table(E4M3_FLOAT64), pair_table(E4M3_ABS_FLOAT64)



class StackedWeights(NamedTuple):
    """ExpertWeights from a dict of [E, ...] arrays (keys as in docs/interfaces.md, per quant path). Any
    object with ``num_experts`` and ``expert(e) -> dict`` is an ExpertWeights (difftest generates experts on
    demand)."""

    arrays: dict

    @property
    def num_experts(self):
        return len(next(iter(self.arrays.values())))

    def expert(self, e):
        return {k: v[e] for k, v in self.arrays.items()}


def prepare_expert(w13, w2, quant, recipe, *, gated, scale_fmt="fp32"):
    """One expert's unquantized weights (float32 values: w13 [N1, H], w2 [H, I]) prepared as `recipe` declares
    (Recipe docstring, "Weight preparation"): the per-expert dict of the table in docs/interfaces.md."""
    if quant == "bf16":
        return {"w13": round_to(w13, "bf16"), "w2": round_to(w2, "bf16")}
    out = {}
    for name, w in (("w13", w13), ("w2", w2)):
        if quant == "fp8_block":
            keywords = dict(variant=recipe.weight_quant_variant, scale_formula=recipe.weight_scale_formula,
                            scale_fmt=scale_fmt)
            half = len(w) // 2
            q, sc = (w13_block_quant(w[:half], w[half:], **keywords) if name == "w13" and gated
                     else weight_block_quant(w, **keywords))
        elif quant == "mxfp8":
            q, sc = mxfp8_quant(w, rule=recipe.mx_rule)
        else:
            gs = nvfp4_global_scale(w)
            (q, sc), out[name + "_global"] = nvfp4_quant(w, gs), np.float32(gs)
        out[name], out[name + "_scale"] = q, sc
    return out


class PreparedWeights(NamedTuple):
    """ExpertWeights of unquantized weights (`source`, an ExpertWeights of {w13, w2} float32 values) prepared by
    `recipe` (prepare_expert), each expert with its given values as ``w13_values`` / ``w2_values``, from which
    the layer charges the preparation's own error to the recipe-vs-ideal bound."""

    source: object
    quant: str
    recipe: Recipe
    gated: bool
    scale_fmt: str = "fp32"

    @property
    def num_experts(self):
        return self.source.num_experts

    def expert(self, e):
        raw = self.source.expert(e)
        prepared = prepare_expert(raw["w13"], raw["w2"], self.quant, self.recipe, gated=self.gated,
                                  scale_fmt=self.scale_fmt)
        return {**prepared, "w13_values": raw["w13"], "w2_values": raw["w2"]}


class LayerResult(NamedTuple):
    out: np.ndarray  # [T, H] float32 values of recipe.out (float64 for the ideal)
    ids: np.ndarray  # int32 [T, k + S] global expert ids, selection order
    weights: np.ndarray  # [T, k + S] router weights as the experts use them
    expert_margin: np.ndarray  # float64 [T] (spec/routing.py)
    group_margin: np.ndarray  # float64 [T]
    errors: Err | None  # bounds at out (spec/bounds.py); None for the ideal
    flips: np.ndarray | None  # int [T]: intermediate elements an implementation may quantize to another code
    recipe: Recipe | None


class Operand(NamedTuple):
    values: np.ndarray  # [M, K] float64, exact
    fp8: tuple | None  # (e4m3 codes, DeepSeek block scales) when block_scaled_gemm can emulate accumulation
    changed: np.ndarray | None = None  # [M, K] float64: how far its FP8 code may move (bounds.code_changes)


def _gemm(a, w, accumulate, block=FP8_BLOCK):
    """a·wᵀ summed exactly in float64, or (emulations, for the bound tests) as one fp32 realization of the
    recipe: "fp32" sequential, "fp32_pairwise" (numpy's pairwise sum) and "fp32_truncating" (sequential, every
    addition rounded toward zero: a tensor_core accumulator) over fp32 products of the decoded values;
    "fp32_blocked" and "hopper_fp8": block_scaled_gemm on FP8 codes (as "fp32" for other operands), in K blocks
    of the activation's group width `block` (FP8_BLOCK, or 64 for mono_moe's re-quantization)."""
    if accumulate == "exact":
        return a.values @ w.values.T
    if accumulate in BLOCKED and a.fp8 is not None and w.fp8 is not None:
        (aq, a_s), (wq, w_s) = a.fp8, w.fp8
        r = FP8_BLOCK // block  # activation groups per 128-wide weight block: 2 for 1×64 (mono_moe)
        (n, k) = wq.shape
        w_s = np.repeat(np.repeat(w_s, r, 0), r, 1)[: -(-n // block), : -(-k // block)]
        acc = "fp32" if accumulate == "fp32_blocked" else accumulate
        return block_scaled_gemm(aq, a_s, wq, w_s, acc=acc, block=block)
    products = (a.values[:, None, :] * w.values[None, :, :]).astype(np.float32)
    if accumulate == "fp32_pairwise":
        return np.sum(products, axis=-1, dtype=np.float32).astype(np.float64)
    if accumulate == "fp32_truncating":
        return _truncating_sum(products)
    return np.cumsum(products, axis=-1, dtype=np.float32)[..., -1].astype(np.float64)


def _truncating_sum(products):
    """Σ_k products[..., k] in fp32, k ascending, each addition rounded toward zero. The float64 sum of two fp32
    values is exact unless their exponents lie more than 29 apart, and then it is off by far less than an fp32 ulp."""
    acc = np.zeros(products.shape[:-1])
    for k in range(products.shape[-1]):
        exact = acc + products[..., k]
        near = exact.astype(np.float32)
        acc = np.where(np.abs(near) > np.abs(exact), np.nextafter(near, np.float32(0)), near).astype(np.float64)
    return acc


def _parts(wd, name, quant, gated):
    """(first row, end row, first block-scale row) of each part of weight `name` with its own block-scale rows:
    the whole weight, or the two halves of a gated w13, which each have ceil(I/128) block-scale rows
    (docs/semantics.md §3)."""
    n = np.shape(wd[name])[0]
    if not (name == "w13" and gated):
        return [(0, n, 0)]
    if n % 2:
        raise ValueError(f"gated w13 needs 2I rows, got {n}")
    half = n // 2
    blocks = -(-half // FP8_BLOCK)
    if quant == "fp8_block" and np.shape(wd["w13_scale"])[0] != 2 * blocks:
        raise ValueError(
            f"gated fp8_block w13_scale needs 2·ceil(I/128) = {2 * blocks} rows, "
            f"got {np.shape(wd['w13_scale'])[0]}"
        )
    return [(0, half, 0), (half, n, blocks)]


def _slabs(wd, name, quant, gated):
    """(rows, block-scale rows) of each SLAB-row slab of weight `name`, the unit in which it is decoded: no
    slab straddles two parts (_parts), nor a block row."""
    return [
        (slice(r, min(r + SLAB, end)), slice(b, b + 1))
        for start, end, first in _parts(wd, name, quant, gated)
        for r in range(start, end, SLAB)
        for b in [first + (r - start) // FP8_BLOCK]
    ]


def _weight(wd, name, quant, rows, scale_rows, magnitude=False):
    """One slab of expert weight `name` (its `rows`, all in the block-scale row `scale_rows`), decoded
    exactly: code × scale in float64 (fp8_block with `magnitude`: |code| × scale, all the shadows need)."""
    w = np.asarray(wd[name])[rows]
    if quant == "bf16":
        return Operand(w.astype(np.float64), None)
    s = np.asarray(wd[name + "_scale"])
    if quant == "fp8_block":
        s = s[scale_rows]
        table, pairs = (E4M3_ABS_FLOAT64, E4M3_ABS_FLOAT64_PAIRS) if magnitude else (E4M3_FLOAT64, E4M3_FLOAT64_PAIRS)
        even = w.shape[1] % 2 == 0  # two codes per gather
        values = decode_pairs(pairs, np.ascontiguousarray(w).view(np.uint16)) if even else np.take(table, w)
        values *= block_scales(s, w.shape[1], FP8_BLOCK)
        return Operand(values, (w, s))
    s = s[rows]
    if quant == "mxfp8":
        return Operand(E4M3_VALUES[w] * block_scales(decode(s, QUANT_TABLE[quant].scale), w.shape[1], MX_BLOCK), None)
    sf = block_scales(decode(s, QUANT_TABLE[quant].scale), 2 * w.shape[1], NVFP4_BLOCK)
    return Operand(decode(unpack_nibbles(w), E2M1) * sf / np.float64(wd[name + "_global"]), None)


def _weight_gemm(x, ex, wd, name, c, gated=False, block=FP8_BLOCK, reach=None):
    """x·Wᵀ [M, N] (_gemm) and its Err (bounds.gemm; `block`: the K block of hopper_fp8), W decoded slab by
    slab from its codes: an expert is never whole in float64, and the four shadow products are one GEMM per
    slab. reach (lo, hi, rho): x's hard error is directed (bounds.directed_products), and moves with its groups'
    scales (bounds.scale_motion; rho None: no shared scale). Weights prepared from given values (PreparedWeights:
    ``<name>_values``) add their preparation error (|x| + δ_ideal)·|W − W_given|ᵀ to the ideal bound."""
    emulated = c.accumulate == "hopper_fp8" == c.recipe.gemm_acc and x.changed is not None
    hopper = ex and c.recipe.gemm_acc == "hopper_fp8" and x.fp8 is not None and c.quant == "fp8_block"
    exact = ex and not (ex.hard.any() or ex.prob.any() or ex.ideal.any())  # the given hidden states, as they are
    if exact:  # [|a|; 1]: |a|·|W|ᵀ, and Σ|W| for the three zero shadows (0·|W| is NaN in a row of W with NaN/Inf)
        left = np.concatenate([np.abs(x.values), np.ones((1, x.values.shape[1]))])
    else:
        left = ex and bounds.shadow_operand(x.values, ex)
    if ex and emulated:  # one more left operand: outputs whose block sums may see another code
        left = np.concatenate([left, (x.changed > 0).astype(np.float64)])
    given = wd.get(name + "_values")
    y, products, prepared, directed, truncation, w_live = [], [], [], [], [], []
    blocked = c.accumulate in BLOCKED and x.fp8 is not None and c.quant == "fp8_block"  # as _gemm decides
    if blocked:  # on the codes, one call per part (each output is its own sum): large calls amortize the setup
        for start, end, first in _parts(wd, name, c.quant, gated):
            s = np.asarray(wd[name + "_scale"])[first:first + -(-(end - start) // FP8_BLOCK)]
            y.append(_gemm(x, Operand(None, (np.asarray(wd[name])[start:end], s)), c.accumulate, block))
    for rows, scale_rows in _slabs(wd, name, c.quant, gated) if ex or not blocked else ():
        w = _weight(wd, name, c.quant, rows, scale_rows, magnitude=blocked)
        if not blocked:
            y.append(_gemm(x, w, c.accumulate, block))
        products.append(ex and left @ (w.values if blocked else np.abs(w.values)).T)
        if ex:  # weights prepared from given values: the implementation's own codes may be nonzero where those are
            live = w.values != 0 if given is None else (w.values != 0) | (np.asarray(given)[rows] != 0)
            w_live.append(np.count_nonzero(live, axis=1))
        if hopper:  # on the slab's codes (w.fp8), which magnitude decoding keeps signed
            truncation.append(_hopper_term(x, w, block, emulated))
        if ex and (given is not None or reach):  # both need the signed values, which blocked decoding skips
            signed = _weight(wd, name, c.quant, rows, scale_rows) if blocked else w
        if ex and given is not None:  # the preparation error
            off = np.abs(signed.values - np.asarray(given, np.float64)[rows])
            prepared.append((np.abs(x.values) + ex.ideal) @ off.T)
        if ex and reach:  # the directed charge
            lo, hi, rho = reach
            d = bounds.directed_products(lo, hi, np.maximum(signed.values, 0), np.maximum(-signed.values, 0))
            directed.append(d if rho is None else d + bounds.scale_motion(x.values, rho, signed.values, block))
    if not ex:
        return np.concatenate(y, axis=1), ex
    products = np.concatenate(products, axis=1)
    directed = np.concatenate(directed, axis=1) if directed else None
    if exact:
        m = len(x.values)
        products = np.concatenate([products[:m], *[np.broadcast_to(0.0 * products[m], (m, products.shape[1]))] * 3,
                                   products[m + 1:]])
    moved = None
    if emulated:
        products, moved = products[: 4 * len(x.values)], products[4 * len(x.values):] > 0
    fp8 = x.fp8 is not None and c.quant == "fp8_block"
    truncation = np.concatenate(truncation, axis=1) if hopper else None
    a_live = np.count_nonzero(np.abs(x.values) + ex.hard != 0, axis=1)  # NaN counts
    terms = bounds.nonzero_terms(a_live, np.concatenate(w_live))
    e = bounds.gemm_shadow(products, x.values.shape[1], c.recipe.gemm_acc, fp8, block, moved, directed, truncation,
                           terms)
    if prepared:
        e = e._replace(ideal=e.ideal + np.concatenate(prepared, axis=1))
    return np.concatenate(y, axis=1), e


def _hopper_term(x, w, block, emulated):
    """bounds.gemm_shadow's hopper term [M, slab] of one weight slab: Σ_b a_s·w_s·(bound of block b). A block
    whose codes may differ from the spec's: hopper_truncation (twice against emulated sums). One whose codes are
    the spec's: against emulated sums nothing (the same block sum), against exact sums its truncation exactly,
    |hopper_block_sums − exact| (the emulation is the tensor core's, bit for bit)."""
    (aq, a_s), (wq, w_s) = x.fp8, w.fp8
    a, wv = E4M3_FLOAT64[aq], E4M3_FLOAT64[wq]
    flips = np.zeros(aq.shape) if x.changed is None else x.changed
    kb = -(-a.shape[1] // block)
    scale = np.asarray(a_s, np.float64)[:, :kb] * np.repeat(np.asarray(w_s, np.float64)[0], FP8_BLOCK // block)[:kb]
    pad = ((0, 0), (0, kb * block - a.shape[1]))
    flipped = (np.pad(flips, pad).reshape(len(a), kb, block) > 0).any(axis=-1)[:, None, :]  # [M, 1, KB]
    if emulated:  # only rows with a block that may differ
        out, rows = np.zeros((len(a), len(wv))), np.flatnonzero(flipped.any(axis=(1, 2)))
        if rows.size:
            eps = bounds.hopper_truncation(a[rows], wv, flips[rows], block)
            out[rows] = np.einsum("mnb,mb->mn", np.where(flipped[rows], 2 * eps, 0.0), scale[rows])
        return out
    eps = bounds.hopper_truncation(a, wv, flips, block)  # [M, slab, KB]
    exact = np.einsum("mbk,nbk->mnb", np.pad(a, pad).reshape(len(a), kb, block),
                      np.pad(wv, pad).reshape(len(wv), kb, block))
    known = np.abs(hopper_block_sums(aq, wq, block) - exact)
    return np.einsum("mnb,mb->mn", np.where(flipped, eps, known), scale)


def _split(e, half_order):
    if not e:
        return e, e
    gates, ups = zip(*(split_halves(x, half_order) for x in e), strict=True)
    return Err(*gates), Err(*ups)


def _rows(e, t):
    return e and Err(*(x[t] for x in e))


def _stored(v, e, fmt, R, exact=False):
    """A rounding point of the recipe: v stored in fmt, and its error shadow e carried through the store
    (bounds.rounded; any result below fmt's min normal may be 0 under R.subnormals "flush"; exact: v is itself a
    stored value). e falsy: none."""
    r = round_to(v, fmt)
    return r, e and bounds.rounded(v, r, e, fmt, R.subnormals == "flush", exact=exact)


def _expert(x, ex, wt, ew, wd, c):
    """One expert on its tokens: x Operand rows [n, H] (error ex), router weights wt [n, 1] (error ew).
    -> (contribution to the combine sum [n, H], its Err, possible requant flips [n])."""
    R, gated = c.recipe, c.activation in GATED_ACTIVATIONS
    h, eh = _weight_gemm(x, ex, wd, "w13", c, gated)
    if c.router_weight_on_input:  # on GEMM1's fp32 accumulator, = (x·w)·W13 (docs/semantics.md §4.4)
        h, eh = h * wt, eh and bounds.product(h, wt, eh, ew, bounds.U32)
    h1, e1 = _stored(h, eh, R.gemm1_out, R)
    if c.quant == "fp8_block" and R.gemm1_out_quant:  # GEMM1 writes e4m3 with 1×128 scales; read as fl(code·scale)
        q = quantize(h1, c.quant, R, R.gemm1_out_quant_variant, R.gemm1_out_quant_scale_formula, FP8_BLOCK,
                     c.scale_fmt)
        h1, e1 = _stored(q.values, e1 and bounds.requantized(h1, e1, q), R.act_compute, R)
    f = NONLINEARITY[c.activation]
    if gated:
        (g, up), (eg, eup) = split_halves(h1, c.half_order), _split(e1, c.half_order)
    else:
        g, up, eg = h1, None, e1
    fg = f(g)
    a, ea = _stored(fg, eg and bounds.nonlinear(f.__name__, g, fg, eg), R.act_compute, R)
    if gated:
        a, ea = _stored(a * up, ea and bounds.product(a, up, ea, eup), R.act_compute, R)
    a2, ea2 = _stored(a, ea, R.act_out, R, exact=True)  # a is a stored act_compute value: exact
    last = (a, a2, ea)  # the intermediate's last rounding: GEMM2's operand error is its directed reach
    weighted_early = not c.router_weight_on_input and R.router_weight_at == "before_requant"
    if weighted_early:  # mono_moe: w·act in fp32, then the re-quantization sees the weighted value
        p, ep = a2 * wt, ea2 and bounds.product(a2, wt, ea2, ew, bounds.U32)
        a2, ea2 = _stored(p, ep, R.act_out, R)
        last = (p, a2, ep)
    flips = np.zeros(len(a2), int)
    group = FP8_BLOCK
    if (
        c.quant != "bf16" and R.requant_intermediate
    ):  # per token, on the stored intermediate (docs/semantics.md §4.3, step 4)
        group = R.requant_group if c.quant == "fp8_block" else FP8_BLOCK
        q = quantize(a2, c.quant, R, R.requant_variant, R.requant_scale_formula, group, c.scale_fmt)
        changed = ea2 and bounds.code_changes(a2, ea2, q)
        op, ev = Operand(q.values, q.fp8, changed if ea2 else None), ea2 and bounds.requantized(a2, ea2, q)
        reach = ea2 and bounds.requant_reach(a2, ea2, q)
        flips = np.count_nonzero(changed, axis=-1) if ea2 else flips
    else:
        op, ev = Operand(np.asarray(a2, np.float64), None), ea2
        reach = ea2 and bounds.rounded_reach(*last, R.act_out, R.subnormals == "flush", exact=not weighted_early)
    y, ey = _weight_gemm(op, ev, wd, "w2", c, block=group, reach=reach)
    weighted_in_gemm2 = not c.router_weight_on_input and R.router_weight_at == "gemm2"
    if weighted_in_gemm2:  # the fp32 accumulator times the router weight, then the expert_out write
        y, ey = y * wt, ey and bounds.product(y, wt, ey, ew, bounds.U32)
    ye, eye = _stored(y, ey, R.expert_out, R)
    if weighted_in_gemm2 or weighted_early or c.router_weight_on_input:
        return ye.astype(np.float64), eye, flips
    return ye * wt, eye and bounds.product(ye, wt, eye, ew), flips


class _Config(NamedTuple):
    activation: str
    half_order: str
    quant: str
    router_weight_on_input: bool
    recipe: Recipe
    accumulate: str
    scale_fmt: str


def _route(logits, bias, routing, rsf_placement, recipe, ids):
    """spec Routing under the recipe (ideal: float64); rsf_placement "combine" leaves rsf to the combine and
    gives fused shared experts 1/rsf of their weight, so that they count once after it (docs/semantics.md §1.5)."""
    options = dict(routing)
    rsf = options.get("routed_scaling_factor")
    if rsf_placement == "combine":
        options["routed_scaling_factor"] = None
    if ids is not None:
        options["ids"] = ids
    if recipe is None:
        r = route(logits, bias, **options, ideal=True)
    else:
        r = route(round_to(logits, recipe.logits), bias, **options, recipe=recipe)
    k = options["top_k"]
    if rsf_placement == "combine" and rsf is not None and r.ids.shape[1] > k:
        shared = r.weights[:, k:] / rsf
        w = r.weights.copy()
        w[:, k:] = shared if recipe is None else round_to(shared, recipe.routing_weights)
        r = r._replace(weights=w)
    return r


def _routing_rsf(routing, rsf_placement):
    """The routed scaling factor inside the routing weights (1 when the combine applies it)."""
    rsf = routing.get("routed_scaling_factor")
    return 1.0 if rsf is None or rsf_placement != "routing" else rsf


def _tanh_score_sum(logits, routing, ids, R):
    """Σ of the exact selected sigmoids + eps [T, 1] where a "tanh" recipe's weights are renormalized sigmoids
    (deepseek_v3 and sigmoid_renorm with renormalize, minimax2), for bounds.routing_weights' absolute
    tanh.approx term; None elsewhere (that term then assumes unrenormalized weights)."""
    method = routing["method"]
    renormalized = method in SIGMOID_METHODS and renormalizes(method, routing.get("renormalize", True))
    if R.sigmoid != "tanh" or not renormalized:
        return None
    return ideal_scores(logits, method=method, ids=ids).sum(axis=1, keepdims=True) + routing.get("eps", 0.0)


def moe_layer(
    hidden,
    logits,
    bias,
    weights,
    *,
    routing,
    activation,
    half_order="gate_up",
    quant="bf16",
    local_expert_offset=0,
    local_num_experts=None,
    rsf_placement="routing",
    router_weight_on_input=False,
    recipe=None,
    ids=None,
    accumulate=None,
    scale_fmt="fp32",
    router_weights=None,
):
    """out[t] = Σ_j w[t, j]·W2_e·act(W13_e·x[t]) over the local experts e = ids[t, j] (rsf in the routing
    weights or multiplying the sum, per rsf_placement), recipe-exact or ideal. hidden [T, H], logits [T, E],
    weights an ExpertWeights holding E + S experts (global ids). accumulate (ACCUMULATIONS): how GEMMs sum;
    None = the recipe's: "hopper_fp8" (bit-exact emulation, tight bounds) for a hopper_fp8 recipe, else
    "exact" (the bounds cover any summation order). scale_fmt (SCALE_FMTS, fp8_block): the activation and
    intermediate scales, fp32 or rounded up to powers of two (ue8m0). router_weights [T, top_k] (with ids) replaces
    the routed weights as written (an implementation's own, for difftest/checking/bias.py); the bounds still
    describe the recipe's. -> LayerResult."""
    if accumulate is None:
        accumulate = "hopper_fp8" if recipe is not None and recipe.gemm_acc == "hopper_fp8" else "exact"
    check_activation(activation, half_order)
    for name, value, allowed in (
        ("quant", quant, QUANT_PATHS),
        ("rsf_placement", rsf_placement, RSF_PLACEMENTS),
        ("accumulate", accumulate, ACCUMULATIONS),
        ("scale_fmt", scale_fmt, SCALE_FMTS),
    ):
        if value not in allowed:
            raise ValueError(f"{name}={value!r} is not one of {allowed}")
    if recipe is not None and not isinstance(recipe, Recipe):
        raise ValueError(f"recipe must be a spec.recipes.Recipe or None, got {type(recipe).__name__}")
    if router_weight_on_input and rsf_placement == "combine":
        raise ValueError(
            "router_weight_on_input applies the full router weight: rsf_placement must be 'routing'"
        )
    hidden = np.asarray(hidden)
    if hidden.ndim != 2 or np.shape(logits)[0] != hidden.shape[0]:
        raise ValueError(
            f"hidden must be [T, H] with T = logits.shape[0], got {hidden.shape}, {np.shape(logits)}"
        )
    T, H = hidden.shape
    E, S = np.shape(logits)[1], routing.get("num_fused_shared_experts", 0)
    if weights.num_experts != E + S:
        raise ValueError(f"weights.num_experts={weights.num_experts} must be num_experts + shared = {E + S}")
    n_local = weights.num_experts - local_expert_offset if local_num_experts is None else local_num_experts
    R = IDEAL if recipe is None else recipe
    r = _route(logits, bias, routing, rsf_placement, recipe, ids)
    if router_weights is not None:
        if ids is None or np.shape(router_weights) != np.shape(ids):
            raise ValueError(f"router_weights {np.shape(router_weights)} need ids of the same shape, got "
                             f"{None if ids is None else np.shape(ids)}")
        r = r._replace(weights=np.concatenate([np.asarray(router_weights, r.weights.dtype),
                                               r.weights[:, np.shape(ids)[1]:]], axis=1))
    local = expert_parallel_ids(r.ids, local_expert_offset, n_local)
    tracked = recipe is not None
    if scale_fmt not in QUANT_TABLE[quant].scale_fmts:
        raise ValueError(f"scale_fmt={scale_fmt!r} needs quant='fp8_block', got {quant!r}")
    if tracked and quant != "bf16":
        q = quantize(hidden, quant, R, R.act_quant_variant, R.act_scale_formula, scale_fmt=scale_fmt)
        hidden64 = np.asarray(hidden, np.float64)  # every quantizer is reproduced bit for bit (hopper_rcp: measured)
        ex = bounds.quantized_input(hidden64, q)
        x = Operand(q.values, q.fp8, bounds.code_changes(hidden64, Err(*(np.zeros_like(hidden64),) * 3), q))
    else:
        x, ex = Operand(np.asarray(hidden, np.float64), None), tracked and bounds.zero((T, H))
        if tracked and R.subnormals == "flush":
            ex = bounds.flushed_input(hidden, ex)
    k = routing["top_k"]
    unrounded = None
    if tracked and R.routing_weights != "fp32":  # the same routing before its write: the rounding rule applies
        unrounded = _route(logits, bias, routing, rsf_placement, R.but(routing_weights="fp32"), ids).weights[:, :k]
    ew = tracked and bounds.routing_weights(r.weights, R, E, k, _tanh_score_sum(logits, routing, r.ids[:, :k], R),
                                            _routing_rsf(routing, rsf_placement), unrounded=unrounded,
                                            softmax_exponents=softmax_exponents(logits, routing["method"],
                                                                                r.ids[:, :k]))
    c = _Config(activation, half_order, quant, router_weight_on_input, R, accumulate, scale_fmt)
    total, total_abs = np.zeros((T, H)), np.zeros((T, H))
    err = tracked and bounds.zero((T, H))
    flips = np.zeros(T, int)
    for e in np.unique(local[local >= 0]):
        t, j = np.nonzero(local == e)  # a token selects an expert at most once: t has no repeats
        wt = r.weights[t, j].astype(np.float64)[:, None]
        term, et, fl = _expert(
            Operand(x.values[t], x.fp8 and (x.fp8[0][t], x.fp8[1][t]), None if x.changed is None else x.changed[t]),
            ex and _rows(ex, t),
            wt,
            ew and Err(*(v[t, j][:, None] for v in ew)),
            weights.expert(e),
            c,
        )
        total[t] += term
        total_abs[t] += np.abs(term)
        flips[t] += fl
        for acc, v in zip(err or (), et or (), strict=True):
            acc[t] += v
    rsf = routing.get("routed_scaling_factor") if rsf_placement == "combine" else None
    out, err = _combine(total, total_abs, err, local.shape[1], rsf, R)
    return LayerResult(
        out,
        r.ids,
        r.weights,
        r.expert_margin,
        r.group_margin,
        err or None,
        flips if tracked else None,
        recipe,
    )


def _combine(total, total_abs, err, slots, rsf, R):
    """out = R_out(R_combine(Σ_j terms)·rsf): the sum in `combine` (fp32 moe_sum_reduce / finalize), rsf once
    after it, one write in `out`. err: the summed shadows of the terms."""
    err = err and bounds.summed(total_abs, err, slots + 1, R.combine)
    if err and R.subnormals == "flush":  # the slots' weighted terms w·y and the slots − 1 additions
        err = bounds.flushed_reduction(err, 2 * slots - 1, R.combine)
    c, err = _stored(total, err, R.combine, R)
    if rsf is not None:
        c, err = _stored(c * np.float64(rsf), err and bounds.product(c, np.float64(rsf), err, Err(0.0, 0.0, 0.0)),
                         R.combine, R)
    return _stored(c, err, R.out, R, exact=True)  # c is a stored combine value: exact
