"""spec/bounds.py: the rules hold on their own, and the layer bounds hold (and bite) against the spec itself
recomputed with other summation orders and accumulators."""

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from difftest.checking.compare import elementwise
from spec import bounds, hopper, layer, mlp, quant, recipes
from spec.bounds import Err
from spec.layer import StackedWeights, moe_layer
from spec.numerics import E4M3FN, encode, round_to
from spec.quant import quantize
from spec.recipes import Recipe
from tests.helpers.within import assert_within
from tests.spec.test_layer import problem, quantized_weights

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


def test_a_truncating_accumulator_needs_the_tensor_core_coefficient():
    """1 + n terms of 2^-23·(1 − 2^-10), each below one ulp of the running sum: rounded to nearest every addition
    goes up by one ulp (error ≈ 2^-33 each), rounded toward zero every term is lost (error ≈ n·2^-23), twice the
    fp32 coefficient γ_{n+2}(2^-24) and within tensor_core's γ_{n+2}(2^-23)."""
    n = 1000
    t = np.float32(2.0**-23 * (1 - 2.0**-10))
    terms = np.array([1.0, *[t] * n], np.float32)
    exact = float(np.sum(terms.astype(np.float64)))
    truncated = float(layer._truncating_sum(terms[None, :])[0])
    nearest = float(np.cumsum(terms, dtype=np.float32)[-1])
    magnitude = float(np.sum(np.abs(terms.astype(np.float64))))
    fp32, _ = bounds.accumulation(n + 1, "fp32", False)
    tensor_core, prob = bounds.accumulation(n + 1, "tensor_core", False)
    assert truncated == 1.0 and abs(nearest - exact) <= fp32 * magnitude
    assert fp32 * magnitude < abs(truncated - exact) <= tensor_core * magnitude and prob == tensor_core


def test_accumulation_counts_the_nonzero_products_only():
    """The truncating sum above with 4,000 exact zeros interleaved: the zeros change no partial sum, so the error
    is the same n·2^-23 and the coefficients of the n nonzero products bound it (tensor_core) and are reached
    (it exceeds fp32's). gemm_shadow with terms = n gives the same bound as K = n."""
    n = 1000
    t = np.float32(2.0**-23 * (1 - 2.0**-10))
    terms = np.zeros(5 * n + 1, np.float32)
    terms[0], terms[5::5] = 1.0, t
    exact = float(np.sum(terms.astype(np.float64)))
    truncated = float(layer._truncating_sum(terms[None, :])[0])
    magnitude = float(np.sum(np.abs(terms.astype(np.float64))))
    live = bounds.nonzero_terms([np.count_nonzero(terms)], [terms.size])
    assert live.tolist() == [[n + 1]]
    fp32, _ = bounds.accumulation(n + 1, "fp32", False)
    tensor_core, _ = bounds.accumulation(n + 1, "tensor_core", False)
    assert fp32 * magnitude < abs(truncated - exact) <= tensor_core * magnitude
    products = np.array([[magnitude], [0.0], [0.0], [0.0]])
    counted = bounds.gemm_shadow(products, terms.size, "tensor_core", False, terms=live)
    assert counted.hard[0, 0] == bounds.gemm_shadow(products, n + 1, "tensor_core", False).hard[0, 0]
    assert counted.hard[0, 0] < bounds.gemm_shadow(products, terms.size, "tensor_core", False).hard[0, 0] / 4


def test_gemm_bound_of_sparse_rows_holds_under_truncation():
    """a·Wᵀ with W of 64 nonzeros per row (K = 1024), non-negative operands, summed over K with every addition
    rounded toward zero: the tensor_core hard bound from the nonzero count holds, and the error reaches 5 % of it
    (measured 0.052; counting K instead, 16x the bound, it would be 0.3 %). Random terms lose about half an ulp
    per addition, not the worst case's whole one: test_accumulation_counts_the_nonzero_products_only reaches the
    bound with terms built for it."""
    rng = np.random.default_rng(3)
    a = round_to(np.abs(rng.standard_normal((16, 1024))), "bf16")
    w = round_to(np.abs(sparse_rows(rng.standard_normal((1, 32, 1024)).astype(np.float32), 64, rng)[0]), "bf16")
    products = (a[:, None, :] * w[None, :, :]).astype(np.float32)  # bf16 x bf16: exact in fp32
    exact = np.einsum("mk,nk->mn", a, w)
    got = layer._truncating_sum(products)
    terms = bounds.nonzero_terms(np.count_nonzero(a, axis=1), np.count_nonzero(w, axis=1))
    e = bounds.gemm(a, bounds.zero(a.shape), np.abs(w), "tensor_core", False, terms=terms)
    ratio = np.abs(got - exact) / e.hard
    assert terms.max() <= 64 and 0.02 <= ratio.max() <= 1, ratio.max()


def test_a_product_with_an_unbounded_factor_error_and_an_exact_zero_has_no_nan():
    """bounds.product: where the router weight is 0 with an unbounded ideal error (every sigmoid underflowed) and
    the expert output is exact, the ideal bound is |a|·∞ = ∞ where a ≠ 0 and 0 where a = 0, never 0·∞ = NaN,
    and no RuntimeWarning. Found on the H200 (2026-12-02, docs/device-results.md): the trtllm-gen no-GEMM layer's
    comparisons on `underflow` inputs raised "invalid value encountered in multiply" (the rounding term
    0·(|a| + δa)·(|b| + ∞))."""
    from difftest.checking import impl_spec
    from difftest.checking.check import compared
    from difftest.model import generate
    from difftest.model.case import Case, MoEConfig, RoutingConfig

    a, b = np.array([[0.0, 1.5]]), np.array([[0.0]])
    ea, eb = bounds.zero(a.shape), Err(np.zeros((1, 1)), np.zeros((1, 1)), np.full((1, 1), np.inf))
    with np.errstate(all="raise"):
        e = bounds.product(a, b, ea, eb)
    assert e.ideal.tolist() == [[0.0, np.inf]] and e.hard.tolist() == [[0.0, 0.0]]
    r = RoutingConfig("deepseek_v3", 1, 256, 8, n_group=8, topk_group=4, routed_scaling_factor=2.5, eps=1e-20,
                      logits_dtype="fp32", bias_dtype="fp32")
    case = Case("moe", MoEConfig(r, 128, 128, quant="fp8_block"), "underflow", 0)
    recipe = recipes.NAMED["flashinfer_trtllm_gen_nogemm_fp8_block_grouped_as_built"]
    inputs = generate.inputs(case)
    assert compared(case, inputs, impl_spec.expected(case, inputs, recipe), recipe, "test").ok


# Measured on the H200 (spec/data/probes/underflow_probe.py, spec/data/underflow_probe.txt): torch-CUDA on two
# `underflow` nvfp4 layers, whose router weights are fp32 subnormals (25 and 160 ulps of 2^-149) times expert outputs
# near 10^6. (rsf, I, element, tokens, the CUDA output there.)
FLUSHED_COMBINES = [(2.5, 16, 4, (3, 2), 1.5703869843016497e-38), (16.0, 48, 6, (3, 0), 8.412131448071995e-38)]


@pytest.mark.parametrize("rsf,I,tokens,at,cuda", FLUSHED_COMBINES)
def test_a_flush_to_zero_combine_is_inside_the_flush_recipes_bound(rsf, I, tokens, at, cuda):
    """The combine's terms w·y and partial sums there lie near the fp32 min normal, and CUDA flushed some (its
    output differs from the IEEE sum by 3·10^-39 and 5.5·10^-39, 7-16 % of it). The flush recipe's bound covers
    that (bounds.flushed_reduction: < N per product and per addition); the IEEE recipe's does not, so the term is
    what covers it."""
    from difftest.checking import impl_spec
    from difftest.model import generate
    from difftest.model.case import Case, MoEConfig, RoutingConfig

    r = RoutingConfig("deepseek_v3", tokens, 8, 3, n_group=4, topk_group=2,
                      routed_scaling_factor=rsf, renormalize=False, logits_dtype="bf16")
    case = Case("moe", MoEConfig(r, 16, I, activation="silu", quant="nvfp4"), "underflow", 2**32 - 1)
    inputs = generate.inputs(case)
    for recipe, covered in ((recipes.TORCH_EAGER_CUDA[3], True), (recipes.TORCH_EAGER_NVFP4, False)):
        res = impl_spec.layer(case, inputs, recipe)
        hard, _ = bounds.bound_vs_recipe(res, recipe)
        assert 0.8 < cuda / res.out[at] < 1.2  # the measured case
        assert (abs(cuda - res.out[at]) <= hard[at]) == covered, (recipe.name, res.out[at], hard[at])


def sparse_rows(w, m, rng):
    """w [E, N, K] with m entries kept per row (positions drawn with repeats), the rest exact zeros."""
    keep = np.zeros(w.shape, bool)
    np.put_along_axis(keep, rng.integers(0, w.shape[-1], (*w.shape[:-1], m)), True, axis=-1)
    return np.where(keep, w * np.float32(math.sqrt(w.shape[-1] / m)), np.float32(0.0))


SPARSE_CASES = [
    ("bf16", PLAIN), ("bf16", recipes.TRTLLM_BF16), ("fp8_block", recipes.TORCH_EAGER_FP8_BLOCK),
    ("fp8_block", recipes.MONO_MOE),
]


@pytest.mark.parametrize("path,recipe", SPARSE_CASES, ids=[f"{p}-{r.name}" for p, r in SPARSE_CASES])
def test_bound_of_sparse_weights_holds_and_bites(path, recipe):
    """Weights with 8 nonzeros per row (H = 1024, I = 512): the layer's hard bound counts the products that may
    be nonzero, not K. It holds against the spec recomputed in reversed K order (fp32; tensor_core: rounding
    toward zero; hopper_fp8: whole blocks reversed) on signed inputs, and is reached on non-negative ones (≥ 1 %,
    outputs stored in fp32 as in test_hard_bound_is_not_vacuous). At this width the K-counted fp32 bound would be
    ≥ 10x larger."""
    H, I = 1024, 512
    rng = np.random.default_rng(5)
    x, logits, w13, w2 = problem(5, T=32, H=H, I=I, E=4)
    w13, w2 = sparse_rows(w13, 8, rng), sparse_rows(w2, 8, rng)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant=path)
    h_order, i_order, acc = another_order(recipe, H, I)
    for nonneg in (False, True):
        r = recipe.but(expert_out="fp32", out="fp32") if nonneg else recipe
        xs, a13, a2 = (np.abs(a) for a in (x, w13, w2)) if nonneg else (x, w13, w2)
        xp, w13p, w2p = permuted(xs, (a13, a2), h_order, i_order, True)
        exact = moe_layer(xs, logits, None, quantized_weights(a13, a2, path)[0], **kw, recipe=r)
        got = moe_layer(xp, logits, None, quantized_weights(w13p, w2p, path)[0], **kw, recipe=r, accumulate=acc)
        hard, _ = bounds.bound_vs_recipe(exact, r)
        assert np.isfinite(hard).all()
        assert_within(f"out ({acc} vs exact)", got.out, exact.out, hard)
        if nonneg:
            assert np.max(np.abs(got.out - exact.out) / hard) >= 0.01
            if recipe.gemm_acc != "hopper_fp8":
                dense = bounds.accumulation(H, recipe.gemm_acc, path != "bf16")[0]
                assert bounds.accumulation(8, recipe.gemm_acc, path != "bf16")[0] * 10 < dense


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


REQUANT_DRAWS = dict(
    seed=st.integers(0, 2**32 - 1),
    path=st.sampled_from(["fp8_block", "mxfp8", "nvfp4"]),
    log_rel=st.floats(-6, -2),
    sparse=st.booleans(),
)


def requant_problem(seed, path, log_rel, sparse):
    """(rng, v, δ, Q(v)): 4 bf16 rows of 128 at random scales, δ relative 10^log_rel on all or ~10 % of them."""
    rng = np.random.default_rng(seed)
    v = round_to(rng.standard_normal((4, 128)) * np.exp(rng.uniform(-3, 3, (4, 1))), "bf16").astype(np.float64)
    delta = np.abs(v) * 10.0**log_rel * (rng.random(v.shape) < 0.1 if sparse else 1)
    return rng, v, delta, quantize(v, path, PLAIN, "div", "div448")


def requantized_moved(rng, v, delta, path):
    """The real quantizer on a random fp32 v' within δ of v."""
    moved = round_to(v + rng.uniform(-1, 1, v.shape) * delta, "fp32")
    return quantize(np.clip(moved, v - delta, v + delta), path, PLAIN, "div", "div448")


@settings(deadline=None, max_examples=60)
@given(**REQUANT_DRAWS)
def test_requant_rule(seed, path, log_rel, sparse):
    """Re-quantizing any v' with |v' − v| ≤ δ (δ on some or all elements, amax may move) lands within
    requantized(...).hard of the spec's Q(v), codes and scales recomputed by the real quantizer."""
    rng, v, delta, q = requant_problem(seed, path, log_rel, sparse)
    e = bounds.requantized(v, Err(delta, delta, np.zeros_like(v)), q)
    for _ in range(8):
        got = requantized_moved(rng, v, delta, path).values
        assert np.all(np.abs(got - q.values) <= e.hard), path
    assert np.all(np.abs(q.values - v) <= e.ideal)


@settings(deadline=None, max_examples=60)
@given(**REQUANT_DRAWS)
@example(seed=15098143, path="fp8_block", log_rel=-2.0, sparse=True)  # f alone beyond the total's bound
def test_requant_reach_is_directed_and_shares_the_scale(seed, path, log_rel, sparse):
    """Q'(v') − Q(v) = f + Q(v)·(r − 1) with f in requant_reach's [lo, hi] and r = s'/s, |r − 1| <= rho, for the
    real quantizer's codes and scales of any v' within δ; and for most elements that can flip, only one side.

    f is one part of the move, not the move: the undirected rule bounds the total |Q' − Q| (requantized.hard), so
    |f| <= hard + rho·|Q| and, where no scale is shared (rho = 0), |f| <= hard. It may exceed hard alone: an element
    with δ = 0 whose v/s lies just above a midpoint (17.03·s, code 18, the example) flips to 16 only once its
    group's amax grows the scale by r > 1.0016, so f = −2·s·r reaches −2·s·r_max, while the total 16·s·r − 18·s
    stays within 2·s: the scale's rise gives back 16·s·(r − 1) of the flip."""
    rng, v, delta, q = requant_problem(seed, path, log_rel, sparse)
    lo, hi, rho = bounds.requant_reach(v, Err(delta, delta, np.zeros_like(v)), q)
    assert np.all(lo <= 0) and np.all(hi >= 0) and np.all(rho >= 0)
    hard = bounds.requantized(v, Err(delta, delta, delta), q).hard
    assert np.all((np.maximum(hi, -lo) <= hard)[rho == 0])
    assert np.all(np.maximum(hi, -lo) <= hard + rho * np.abs(q.values) * (1 + 1e-12))
    for _ in range(8):
        got = requantized_moved(rng, v, delta, path)
        r = np.where(q.scale > 0, got.scale / np.where(q.scale > 0, q.scale, 1), 1.0)
        shared = rho > 0
        assert np.all(np.abs(r - 1)[shared] <= rho[shared] * (1 + 1e-12))
        f = got.values - q.values - np.where(shared, q.values * (r - 1), 0.0)
        assert np.all((lo - 1e-12 * np.abs(q.values) <= f) & (f <= hi + 1e-12 * np.abs(q.values))), path
    if path == "fp8_block" and log_rel < -3:
        reachable = (lo < 0) | (hi > 0)
        assert np.mean(((lo < 0) & (hi > 0))[reachable]) < 0.5 if reachable.any() else True


@pytest.mark.parametrize("path", ["fp8_block", "mxfp8", "nvfp4"])
def test_requant_reach_of_a_zero_group_that_may_move_is_finite(path):
    """A group the spec computes as all zeros (a relu2 row of 128 zeros) while an implementation's values may be up
    to δ > 0: its scale may grow without bound relative to the spec's eps-sized one, so the reach is not a code
    flip times a scale ratio (that was ±inf, and inf·0 a NaN in the layer's bound, seen in a campaign's model-width
    layer); every reached value still lies within δ plus a rounding, and the bounds say so, finite."""
    rng = np.random.default_rng(5)
    v = np.zeros((2, 128))
    v[1] = round_to(rng.standard_normal(128), "bf16")
    delta = np.full(v.shape, 1.5e-5)
    q = quantize(v, path, PLAIN, "div", "div448")
    lo, hi, rho = bounds.requant_reach(v, Err(delta, delta, np.zeros_like(v)), q)
    hard = bounds.requantized(v, Err(delta, delta, delta), q).hard
    assert np.isfinite(lo).all() and np.isfinite(hi).all() and np.isfinite(rho).all() and np.isfinite(hard).all()
    for _ in range(8):
        got = requantized_moved(rng, v, delta, path).values
        assert np.all(np.abs(got - q.values) <= hard)
    w = rng.standard_normal((16, 128))
    assert np.isfinite(bounds.directed_products(lo, hi, np.maximum(w, 0), np.maximum(-w, 0))).all()


@settings(deadline=None, max_examples=50)
@given(seed=st.integers(0, 2**32 - 1), fmt=st.sampled_from(["bf16", "e4m3fn"]), log_rel=st.floats(-8, -1))
def test_directed_rounding_and_products(seed, fmt, log_rel):
    """rounded_reach holds for every v' within δ, and directed_products bounds |(a' − a)·Wᵀ| for deviations in
    [lo, hi] (checked at random deviations and at the two extreme corners per output), never above δ·|W|ᵀ."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((3, 64)) * 4
    delta = np.abs(v) * 10.0**log_rel
    r = round_to(v, fmt, saturate=True).astype(np.float64)
    e = Err(delta, delta, delta)
    lo, hi, _ = bounds.rounded_reach(v, r, e, fmt)
    for _ in range(16):
        got = round_to(v + rng.uniform(-1, 1, v.shape) * delta, fmt, saturate=True).astype(np.float64) - r
        assert np.all((lo <= got) & (got <= hi))
    w = rng.standard_normal((32, 64))
    wp, wn = np.maximum(w, 0), np.maximum(-w, 0)
    bound = bounds.directed_products(lo, hi, wp, wn)
    assert np.all(bound <= np.maximum(hi, -lo) @ np.abs(w).T + 1e-12)
    up = np.where(w[None] > 0, hi[:, None], lo[:, None])  # the deviation that raises output n the most
    assert np.allclose(np.maximum((up * w[None]).sum(-1), -(np.where(w[None] > 0, lo[:, None], hi[:, None])
                                                            * w[None]).sum(-1)), bound)
    for _ in range(16):
        d = lo + rng.random(lo.shape) * (hi - lo)
        assert np.all(np.abs(d @ w.T) <= bound + 1e-12)


def test_rounding_of_an_exact_value_without_freedom_is_exact():
    """δ = 0 on an exactly known value: no freedom, so the bound is 0 even at a tie (ties to even compared
    exactly: an implementation rounding 1 + 2^-8 away from zero to bf16 fails); a float64 value that may be a few
    ulps off keeps one ulp there."""
    v = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1.3])  # two bf16 ties (to 1 and to 1 + 2^-6) and a plain value
    r = round_to(v, "bf16").astype(np.float64)
    zero = Err(np.zeros(3), np.zeros(3), np.zeros(3))
    assert np.all(bounds.rounded(v, r, zero, "bf16", exact=True).hard == 0)
    assert np.all(bounds.rounded_reach(v, r, zero, "bf16", exact=True)[1] == 0)
    assert np.all(bounds.rounded(v, r, zero, "bf16").hard[:2] == 2.0**-7)
    away = np.array([1 + 2.0**-7, 1 + 2 * 2.0**-7, 1.296875])  # ties rounded away from zero, 1.3 as RNE
    assert not elementwise("ties away", away, r, bounds.rounded(v, r, zero, "bf16", exact=True).hard, "t").ok


def test_scale_motion_charges_a_group_once():
    """A group whose common scale moves by r moves its partial product by r − 1: scale_motion bounds that for
    every r within rho, and is far below rho·|values|·|W|ᵀ when the group's products cancel."""
    rng = np.random.default_rng(5)
    values, w = rng.standard_normal((4, 256)), rng.standard_normal((16, 256))
    rho = np.repeat(rng.uniform(0, 0.01, (4, 2)), 128, axis=1)
    bound = bounds.scale_motion(values, rho, w, 128)
    for _ in range(32):
        r = 1 + np.repeat(rng.uniform(-1, 1, (4, 2)), 128, axis=1) * rho
        assert np.all(np.abs((values * (r - 1)) @ w.T) <= bound + 1e-12)
    assert np.median(bound / ((rho * np.abs(values)) @ np.abs(w).T)) < 0.2


@settings(deadline=None, max_examples=20)
@given(seed=st.integers(0, 2**32 - 1), signed=st.booleans(), spread=st.sampled_from([1.0, 100.0]))
def test_hopper_truncation_bounds_the_tensor_core(seed, signed, spread):
    """hopper_truncation bounds |B_b(a') − Σ a'·w| of the emulated tensor core (hopper.hopper_block_sums_reference)
    for codes a' within flips of a, and stays well below γ_128(2^-13)·Σ|a'w| on cancelling data."""
    rng = np.random.default_rng(seed)
    enc = lambda x: quant.E4M3_VALUES[encode(x, E4M3FN, saturate=True)].astype(np.float64)
    a, w = enc(rng.standard_normal((4, 256)) * spread), enc(rng.standard_normal((32, 256)) * spread)
    if not signed:
        a, w = np.abs(a), np.abs(w)
    flips = np.where(rng.random(a.shape) < 0.2, np.abs(a) / 8, 0.0)
    eps = bounds.hopper_truncation(a, w, flips)
    for _ in range(4):
        moved = enc(a + rng.uniform(-1, 1, a.shape) * flips)
        moved = np.where(np.abs(moved - a) <= flips, moved, a)
        exact = np.einsum("mbk,nbk->mnb", moved.reshape(4, 2, 128), w.reshape(32, 2, 128))
        assert np.all(np.abs(hopper.hopper_block_sums_reference(moved, w, 128) - exact) <= eps)
    gamma = bounds.gamma(128, 2.0**-13) * np.einsum("mbk,nbk->mnb", np.abs(a).reshape(4, 2, 128),
                                                     np.abs(w).reshape(32, 2, 128))
    assert np.median(eps / gamma) < (0.5 if signed else 1.0)


def test_hopper_truncation_is_reached():
    """The worst case the bound is built for: a first step of 448² products lifts the accumulator to 2^22.6, so
    each later product 22.5² = 506.25 lies below the 2^(22-13) = 512 grid and is truncated to 0. The block sum
    loses 96·506.25, more than half the bound."""
    a = np.array([[448.0] * 32 + [22.5] * 96])
    lost = np.abs(hopper.hopper_block_sums_reference(a, a, 128) - (a * a).sum())
    assert lost == 96 * 506.25
    assert 0.5 < lost / bounds.hopper_truncation(a, a, np.zeros_like(a)) <= 1


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
    sequential, fp32 pairwise and block-scaled fp32, with K orders permuted within scale blocks. A hopper_fp8
    recipe is the tensor core's accumulator, which sums each K block in ascending K, 32 products a step (the
    measured model, hopper.hopper_fp8_step): its implementations differ only in the order of the blocks' fp32
    promotion, whole blocks permuted, against the recipe's own emulated result and against exact sums."""
    gated = activation in mlp.GATED_ACTIVATIONS
    x, logits, w13, w2 = problem(seed % 2**16, T=8, H=256, I=128, E=4, gated=gated)
    rng = np.random.default_rng(seed)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation=activation, quant=path, recipe=recipe)
    weights = quantized_weights(w13, w2, path)[0]
    block = {"mxfp8": 32, "nvfp4": 16}.get(path, 128)  # scale blocks must keep their elements
    within = permuted(x, (w13, w2), block_permutation(rng, 256, block), block_permutation(rng, 128, block), gated)
    accs = ["fp32", "fp32_pairwise"] + {"bf16": []}.get(path, ["fp32_blocked"])
    accs += ["fp32_truncating"] if recipe.gemm_acc == "tensor_core" else []
    runs = [("exact", (x, weights), acc) for acc in accs]
    runs += [("exact", (within[0], quantized_weights(*within[1:], path)[0]), acc) for acc in accs]
    if recipe.gemm_acc == "hopper_fp8":
        g2 = recipe.requant_group
        blocks = permuted(x, (w13, w2), block_order(rng, 256, 128), block_order(rng, 128, g2), gated)
        block_weights = quantized_weights(*blocks[1:], path)[0]
        runs = [(reference, operands, "hopper_fp8") for reference in ("exact", "hopper_fp8")
                for operands in ((x, weights), (blocks[0], block_weights))]
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
    ("fp8_block", recipes.TRTLLM_GEN_NOGEMM_FP8_BLOCK, 256, 128),
    ("fp8_block", recipes.TORCH_EAGER_FP8_BLOCK, 256, 128),
    ("fp8_block", recipes.SGLANG_TRITON_FP8_BLOCK, 512, 384),
    ("fp8_block", recipes.MONO_MOE, 512, 256),
    ("mxfp8", recipes.TORCH_EAGER_MXFP8, 256, 128),
    ("nvfp4", recipes.TORCH_EAGER_NVFP4, 256, 128),
]


@pytest.mark.parametrize("path,recipe,H,I", VACUITY, ids=[f"{c[0]}-{c[1].name}" for c in VACUITY])
def test_hard_bound_is_not_vacuous(path, recipe, H, I):
    """Random non-negative inputs (no cancellation, so rounding errors of a sequential fp32 sum are not hidden
    by a small result): an implementation's legitimate freedom reaches at least 1 % of the hard bound. That
    freedom is the summation order: reversed K for fp32 accumulation; for a hopper_fp8 recipe, whose block
    sums the spec reproduces bit-exactly, the order of the blocks' fp32 promotion (whole blocks reversed); for a
    tensor_core recipe, reversed K summed with additions that round toward zero.
    Expert and layer outputs are stored in fp32 here: a bf16 output rounding is tight by construction (0 or
    one ulp where a flip is possible) and would make the ratio a coin toss on a few near-midpoint elements."""
    recipe = recipe.but(expert_out="fp32", out="fp32")
    x, logits, w13, w2 = (np.abs(a) for a in problem(21, T=128, H=H, I=I, E=4))
    x = round_to(x, "bf16").astype(np.float32)  # mono_moe's inputs are bf16 (its quantizer is then exact)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant=path, recipe=recipe)
    h_order, i_order, acc = another_order(recipe, H, I)
    xp, w13p, w2p = permuted(x, (w13, w2), h_order, i_order, True)
    exact = moe_layer(x, logits, None, quantized_weights(w13, w2, path)[0], **kw)
    got = moe_layer(xp, logits, None, quantized_weights(w13p, w2p, path)[0], **kw, accumulate=acc)
    hard, _ = bounds.bound_vs_recipe(exact, recipe)
    assert np.isfinite(hard).all() and (hard > 0).all()
    ratio = np.max(np.abs(got.out - exact.out) / hard)
    assert 0.01 <= ratio <= 1, f"observed / bound = {ratio}"


TORCH_PATHS = {"bf16": recipes.TORCH_EAGER_BF16, "fp8_block": recipes.TORCH_EAGER_FP8_BLOCK,
               "mxfp8": recipes.TORCH_EAGER_MXFP8, "nvfp4": recipes.TORCH_EAGER_NVFP4}


@pytest.mark.parametrize("path", TORCH_PATHS)
def test_torch_eager_reaches_the_bound(path):
    """The torch eager implementation, a correct one written independently, comes within 100x of the hard
    bound of its declared recipe somewhere in 512 tokens (its bf16 outputs: where an output lands on the other
    side of a rounding midpoint, one ulp against a bound of one or a few ulps), and never above it."""
    import torch

    import impls.torch_eager as te
    from difftest.checking.impl_torch import expert_tensors

    x, logits, w13, w2 = (np.abs(a) for a in problem(21, T=512, H=256, I=128, E=4))
    weights = quantized_weights(w13, w2, path)[0]
    routing = dict(method="renormalize", top_k=2)
    exact = moe_layer(x, logits, None, weights, routing=routing, activation="swiglu", quant=path,
                      recipe=TORCH_PATHS[path])
    got = te.moe_layer(torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(logits), None,
                       expert_tensors(weights, path), routing=routing, activation="swiglu", quant=path).out
    hard, _ = bounds.bound_vs_recipe(exact, TORCH_PATHS[path])
    diff = np.abs(got.float().numpy() - exact.out)
    assert_within("torch out", got.float().numpy(), exact.out, hard)
    assert np.max(diff / np.where(diff > 0, hard, 1)) >= 0.01


@pytest.mark.parametrize("recipe", [recipes.SGLANG_TRITON_FP8_BLOCK, recipes.MONO_MOE], ids=lambda r: r.name)
def test_hopper_bound_against_exact_sums_is_not_of_the_order_of_out(recipe):
    """A Hopper recipe's bound against exact sums (accumulate="exact": the tensor core's truncation, measured
    where the codes are the spec's, bounded where they may differ) stays far below |out|, and the emulated tensor
    core stays within it."""
    x, logits, w13, w2 = problem(21, T=32, H=512, I=384, E=4)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant="fp8_block", recipe=recipe)
    weights = quantized_weights(w13, w2, "fp8_block")[0]
    exact = moe_layer(x, logits, None, weights, **kw, accumulate="exact")
    hard, _ = bounds.bound_vs_recipe(exact, recipe)
    assert np.median(hard / np.maximum(np.abs(exact.out), 1e-30)) < 0.1
    assert_within("emulated vs exact sums", moe_layer(x, logits, None, weights, **kw).out, exact.out, hard)


def reversed_blocks(n, block):
    """range(n) with its blocks of `block` in reverse order, each block's own order kept."""
    return np.arange(n).reshape(-1, block)[::-1].ravel()


def another_order(recipe, H, I):
    """(H order, I order, accumulate) of an implementation of `recipe` that sums differently from the spec: reversed
    K in fp32 (tensor_core: every addition rounded toward zero); hopper_fp8, whose block sums the spec reproduces,
    whole blocks reversed."""
    if recipe.gemm_acc == "hopper_fp8":
        return reversed_blocks(H, 128), reversed_blocks(I, recipe.requant_group), None
    acc = "fp32_truncating" if recipe.gemm_acc == "tensor_core" else "fp32"
    return np.arange(H)[::-1], np.arange(I)[::-1], acc


def test_bounds_refuse_the_ideal_and_other_recipes():
    x, logits, w13, w2 = problem(2, T=2, H=32, I=16)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu")
    weights = StackedWeights({"w13": w13, "w2": w2})
    with pytest.raises(ValueError, match="recipe-exact"):
        bounds.bound_vs_recipe(moe_layer(x, logits, None, weights, **kw), PLAIN)
    with pytest.raises(ValueError, match="not 'plain'"):
        bounds.bound_vs_ideal(moe_layer(x, logits, None, weights, **kw, recipe=FP32_STORES), PLAIN)
