"""impls/torch_eager against spec/, op by op: routing tie-aware, quantization bit-exact, the layer within the
spec's derived bound (spec/bounds.py).

Inputs come from difftest/model/generate.py (PCG64 bits + exact transforms, deterministic from the drawn seed); the
configuration is drawn by Hypothesis. The two sides were written independently, so every agreement here is
evidence. Tolerances are derived, never typed in:

* Routing: the error analysis of spec/bounds.py, the one difftest/checking/compare/ applies to every
  implementation, against the float64 ideal of spec.routing (ideal_keys, ideal_scores). Each side's fp32 key is
  within δ (bounds.routing_key_delta) of the ideal key, so the two are 2δ apart: a token whose spec margin exceeds
  twice that must get the spec's id set; elsewhere torch's ids must be a valid selection (no selected key below a
  rejected one by more than 2·2δ), group scores likewise (bounds.routing_group_delta).
* Routing weights are always compared at torch's ids (the spec recomputes its formula with ``ids=``), within the
  hard bound between two implementations (bounds.routing_weight_bound) plus twice the underflow allowance
  (bounds.routing_underflow). A token whose renormalizing denominator may vanish (0/0 = NaN on one side, a number
  on the other) is not compared (counted as a Hypothesis event). Every bound must be a finite number wherever the
  two sides differ (difftest.checking.compare.elementwise fails otherwise).
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import event, given, reject, settings
from hypothesis import strategies as st

import impls.torch_eager as te
from difftest.checking import compare
from difftest.checking.impl_torch import TORCH_ROUTE_KEYWORDS, expert_tensors
from difftest.model import generate as gen
from spec import bounds, layouts
from spec import quant as sq
from spec import routing as sr
from spec.layer import StackedWeights, moe_layer
from spec.numerics import E2M1, encode
from spec.recipes import HOST_QUANT_VARIANTS, Recipe

GROUPED = sr.GROUPED_METHODS  # the method facts: spec.routing.METHODS
BIASED = sr.BIASED_METHODS
RAW = sr.RAW_KEY_METHODS
SOFTMAX = sr.SOFTMAX_METHODS
FINITE_ROUTING_DISTS = gen.ROUTING_DISTS
FINITE_QUANT_DISTS = tuple(d for d in gen.QUANT_DISTS if d != "nonfinite")
TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def as_torch(a, dtype="fp32"):
    return torch.from_numpy(np.array(a, np.float32)).to(TORCH_DTYPE[dtype])


# ---- routing


class RoutingDraw(dict):
    """Keyword arguments of route (both sides) plus the draw's inputs; a dict so failures print it whole."""


@st.composite
def routing_draws(draw, method=None):
    method = method or draw(st.sampled_from(sr.ROUTING_METHODS), label="method")
    if method in GROUPED and draw(st.booleans(), label="grouped"):
        G = draw(st.sampled_from([2, 4, 8]), label="n_group")
        E = G * draw(st.integers(2, 8), label="experts_per_group")
        tg = draw(st.integers(1, G), label="topk_group")
    else:
        E, G, tg = draw(st.integers(1, 48), label="num_experts"), 1, 1
    k = 1 if method == "llama4" else draw(st.integers(1, min(8, tg * (E // G))), label="top_k")
    T = draw(st.integers(0, 24), label="num_tokens")
    seed, dist = (
        draw(st.integers(0, 2**32 - 1), label="seed"),
        draw(st.sampled_from(FINITE_ROUTING_DISTS), label="dist"),
    )
    logits = gen.round_to_dtype(
        gen.logits(seed, dist, T, E, G), draw(st.sampled_from(["fp32", "bf16", "fp16"]), label="logits_dtype")
    )
    bias = None
    if method in BIASED and draw(st.booleans(), label="has_bias"):
        bias = gen.round_to_dtype(
            gen.bias(seed, dist, E), draw(st.sampled_from(["fp32", "bf16"]), label="bias_in")
        )
    return RoutingDraw(
        logits=logits,
        bias=bias,
        method=method,
        top_k=k,
        n_group=G,
        topk_group=tg,
        routed_scaling_factor=draw(st.sampled_from([None, 1.0, 2.5, 2.826]), label="rsf"),
        renormalize=draw(st.booleans(), label="renormalize"),
        eps=draw(st.sampled_from([0.0, 1e-20]), label="eps"),
        num_fused_shared_experts=draw(st.integers(0, 2), label="shared"),
        group_mask_value=draw(st.sampled_from([-math.inf, 0.0]), label="mask")
        if method == "deepseek_v2"
        else -math.inf,
        bias_dtype=draw(st.sampled_from(["fp32", "bf16"]), label="bias_dtype"),
        weights_dtype=draw(st.sampled_from(["fp32", "bf16"]), label="weights_dtype"),
        renorm_order=draw(st.sampled_from(["divide_then_scale", "scale_then_divide"]), label="renorm_order"),
    )


def options(d):
    return {k: v for k, v in d.items() if k not in ("logits", "bias")}


def run_torch_routing(d):
    bias = None if d["bias"] is None else as_torch(d["bias"])
    ids, w = te.route(as_torch(d["logits"]), bias, **options(d))
    return ids.numpy(), w.numpy()


def recipe_of(d):
    """The spec's fp32 routing as the draw configures it (spec.recipes.Recipe): both sides follow it, torch by its
    own keywords (impl_torch.TORCH_ROUTE_KEYWORDS, the draw's), the spec by the recipe's fields."""
    return Recipe(name="spec", **{field: d[keyword] for keyword, field in TORCH_ROUTE_KEYWORDS.items() if keyword in d})


def spec_options(d):
    """spec.routing.route's keywords of a draw: its options but torch's rounding keywords, and recipe_of(d)."""
    return {**{k: v for k, v in options(d).items() if k not in TORCH_ROUTE_KEYWORDS}, "recipe": recipe_of(d)}


def keys_and_delta(d):
    """Exact (float64) selection keys [T, E], group scores [T, G] or None, and δ, δ_group [T]: the bound on
    |spec key − torch key|, twice each side's (module docstring)."""
    x, method, b = d["logits"], d["method"], d["bias"]
    if b is not None and d["bias_dtype"] == "bf16":
        b = gen.round_bf16(b.astype(np.float64)).astype(np.float64)
    rule = sr.group_rule(method, "method", d["bias"] is not None)
    keys, gkeys = sr.ideal_keys(x, b, method=method, n_group=d["n_group"], group_score=rule)
    scores = keys if b is None else sr.ideal_keys(x, method=method)[0]
    delta = bounds.routing_key_delta(x, scores, sr.METHODS[method].keys, recipe_of(d), None if b is None else keys)
    assert np.isfinite(delta).all(), f"routing key bound δ={delta} is not finite"
    if gkeys is None:
        return keys, None, 2 * delta, np.zeros(len(keys))
    return keys, gkeys, 2 * delta, 2 * bounds.routing_group_delta(gkeys, delta, rule == "top2_sum", recipe_of(d))


def invalid_selection(ids, keys, gkeys, delta, gdelta, d):
    """None if ids (one token, routed) are a valid choice within 2δ of the exact keys; else the reason."""
    E, G, tg = len(keys), d["n_group"], d["topk_group"]
    allowed = np.ones(E, bool)
    if gkeys is not None:
        per, kth = E // G, -np.sort(-gkeys)[tg - 1]
        used = np.unique(ids // per)
        if len(used) > tg or (gkeys[used] < kth - 2 * gdelta).any():
            return f"groups {used.tolist()} are not among the best {tg} within 2δ={2 * gdelta:.3g}"
        allowed = np.isin(np.arange(E) // per, np.union1d(used, np.flatnonzero(gkeys > kth + 2 * gdelta)))
    rest = allowed.copy()
    rest[ids] = False
    if rest.any() and keys[ids].min() < keys[rest].max() - 2 * delta:
        return f"selected key {keys[ids].min():.9g} < rejected {keys[rest].max():.9g} − 2δ ({2 * delta:.3g})"
    return None


def check_ids(d, spec, ids):
    k = d["top_k"]
    keys, gkeys, delta, gdelta = keys_and_delta(d)
    robust = (spec.expert_margin > 2 * delta) & (spec.group_margin > 2 * gdelta)
    same = (np.sort(ids[:, :k], axis=1) == np.sort(spec.ids[:, :k], axis=1)).all(axis=1)
    for t in np.flatnonzero(robust & ~same):
        pytest.fail(
            f"ids[{t}]={sorted(ids[t, :k])} but spec={sorted(spec.ids[t, :k])} with margin "
            f"{spec.expert_margin[t]:.3g} > 2δ={2 * delta[t]:.3g}"
        )
    for t in np.flatnonzero(~same):
        reason = invalid_selection(
            ids[t, :k], keys[t], None if gkeys is None else gkeys[t], delta[t], gdelta[t], d
        )
        assert reason is None, f"token {t}: torch ids {sorted(ids[t, :k])}: {reason}"
    S = d["num_fused_shared_experts"]
    assert (ids[:, k:] == d["logits"].shape[1] + np.arange(S)).all(), f"shared ids {ids[:1, k:]}"


def kept_groups(d, robust):
    """[T, G] bool: deepseek_v2's kept groups (the topk_group best group scores, lower index first) where the
    spec's group decision is robust (margin > 2δ_group), so that both sides keep them; elsewhere every group,
    since either side may keep another near-tied one and its ids then lie in the groups it kept."""
    G, tg = d["n_group"], d["topk_group"]
    _, score = sr.ideal_keys(d["logits"], method="deepseek_v2", n_group=G, group_score="max")
    best = np.argsort(-score, axis=-1, kind="stable")[:, :tg]
    kept = np.zeros(score.shape, bool)
    np.put_along_axis(kept, best, True, axis=-1)
    return kept | ~robust[:, None]


def weight_bound(d, want, ids, robust_groups):
    """(bound [T, columns] on |torch weight − spec weight| at the same routed ids [T, k], degenerate [T]): the
    hard bound between two implementations at the spec's weights `want` (shared columns included), plus twice
    the underflow allowance at the ideal scores of `ids` (deepseek_v2: group_mask_value where the spec's group
    decision is robust and drops the group, as both sides then score it)."""
    x, method, k = d["logits"], d["method"], ids.shape[1]
    E, rsf = x.shape[1], 1.0 if d["routed_scaling_factor"] is None else d["routed_scaling_factor"]
    s = sr.ideal_scores(x, method=method, ids=ids)
    if method == "deepseek_v2" and d["n_group"] > 1:
        kept = np.take_along_axis(kept_groups(d, robust_groups), ids // (E // d["n_group"]), axis=-1)
        s = np.where(kept, s, d["group_mask_value"])
    renorm = sr.renormalizes(method, d["renormalize"])
    absolute, degenerate = bounds.routing_underflow(s, sr.METHODS[method].scores, renorm, recipe_of(d), E, rsf,
                                                    d["eps"])
    bound = bounds.routing_weight_bound(want, recipe_of(d), E, k, rsf, logits=x, method=method, ids=ids,
                                        renormalize=d["renormalize"], eps=d["eps"])
    bound[:, :k] += np.where(degenerate[:, None], 0.0, 2 * absolute)
    return bound, degenerate


def compare_weights(d, spec, ids, w):
    k = d["top_k"]
    routed = ids[:, :k].astype(np.int64)
    _, _, _, gdelta = keys_and_delta(d)
    robust_groups = spec.group_margin > 2 * gdelta
    want = sr.route(d["logits"], d["bias"], **{**spec_options(d), "ids": routed}).weights
    assert want.shape == w.shape, (want.shape, w.shape)
    excluded = np.zeros(len(w), bool)
    if d["method"] == "deepseek_v2" and d["n_group"] > 1:
        # The spec gathers forced ids from its own group-masked q. Where its group decision is not robust, torch
        # may keep another near-tied group: the formula at ids in groups torch kept is p[ids] (one group gives
        # it). With group_mask_value 0 torch may also pick ids of a group it masked (q = 0 ties once the kept
        # groups' scores underflow), weighing 0 where p[ids] may not: which groups were kept is then unknown.
        free = sr.route(d["logits"], d["bias"], **{**spec_options(d), "n_group": 1, "topk_group": 1, "ids": routed})
        want = np.where(robust_groups[:, None], want, free.weights)
        excluded = ~robust_groups & (d["group_mask_value"] == 0) & (w[:, :k] == 0).any(axis=1)
        if excluded.any():
            event("weights of a token not compared: deepseek_v2 group near-tie with a 0-weighted id")
    bound, degenerate = weight_bound(d, want, routed, robust_groups)
    if degenerate.any():
        event("weights of a token not compared: its fp32 renormalizing denominator may vanish")
    keep = ~(degenerate | excluded)[:, None]
    v = compare.elementwise("weights", np.where(keep, w, 0), np.where(keep, want, 0),
                            np.where(keep, bound, 0), f"routing {d['method']}, at torch's ids")
    assert v.ok, v.message


@settings(max_examples=60)
@given(d=routing_draws())
def test_route(d):
    spec = sr.route(d["logits"], d["bias"], **spec_options(d))
    ids, w = run_torch_routing(d)
    T, k, S = d["logits"].shape[0], d["top_k"], d["num_fused_shared_experts"]
    assert ids.dtype == np.int32 and w.dtype == np.float32, (ids.dtype, w.dtype)
    assert ids.shape == w.shape == spec.ids.shape == (T, k + S), (ids.shape, spec.ids.shape)
    check_ids(d, spec, ids)
    compare_weights(d, spec, ids, w)


UNDERFLOWING = [  # scores far below fp32's subnormals: the old relative-only bound overflowed to inf / NaN here
    RoutingDraw(logits=np.float32([[-113.50084]]), bias=None, method="llama4", top_k=1, n_group=1, topk_group=1,
                routed_scaling_factor=None, renormalize=False, eps=0.0, num_fused_shared_experts=0,
                group_mask_value=-math.inf, bias_dtype="fp32", weights_dtype="fp32",
                renorm_order="divide_then_scale"),
    RoutingDraw(logits=np.float32([[-473.0301, -852.2929, -1794.7516, -3694.4688]]), bias=None,
                method="deepseek_v2", top_k=2, n_group=2, topk_group=1, routed_scaling_factor=None,
                renormalize=False, eps=0.0, num_fused_shared_experts=0, group_mask_value=-math.inf,
                bias_dtype="fp32", weights_dtype="fp32", renorm_order="divide_then_scale"),
]


@pytest.mark.parametrize("d", UNDERFLOWING, ids=lambda d: d["method"])
def test_weight_bound_stays_finite_and_tight_where_scores_underflow(d):
    spec = sr.route(d["logits"], d["bias"], **spec_options(d))
    ids, w = run_torch_routing(d)
    routed = ids[:, :d["top_k"]].astype(np.int64)
    want = sr.route(d["logits"], d["bias"], **{**spec_options(d), "ids": routed}).weights
    bound, degenerate = weight_bound(d, want, routed, np.ones(len(w), bool))
    assert np.isfinite(bound).all() and not degenerate.any(), bound
    compare_weights(d, spec, ids, w)
    with pytest.raises(AssertionError, match="weights"):  # and it can fail: twice the bound off
        compare_weights(d, spec, ids, (w + 2 * bound).astype(np.float32))


@pytest.mark.parametrize("method", sr.ROUTING_METHODS)
def test_route_special_values(method):
    """NaN, ±inf logits: both sides rank NaN below every number and produce NaN weights at the same places."""
    rng_bits = gen.normal(7, "special", (64, 8))
    x = rng_bits.astype(np.float32)
    pick = gen.integers(7, "where", x.shape, 16)
    x[pick == 0], x[pick == 1], x[pick == 2] = np.nan, -np.inf, np.inf
    G, tg = (4, 2) if method in GROUPED else (1, 1)
    bias = gen.bias(7, "normal", 8).astype(np.float32) if method in BIASED else None
    for k in (1,) if method == "llama4" else (1, 3, 4):
        kw = dict(method=method, top_k=k, n_group=G, topk_group=tg)
        spec = sr.route(x, bias, **kw)
        ids, w = te.route(torch.from_numpy(x), None if bias is None else torch.from_numpy(bias), **kw)
        np.testing.assert_array_equal(ids.numpy(), spec.ids, err_msg=f"{method} top_k={k}: ids")
        np.testing.assert_array_equal(
            np.isnan(w.numpy()), np.isnan(spec.weights), err_msg=f"{method}: NaN places"
        )


# ---- quantization: bit-exact codes, scales and scale memory


def quant_input(seed, dist, T, H, group, dtype):
    return gen.round_to_dtype(gen.quant_input(seed, dist, T, H, group), dtype)


def bit_patterns(a):
    """uint8 codes as they are; float values as fp32 bit patterns, every NaN as the one quiet NaN (sign and
    payload are no contract)."""
    if a.dtype == np.uint8:
        return a
    a = np.ascontiguousarray(a, np.float32)
    return np.where(np.isnan(a), np.float32(np.nan), a).view(np.uint32)


def assert_bits(name, got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} but spec {want.shape}"
    gb, wb = bit_patterns(got), bit_patterns(want)
    diff = np.argwhere(gb != wb)
    assert not diff.size, (
        f"{name}{diff[0].tolist()}={gb[tuple(diff[0])]:#x} but spec={wb[tuple(diff[0])]:#x}: "
        f"{len(diff)} of {gb.size} differ (bit-exact)"
    )


def codes(t):
    return t.view(torch.uint8).numpy() if t.dtype == torch.float8_e4m3fn else t.numpy()


def e4m3(c):
    """e4m3fn codes with both NaN patterns (0x7F, 0xFF) as 0x7F: a NaN's sign is no contract (PTX cvt writes
    the canonical 0x7F whatever the input; torch's CPU arithmetic may hand the cast a negative NaN)."""
    c = np.asarray(c, np.uint8)
    return np.where((c & 0x7F) == 0x7F, np.uint8(0x7F), c)


LAYOUT_FLAGS = {
    "row": ({}, layouts.row_major),
    "col": ({"column_major_scales": True}, layouts.column_major),
    "col_tma": ({"column_major_scales": True, "scale_tma_aligned": True}, layouts.column_major_tma),
}


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**32 - 1),
    dist=st.sampled_from(gen.QUANT_DISTS),
    T=st.integers(1, 20),
    group=st.sampled_from(sq.GROUP_SIZES),
    groups=st.integers(1, 4),
    dtype=st.sampled_from(["bf16", "fp16", "fp32"]),
    variant=st.sampled_from(HOST_QUANT_VARIANTS),
    formula=st.sampled_from(["div448", "mul_rcp448"]),
    fmt=st.sampled_from(["fp32", "ue8m0"]),
    layout=st.sampled_from(["row", "col", "col_tma"]),
)
def test_per_token_group_quant_fp8(seed, dist, T, group, groups, dtype, variant, formula, fmt, layout):
    x = quant_input(seed, dist, T, group * groups, group, dtype)
    q, s = sq.per_token_group_quant_fp8(x, group, variant=variant, scale_formula=formula, scale_fmt=fmt)
    ue8m0 = fmt == "ue8m0"
    flags, spec_layout = (
        ({"column_major_scales": True, "scale_tma_aligned": True}, None)
        if ue8m0 and layout != "row"
        else LAYOUT_FLAGS[layout]
    )
    tq, ts = te.per_token_group_quant_fp8(
        as_torch(x, dtype), group, variant=variant, scale_formula=formula, scale_ue8m0=ue8m0, **flags
    )
    assert_bits("q", e4m3(codes(tq)), e4m3(q))
    if ue8m0 and layout != "row":  # packed int32, column-major TMA memory
        buf = layouts.ue8m0_packed(s)
        assert tuple(ts.stride()) == buf.strides and tuple(ts.shape) == buf.shape, (ts.stride(), buf.strides)
        assert_bits("scales (unpacked)", te.e8m0_to_float(te.unpack_ue8m0(ts, groups)).numpy(), s)
        mem = te.scale_buffer(ts).numpy()
        assert_bits("scale memory", layouts.view(buf._replace(data=mem)), layouts.view(buf))
        return
    assert_bits("scales", ts.contiguous().numpy(), s)
    buf = spec_layout(s)
    assert tuple(ts.stride()) == buf.strides, f"strides {tuple(ts.stride())} but spec {buf.strides}"
    mem = te.scale_buffer(ts).numpy()
    assert mem.size == buf.data.size, f"scale memory {mem.size} elements but spec {buf.data.size}"
    assert_bits("scale memory", layouts.view(buf._replace(data=mem)), layouts.view(buf))


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**32 - 1),
    dist=st.sampled_from(gen.QUANT_DISTS),
    T=st.integers(1, 12),
    blocks=st.integers(1, 8),
    dtype=st.sampled_from(["bf16", "fp16", "fp32"]),
    rule=st.sampled_from(sq.MXFP8_RULES),
)
def test_mxfp8_quant(seed, dist, T, blocks, dtype, rule):
    x = quant_input(seed, dist, T, 32 * blocks, 32, dtype)
    q, s = sq.mxfp8_quant(x, rule=rule)
    tq, ts = te.mxfp8_quant(as_torch(x, dtype), rule=rule)
    assert_bits("q", e4m3(codes(tq)), e4m3(q))
    assert_bits("e8m0", ts.numpy(), s)


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**32 - 1),
    dist=st.sampled_from(FINITE_QUANT_DISTS),
    T=st.integers(1, 12),
    blocks=st.integers(1, 8),
    dtype=st.sampled_from(["bf16", "fp16", "fp32"]),
)
def test_nvfp4_quant(seed, dist, T, blocks, dtype):
    x = quant_input(seed, dist, T, 16 * blocks, 16, dtype)
    if not np.any(x != 0):
        return  # the global scale 448·6/amax needs amax > 0 (spec refuses, by contract)
    gs = sq.nvfp4_global_scale(x)
    assert_bits("global scale", te.nvfp4_global_scale(as_torch(x, dtype)).numpy(), gs)
    packed, sf = sq.nvfp4_quant(x, gs)
    tp, tsf = te.nvfp4_quant(as_torch(x, dtype), torch.tensor(float(gs)))
    assert_bits("packed e2m1", tp.numpy(), packed)
    assert_bits("e4m3 block scales", codes(tsf), sf)
    assert_bits(
        "dequant",
        te.nvfp4_dequant(tp, tsf, torch.tensor(float(gs))).numpy(),
        sq.nvfp4_dequant(packed, sf, gs),
    )


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1),
    dist=st.sampled_from(gen.QUANT_DISTS),
    E=st.integers(1, 3),
    N=st.integers(1, 300),
    K=st.sampled_from([16, 128, 208, 256]),
)
def test_weight_block_quant(seed, dist, E, N, K):
    w = gen.round_bf16(gen.quant_input(seed, dist, E * N, K, 16)).reshape(E, N, K)
    q, s = sq.weight_block_quant(w)
    tq, ts = te.weight_block_quant(as_torch(w, "bf16"))
    assert_bits("q", e4m3(codes(tq)), e4m3(q))
    assert_bits("scales", ts.numpy(), s)
    assert_bits("dequant", te.weight_dequant(tq, ts).numpy(), sq.weight_dequant(q, s))


def test_ue8m0_ceil_every_exponent():
    """Exponent-bit ceiling on fp32 patterns: every exponent with mantissa 0, 1 ulp, random, all ones."""
    exps = np.arange(0, 255, dtype=np.uint32)
    mant = np.array([0, 1, 0x2AAAAA, 0x400000, 0x7FFFFF], np.uint32)
    s = ((exps[:, None] << 23) | mant[None, :]).ravel().view(np.float32)
    s = s[np.isfinite(s) & (s < 2.0**127)]
    assert_bits("ue8m0", te.ue8m0_ceil(torch.from_numpy(s.copy())).numpy(), sq.ue8m0_ceil(s))


def test_e2m1_encode_matches_spec_numerics():
    """Every fp32 of bf16 precision in [-8, 8] (ties and midpoints included) rounds to the same e2m1 code."""
    v = np.concatenate([np.arange(-8, 8, 2.0**-5), [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.0]]).astype(
        np.float32
    )
    assert_bits("e2m1", te.e2m1_encode(torch.from_numpy(v)).numpy(), encode(v, E2M1, saturate=True))


# ---- the layer, within spec/bounds.py of the recipe-exact spec at torch's ids

QUANT_STEP = {"bf16": 16, "fp8_block": 128, "mxfp8": 32, "nvfp4": 16}



@st.composite
def layer_draws(draw):
    quant = draw(st.sampled_from(sorted(QUANT_STEP)), label="quant")
    activation = draw(st.sampled_from(te.ACTIVATIONS), label="activation")
    method = draw(st.sampled_from(sr.ROUTING_METHODS), label="method")
    G = 2 if method in GROUPED and draw(st.booleans(), label="grouped") else 1
    E = G * draw(st.integers(2, 4), label="experts_per_group")
    k = 1 if method == "llama4" else draw(st.integers(1, min(3, E if G == 1 else E // G)), label="top_k")
    step = QUANT_STEP[quant]
    H, I = (step * draw(st.integers(1, max(1, 128 // step)), label=n) for n in ("H", "I"))
    offset, local = 0, None
    if draw(st.booleans(), label="expert_parallel"):
        local = draw(st.integers(1, E - 1), label="local_num_experts")
        offset = draw(st.integers(0, E - local), label="local_expert_offset")
    seed, dist = (
        draw(st.integers(0, 2**32 - 1), label="seed"),
        draw(st.sampled_from(gen.DISTS["moe"]), label="dist"),
    )
    return dict(
        quant=quant,
        activation=activation,
        method=method,
        E=E,
        G=G,
        k=k,
        H=H,
        I=I,
        seed=seed,
        dist=dist,
        T=draw(st.integers(1, 6), label="T"),
        offset=offset,
        local=local,
        half_order=draw(st.sampled_from(["gate_up", "up_gate"]), label="half_order"),
        rsf=draw(st.sampled_from([None, 2.5]), label="rsf"),
        rsf_placement=draw(st.sampled_from(["routing", "combine"]), label="rsf_placement"),
        on_input=k == 1 and draw(st.booleans(), label="router_weight_on_input"),
        logits_dtype=draw(st.sampled_from(["fp32", "bf16"]), label="logits_dtype"),
    )


@settings(max_examples=25)
@given(c=layer_draws())
def test_moe_layer(c):
    gated = c["activation"] in ("swiglu", "geglu", "geglu_tanh")
    weights = gen.GeneratedWeights(
        c["seed"], c["quant"], c["E"], (2 if gated else 1) * c["I"], c["H"], c["I"]
    )
    hidden = gen.round_bf16(gen.normal(c["seed"], "hidden", (c["T"], c["H"])))
    logits = gen.round_to_dtype(gen.logits(c["seed"], c["dist"], c["T"], c["E"], c["G"]), c["logits_dtype"])
    bias = gen.bias(c["seed"], c["dist"], c["E"]).astype(np.float32) if c["method"] in BIASED else None
    routing = dict(
        method=c["method"], top_k=c["k"], n_group=c["G"], topk_group=1, routed_scaling_factor=c["rsf"]
    )
    if c["on_input"]:
        c["rsf_placement"] = "routing"
    layer_kw = dict(
        activation=c["activation"],
        half_order=c["half_order"],
        quant=c["quant"],
        local_expert_offset=c["offset"],
        local_num_experts=c["local"],
        rsf_placement=c["rsf_placement"],
        router_weight_on_input=c["on_input"],
    )
    recipe = Recipe(**te.RECIPE[c["quant"]])
    out = te.moe_layer(
        as_torch(hidden, "bf16"),
        as_torch(logits, c["logits_dtype"]),
        None if bias is None else as_torch(bias),
        expert_tensors(weights, c["quant"]),
        routing=routing,
        **layer_kw,
    )
    ids = out.ids.numpy()
    d = RoutingDraw(
        logits=logits,
        bias=bias,
        **routing,
        renormalize=True,
        eps=0.0,
        num_fused_shared_experts=0,
        group_mask_value=-math.inf,
        bias_dtype=recipe.bias,
        weights_dtype=recipe.routing_weights,
        renorm_order=recipe.renorm_order,
    )
    check_ids(d, sr.route(logits, bias, **spec_options(d)), ids)
    try:
        spec = moe_layer(
            hidden, logits, bias, weights, routing=routing, recipe=recipe, ids=ids[:, : c["k"]], **layer_kw
        )
    except ValueError as e:  # an overflowing intermediate: e2m1 has no Inf, the spec refuses (a skip in fuzz)
        if "must be finite" not in str(e):
            raise
        reject()
    hard, _ = bounds.bound_vs_recipe(spec, recipe)
    v = compare.elementwise("out", out.out.float().numpy(), spec.out, hard, str(c))
    assert v.ok, v.message


@pytest.mark.parametrize("rule", ["routed_sum_over_rsf", "one"])
def test_shared_expert_weight_convention_torch_equals_spec(rule):
    """Fused shared experts under both conventions, ordinary and fully underflowing logits: torch eager's weights
    equal the spec's bit for bit (Σ(routed)/rsf in fp32 sequential order, or the constant 1)."""
    from spec.routing import route

    for logits in (np.linspace(-3, 2, 6 * 16, dtype=np.float32).reshape(6, 16),
                   np.full((6, 16), -200, np.float32)):
        kw = dict(method="deepseek_v3", top_k=4, n_group=4, topk_group=2, routed_scaling_factor=2.5, eps=1e-20,
                  num_fused_shared_experts=2)
        bias = np.zeros(16, np.float32)
        want = route(logits, bias, **kw, recipe=Recipe(name="shared", shared_weight=rule)).weights
        ids, got = te.route(torch.from_numpy(logits), torch.from_numpy(bias), **kw, shared_weight=rule)
        np.testing.assert_array_equal(got.numpy(), want)
        if logits[0, 0] == -200:
            assert (want[:, -2:] == (1.0 if rule == "one" else 0.0)).all()


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")])])
def test_layer_swiglu_within_the_recipe_bound_of_float64(device):
    """torch's bf16 SwiGLU layer within |torch − spec| + |spec − ideal| of the float64 ideal at torch's ids: the
    spec's hard bound for torch's declared recipe plus that recipe's own error (spec/bounds.py, the shadows the
    spec's layer carries); a gate/up swap of the weights lands outside it."""
    g = np.random.Generator(np.random.PCG64(8))
    T, E, H, I = 8, 8, 64, 32
    x, w13, w2 = (torch.tensor(g.standard_normal(shape) / scale).bfloat16()
                  for shape, scale in (((T, H), 1), ((E, 2 * I, H), 8), ((E, H, I), 8)))  # in this order
    logits = torch.tensor(g.standard_normal((T, E)), dtype=torch.float32)
    routing = dict(method="renormalize", top_k=3)
    kw = dict(routing=routing, activation="swiglu")
    res = te.moe_layer(x.to(device), logits.to(device), None, {"w13": w13.to(device), "w2": w2.to(device)}, **kw)
    ids = res.ids.cpu().numpy()
    recipe = Recipe(**te.RECIPE["bf16"])
    weights = StackedWeights({"w13": w13.float().numpy(), "w2": w2.float().numpy()})
    args = (x.float().numpy(), logits.numpy(), None, weights)
    spec = moe_layer(*args, recipe=recipe, ids=ids, **kw)
    ideal = moe_layer(*args, ids=ids, **kw).out
    bound = bounds.bound_vs_recipe(spec, recipe)[0] + bounds.bound_vs_ideal(spec, recipe)
    v = compare.elementwise("out vs float64", res.out.cpu().float().numpy(), ideal, bound, "torch bf16 swiglu")
    assert v.ok, v.message
    swapped = te.moe_layer(x, logits, None, {"w13": w13[:, torch.cat([torch.arange(I, 2 * I), torch.arange(I)])],
                                             "w2": w2}, **kw)
    assert (np.abs(swapped.out.float().numpy() - ideal) > bound).any()  # a gate/up swap is outside the bound
