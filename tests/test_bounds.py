"""spec/bounds.py: the rules hold on their own, and the layer bounds hold (and bite) against the spec itself
recomputed with other summation orders and accumulators."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from test_layer import problem, quantized_weights
from within import assert_within

from spec import bounds, mlp, recipes
from spec.bounds import Err
from spec.layer import StackedWeights, moe_layer
from spec.numerics import round_to
from spec.quant import quantize
from spec.recipes import Recipe

PLAIN = Recipe(name="plain")
FP32_STORES = Recipe(name="fp32_stores", gemm1_out="fp32", act_out="fp32", expert_out="fp32", out="fp32")


def test_gamma_and_accumulation_coefficients():
    """docs/semantics.md §6: fp32 γ_128 = 7.6e-6, γ_7168 = 4.3e-4; hopper adds γ_128(2^-13) = 1.6e-2."""
    assert bounds.gamma(128, 2.0**-24) == pytest.approx(7.63e-6, rel=1e-3)
    assert bounds.gamma(7168, 2.0**-24) == pytest.approx(4.27e-4, rel=1e-2)
    assert bounds.gamma(2**24, 2.0**-24) == math.inf
    fp32, _ = bounds.accumulation(7168, "fp32", True)
    hopper, prob = bounds.accumulation(7168, "hopper_fp8", True)
    assert hopper == pytest.approx(bounds.gamma(128, 2.0**-13) + bounds.gamma(58, 2.0**-24), rel=1e-3)
    assert bounds.accumulation(7168, "hopper_fp8", False)[0] == fp32  # bf16 operands: fp32 accumulation
    assert prob < hopper


@pytest.mark.parametrize("name", ["silu", "gelu", "gelu_tanh", "identity"])
def test_lipschitz_constants_bound_the_derivative(name):
    x = np.linspace(-40, 40, 400001)
    f = mlp.NONLINEARITY[name if name != "gelu_tanh" else "geglu_tanh"]
    slope = np.abs(np.diff(f(x)) / np.diff(x))
    assert slope.max() <= bounds.LIPSCHITZ[name] and slope.max() > bounds.LIPSCHITZ[name] - 0.01


@settings(deadline=None, max_examples=100)
@given(
    v=arrays(np.float64, 64, elements=st.floats(-1e3, 1e3, width=64)),
    log_rel=st.floats(-10, -1),
    fmt=st.sampled_from(["bf16", "fp16", "e4m3fn", "fp32"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_rounding_rule(v, log_rel, fmt, seed):
    """Any v' within δ of v rounds to within rounded(...).hard of R(v); the ideal term bounds |R(v) − v|."""
    delta = np.abs(v) * 10.0**log_rel
    r = round_to(v, fmt, saturate=True).astype(np.float64)
    e = bounds.rounded(v, r, Err(delta, delta, np.zeros_like(v)), fmt)
    u = np.random.default_rng(seed).uniform(-1, 1, (16, v.size))
    moved = np.abs(round_to(v + u * delta, fmt, saturate=True) - r)
    assert np.all(moved <= e.hard)
    inside = np.abs(v) <= (448 if fmt == "e4m3fn" else np.inf)
    assert np.all((np.abs(r - v) <= e.ideal)[inside])


@settings(deadline=None, max_examples=60)
@given(
    seed=st.integers(0, 2**32 - 1),
    path=st.sampled_from(["fp8_block", "mxfp8", "nvfp4"]),
    log_rel=st.floats(-6, -2),
    sparse=st.booleans(),
)
def test_requant_rule(seed, path, log_rel, sparse):
    """Re-quantizing any v' with |v' − v| ≤ δ (δ on some or all elements, amax may move) lands within
    requantized(...).hard of the spec's Q(v), codes and scales recomputed by the real quantizer."""
    rng = np.random.default_rng(seed)
    v = round_to(rng.standard_normal((4, 128)) * np.exp(rng.uniform(-3, 3, (4, 1))), "bf16").astype(
        np.float64
    )
    delta = np.abs(v) * 10.0**log_rel * (rng.random(v.shape) < 0.1 if sparse else 1)
    q = quantize(v, path, PLAIN, "div", "div448")
    e = bounds.requantized(v, Err(delta, delta, np.zeros_like(v)), q)
    for _ in range(8):
        moved = round_to(v + rng.uniform(-1, 1, v.shape) * delta, "fp32")
        got = quantize(np.clip(moved, v - delta, v + delta), path, PLAIN, "div", "div448").values
        assert np.all(np.abs(got - q.values) <= e.hard), path
    assert np.all(np.abs(q.values - v) <= e.ideal)


def permuted(x, w, K_perm_h, I_perm, gated):
    """The same layer with the H and I sums reordered: hidden and w13 columns by K_perm_h, w13 rows (each
    half) and w2 columns by I_perm, w2 rows unchanged (the output order stays)."""
    w13, w2 = w[0][:, :, K_perm_h], w[1][:, :, I_perm]
    rows = np.concatenate([I_perm, I_perm + len(I_perm)]) if gated else I_perm
    return x[:, K_perm_h], w13[:, rows], w2


def block_permutation(rng, n, block):
    """A permutation of range(n) that keeps each element inside its block of `block` (scales stay valid)."""
    return np.concatenate([b + rng.permutation(min(block, n - b)) for b in range(0, n, block)])


def block_order(rng, n, block):
    """A permutation of range(n) that moves whole blocks of `block` and keeps the order inside each."""
    return np.concatenate([np.arange(b, b + block) for b in rng.permutation(range(0, n, block))])


CASES = [
    ("bf16", PLAIN, "swiglu"),
    ("bf16", recipes.TRTLLM_BF16, "swiglu"),
    ("bf16", FP32_STORES, "geglu"),
    ("bf16", PLAIN, "relu2"),
    ("fp8_block", recipes.TRTLLM_FP8_BLOCK, "swiglu"),
    ("fp8_block", recipes.SGLANG_TRITON_FP8_BLOCK, "swiglu"),
    ("fp8_block", recipes.MONO_MOE, "geglu_tanh"),
    ("mxfp8", PLAIN, "swiglu"),
    ("nvfp4", PLAIN, "relu2"),
]


@pytest.mark.parametrize("path,recipe,activation", CASES, ids=[f"{c[0]}-{c[1].name}-{c[2]}" for c in CASES])
@settings(deadline=None, max_examples=3)
@given(seed=st.integers(0, 2**32 - 1))
def test_hard_bound_holds_for_reordered_accumulation(path, recipe, activation, seed):
    """The spec recomputed as an implementation would run it never leaves bound_vs_recipe of the recipe-exact
    result, and the recipe-exact result never leaves bound_vs_ideal of the ideal. Against exact sums: fp32
    sequential, fp32 pairwise, block-scaled fp32 and the Hopper accumulator, with K orders permuted within
    scale blocks. A hopper_fp8 recipe's own result emulates the tensor core (bit-exact, hopper.hopper_fp8_step),
    so its implementations differ only in the order of the blocks' fp32 promotion: whole blocks permuted."""
    gated = activation in mlp.GATED_ACTIVATIONS
    x, logits, w13, w2 = problem(seed % 2**16, T=8, H=256, I=128, E=4, gated=gated)
    rng = np.random.default_rng(seed)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation=activation, quant=path, recipe=recipe)
    weights = quantized_weights(w13, w2, path)[0]
    block = {"mxfp8": 32, "nvfp4": 16}.get(path, 128)  # scale blocks must keep their elements
    within = permuted(x, (w13, w2), block_permutation(rng, 256, block), block_permutation(rng, 128, block), gated)
    accs = ["fp32", "fp32_pairwise"] + {"bf16": []}.get(path, ["fp32_blocked"])
    runs = [("exact", (x, weights), acc) for acc in accs]
    runs += [("exact", (within[0], quantized_weights(*within[1:], path)[0]), acc) for acc in accs]
    if recipe.gemm_acc == "hopper_fp8":
        runs += [("exact", (within[0], quantized_weights(*within[1:], path)[0]), "hopper_fp8")]
        g2 = recipe.requant_group
        blocks = permuted(x, (w13, w2), block_order(rng, 256, 128), block_order(rng, 128, g2), gated)
        runs += [("hopper_fp8", (x, weights), "hopper_fp8"),
                 ("hopper_fp8", (blocks[0], quantized_weights(*blocks[1:], path)[0]), "hopper_fp8")]
    for reference in {r for r, _, _ in runs}:
        exact = moe_layer(x, logits, None, weights, **kw, accumulate=reference)
        hard, prob = bounds.bound_vs_recipe(exact, recipe)
        assert np.isfinite(hard).all() and np.all(prob <= hard)
        for _, (xs, ws), acc in (r for r in runs if r[0] == reference):
            got = moe_layer(xs, logits, None, ws, **kw, accumulate=acc).out
            assert_within(f"out ({acc} vs {reference})", got, exact.out, hard)
        ideal = moe_layer(x, logits, None, weights, routing=kw["routing"], activation=activation, quant=path)
        assert_within("recipe-exact out vs ideal", exact.out, ideal.out, bounds.bound_vs_ideal(exact, recipe))


VACUITY = [  # (path, recipe, H, I): FP8 Hopper recipes need ≥ 3 K blocks for the promotion order to matter
    ("bf16", recipes.TRTLLM_BF16, 256, 128),
    ("bf16", FP32_STORES, 256, 128),
    ("fp8_block", recipes.TRTLLM_FP8_BLOCK, 256, 128),
    ("fp8_block", recipes.SGLANG_TRITON_FP8_BLOCK, 512, 384),
    ("fp8_block", recipes.MONO_MOE, 512, 256),
]


@pytest.mark.parametrize("path,recipe,H,I", VACUITY, ids=[f"{c[0]}-{c[1].name}" for c in VACUITY])
def test_hard_bound_is_not_vacuous(path, recipe, H, I):
    """Random non-negative inputs (no cancellation, so rounding errors of a sequential fp32 sum are not hidden
    by a small result): an implementation's legitimate freedom reaches at least 1 % of the hard bound. That
    freedom is the summation order: reversed K for fp32 accumulation; for a hopper_fp8 recipe, whose block
    sums the spec reproduces bit-exactly, the order of the blocks' fp32 promotion (whole blocks reversed).
    Expert and layer outputs are stored in fp32 here: a bf16 output rounding is tight by construction (0 or
    one ulp where a flip is possible) and would make the ratio a coin toss on a few near-midpoint elements."""
    recipe = recipe.but(expert_out="fp32", out="fp32")
    x, logits, w13, w2 = (np.abs(a) for a in problem(21, T=128, H=H, I=I, E=4))
    x = round_to(x, "bf16").astype(np.float32)  # mono_moe's inputs are bf16 (its quantizer is then exact)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant=path, recipe=recipe)
    if recipe.gemm_acc == "hopper_fp8":
        h_order, i_order, acc = reversed_blocks(H, 128), reversed_blocks(I, recipe.requant_group), None
    else:
        h_order, i_order, acc = np.arange(H)[::-1], np.arange(I)[::-1], "fp32"
    xp, w13p, w2p = permuted(x, (w13, w2), h_order, i_order, True)
    exact = moe_layer(x, logits, None, quantized_weights(w13, w2, path)[0], **kw)
    got = moe_layer(xp, logits, None, quantized_weights(w13p, w2p, path)[0], **kw, accumulate=acc)
    hard, _ = bounds.bound_vs_recipe(exact, recipe)
    assert np.isfinite(hard).all() and (hard > 0).all()
    ratio = np.max(np.abs(got.out - exact.out) / hard)
    assert 0.01 <= ratio <= 1, f"observed / bound = {ratio}"


def reversed_blocks(n, block):
    """range(n) with its blocks of `block` in reverse order, each block's own order kept."""
    return np.arange(n).reshape(-1, block)[::-1].ravel()


def test_bounds_refuse_the_ideal_and_other_recipes():
    x, logits, w13, w2 = problem(2, T=2, H=32, I=16)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu")
    weights = StackedWeights({"w13": w13, "w2": w2})
    with pytest.raises(ValueError, match="recipe-exact"):
        bounds.bound_vs_recipe(moe_layer(x, logits, None, weights, **kw), PLAIN)
    with pytest.raises(ValueError, match="not 'plain'"):
        bounds.bound_vs_ideal(moe_layer(x, logits, None, weights, **kw, recipe=FP32_STORES), PLAIN)
