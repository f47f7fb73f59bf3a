"""The MoE layer: routing → activation quantization → GEMM1 → activation → re-quantization → GEMM2 → combine.

Semantics: docs/semantics.md §3-§5. Two modes. ``recipe=None`` is the float64 ideal:
the given inputs (bf16 hidden values, weight codes × scales) in exact float64 arithmetic, with no activation
quantization and no rounding anywhere; it is the IDEAL recipe below, every rounding an identity. A ``Recipe``
gives the recipe-exact result: activations quantized by the declared quantizer, GEMMs summed exactly, and one
``round_to`` at each recipe field. Next to every value runs its error shadow (spec/bounds.py), so the result
carries the bounds of bound_vs_recipe and bound_vs_ideal.

Scale: only experts that received tokens are visited, one at a time, each decoded from its codes on its own
(a DeepSeek-V3 layer never holds more than one expert in float64).
"""

from typing import NamedTuple

import numpy as np

from . import bounds
from .bounds import Err, Quantized
from .mlp import GATED_ACTIVATIONS, NONLINEARITY, check_activation, split_halves
from .numerics import E2M1, E4M3FN, E8M0, decode, round_to
from .quant import (
    E4M3_VALUES,
    FP8_BLOCK,
    MX_BLOCK,
    NVFP4_BLOCK,
    block_scaled_gemm,
    mxfp8_quant,
    nvfp4_global_scale,
    nvfp4_quant,
    per_token_group_quant_fp8,
    w13_block_quant,
    weight_block_quant,
)
from .recipes import Recipe
from .routing import SIGMOID_METHODS, expert_parallel_ids, renormalizes, route, softmax_exponents

QUANT_PATHS = ("bf16", "fp8_block", "mxfp8", "nvfp4")
RSF_PLACEMENTS = ("routing", "combine")
SCALE_FMTS = ("fp32", "ue8m0")  # fp8_block activation / intermediate scales (quant.per_token_group_quant_fp8)
ACCUMULATIONS = ("exact", "fp32", "fp32_pairwise", "fp32_blocked", "hopper_fp8")
SLAB = 32  # weight rows decoded at a time (divides FP8_BLOCK): a [32, 7168] float64 slab stays in L2
E4M3_FLOAT64 = E4M3_VALUES.astype(np.float64)  # one gather and a same-dtype multiply decode a slab
QUANT_EPS = 1e-10  # amax floor of every FP8 quantizer here
APPROX_DIVIDE = 3 * 2.0**-24  # x·fl(448·rcp(amax)): rcp within 1 ulp of the device's unless amax is bf16

IDEAL = Recipe(
    name="ideal",
    logits="fp64",
    gemm_acc="fp64",
    gemm1_out="fp64",
    act_compute="fp64",
    act_out="fp64",
    requant_intermediate=False,
    expert_out="fp64",
    combine="fp64",
    out="fp64",
)


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
    changed: np.ndarray | None = None  # [M, K] bool: an implementation's FP8 code may differ here (fp8 only)


def _gemm(a, w, accumulate):
    """a·wᵀ summed exactly in float64, or (emulations, for the bound tests) as one fp32 realization of the
    recipe: "fp32" sequential and "fp32_pairwise" (numpy's pairwise sum) over fp32 products of the decoded
    values; "fp32_blocked" and "hopper_fp8": block_scaled_gemm on FP8 codes (as "fp32" for other operands)."""
    if accumulate == "exact":
        return a.values @ w.values.T
    if accumulate in ("fp32_blocked", "hopper_fp8") and a.fp8 is not None and w.fp8 is not None:
        (aq, a_s), (wq, w_s) = a.fp8, w.fp8
        r = a_s.shape[1] // w_s.shape[1]  # activation groups per 128-wide weight block: 2 for 1×64 (mono_moe)
        w_s = np.repeat(np.repeat(w_s, r, 0), r, 1)[: -(-wq.shape[0] * r // FP8_BLOCK)]
        acc = "fp32" if accumulate == "fp32_blocked" else accumulate
        return block_scaled_gemm(aq, a_s, wq, w_s, acc=acc, block=FP8_BLOCK // r)
    products = (a.values[:, None, :] * w.values[None, :, :]).astype(np.float32)
    if accumulate == "fp32_pairwise":
        return np.sum(products, axis=-1, dtype=np.float32).astype(np.float64)
    return np.cumsum(products, axis=-1, dtype=np.float32)[..., -1].astype(np.float64)


def _block_scales(scales, width, cols_per_scale):
    """Dequant multiplier of each column: scales [R, ceil(width/cols_per_scale)] -> float64 [R, width]."""
    return np.repeat(np.asarray(scales, np.float64), cols_per_scale, 1)[:, :width]


def _nibbles(packed):
    return np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[0], -1)


def _slabs(wd, name, quant, gated):
    """(rows, block-scale rows) of each SLAB-row slab of weight `name`, the unit in which it is decoded. The
    two halves of a gated w13 each have their own ceil(I/128) block-scale rows (docs/semantics.md §3): no slab straddles
    them, nor a block row."""
    n = np.shape(wd[name])[0]
    parts = [(0, n, 0)]
    if name == "w13" and gated:
        if n % 2:
            raise ValueError(f"gated w13 needs 2I rows, got {n}")
        half = n // 2
        blocks = -(-half // FP8_BLOCK)
        if quant == "fp8_block" and np.shape(wd["w13_scale"])[0] != 2 * blocks:
            raise ValueError(
                f"gated fp8_block w13_scale needs 2·ceil(I/128) = {2 * blocks} rows, "
                f"got {np.shape(wd['w13_scale'])[0]}"
            )
        parts = [(0, half, 0), (half, n, blocks)]
    return [
        (slice(r, min(r + SLAB, end)), slice(b, b + 1))
        for start, end, first in parts
        for r in range(start, end, SLAB)
        for b in [first + (r - start) // FP8_BLOCK]
    ]


def _weight(wd, name, quant, rows, scale_rows):
    """One slab of expert weight `name` (its `rows`, all in the block-scale row `scale_rows`), decoded
    exactly: code × scale in float64."""
    w = np.asarray(wd[name])[rows]
    if quant == "bf16":
        return Operand(w.astype(np.float64), None)
    s = np.asarray(wd[name + "_scale"])
    if quant == "fp8_block":
        s = s[scale_rows]
        return Operand(E4M3_FLOAT64[w] * _block_scales(s, w.shape[1], FP8_BLOCK), (w, s))
    s = s[rows]
    if quant == "mxfp8":
        return Operand(E4M3_VALUES[w] * _block_scales(decode(s, E8M0), w.shape[1], MX_BLOCK), None)
    sf = _block_scales(decode(s, E4M3FN), 2 * w.shape[1], NVFP4_BLOCK)
    return Operand(decode(_nibbles(w), E2M1) * sf / np.float64(wd[name + "_global"]), None)


def _weight_gemm(x, ex, wd, name, c, gated=False, block=FP8_BLOCK):
    """x·Wᵀ [M, N] (_gemm) and its Err (bounds.gemm; `block`: the K block of hopper_fp8), W decoded slab by
    slab from its codes: an expert is never whole in float64, and the four shadow products are one GEMM per
    slab. Weights prepared from given values (PreparedWeights: ``<name>_values``) add their preparation error
    (|x| + δ_ideal)·|W − W_given|ᵀ to the ideal bound."""
    emulated = c.accumulate == "hopper_fp8" == c.recipe.gemm_acc and x.changed is not None
    left = ex and bounds.shadow_operand(x.values, ex)
    if ex and emulated:  # one more left operand: outputs whose block sums may see another code
        left = np.concatenate([left, x.changed.astype(np.float64)])
    given = wd.get(name + "_values")
    y, products, prepared = [], [], []
    for rows, scale_rows in _slabs(wd, name, c.quant, gated):
        w = _weight(wd, name, c.quant, rows, scale_rows)
        y.append(_gemm(x, w, c.accumulate))
        products.append(ex and left @ np.abs(w.values).T)
        if ex and given is not None:
            off = np.abs(w.values - np.asarray(given, np.float64)[rows])
            prepared.append((np.abs(x.values) + ex.ideal) @ off.T)
    if not ex:
        return np.concatenate(y, axis=1), ex
    products = np.concatenate(products, axis=1)
    moved = None
    if emulated:
        products, moved = products[: 4 * len(x.values)], products[4 * len(x.values):] > 0
    fp8 = x.fp8 is not None and c.quant == "fp8_block"
    e = bounds.gemm_shadow(products, x.values.shape[1], c.recipe.gemm_acc, fp8, block, moved)
    if prepared:
        e = e._replace(ideal=e.ideal + np.concatenate(prepared, axis=1))
    return np.concatenate(y, axis=1), e


def _nvfp4_rows(x):
    """NVFP4 per token: each row its own global scale gs = 448·6/max(amax(row), 1e-10)."""
    values, scale = np.zeros(x.shape), np.zeros(x.shape)
    for t, row in enumerate(x):
        gs = nvfp4_global_scale(row)
        packed, sf = nvfp4_quant(row[None], gs)
        scale[t] = np.repeat(decode(sf[0], E4M3FN).astype(np.float64), NVFP4_BLOCK) / np.float64(gs)
        values[t] = decode(_nibbles(packed)[0], E2M1) * scale[t]
    return values, scale


def _rcp_exact(x, group):
    """Every `group`-column amax (NaN read as 0) is 0 or a bf16 value above the 1e-10 floor (inputs of bf16
    values). quant.hopper_rcp is exact for every fp32 amax since it reads the whole measured table; the bound
    still charges APPROX_DIVIDE elsewhere (conservative, as before the table)."""
    x = np.abs(np.nan_to_num(np.asarray(x, np.float32), nan=0.0, posinf=np.inf, neginf=-np.inf))
    amax = x.reshape(x.shape[0], -1, group).max(axis=-1)
    return bool(np.all((amax == 0) | ((amax >= QUANT_EPS) & (round_to(amax, "bf16") == amax))))


def quant_448_div_amax(x, group):
    """mono_moe's quantizer per (row, `group` columns): NaN → 0, then per_token_group_quant_fp8 with variant
    "mul_448_div_amax" (amax = max(|x|, 1e-10), s = fl(amax·fl(1/448)), q = e4m3_satfinite(fl(x·fl(448·rcp(amax)))),
    rcp the device's reciprocal: quant.hopper_rcp, the measured MUFU.RCP of every fp32 amax).
    [M, K] -> (q uint8 [M, K], s float32 [M, K/group])."""
    x = np.where(np.isnan(x), np.float32(0), x).astype(np.float32)
    return per_token_group_quant_fp8(x, group, eps=QUANT_EPS, variant="mul_448_div_amax", scale_formula="mul_rcp448")


def quantize(x, quant, recipe, variant, scale_formula, group=FP8_BLOCK, scale_fmt="fp32"):
    """Activation quantization of x [M, K] on a quant path: fp8_block 1×`group` (per_token_group_quant_fp8 with
    `variant`, `scale_formula`, `scale_fmt`, or quant_448_div_amax), mxfp8 (recipe.mx_rule), nvfp4 (per-token
    global scale). -> Quantized (a ue8m0 scale moves in powers of two: not linear in amax)."""
    x = np.asarray(x, np.float32)
    if quant == "fp8_block":
        if variant == "mul_448_div_amax":
            if scale_fmt != "fp32":
                raise ValueError(f"the mul_448_div_amax quantizer (mono_moe) has no {scale_fmt} scales")
            q, s = quant_448_div_amax(x, group)
        else:
            q, s = per_token_group_quant_fp8(x, group, variant=variant, scale_formula=scale_formula,
                                             scale_fmt=scale_fmt)
        scale = _block_scales(s, x.shape[1], group)
        return Quantized(
            E4M3_VALUES[q] * scale, scale, "e4m3fn", (group,), E4M3FN.unit_roundoff, scale_fmt == "fp32", (q, s)
        )
    if quant == "mxfp8":
        q, e8 = mxfp8_quant(x, rule=recipe.mx_rule)
        scale = _block_scales(decode(e8, E8M0), x.shape[1], MX_BLOCK)
        u = E4M3FN.unit_roundoff * (2 if recipe.mx_rule == "ocp" else 1)  # ocp: x/X < 512 saturates at 448
        return Quantized(E4M3_VALUES[q] * scale, scale, "e4m3fn", (MX_BLOCK,), u, False, None)
    values, scale = _nvfp4_rows(x)
    return Quantized(values, scale, "e2m1", (NVFP4_BLOCK, x.shape[1]), E2M1.unit_roundoff, False, None)


def _split(e, half_order):
    if not e:
        return e, e
    gates, ups = zip(*(split_halves(x, half_order) for x in e), strict=True)
    return Err(*gates), Err(*ups)


def _rows(e, t):
    return e and Err(*(x[t] for x in e))


def _expert(x, ex, wt, ew, wd, c):
    """One expert on its tokens: x Operand rows [n, H] (error ex), router weights wt [n, 1] (error ew).
    -> (contribution to the combine sum [n, H], its Err, possible requant flips [n])."""
    R, gated = c.recipe, c.activation in GATED_ACTIVATIONS
    h, eh = _weight_gemm(x, ex, wd, "w13", c, gated)
    if c.router_weight_on_input:  # on GEMM1's fp32 accumulator, = (x·w)·W13 (docs/semantics.md §4.4)
        h, eh = h * wt, eh and bounds.product(h, wt, eh, ew, bounds.U32)
    h1 = round_to(h, R.gemm1_out)
    e1 = eh and bounds.rounded(h, h1, eh, R.gemm1_out, R.subnormals == "flush")
    f = NONLINEARITY[c.activation]
    if gated:
        (g, up), (eg, eup) = split_halves(h1, c.half_order), _split(e1, c.half_order)
    else:
        g, up, eg = h1, None, e1
    fg = f(g)
    a = round_to(fg, R.act_compute)
    ea = eg and bounds.rounded(fg, a, bounds.nonlinear(f.__name__, g, fg, eg), R.act_compute,
                               R.subnormals == "flush")
    if gated:
        p = a * up
        ep = ea and bounds.product(a, up, ea, eup)
        a = round_to(p, R.act_compute)
        ea = ep and bounds.rounded(p, a, ep, R.act_compute, R.subnormals == "flush")
    a2 = round_to(a, R.act_out)
    ea2 = ea and bounds.rounded(a, a2, ea, R.act_out, R.subnormals == "flush")
    weighted_early = not c.router_weight_on_input and R.router_weight_at == "before_requant"
    if weighted_early:  # mono_moe: w·act in fp32, then the re-quantization sees the weighted value
        p = a2 * wt
        ep = ea2 and bounds.product(a2, wt, ea2, ew, bounds.U32)
        a2 = round_to(p, R.act_out)
        ea2 = ep and bounds.rounded(p, a2, ep, R.act_out, R.subnormals == "flush")
    flips = np.zeros(len(a2), int)
    group = FP8_BLOCK
    if (
        c.quant != "bf16" and R.requant_intermediate
    ):  # per token, on the stored intermediate (docs/semantics.md §4.3, step 4)
        group = R.requant_group if c.quant == "fp8_block" else FP8_BLOCK
        q = quantize(a2, c.quant, R, R.requant_variant, R.requant_scale_formula, group, c.scale_fmt)
        changed = ea2 and bounds.code_changes(a2, ea2, q)
        op, ev = Operand(q.values, q.fp8, changed if ea2 else None), ea2 and bounds.requantized(a2, ea2, q)
        flips = np.count_nonzero(changed, axis=-1) if ea2 else flips
    else:
        op, ev = Operand(np.asarray(a2, np.float64), None), ea2
    y, ey = _weight_gemm(op, ev, wd, "w2", c, block=group)
    weighted_in_gemm2 = not c.router_weight_on_input and R.router_weight_at == "gemm2"
    if weighted_in_gemm2:  # the fp32 accumulator times the router weight, then the expert_out write
        y, ey = y * wt, ey and bounds.product(y, wt, ey, ew, bounds.U32)
    ye = round_to(y, R.expert_out)
    eye = ey and bounds.rounded(y, ye, ey, R.expert_out, R.subnormals == "flush")
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
        r = route(
            round_to(logits, recipe.logits),
            bias,
            **{
                **options,
                "bias_dtype": recipe.bias,
                "sigmoid": recipe.sigmoid,
                "exp": recipe.exp,
                "weights_dtype": recipe.routing_weights,
                "renorm_order": recipe.renorm_order,
                "group_score": recipe.group_score,
                "scores_dtype": recipe.routing_scores,
                "bias_add_dtype": recipe.routing_bias_add,
                "group_scores_dtype": recipe.routing_group_scores,
                "renorm_dtype": recipe.routing_renorm,
            },
        )
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
    x = np.take_along_axis(np.asarray(logits, np.float64), np.asarray(ids, np.int64), axis=1)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
    return s.sum(axis=1, keepdims=True) + routing.get("eps", 0.0)


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
):
    """out[t] = Σ_j w[t, j]·W2_e·act(W13_e·x[t]) over the local experts e = ids[t, j] (rsf in the routing
    weights or multiplying the sum, per rsf_placement), recipe-exact or ideal. hidden [T, H], logits [T, E],
    weights an ExpertWeights holding E + S experts (global ids). accumulate (ACCUMULATIONS): how GEMMs sum;
    None = the recipe's: "hopper_fp8" (bit-exact emulation, tight bounds) for a hopper_fp8 recipe, else
    "exact" (the bounds cover any summation order). scale_fmt (SCALE_FMTS, fp8_block): the activation and
    intermediate scales, fp32 or rounded up to powers of two (ue8m0). -> LayerResult."""
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
    local = expert_parallel_ids(r.ids, local_expert_offset, n_local)
    tracked = recipe is not None
    if scale_fmt != "fp32" and quant != "fp8_block":
        raise ValueError(f"scale_fmt={scale_fmt!r} needs quant='fp8_block', got {quant!r}")
    if tracked and quant != "bf16":
        q = quantize(hidden, quant, R, R.act_quant_variant, R.act_scale_formula, scale_fmt=scale_fmt)
        rel = APPROX_DIVIDE if R.act_quant_variant == "mul_448_div_amax" and not _rcp_exact(hidden, FP8_BLOCK) else 0.0
        hidden64 = np.asarray(hidden, np.float64)
        ex = bounds.quantized_input(hidden64, q, rel)
        x = Operand(q.values, q.fp8, bounds.code_changes(hidden64, Err(*(rel * np.abs(hidden64),) * 3), q))
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
    c = round_to(total, R.combine)
    err = err and bounds.rounded(total, c, err, R.combine, R.subnormals == "flush")
    if rsf is not None:
        scaled = c * np.float64(rsf)
        err = err and bounds.product(c, np.float64(rsf), err, Err(0.0, 0.0, 0.0))
        c = round_to(scaled, R.combine)
        err = err and bounds.rounded(scaled, c, err, R.combine, R.subnormals == "flush")
    out = round_to(c, R.out)
    return out, err and bounds.rounded(c, out, err, R.out, R.subnormals == "flush")
