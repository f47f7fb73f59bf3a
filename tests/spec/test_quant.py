"""spec/quant.py: hand examples, oracles (torch, math), error bounds, edge values (UE8M0, NaN, saturation)."""

import importlib.util
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spec import quant
from spec.bounds import accumulation
from spec.hopper import hopper_block_sums, hopper_block_sums_reference, hopper_rcp, mufu_rcp_ulps
from spec.numerics import E2M1, E4M3FN, E8M0, decode, round_to
from spec.quant import (
    E4M3_VALUES,
    GROUP_SIZES,
    RCP448,
    block_scaled_gemm,
    mxfp8_dequant,
    mxfp8_quant,
    nvfp4_dequant,
    nvfp4_global_scale,
    nvfp4_quant,
    per_token_group_quant_fp8,
    ue8m0_ceil,
    ue8m0_ceil_log2,
    w13_block_quant,
    w13_dequant,
    weight_block_quant,
    weight_dequant,
)
from spec.recipes import QUANT_VARIANTS, SCALE_FORMULAS
from tests.helpers.within import assert_within

DATA = Path(__file__).parents[1] / "data"

SETTINGS = settings(deadline=None, max_examples=60)
F32_MAX = np.float32(448.0)


def randn_bf16(seed, shape, scale=3.0):
    """bf16 values of scale·N(0, 1), as float32 (the SGLang kernel tests' randn·3 input)."""
    return round_to(np.random.default_rng(seed).standard_normal(shape) * scale, "bf16")


def fp32_nearest(q):
    """Nearest float32 to the rational q, ties to even, from Fraction arithmetic only."""
    lo = np.float32(float(q))  # within one ulp; fix up by comparing exact distances
    cands = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - q), int(np.float32(c).view(np.uint32)) & 1))


def tile_scales(s, n, k, block=128):
    """Per-element float64 scales of a [..., ceil(N/b), ceil(K/b)] block grid, cut to [..., N, K]."""
    return np.repeat(np.repeat(s.astype(np.float64), block, axis=-2), block, axis=-1)[..., :n, :k]


def dequant_groups(q, s, g):
    return decode(q, E4M3FN).astype(np.float64) * np.repeat(s.astype(np.float64), g, axis=-1)


# ---- per_token_group_quant_fp8 ---------------------------------------------------------------------------

def test_per_token_group_quant_fp8_hand_example():
    x = np.zeros((1, 32), np.float32)
    x[0, :7] = [7.0, 1.0, 0.5, -3.5, 0.01, 1e-4, -0.0]  # group 0: amax 7, s = 7/448 = 2^-6, x/s = 64·x
    q, s = per_token_group_quant_fp8(x, 16)
    # 448 -> 0x7E; 64 = 2^6 -> E=13; 32 -> E=12; -224 = -1.75·2^7 -> 0x80|E=14,M=6;
    # 0.64 -> 0.625 = 1.25·2^-1 -> E=6,M=2; 0.0064 -> subnormal 3·2^-9 -> M=3; -0.0 keeps its sign.
    assert list(q[0, :7]) == [0x7E, 0x68, 0x60, 0xF6, 0x32, 0x03, 0x80]
    assert s[0, 0] == np.float32(2.0**-6)
    assert s[0, 1] == fp32_nearest(Fraction(float(np.float32(1e-10))) / 448), "all-zero group: eps floor"
    assert not q[0, 16:].any()


def test_rcp448_is_the_nearest_float32():
    assert RCP448 == fp32_nearest(Fraction(1, 448))


@pytest.mark.parametrize("scale_formula", SCALE_FORMULAS)
def test_scale_formulas(scale_formula):
    amax = np.float32(0.7265625)  # 93/128: amax/448 is not a float32, so the formulas may round apart
    x = np.full((1, 128), amax, np.float32)
    _, s = per_token_group_quant_fp8(x, 128, scale_formula=scale_formula)
    exact = Fraction(float(amax)) / 448 if scale_formula == "div448" else Fraction(float(amax)) * Fraction(
        float(fp32_nearest(Fraction(1, 448))))
    assert s[0, 0] == fp32_nearest(exact)


@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 9), group=st.sampled_from(GROUP_SIZES),
       groups=st.integers(1, 8), scale=st.sampled_from([1e-6, 1e-2, 3.0, 1e3]),
       dtype=st.sampled_from(["bf16", "fp16", "fp32"]))
@SETTINGS
def test_div_variant_matches_torch(seed, m, group, groups, scale, dtype):
    """Oracle: torch's (x/s).clamp(±448).to(float8_e4m3fn) with s = max(amax, eps)/448 in fp32."""
    x = round_to(np.random.default_rng(seed).standard_normal((m, group * groups)) * scale, dtype)
    q, s = per_token_group_quant_fp8(x, group)
    xt = torch.from_numpy(x).view(m, groups, group)
    s_t = xt.abs().amax(dim=-1, keepdim=True).clamp(min=torch.tensor(1e-10, dtype=torch.float32)) / 448.0
    qt = (xt / s_t).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).reshape(m, -1)
    np.testing.assert_array_equal(s, s_t[..., 0].numpy())
    np.testing.assert_array_equal(q, qt.numpy())


def test_variants_differ_by_at_most_one_code_on_rare_elements():
    """bf16 randn·3, 256×7168: q across formulations differs by ≤ 1 code, same sign, on well under 1 % of
    elements (docs/semantics.md §2.2 measured 0.047-0.084 %); fp32 scales differ by ≤ 1 ulp. Each pair must differ
    somewhere, or the variant switch is dead."""
    x = randn_bf16(7, (256, 7168))
    q_ref, s_ref = per_token_group_quant_fp8(x)
    for variant in QUANT_VARIANTS[1:]:
        q, _ = per_token_group_quant_fp8(x, variant=variant)
        differ = q != q_ref
        assert 0 < differ.mean() < 0.002, f"{variant}: {differ.mean():.4%} of codes differ"
        assert np.all((q[differ] ^ q_ref[differ]) & 0x80 == 0), f"{variant}: sign flipped"
        assert np.abs(q[differ].astype(int) - q_ref[differ]).max() == 1, f"{variant}: ≥ 2-code difference"
    _, s_rcp = per_token_group_quant_fp8(x, scale_formula="mul_rcp448")
    ulps = np.abs(s_rcp.view(np.int32) - s_ref.view(np.int32))
    assert ulps.max() == 1 and 0.2 < (ulps == 1).mean() < 0.9


def test_device_reciprocal_variant_differs_where_mufu_does():
    """mul_448_div_amax is mul_rcp_amax with 1/amax taken from hopper.hopper_rcp: bf16 amax whose significand has a
    0 in the MUFU.RCP table quantize identically; where MUFU.RCP is one ulp off, a code changes only when x·448/amax
    sits on an e4m3 rounding midpoint (x = amax·j/256: one of the 20 such significands here)."""
    m = np.arange(128)
    amax = (1 + m / 128).astype(np.float32)  # every bf16 significand
    x = (amax[:, None] * np.arange(1, 257) / 256).astype(np.float32)  # column 255 is amax itself
    x = np.concatenate([x, np.zeros((128, 256), np.float32)], axis=1)  # 2 groups of 256
    x = round_to(x, "bf16").astype(np.float32)
    q_rn, s_rn = per_token_group_quant_fp8(x, 256, variant="mul_rcp_amax", scale_formula="mul_rcp448")
    q_dev, s_dev = per_token_group_quant_fp8(x, 256, variant="mul_448_div_amax", scale_formula="mul_rcp448")
    np.testing.assert_array_equal(s_dev, s_rn)
    exact = mufu_rcp_ulps()[m << 16] == 0
    np.testing.assert_array_equal(q_dev[exact], q_rn[exact])
    assert (q_dev[~exact] != q_rn[~exact]).any(axis=1).sum() >= 1


def test_rejects_bad_input():
    x = np.ones((2, 256), np.float32)
    with pytest.raises(ValueError, match="multiple"):
        per_token_group_quant_fp8(x[:, :200], 128)
    with pytest.raises(ValueError, match="group_size"):
        per_token_group_quant_fp8(x, 100)
    with pytest.raises(ValueError, match="variant"):
        per_token_group_quant_fp8(x, variant="rcp448_scale")
    with pytest.raises(ValueError, match="float32-representable"):
        per_token_group_quant_fp8(np.full((2, 256), 0.1), 128)
    with pytest.raises(ValueError, match="2-D"):
        per_token_group_quant_fp8(x[0], 128)


def _roundings(variant, scale_formula):
    """fp32 roundings between x/s (s the returned scale) and the value handed to e4m3 rounding; the device
    reciprocal of mul_448_div_amax and mul_mufu_rcp_scale (within 1 ulp of the correctly rounded one) counts as
    one more."""
    if variant in ("mul_rcp_amax", "mul_448_div_amax"):
        return 3 + (1 if scale_formula == "div448" else 2) + (variant == "mul_448_div_amax")
    return {"div": 1, "mul_rcp_scale": 2, "mul_mufu_rcp_scale": 3}[variant]


@given(x=st.lists(st.floats(-3e4, 3e4, width=32), min_size=64, max_size=64).map(
           lambda v: np.array(v, np.float32).reshape(2, 32)),
       exponent=st.integers(-30, 10), variant=st.sampled_from(QUANT_VARIANTS),
       scale_formula=st.sampled_from(SCALE_FORMULAS), scale_fmt=st.sampled_from(["fp32", "ue8m0"]))
@SETTINGS
def test_quantization_error_bound(x, exponent, variant, scale_formula, scale_fmt):
    """|q·s − x| ≤ max(|x|·2^-4, s·2^-10)·(1 + n·2^-20), n = fp32 roundings of the quotient (0 for ue8m0).
    Derivation: e4m3 RNE errs ≤ |v|/17 on normals (slack absorbs n roundings) and ≤ 2^-10 on subnormals,
    where a quotient off by n·2^-24 relative adds n·2^-24·2^-6 = n·2^-30. A flat 2^-20 holds for "div" only;
    the reciprocal variants exceed it at subnormal ties (measured up to 2.5·2^-20 for mul_rcp_amax)."""
    x = np.ldexp(x, exponent).astype(np.float32)
    q, s = per_token_group_quant_fp8(x, 16, variant=variant, scale_formula=scale_formula, scale_fmt=scale_fmt)
    n = 0 if scale_fmt == "ue8m0" else _roundings(variant, scale_formula)
    x64 = x.astype(np.float64)
    per_element_s = np.repeat(s.astype(np.float64), 16, axis=-1)
    bound = np.maximum(np.abs(x64) * 2.0**-4, per_element_s * 2.0**-10) * (1 + 1.001 * n * 2.0**-20)
    assert_within("dequantized", dequant_groups(q, s, 16), x64, bound)


@given(seed=st.integers(0, 2**32 - 1), variant=st.sampled_from(QUANT_VARIANTS),
       scale_formula=st.sampled_from(SCALE_FORMULAS), group=st.sampled_from(GROUP_SIZES))
@SETTINGS
def test_amax_element_saturates_to_448(seed, variant, scale_formula, group):
    """With fp32 scales, amax/s is 448 within a few fp32 ulps: the amax element always encodes ±448, never
    NaN, including x·fl(448·fl(1/amax)) landing above 448 (clamped, as satfinite does)."""
    x = randn_bf16(seed, (4, group * 2))
    q, _ = per_token_group_quant_fp8(x, group, variant=variant, scale_formula=scale_formula)
    at_amax = np.abs(x) == np.abs(x).reshape(4, 2, group).max(-1).repeat(group, -1)
    assert np.all(q[at_amax] & 0x7F == 0x7E)


@pytest.mark.parametrize("scale_fmt", ["fp32", "ue8m0"])
@pytest.mark.parametrize("variant", QUANT_VARIANTS)
def test_nan_inputs(variant, scale_fmt):
    """amax ignores NaN (fmaxf): a NaN element maps to a NaN code, its neighbours quantize as if it
    were 0; an all-NaN group has the eps-floor scale and NaN codes."""
    x = randn_bf16(3, (2, 64))
    x[0, [3, 40]] = [np.nan, -np.nan]
    x[1, 32:] = np.nan
    q, s = per_token_group_quant_fp8(x, 32, variant=variant, scale_fmt=scale_fmt)
    q0, s0 = per_token_group_quant_fp8(np.nan_to_num(x, nan=0.0), 32, variant=variant, scale_fmt=scale_fmt)
    nan = np.isnan(x)
    assert np.all(q[nan] & 0x7F == 0x7F)
    np.testing.assert_array_equal(q[~nan], q0[~nan])
    np.testing.assert_array_equal(s, s0)
    assert np.all(np.isnan(decode(q[1, 32:], E4M3FN)))


# ---- UE8M0 -----------------------------------------------------------------------------------------------

def least_power_of_two_at_least(v):
    """Exponent k of the least 2^k >= v > 0, from math.frexp (v = f·2^e, f in [0.5, 1))."""
    f, e = math.frexp(float(v))
    return e - 1 if f == 0.5 else e


@given(s=st.floats(min_value=2.0**-149, max_value=2.0**127, width=32))
@settings(deadline=None, max_examples=200)
def test_ue8m0_ceil_is_the_least_power_of_two_at_least_s(s):
    """fp32 subnormals (biased exponent 0, mantissa non-zero) go to 2^-126, not 2^-127: the bit rule."""
    assert ue8m0_ceil(np.float32(s)) == max(least_power_of_two_at_least(s), -126) + 127


def test_ue8m0_one_ulp_around_powers_of_two():
    """The K14 edge: bit form gives 2^(k+1) one ulp above 2^k; float log2 gives 2^k there when the fp32
    half-ulp of log2 near k (toward zero) exceeds log2(1 + 2^-23) = 1.7e-7, i.e. for k >= 4 and k <= -5."""
    k = np.arange(-40, 20)
    p = np.ldexp(np.float32(1), k).astype(np.float32)
    above = np.nextafter(p, np.float32(np.inf))
    below = np.nextafter(p, np.float32(0))
    np.testing.assert_array_equal(ue8m0_ceil(p), k + 127)
    np.testing.assert_array_equal(ue8m0_ceil(above), k + 128)
    np.testing.assert_array_equal(ue8m0_ceil(below), k + 127)
    np.testing.assert_array_equal(ue8m0_ceil_log2(p), k + 127)
    wrong = ue8m0_ceil_log2(above) != ue8m0_ceil(above)
    np.testing.assert_array_equal(wrong, (k >= 4) | (k <= -5))
    assert decode(ue8m0_ceil(above[k == -20]), E8M0)[0] == 2.0**-19  # docs/semantics.md §2.3: 1.9e-6 vs 9.5e-7
    assert decode(ue8m0_ceil_log2(above[k == -20]), E8M0)[0] == 2.0**-20


def test_ue8m0_special_values():
    above_max = np.nextafter(np.float32(2.0**127), np.float32(np.inf))
    s = np.array([0.0, 2.0**-130, 2.0**127, above_max, np.inf, np.nan], np.float32)
    assert list(ue8m0_ceil(s)) == [0, 1, 254, 255, 255, 255]
    with pytest.raises(ValueError, match="non-negative"):
        ue8m0_ceil(np.float32(-1.0))


@pytest.mark.parametrize("scale_formula", SCALE_FORMULAS)
def test_ue8m0_quant_edges(scale_formula):
    """Row 0: amax/448 one ulp above 2^-20 -> s = 2^-19 and amax encodes as 224; row 1: amax = 448·2^-20
    exactly -> s = 2^-20 and amax encodes as 448; rows 2, 3: all-zero and tiny groups -> eps floor, s = 2^-42
    (1e-10/448 = 2.23e-13 lies in (2^-43, 2^-42])."""
    p = np.float32(448 * 2.0**-20)
    x = np.zeros((4, 128), np.float32)
    x[0, 0] = np.nextafter(p, np.float32(np.inf))
    x[1, 0] = -p
    x[3, :] = 1e-12
    q, s = per_token_group_quant_fp8(x, 128, scale_fmt="ue8m0", scale_formula=scale_formula)
    _, s32 = per_token_group_quant_fp8(x, 128, scale_formula=scale_formula)
    if scale_formula == "div448":
        assert s32[0, 0] == np.nextafter(np.float32(2.0**-20), np.float32(1))
        assert ue8m0_ceil_log2(s32[0, 0]) == 127 - 20, "the log2 mutant keeps 2^-20 and would overflow 448"
    assert list(s[:, 0]) == [2.0**-19, 2.0**-20, 2.0**-42, 2.0**-42]
    assert q[0, 0] == 0x76 and q[1, 0] == 0xFE  # 224.00001 -> 224 = 1.75·2^7 (E=14, M=6); -448
    assert not q[2].any() and not q[0, 1:].any()
    assert np.all(q[3] == 0x49)  # 1e-12·2^42 = 4.398 -> 4.5 = 1.125·2^2 (E=9, M=1): below eps, not flushed


# ---- weight blocks ---------------------------------------------------------------------------------------

def test_weight_block_quant_hand_example_partial_blocks():
    w = np.zeros((130, 260), np.float32)
    w[5, 7] = 7.0  # block (0, 0)
    w[129, 259] = -448.0  # the partial corner block (1, 2): 2 rows × 4 columns
    w[127, 200] = 0.875  # block (0, 1)
    q, s = weight_block_quant(w)
    assert q.shape == (130, 260) and s.shape == (2, 3)
    eps_s = fp32_nearest(Fraction(float(np.float32(1e-10))) / 448)
    np.testing.assert_array_equal(s, np.array([[2.0**-6, 2.0**-9, eps_s], [eps_s, eps_s, 1.0]], np.float32))
    assert q[5, 7] == 0x7E and q[129, 259] == 0xFE and q[127, 200] == 0x7E
    assert np.count_nonzero(q) == 3


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), k=st.integers(1, 300),
       experts=st.integers(1, 2))
@settings(deadline=None, max_examples=30)
def test_weight_dequant_is_one_fp32_multiply_and_bounded(seed, n, k, experts):
    w = randn_bf16(seed, (experts, n, k), scale=0.02)
    q, s = weight_block_quant(w)
    assert s.shape == (experts, -(-n // 128), -(-k // 128))
    tile_s = tile_scales(s, n, k)
    exact = decode(q, E4M3FN).astype(np.float64) * tile_s
    np.testing.assert_array_equal(weight_dequant(q, s), exact.astype(np.float32))
    bound = np.maximum(np.abs(w) * 2.0**-4, tile_s * 2.0**-10) * (1 + 2.0**-20)
    assert_within("dequantized weight", exact, w, bound)
    q0, s0 = weight_block_quant(w[0])
    np.testing.assert_array_equal(q0, q[0])
    np.testing.assert_array_equal(s0, s[0])


def test_weight_dequant_rejects_wrong_scale_shape():
    q, s = weight_block_quant(np.ones((256, 384), np.float32))
    with pytest.raises(ValueError, match="ceil"):
        weight_dequant(q, s.T)


@pytest.mark.parametrize("half_order", ["gate_up", "up_gate"])
def test_w13_scales_are_two_separately_ceiled_halves(half_order):
    """I = 192: w13 scales have 2·ceil(192/128) = 4 rows, not ceil(384/128) = 3 (docs/semantics.md §3)."""
    gate = randn_bf16(1, (2, 192, 256))
    up = randn_bf16(2, (2, 192, 256)) * 100
    q, s = w13_block_quant(gate, up, half_order=half_order)
    assert q.shape == (2, 384, 256) and s.shape == (2, 4, 2)
    first, second = (gate, up) if half_order == "gate_up" else (up, gate)
    np.testing.assert_array_equal(s[:, :2], weight_block_quant(first)[1])
    np.testing.assert_array_equal(s[:, 2:], weight_block_quant(second)[1])
    np.testing.assert_array_equal(w13_dequant(q, s), np.concatenate(
        [weight_dequant(*weight_block_quant(first)), weight_dequant(*weight_block_quant(second))], axis=-2))
    with pytest.raises(ValueError):
        weight_dequant(q, s)  # the concatenated codes cannot be read with one [ceil(2I/128), .] grid


def test_weight_nan_stays_local():
    w = randn_bf16(4, (128, 128))
    w[3, 3] = np.nan
    q, s = weight_block_quant(w)
    q0, s0 = weight_block_quant(np.nan_to_num(w))
    assert q[3, 3] == 0x7F and np.array_equal(s, s0)
    mask = ~np.isnan(w)
    np.testing.assert_array_equal(q[mask], q0[mask])


# ---- block-scaled GEMM -----------------------------------------------------------------------------------

ONE, H128 = 0x38, 0x70  # e4m3 codes of 1.0 (E=7) and 128.0 (E=14)


@pytest.mark.parametrize("acc", ["fp64", "fp32", "hopper_fp8"])
def test_block_scaled_gemm_hand_example(acc):
    """Two K blocks of ones: C = Σ_b 128·a_s[b]·w_s[b] = 128·(0.5·0.25 + 2·0.125) = 48."""
    aq = np.full((1, 256), ONE, np.uint8)
    wq = np.full((3, 256), ONE, np.uint8)
    c = block_scaled_gemm(aq, np.array([[0.5, 2.0]], np.float32), wq, np.array([[0.25, 0.125]], np.float32),
                          acc=acc)
    np.testing.assert_array_equal(c, np.full((1, 3), 48.0))
    assert c.dtype == (np.float64 if acc == "fp64" else np.float32)


def _one_block(aq, wq, acc="hopper_fp8"):
    one = np.ones((1, 1), np.float32)
    return block_scaled_gemm(aq, np.ones((aq.shape[0], 1), np.float32), wq, one, acc=acc)


def test_hopper_fp8_step_hand_examples():
    """The measured WGMMA step: terms truncated toward zero at 2^(E-13), E the largest exponent sum of a nonzero
    product (or the accumulator's); the sum truncated to 13 fraction bits."""
    aq = np.zeros((1, 128), np.uint8)
    wq = np.zeros((1, 128), np.uint8)
    aq[0, :4] = wq[0, :4] = [H128, ONE, ONE, ONE]  # 16384 + 1 + 1 + 1 in one step: E = 14, each 1 < 2 is cut
    assert _one_block(aq, wq)[0, 0] == 16384
    assert _one_block(aq, wq, "fp32")[0, 0] == 16387  # RNE at 14 bits would give 16388: truncation, not rounding
    aq[0, 2:4] = wq[0, 2:4] = 0
    aq[0, 32], wq[0, 32] = ONE | 0x80, ONE  # 16384 + 1 → 16384; -1 next step: cut toward zero, not to -2
    assert _one_block(aq, wq)[0, 0] == 16384
    aq[:] = wq[:] = 0
    aq[0, 0], wq[0, 0] = 0x01, 0x01  # 2^-9 · 2^-9 = 2^-18, alone: exact
    aq[0, 1], wq[0, 1] = 0x00, 0x7E  # 0 · 448: a zero product does not raise E
    assert _one_block(aq, wq)[0, 0] == 2.0**-18
    aq[:] = wq[:] = 0
    aq[0, :2], wq[0, :2] = [ONE, 0x08], [ONE, 0x04]  # 1 + 2^-6·2^-7: E = 0, the 2^-13 product is kept
    aq[0, 32:64], wq[0, 32:48], wq[0, 48:64] = ONE, ONE, ONE | 0x80  # 16 - 16 in a full step of exponent 0:
    assert _one_block(aq, wq)[0, 0] == 1 + 2.0**-13  # E is that exponent (not one more): the 2^-13 survives


def test_hopper_fp8_matches_h200_block_sums():
    """Bit-exact against 4,096 cuBLASLt FP8 block sums and 256 sparse ones measured on an H200
    (tests/data/README.md), through block_scaled_gemm and both block-sum functions; the previous model (14 bits,
    round-to-nearest per 32) matched 16 % of them."""
    d = np.load(DATA / "h200_fp8_arith.npz")
    for b in range(16):
        cols = slice(128 * b, 128 * (b + 1))
        np.testing.assert_array_equal(_one_block(d["gemm_a"][:, cols], d["gemm_w"][:, cols]), d["gemm_blocks"][b])
    np.testing.assert_array_equal(_one_block(d["sparse_a"], d["sparse_w"]), d["sparse_sums"])
    for a, w, sums in ((d["gemm_a"], d["gemm_w"], d["gemm_blocks"].transpose(1, 2, 0)),
                       (d["sparse_a"], d["sparse_w"], d["sparse_sums"][..., None])):
        np.testing.assert_array_equal(hopper_block_sums(a, w), sums)
        np.testing.assert_array_equal(hopper_block_sums_reference(_values(a), _values(w), 128), sums)


def _values(codes):
    return E4M3_VALUES[codes].astype(np.float64)


def assert_same_block_sums(aq, wq, block):
    """hopper_block_sums == hopper_block_sums_reference: every value bit for bit (the sign of zero included), NaN
    where NaN (a NaN's sign bit is the platform's)."""
    with np.errstate(invalid="ignore"):  # NaN codes: the reference's float64 arithmetic meets NaN
        ref = hopper_block_sums_reference(_values(aq), _values(wq), block)
    fast = hopper_block_sums(aq, wq, block)
    assert fast.shape == ref.shape and fast.dtype == ref.dtype
    np.testing.assert_array_equal(fast, ref)
    numbers = ~np.isnan(ref)
    np.testing.assert_array_equal(np.signbit(fast[numbers]), np.signbit(ref[numbers]))


def _codes_of(kind, rng, shape):
    """e4m3 codes: any (NaN included), no NaN, half zeros, subnormals and zeros only, or the extremes (±448,
    the largest subnormal exponents and the smallest subnormal) mixed: alignments 0 to 28 bits apart."""
    c = rng.integers(0, 256, shape, dtype=np.uint8)
    if kind != "any":
        c[(c & 0x7F) == 0x7F] ^= 0x01  # NaN codes -> ±416
    if kind == "sparse":
        c[rng.random(shape) < 0.5] = 0
    elif kind == "subnormal":
        c &= 0x87
    elif kind == "extremes":
        c = (c & 0x80) | rng.choice(np.array([0x7E, 0x7D, 0x08, 0x07, 0x01, 0x00, 0x38], np.uint8), shape)
    return c


@pytest.mark.parametrize("kind", ["any", "dense", "sparse", "subnormal", "extremes"])
@pytest.mark.parametrize("m, n, k, block", [(3, 40, 256, 128), (1, 70, 1024, 128), (2, 33, 200, 64),
                                            (17, 130, 384, 128), (2, 5, 96, 32), (4, 1, 160, 128)])
def test_hopper_block_sums_fast_path_is_the_reference(kind, m, n, k, block):
    """The integer fast path computes exactly the chain of hopper_fp8_step, on every kind of code: partial K
    blocks, 32/64/128-wide blocks, one row or column, and more rows than one chunk holds."""
    rng = np.random.default_rng([m, n, k, block, len(kind)])
    assert_same_block_sums(_codes_of(kind, rng, (m, k)), _codes_of(kind, rng, (n, k)), block)


@settings(deadline=None, max_examples=150)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 300), st.sampled_from([32, 64, 128]), st.data())
def test_hopper_block_sums_fast_path_fuzzed(m, n, k, block, data):
    """Any codes, any shape: shrinks to the smallest disagreement if there is one."""
    codes = st.lists(st.integers(0, 255), min_size=k, max_size=k)
    aq = np.array(data.draw(st.lists(codes, min_size=m, max_size=m)), np.uint8)
    wq = np.array(data.draw(st.lists(codes, min_size=n, max_size=n)), np.uint8)
    assert_same_block_sums(aq, wq, block)


def test_hopper_block_sums_empty_and_bad_block():
    for m, n, k in ((0, 3, 128), (2, 0, 128), (2, 3, 0)):
        assert_same_block_sums(np.zeros((m, k), np.uint8), np.zeros((n, k), np.uint8), 128)
    with pytest.raises(ValueError, match="multiple of 32"):
        hopper_block_sums(np.zeros((1, 48), np.uint8), np.zeros((1, 48), np.uint8), 48)


def h200_probe_operands():
    """The operands of the 2,097,152 block sums measured on the H200 (spec/data/probes/probe_acc.py, 2026-11-29),
    regenerated: A = the first 64 hidden rows of mono_moe cases 0-39 quantized with fl(448/amax) (the quantizer
    of that day), B = the first 2,048 w13 rows of the campaign weights (seed 0); 64 × 2,048 × 16 K blocks.
    tests/data holds the device's sums of A[:8] × B[:32]."""
    path = Path(__file__).parents[1] / "helpers" / "h200_cases.py"
    spec_ = importlib.util.spec_from_file_location("h200_cases", path)
    cases = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(cases)
    rows = np.concatenate([cases.mono_case(s)[1] for s in range(40)])[:64].reshape(64, 16, 128)
    amax = np.maximum(np.abs(rows).max(axis=-1, keepdims=True), np.float32(1e-10))
    a = quant.encode(np.clip(rows * (F32_MAX / amax), -F32_MAX, F32_MAX), E4M3FN).reshape(64, 2048)
    w = cases.e4m3_codes(np.random.Generator(np.random.PCG64(0)), (2 * 1024, 2048))
    return a, w


@pytest.mark.parametrize("rows", [pytest.param(8, id="8_rows"), pytest.param(64, id="all", marks=pytest.mark.heavy)])
def test_hopper_block_sums_on_the_h200_probe_operands(rows):
    """On the operands the device summed (2,097,152 block sums, all bit-exact under the reference model): the fast
    path equals the reference on the first `rows` rows of A (262,144 sums by default; all of them -m heavy), and
    the device on the 4,096 recorded."""
    a, w = h200_probe_operands()
    d = np.load(DATA / "h200_fp8_arith.npz")
    np.testing.assert_array_equal(a[:8], d["gemm_a"])
    np.testing.assert_array_equal(w[:32], d["gemm_w"])
    fast = hopper_block_sums(a[:rows], w)
    assert fast.shape == (rows, 2048, 16)
    np.testing.assert_array_equal(fast[:8, :32].transpose(2, 0, 1), d["gemm_blocks"])
    np.testing.assert_array_equal(fast, hopper_block_sums_reference(_values(a[:rows]), _values(w), 128))


# MUFU.RCP's deviation from RN for the 128 bf16 significands, as the first probe measured it (2026-11-29,
# spec/data/probes/div_probe.cu, every positive bf16 x): the first table, an independent measurement of what
# spec/data's 2^23-entry table holds.
SESSION2_BF16_RCP_ULPS = ("0000-0+0000-0+000000-0-00000000000000++000000000000+000000000+000++00000000000000+000000000+"
                          "00000000000000000+00000++0+00+00000-")
SPEC_DATA = Path(__file__).parents[2] / "spec" / "data"


def test_mufu_rcp_table_agrees_with_the_bf16_probe_and_its_own_counts():
    """spec/data's table (spec/data/probes/mufu_rcp_table.cu, 2^23 significands) equals the first probe's bf16 table
    at every bf16 significand, and holds the counts its run printed (spec/data/README.md)."""
    ulps = mufu_rcp_ulps()
    assert ulps.shape == (1 << 23,)
    assert "".join("-0+"[d + 1] for d in ulps[np.arange(128) << 16]) == SESSION2_BF16_RCP_ULPS
    counts = dict(zip(*np.unique(ulps, return_counts=True), strict=True))
    assert counts == {-1: 374_723, 0: 7_280_086, 1: 733_799}
    assert mufu_rcp_ulps() is ulps  # read once


def test_hopper_rcp_matches_the_exhaustive_h200_measurement():
    """mufu_exhaustive.cu counted, over all 2^32 inputs whose x and 1/x are fp32 normals (both signs),
    MUFU.RCP's deviation from RN(1/x): the table, weighted by the exponents at which each significand has a
    normal reciprocal (exponent fields 1..252, and 253 for significand 0: x = 2^126), gives the same counts."""
    measured = json.loads((SPEC_DATA / "mufu_exhaustive.json").read_text())["rcp_ulps_vs_rn"]
    ulps = mufu_rcp_ulps().astype(np.int64)
    weight = np.full(ulps.shape, 2 * 252, np.int64)
    weight[0] += 2
    predicted = {str(d): int(weight[ulps == d].sum()) for d in (-2, -1, 0, 1, 2)}
    assert predicted == {k: v for k, v in measured.items() if k != "other"} and measured["other"] == 0


def test_hopper_rcp_matches_h200():
    """MUFU.RCP bit-exact for 1,024 bf16 values of 8 binades and 1,024 fp32 values spread over 2^-30..2^31 (the
    latter within one ulp only, before the whole table); CUDA's fast-math 448.f / x is fl(448·MUFU.RCP(x)), the
    formula quant_448_div_amax uses."""
    d = np.load(DATA / "h200_fp8_arith.npz")
    np.testing.assert_array_equal(hopper_rcp(d["rcp_bf16_x"]), d["rcp_bf16"])
    np.testing.assert_array_equal(hopper_rcp(d["rcp_x"]), d["rcp"])
    assert np.mean(hopper_rcp(d["rcp_x"]) == np.float32(1) / d["rcp_x"]) < 0.95  # the table is exercised
    np.testing.assert_array_equal(np.float32(448) * d["rcp"], d["div448"])
    np.testing.assert_array_equal(hopper_rcp(-d["rcp_x"]), -d["rcp"])  # the sign is not part of the deviation


def test_hopper_rcp_outside_the_normal_range_follows_ftz():
    """Where x or 1/x is not an fp32 normal, rcp.approx.ftz flushes (PTX ISA; measured: spec/data/mufu_lg2_probe.json):
    ±0 and subnormal x -> ±inf, |x| > 2^126 and ±inf -> ±0, NaN -> NaN; 2^126 itself -> 2^-126."""
    tiny = np.array([0.0, -0.0, 1e-45, -1e-40, 2.0**-126 * (1 - 2.0**-23)], np.float32)
    np.testing.assert_array_equal(hopper_rcp(tiny), np.float32([np.inf, -np.inf, np.inf, -np.inf, np.inf]))
    huge = np.array([2.0**126 * (1 + 2.0**-23), -2.0**127, 3e38, np.inf, -np.inf], np.float32)
    out = hopper_rcp(huge)
    np.testing.assert_array_equal(out.view(np.uint32), np.float32([0, -0.0, 0, 0, -0.0]).view(np.uint32))
    assert hopper_rcp(np.float32(2.0**126)) == np.float32(2.0**-126)
    assert hopper_rcp(np.float32(2.0**-126)) == np.float32(2.0**126)
    assert np.isnan(hopper_rcp(np.float32(np.nan)))


def gemm_case(seed, m, n, k):
    """Codes and scales of x ~ N(0, 1) [M, K] and w ~ 0.02·N(0, 1) [N, K], the exact (fp64) dequantized
    product and |A|·|W|^T. Products of e4m3 values and fp32 scales are exact in fp64."""
    x = randn_bf16(seed, (m, k), scale=1.0)
    aq, a_s = per_token_group_quant_fp8(x)
    wq, w_s = weight_block_quant(randn_bf16(seed + 1, (n, k), scale=0.02))
    a_dq = dequant_groups(aq, a_s, 128)
    w_dq = decode(wq, E4M3FN).astype(np.float64) * tile_scales(w_s, n, k)
    return aq, a_s, wq, w_s, a_dq @ w_dq.T, np.abs(a_dq) @ np.abs(w_dq).T


def gamma(n, u):
    return n * u / (1 - n * u)


def test_block_scaled_gemm_accumulation_bounds():
    """Against the fp64 dequantized product (itself within γ_K(2^-53)·|A||W| of exact): fp64 within
    γ_{K/128+2}(2^-53) more; fp32 within γ_{K/128+3}(2^-24) (P_b, two scalings, K/128 adds); hopper_fp8 within
    spec.bounds.accumulation's hard coefficient, and visibly worse than fp32."""
    m, n, k = 8, 160, 1024
    aq, a_s, wq, w_s, ref, abs_ab = gemm_case(11, m, n, k)
    ref_err = gamma(k, 2.0**-53)
    c64 = block_scaled_gemm(aq, a_s, wq, w_s, acc="fp64")
    assert np.all(np.abs(c64 - ref) <= (ref_err + gamma(k // 128 + 2, 2.0**-53)) * abs_ab)
    err32 = np.abs(block_scaled_gemm(aq, a_s, wq, w_s, acc="fp32") - ref)
    assert np.all(err32 <= (ref_err + gamma(k // 128 + 3, 2.0**-24)) * abs_ab)
    err_h = np.abs(block_scaled_gemm(aq, a_s, wq, w_s, acc="hopper_fp8") - ref)
    assert np.all(err_h <= (ref_err + accumulation(k, "hopper_fp8", True)[0]) * abs_ab)
    assert err_h.max() > 30 * err32.max()


def test_block_scaled_gemm_partial_k_block_and_errors():
    """K = 200: one full and one 72-wide K block, each with its own scale; N = 5 uses one partial N block."""
    x, w = randn_bf16(5, (3, 200)), randn_bf16(6, (5, 200))
    aq, a_s = (np.concatenate(p) for p in zip(*(weight_block_quant(row[None]) for row in x), strict=True))
    wq, w_s = weight_block_quant(w)
    a_dq = decode(aq, E4M3FN).astype(np.float64) * np.repeat(a_s.astype(np.float64), 128, axis=1)[:, :200]
    w_dq = decode(wq, E4M3FN).astype(np.float64) * np.repeat(w_s.astype(np.float64), 128, axis=1)[:, :200]
    abs_ab = np.abs(a_dq) @ np.abs(w_dq).T
    c = block_scaled_gemm(aq, a_s, wq, w_s, acc="fp64")
    assert a_s.shape == (3, 2) and w_s.shape == (1, 2)
    assert np.all(np.abs(c - a_dq @ w_dq.T) <= gamma(204, 2.0**-53) * abs_ab)
    with pytest.raises(ValueError, match="share K"):
        block_scaled_gemm(aq[:, :128], a_s[:, :1], wq, w_s)
    with pytest.raises(ValueError, match="scales"):
        block_scaled_gemm(aq, a_s[:, :1], wq, w_s)


@pytest.mark.heavy
@pytest.mark.parametrize("acc", ["fp32", "hopper_fp8"])
def test_block_scaled_gemm_deepseek_v3_size(acc):
    """K = 7168 (hidden), N = 4096 (2I): one expert's GEMM1 at DeepSeek-V3 size (M = 256 tokens; 16 for the
    step-by-step hopper_fp8 emulation, whose [M, N, 32] products cost memory), within the hard bounds of
    docs/comparisons.md."""
    m = 16 if acc == "hopper_fp8" else 256
    aq, a_s, wq, w_s, ref, abs_ab = gemm_case(21, m, 4096, 7168)
    err = np.abs(block_scaled_gemm(aq, a_s, wq, w_s, acc=acc) - ref)
    acc_c = accumulation(7168, acc, True)[0] if acc == "hopper_fp8" else gamma(7168 // 128 + 3, 2.0**-24)
    assert np.all(err <= (gamma(7168, 2.0**-53) + acc_c) * abs_ab)


# ---- MXFP8 -----------------------------------------------------------------------------------------------

def test_mxfp8_hand_example():
    """amax 500: ocp X = 2^(8-8) = 1, 500 saturates to 448, 1 -> 1.0; ceil448: 500/448 = 1.12 -> X = 2,
    500/2 = 250 -> 256 (step 16 in [128, 256)), 1/2 -> 0.5. amax 3: both X = 2^-7, 3·128 = 384."""
    x = np.zeros((1, 64), np.float32)
    x[0, :2] = [500.0, 1.0]
    x[0, 32] = -3.0
    q, X = mxfp8_quant(x, rule="ocp")
    assert list(X[0]) == [127, 120] and list(q[0, [0, 1, 32]]) == [0x7E, 0x38, 0xFC]
    q, X = mxfp8_quant(x, rule="ceil448")
    assert list(X[0]) == [128, 120] and list(q[0, [0, 1, 32]]) == [0x78, 0x30, 0xFC]
    assert mxfp8_quant(np.zeros((1, 32), np.float32))[1][0, 0] == 0


@given(x=st.lists(st.floats(-3e4, 3e4, width=32), min_size=64, max_size=64).map(
           lambda v: np.array(v, np.float32).reshape(1, 64)),
       exponent=st.integers(-30, 10), rule=st.sampled_from(["ocp", "ceil448"]))
@SETTINGS
def test_mxfp8_error_bound(x, exponent, rule):
    """x/X is exact: unsaturated elements err ≤ max(|x|·2^-4, X·2^-10); saturated ones (|x| > 448·X, only
    under ocp, where |x|/X < 512) decode to exactly ±448·X."""
    x = np.ldexp(x, exponent).astype(np.float32)
    q, X = mxfp8_quant(x, rule=rule)
    scale = np.repeat(decode(X, E8M0).astype(np.float64), 32, axis=-1)
    xhat = mxfp8_dequant(q, X).astype(np.float64)
    saturated = np.abs(x) > 448 * scale
    assert rule == "ocp" or not saturated.any()
    np.testing.assert_array_equal(xhat[saturated], np.copysign(448 * scale, x)[saturated])
    err = np.abs(xhat - x)[~saturated]
    assert np.all(err <= np.maximum(np.abs(x) * 2.0**-4, scale * 2.0**-10)[~saturated])


def test_mxfp8_nan_and_errors():
    x = randn_bf16(8, (2, 64))
    x[1, 5] = np.nan
    for rule in ("ocp", "ceil448"):
        q, X = mxfp8_quant(x, rule=rule)
        q0, X0 = mxfp8_quant(np.nan_to_num(x), rule=rule)
        assert q[1, 5] == 0x7F and np.array_equal(X, X0)
        assert np.array_equal(np.delete(q.ravel(), 69), np.delete(q0.ravel(), 69))
    with pytest.raises(ValueError, match="multiple"):
        mxfp8_quant(x[:, :48])
    with pytest.raises(ValueError, match="rule"):
        mxfp8_quant(x, rule="floor")


# ---- NVFP4 -----------------------------------------------------------------------------------------------

def test_nvfp4_hand_example():
    """gs = 1, amax 6: sf = e4m3(fl(6·fl(1/6))) = 1.0 (code 0x38), r = 1. e2m1 codes: 6 -> 7, -3 -> 8|5,
    0.5 -> 1, 0.25 -> tie -> 0, 1.75 -> tie -> 2.0 = 4, 5 -> tie -> 4.0 = 6. Low nibble = even element."""
    x = np.zeros((1, 16), np.float32)
    x[0, :6] = [6.0, -3.0, 0.5, 0.25, 1.75, 5.0]
    packed, sf = nvfp4_quant(x, np.float32(1.0))
    assert sf[0, 0] == 0x38
    assert list(packed[0, :3]) == [0xD7, 0x01, 0x64] and not packed[0, 3:].any()
    np.testing.assert_array_equal(nvfp4_dequant(packed, sf, np.float32(1.0))[0, :6], [6, -3, 0.5, 0, 2, 4])


def test_nvfp4_global_scale():
    assert nvfp4_global_scale(np.array([[1.0, -2688.0]], np.float32)) == 1.0
    assert nvfp4_global_scale(np.array([[7.0, np.nan]], np.float32)) == np.float32(384.0)
    floor = np.float32(448 * 6) / np.float32(1e-10)  # amax floored at eps: zero and tiny rows stay finite
    assert nvfp4_global_scale(np.zeros((1, 16), np.float32)) == floor
    assert nvfp4_global_scale(np.full((1, 16), 1e-13, np.float32)) == floor
    with pytest.raises(ValueError, match="amax"):
        nvfp4_global_scale(np.array([[np.inf]], np.float32))


@given(x=st.lists(st.floats(-3e4, 3e4, width=32), min_size=64, max_size=64).map(
           lambda v: np.array(v, np.float32).reshape(2, 32)),
       exponent=st.integers(-20, 10), gs_factor=st.sampled_from([1.0, 0.5, 2.0**-6]))
@example(x=np.where(np.arange(64) == 3, np.float32(1e-45), np.float32(0)).reshape(2, 32), exponent=0,
         gs_factor=1.0)  # a lone subnormal: the block's scale flushes (found by the random profile)
@SETTINGS
def test_nvfp4_error_bound(x, exponent, gs_factor):
    """With unit = sf/gs, |x̂ − x| ≤ max(|x|·2^-2, unit·2^-2, flush)·(1 + 2^-18): e2m1 RNE errs ≤ 0.2·|v| on
    normals and ≤ 0.25 on [0, 1); sf rounding down can push |x|·r to ≤ 6·(1 + 1/15), saturated at 6 (≤ 0.07·|x|);
    the few fp32 roundings of r and of the dequant cost ≤ 2^-18 of the subnormal term. flush: a block whose scale
    gs·amax/6 rounds to the e4m3 code 0 (≤ 2^-10, half the smallest subnormal) stores zeros, so its elements err by
    |x| ≤ amax ≤ 6·2^-10/gs — reachable because gs is capped by the amax floor eps (a tensor of lone subnormals)."""
    x = np.ldexp(x, exponent).astype(np.float32)
    if not np.abs(x).max() > 0:
        return
    gs = np.float32(nvfp4_global_scale(x) * np.float32(gs_factor))
    packed, sf = nvfp4_quant(x, gs)
    unit = np.repeat(decode(sf, E4M3FN).astype(np.float64), 16, axis=-1) / np.float64(gs)
    flush = np.where(unit == 0, 6 * 2.0**-10 / np.float64(gs), 0.0)
    err = np.abs(nvfp4_dequant(packed, sf, gs).astype(np.float64) - x)
    assert np.all(err <= np.maximum(np.maximum(np.abs(x) * 2.0**-2, unit * 2.0**-2), flush) * (1 + 2.0**-18))
    assert np.all(decode(np.stack([packed & 15, packed >> 4], -1).reshape(x.shape), E2M1) ** 2 <= E2M1.max**2)


@pytest.mark.parametrize("v", [1e-45, 1e-38, 1e-30, 2e-16])
def test_nvfp4_flushes_a_block_below_the_smallest_scale(v):
    """A tensor of one tiny value: amax is floored at 1e-10, so gs = 448·6/1e-10 and the block's scale gs·v/6 is
    below half the smallest e4m3 subnormal: the scale code and every element are 0 (the bound's flush term)."""
    x = np.zeros((1, 16), np.float32)
    x[0, 3] = v
    gs = nvfp4_global_scale(x)
    packed, sf = nvfp4_quant(x, gs)
    assert gs == np.float32(448 * 6 / np.float32(1e-10)) and sf[0, 0] == 0 and not packed.any()
    assert v <= 6 * 2.0**-10 / gs


def test_nvfp4_errors():
    x = np.ones((1, 32), np.float32)
    with pytest.raises(ValueError, match="finite"):
        nvfp4_quant(np.where(np.arange(32) == 3, np.nan, x).astype(np.float32), np.float32(1))
    with pytest.raises(ValueError, match="multiple"):
        nvfp4_quant(x[:, :24], np.float32(1))
    with pytest.raises(ValueError, match="global_scale"):
        nvfp4_quant(x, np.float32(0))
