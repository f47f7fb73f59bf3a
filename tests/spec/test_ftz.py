"""Recipe.subnormals = "flush" (CUDA FTZ): a 0 stored for a bf16 subnormal is within the hard bound, but only
near zero; away from min normal the bound is the same as with "keep" (runs/cuda_findings)."""

import numpy as np
import pytest

from spec import bounds, recipes
from spec.bounds import Err
from spec.layer import StackedWeights, moe_layer
from spec.numerics import BF16, round_to
from spec.recipes import Recipe
from tests.helpers.within import assert_within


def tiny_layer(subnormals):
    """T=1, H=2, I=1, two experts, top-1 (weight 1), identity activation: h = 3·2^-30, out = [3·2^-130, 3·2^-30]:
    out[0] a bf16 subnormal (24 · 2^-133), out[1] far above min normal. No input is subnormal."""
    recipe = recipes.TORCH_EAGER_BF16.but(subnormals=subnormals)
    x = np.array([[3 * 2.0**-30, 0.0]], np.float32)
    w13 = np.array([[[1.0, -1.0]]] * 2, np.float32)
    w2 = np.array([[[2.0**-100], [1.0]]] * 2, np.float32)
    logits = np.array([[0.0, 3.0]], np.float32)
    kw = dict(routing=dict(method="renormalize", top_k=1), activation="identity", recipe=recipe)
    res = moe_layer(x, logits, None, StackedWeights({"w13": w13, "w2": w2}), **kw)
    return res, recipe


def test_spec_value_is_ieee_under_both_settings():
    keep, _ = tiny_layer("keep")
    flush, _ = tiny_layer("flush")
    assert np.array_equal(keep.out, flush.out)
    assert keep.out[0, 0] == 3 * 2.0**-130 and 0 < keep.out[0, 0] < BF16.min_normal


def test_ftz_zero_exceeds_keep_bound_and_is_within_flush_bound():
    keep, rk = tiny_layer("keep")
    flush, rf = tiny_layer("flush")
    impl = keep.out.copy()
    impl[0, 0] = 0.0  # what torch-CUDA stores
    hard_keep, _ = bounds.bound_vs_recipe(keep, rk)
    hard_flush, prob_flush = bounds.bound_vs_recipe(flush, rf)
    assert abs(impl[0, 0] - keep.out[0, 0]) > hard_keep[0, 0]
    assert_within("out (flush, hard)", impl, flush.out, hard_flush)
    assert_within("out (flush, prob)", impl, flush.out, prob_flush)


def test_flush_bound_is_tight_away_from_zero():
    keep, rk = tiny_layer("keep")
    flush, rf = tiny_layer("flush")
    hk, pk = bounds.bound_vs_recipe(keep, rk)
    hf, pf = bounds.bound_vs_recipe(flush, rf)
    assert abs(keep.out[0, 1]) > 1e20 * BF16.min_normal
    assert hf[0, 1] == hk[0, 1] and pf[0, 1] == pk[0, 1]


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
def test_rounding_rule_flush(fmt):
    n = 2.0**-126
    v = np.array([5.6e-39, 0.5 * n, 2 * n, 1.0, -3.0 * 2**-130, n * (1 + 2**-6)])
    r = round_to(v, fmt).astype(np.float64)
    e = Err(np.zeros(6), np.zeros(6), np.zeros(6))
    keep, flush = bounds.rounded(v, r, e, fmt), bounds.rounded(v, r, e, fmt, flush=True)
    below = np.abs(v) < n
    assert np.all(flush.hard[below] >= np.abs(r[below])) and np.all(flush.hard[below] > 0)
    assert np.array_equal(flush.hard[~below], keep.hard[~below])
    assert np.array_equal(flush.ideal, keep.ideal)
    # a shadow δ reaching below min normal widens it: |v| − δ < N
    wide = bounds.rounded(v, r, Err(np.full(6, 1.5 * n), np.zeros(6), np.zeros(6)), fmt, flush=True)
    assert wide.hard[2] >= abs(r[2]) and wide.hard[3] == bounds.rounded(
        v, r, Err(np.full(6, 1.5 * n), np.zeros(6), np.zeros(6)), fmt).hard[3]


def test_recipe_field_is_validated():
    with pytest.raises(ValueError, match="Recipe.subnormals"):
        Recipe(name="x", subnormals="daz")
    assert Recipe.from_dict(recipes.NAMED["torch_eager_cuda_bf16"].to_dict()).subnormals == "flush"
