"""The MoE layer: routing → activation quantization → GEMM1 → activation → re-quantization → GEMM2 → combine.

Semantics: moe_semantics.md §4-§5, flashinfer_api.md §1, §3. Two modes. ``recipe=None`` is the float64 ideal:
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
    MX_BLOCK,
    NVFP4_BLOCK,
    block_scaled_gemm,
    mxfp8_quant,
    nvfp4_global_scale,
    nvfp4_quant,
    per_token_group_quant_fp8,
)
from .recipes import Recipe
from .routing import expert_parallel_ids, route

QUANT_PATHS = ("bf16", "fp8_block", "mxfp8", "nvfp4")
RSF_PLACEMENTS = ("routing", "combine")
ACCUMULATIONS = ("exact", "fp32", "fp32_pairwise", "fp32_blocked", "hopper_fp8")
FP8_BLOCK = 128

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


def _gemm(a, w, accumulate):
    """a·wᵀ summed exactly in float64, or (emulations, for the bound tests) as one fp32 realization of the
    recipe: "fp32" sequential and "fp32_pairwise" (numpy's pairwise sum) over fp32 products of the decoded
    values; "fp32_blocked" and "hopper_fp8": block_scaled_gemm on FP8 codes (as "fp32" for other operands)."""
    if accumulate == "exact":
        return a.values @ w.values.T
    if accumulate in ("fp32_blocked", "hopper_fp8") and a.fp8 is not None and w.fp8 is not None:
        return block_scaled_gemm(*a.fp8, *w.fp8, acc="fp32" if accumulate == "fp32_blocked" else accumulate)
    products = (a.values[:, None, :] * w.values[None, :, :]).astype(np.float32)
    if accumulate == "fp32_pairwise":
        return np.sum(products, axis=-1, dtype=np.float32).astype(np.float64)
    return np.cumsum(products, axis=-1, dtype=np.float32)[..., -1].astype(np.float64)


def _block_scales(scales, shape, rows_per_scale, cols_per_scale):
    s = np.repeat(np.repeat(np.asarray(scales, np.float64), rows_per_scale, 0), cols_per_scale, 1)
    return s[: shape[0], : shape[1]]


def _nibbles(packed):
    return np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[0], -1)


def _weight(wd, name, quant, rows=slice(None), scale_rows=slice(None)):
    """Expert weight `name` (its `rows`), decoded exactly: code × scale in float64."""
    w = np.asarray(wd[name])[rows]
    if quant == "bf16":
        return Operand(w.astype(np.float64), None)
    s = np.asarray(wd[name + "_scale"])
    if quant == "fp8_block":
        s = s[scale_rows]
        return Operand(E4M3_VALUES[w] * _block_scales(s, w.shape, FP8_BLOCK, FP8_BLOCK), (w, s))
    s = s[rows]
    if quant == "mxfp8":
        return Operand(E4M3_VALUES[w] * _block_scales(decode(s, E8M0), w.shape, 1, MX_BLOCK), None)
    sf = _block_scales(decode(s, E4M3FN), (w.shape[0], 2 * w.shape[1]), 1, NVFP4_BLOCK)
    return Operand(decode(_nibbles(w), E2M1) * sf / np.float64(wd[name + "_global"]), None)


def _w13(wd, quant, gated):
    """w13 as its stored parts: [whole], or the two halves of a gated w13 (each half of an fp8_block w13 has
    its own 2·ceil(I/128)/2 block-scale rows, sem §3)."""
    if not gated:
        return [_weight(wd, "w13", quant)]
    n = np.shape(wd["w13"])[0]
    if n % 2:
        raise ValueError(f"gated w13 needs 2I rows, got {n}")
    half = n // 2
    if quant == "fp8_block":
        sb = np.shape(wd["w13_scale"])[0]
        if sb != 2 * -(-half // FP8_BLOCK):
            raise ValueError(
                f"gated fp8_block w13_scale needs 2·ceil(I/128) = {2 * -(-half // FP8_BLOCK)} rows, got {sb}"
            )
        return [
            _weight(wd, "w13", quant, slice(0, half), slice(0, sb // 2)),
            _weight(wd, "w13", quant, slice(half, n), slice(sb // 2, sb)),
        ]
    return [_weight(wd, "w13", quant, slice(0, half)), _weight(wd, "w13", quant, slice(half, n))]


def _nvfp4_rows(x):
    """NVFP4 per token: each row its own global scale gs = 448·6/amax(row) (1 for an all-zero row)."""
    values, scale = np.zeros(x.shape), np.zeros(x.shape)
    for t, row in enumerate(x):
        gs = nvfp4_global_scale(row) if np.any(row != 0) else np.float32(1)
        packed, sf = nvfp4_quant(row[None], gs)
        scale[t] = np.repeat(decode(sf[0], E4M3FN).astype(np.float64), NVFP4_BLOCK) / np.float64(gs)
        values[t] = decode(_nibbles(packed)[0], E2M1) * scale[t]
    return values, scale


def quantize(x, quant, recipe, variant, scale_formula):
    """Activation quantization of x [M, K] on a quant path: fp8_block 1×128 (per_token_group_quant_fp8 with
    `variant`, `scale_formula`), mxfp8 (recipe.mx_rule), nvfp4 (per-token global scale). -> Quantized."""
    x = np.asarray(x, np.float32)
    if quant == "fp8_block":
        q, s = per_token_group_quant_fp8(x, FP8_BLOCK, variant=variant, scale_formula=scale_formula)
        scale = _block_scales(s, x.shape, 1, FP8_BLOCK)
        return Quantized(
            E4M3_VALUES[q] * scale, scale, "e4m3fn", (FP8_BLOCK,), E4M3FN.unit_roundoff, True, (q, s)
        )
    if quant == "mxfp8":
        q, e8 = mxfp8_quant(x, rule=recipe.mx_rule)
        scale = _block_scales(decode(e8, E8M0), x.shape, 1, MX_BLOCK)
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
    w13, w2 = _w13(wd, c.quant, gated), _weight(wd, "w2", c.quant)
    fp8 = x.fp8 is not None
    h = np.concatenate([_gemm(x, w, c.accumulate) for w in w13], axis=1)
    eh = ex and Err(
        *(
            np.concatenate(parts, axis=1)
            for parts in zip(
                *(
                    bounds.gemm(x.values, ex, np.abs(w.values), R.gemm_acc, fp8 and w.fp8 is not None)
                    for w in w13
                ),
                strict=True,
            )
        )
    )
    if c.router_weight_on_input:  # on GEMM1's fp32 accumulator, = (x·w)·W13 (sem §4.4)
        h, eh = h * wt, eh and bounds.product(h, wt, eh, ew, bounds.U32)
    h1 = round_to(h, R.gemm1_out)
    e1 = eh and bounds.rounded(h, h1, eh, R.gemm1_out)
    f = NONLINEARITY[c.activation]
    if gated:
        (g, up), (eg, eup) = split_halves(h1, c.half_order), _split(e1, c.half_order)
    else:
        g, up, eg = h1, None, e1
    fg = f(g)
    a = round_to(fg, R.act_compute)
    ea = eg and bounds.rounded(fg, a, bounds.nonlinear(f.__name__, g, fg, eg), R.act_compute)
    if gated:
        p = a * up
        ep = ea and bounds.product(a, up, ea, eup)
        a = round_to(p, R.act_compute)
        ea = ep and bounds.rounded(p, a, ep, R.act_compute)
    a2 = round_to(a, R.act_out)
    ea2 = ea and bounds.rounded(a, a2, ea, R.act_out)
    flips = np.zeros(len(a2), int)
    if (
        c.quant != "bf16" and R.requant_intermediate
    ):  # per token, on the stored intermediate (sem §4.3 step 4)
        q = quantize(a2, c.quant, R, R.requant_variant, R.requant_scale_formula)
        op, ev = Operand(q.values, q.fp8), ea2 and bounds.requantized(a2, ea2, q)
        flips = bounds.possible_flips(a2, ea2, q) if ea2 else flips
    else:
        op, ev = Operand(np.asarray(a2, np.float64), None), ea2
    y = _gemm(op, w2, c.accumulate)
    ey = ev and bounds.gemm(
        op.values, ev, np.abs(w2.values), R.gemm_acc, op.fp8 is not None and w2.fp8 is not None
    )
    weighted_in_gemm2 = not c.router_weight_on_input and R.router_weight_at == "gemm2"
    if weighted_in_gemm2:  # the fp32 accumulator times the router weight, then the expert_out write
        y, ey = y * wt, ey and bounds.product(y, wt, ey, ew, bounds.U32)
    ye = round_to(y, R.expert_out)
    eye = ey and bounds.rounded(y, ye, ey, R.expert_out)
    if weighted_in_gemm2 or c.router_weight_on_input:
        return ye.astype(np.float64), eye, flips
    return ye * wt, eye and bounds.product(ye, wt, eye, ew), flips


class _Config(NamedTuple):
    activation: str
    half_order: str
    quant: str
    router_weight_on_input: bool
    recipe: Recipe
    accumulate: str


def _route(logits, bias, routing, rsf_placement, recipe, ids):
    """spec Routing under the recipe (ideal: float64); rsf_placement "combine" leaves rsf to the combine and
    gives fused shared experts 1/rsf of their weight, so that they count once after it (sem §1.8)."""
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
                "weights_dtype": recipe.routing_weights,
                "renorm_order": recipe.renorm_order,
            },
        )
    k = options["top_k"]
    if rsf_placement == "combine" and rsf is not None and r.ids.shape[1] > k:
        shared = r.weights[:, k:] / rsf
        w = r.weights.copy()
        w[:, k:] = shared if recipe is None else round_to(shared, recipe.routing_weights)
        r = r._replace(weights=w)
    return r


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
    accumulate="exact",
):
    """out[t] = Σ_j w[t, j]·W2_e·act(W13_e·x[t]) over the local experts e = ids[t, j] (rsf in the routing
    weights or multiplying the sum, per rsf_placement), recipe-exact or ideal. hidden [T, H], logits [T, E],
    weights an ExpertWeights holding E + S experts (global ids). -> LayerResult."""
    check_activation(activation, half_order)
    for name, value, allowed in (
        ("quant", quant, QUANT_PATHS),
        ("rsf_placement", rsf_placement, RSF_PLACEMENTS),
        ("accumulate", accumulate, ACCUMULATIONS),
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
    if tracked and quant != "bf16":
        q = quantize(hidden, quant, R, R.act_quant_variant, R.act_scale_formula)
        x, ex = Operand(q.values, q.fp8), bounds.quantized_input(np.asarray(hidden, np.float64), q)
    else:
        x, ex = Operand(np.asarray(hidden, np.float64), None), tracked and bounds.zero((T, H))
    ew = tracked and bounds.routing_weights(r.weights, R, E, routing["top_k"])
    c = _Config(activation, half_order, quant, router_weight_on_input, R, accumulate)
    total, total_abs = np.zeros((T, H)), np.zeros((T, H))
    err = tracked and bounds.zero((T, H))
    flips = np.zeros(T, int)
    for e in np.unique(local[local >= 0]):
        t, j = np.nonzero(local == e)  # a token selects an expert at most once: t has no repeats
        wt = r.weights[t, j].astype(np.float64)[:, None]
        term, et, fl = _expert(
            Operand(x.values[t], x.fp8 and (x.fp8[0][t], x.fp8[1][t])),
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
    err = err and bounds.rounded(total, c, err, R.combine)
    if rsf is not None:
        scaled = c * np.float64(rsf)
        err = err and bounds.product(c, np.float64(rsf), err, Err(0.0, 0.0, 0.0))
        c = round_to(scaled, R.combine)
        err = err and bounds.rounded(scaled, c, err, R.combine)
    out = round_to(c, R.out)
    return out, err and bounds.rounded(c, out, err, R.out)
