"""spec/numerics.py bit for bit against ml_dtypes and torch, and against a brute-force nearest-even oracle.

Oracle disagreements, each pinned by a test below:
* torch 2.13 (CPU) casts to float8_e4m3fn *saturate* (Inf and everything above 464 → ±448); ml_dtypes
  sends them to NaN. The spec's ``saturate=False`` is the ml_dtypes cast, ``saturate=True`` matches torch.
* NaN payloads differ (torch writes bf16 NaN as 0xffff whatever the sign, e5m2 NaN as 0x7f; ml_dtypes and
  the spec write the canonical quiet NaN with the input's sign). Only NaN-ness (and the sign, against
  ml_dtypes) is compared.
* float64 inputs: the spec rounds once, as the brute-force oracle does. How the oracles round them depends on
  their version: ml_dtypes up to 0.6.0 goes through float32 first (double rounding) for bf16, the fp8
  formats and e2m1, 0.7.0 rounds once; torch 2.13.0 goes through float32 for every narrow format, fp16 too.
  Those tests check the installed version against that list.
* e2m1 has no NaN: ml_dtypes maps NaN to a zero of the opposite sign (code 0x8 for +NaN); the spec copies it.
"""

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from spec import numerics
from spec.numerics import (
    BF16,
    E2M1,
    E4M3FN,
    E5M2,
    E8M0,
    FORMATS,
    FP16,
    FP32,
    FP64,
    Format,
    decode,
    encode,
    round_to,
)

ML = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3fn": ml_dtypes.float8_e4m3fn,
      "e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn, "e8m0": ml_dtypes.float8_e8m0fnu}
TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3fn": torch.float8_e4m3fn,
         "e5m2": torch.float8_e5m2}
NARROW = ("bf16", "fp16", "e4m3fn", "e5m2", "e2m1")
SETTINGS = settings(max_examples=100, deadline=None)


def ml_codes(x, name):
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(ML[name]).view(FORMATS[name].code_dtype)


def torch_codes(x, name):
    view = torch.uint8 if FORMATS[name].bits == 8 else torch.int16
    return torch.from_numpy(x).to(TORCH[name]).view(view).numpy().view(FORMATS[name].code_dtype)


def clamp(x, name):
    """CUDA satfinite expressed as clamp-then-cast: NaN passes through np.clip."""
    return np.clip(x, -FORMATS[name].max, FORMATS[name].max)


def assert_same_codes(x, ours, theirs, name, *, nan_sign=True):
    """Bit-for-bit equal codes; where either is NaN both must be NaN (and share the sign if nan_sign)."""
    fmt = FORMATS[name]
    ours_nan, theirs_nan = np.isnan(decode(ours, fmt)), np.isnan(decode(theirs, fmt))
    sign = np.asarray(1 << (fmt.bits - 1), fmt.code_dtype)
    nan_differ = (ours_nan != theirs_nan) | (nan_sign & ((ours ^ theirs) & sign != 0))
    differ = np.where(ours_nan | theirs_nan, nan_differ, ours != theirs)
    bad = np.flatnonzero(differ)
    assert bad.size == 0, (f"{name}: {bad.size} mismatches, first inputs {x.ravel()[bad[:4]].tolist()} -> "
                           f"ours {ours.ravel()[bad[:4]]}, oracle {theirs.ravel()[bad[:4]]}")


def all_patterns(name):
    """Every bf16 or fp16 bit pattern as an exactly representable float32."""
    codes = np.arange(2**16, dtype=np.uint16)
    return decode(codes, name)


def finite_values(fmt):
    """The finite non-negative values of fmt in increasing order, with their codes."""
    codes = np.arange(2 ** (fmt.bits - fmt.signed), dtype=fmt.code_dtype)
    values = decode(codes, fmt).astype(np.float64)
    keep = np.isfinite(values)
    return values[keep], codes[keep]


def nearest_even(x, fmt, saturate):
    """Brute force: the nearer of the two neighbouring values of |x| in the code table, the even code on a
    tie; the value one spacing past max stands for overflow."""
    values, codes = finite_values(fmt)
    spacing = values[-1] - values[-2]
    values, codes = np.append(values, values[-1] + spacing), np.append(codes, codes[-1] + 1)
    a = np.abs(x)
    hi = np.clip(np.searchsorted(values, a), 1, len(values) - 1)
    lo = hi - 1
    # Consecutive values satisfy hi <= 2 lo (or lo = 0), so both differences are exact (Sterbenz).
    below, above = a - values[lo], values[hi] - a
    pick = np.where((above < below) | ((above == below) & (codes[hi] % 2 == 0)), hi, lo)
    r = values[pick]
    overflow = (pick == len(values) - 1) | (a > values[-1])
    beyond = fmt.max if saturate or not (fmt.has_inf or fmt.has_nan) else (np.inf if fmt.has_inf else np.nan)
    r = np.copysign(np.where(overflow, beyond, r), x)
    # e2m1 (no NaN) follows ml_dtypes: a zero of the opposite sign.
    nan = np.copysign(np.nan, x) if fmt.has_nan else np.copysign(0.0, -x)
    return np.where(np.isnan(x), nan, r)


def boundary_points(fmt):
    """Every representable value and every midpoint (so max + half a spacing, the overflow threshold, and
    half the smallest subnormal), each with its float32 neighbours, both signs, and the specials."""
    values, _ = finite_values(fmt)
    spacing = values[-1] - values[-2]
    grid = np.concatenate([values, [values[-1] + spacing, values[-1] + 2 * spacing]])  # sorted
    with np.errstate(over="ignore"):  # bf16's overflow points lie beyond float32: they become Inf
        grid = np.unique(np.concatenate([grid, (grid[:-1] + grid[1:]) / 2])).astype(np.float32)
    points = np.concatenate([grid, np.nextafter(grid, np.float32(np.inf)), np.nextafter(grid, np.float32(0))])
    return np.concatenate([points, -points, np.float32([np.inf, -np.inf, np.nan, -np.nan])])


def assert_same_values(ours, expected):
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(expected))
    np.testing.assert_array_equal(ours[~np.isnan(ours)], expected[~np.isnan(expected)])


# --- the format table ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3fn", "e5m2", "e2m1", "e8m0", "fp32", "fp64"])
def test_format_table_matches_finfo(name):
    fmt = FORMATS[name]
    dtype = {"fp32": np.float32, "fp64": np.float64}.get(name) or ML[name]
    fi = ml_dtypes.finfo(dtype)
    assert (fmt.bits, fmt.exponent_bits, fmt.mantissa_bits) == (fi.bits, fi.nexp, fi.nmant)
    assert (fmt.max, fmt.min_normal) == (float(fi.max), float(fi.smallest_normal))
    assert fmt.min_subnormal == float(fi.smallest_subnormal)
    assert 2 * fmt.unit_roundoff == float(fi.eps)
    with np.errstate(invalid="ignore", over="ignore"):
        special = np.array([np.inf, np.nan]).astype(dtype).astype(np.float64)
    assert fmt.has_inf == bool(np.isinf(special[0]))
    assert fmt.has_nan == bool(np.isnan(special[1]))
    one_at_emin = np.array([1 << fmt.mantissa_bits], fmt.code_dtype).view(dtype).astype(np.float64)[0]
    assert one_at_emin == 2.0 ** (1 - fmt.bias)
    assert fmt.signed == (float(fi.min) < 0)


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3fn", "e5m2", "e2m1", "e8m0"])
def test_format_table_matches_its_own_code_table(name):
    fmt = FORMATS[name]
    values, _ = finite_values(fmt)
    positive = values[values > 0]
    assert fmt.max == values[-1]
    assert fmt.min_subnormal == positive[0]
    assert fmt.min_normal == positive[2 ** fmt.mantissa_bits - 1] if name != "e8m0" else positive[0]
    assert fmt.unit_roundoff == 2.0 ** -(fmt.mantissa_bits + 1)
    assert fmt.code_dtype.itemsize * 8 >= fmt.bits
    assert E4M3FN.max == 448.0 and E5M2.max == 57344.0 and E2M1.max == 6.0 and FP16.max == 65504.0
    assert E4M3FN.min_subnormal == 2.0**-9


def test_names_and_format_objects_are_interchangeable():
    x = np.linspace(-500, 500, 101, dtype=np.float32)
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        if fmt is not E8M0:
            assert_same_values(round_to(x, name), round_to(x, fmt))
    assert isinstance(BF16, Format) and FORMATS["fp32"] is FP32 and FORMATS["fp64"] is FP64


# --- decode and round trips ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3fn", "e5m2", "e2m1", "e8m0"])
def test_decode_every_code_matches_ml_dtypes(name):
    fmt = FORMATS[name]
    codes = np.arange(2**fmt.bits, dtype=fmt.code_dtype)
    ours = decode(codes, name)
    assert ours.dtype == np.float32
    assert_same_values(ours, codes.view(ML[name]).astype(np.float32))


@pytest.mark.parametrize("name", sorted(TORCH))
def test_decode_every_code_matches_torch(name):
    fmt = FORMATS[name]
    codes = np.arange(2**fmt.bits, dtype=fmt.code_dtype)
    view = torch.from_numpy(codes) if fmt.bits == 8 else torch.from_numpy(codes.view(np.int16))
    assert_same_values(decode(codes, name), view.view(TORCH[name]).float().numpy())


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", NARROW)
def test_every_code_round_trips(name, saturate):
    fmt = FORMATS[name]
    codes = np.arange(2**fmt.bits, dtype=fmt.code_dtype)
    values = decode(codes, name)
    back = encode(values, name, saturate=saturate)
    nan, inf = np.isnan(values), np.isinf(values)
    exact = ~nan & ~(inf & saturate)
    np.testing.assert_array_equal(back[exact], codes[exact])
    assert np.isnan(decode(back[nan], name)).all()
    np.testing.assert_array_equal(np.signbit(decode(back[nan], name)), np.signbit(values[nan]))
    expected = np.where(inf, np.copysign(fmt.max, values), values) if saturate else values
    assert_same_values(round_to(values, name, saturate=saturate), expected)


def test_e4m3fn_and_e5m2_special_codes():
    assert np.isnan(decode(np.uint8([0x7F, 0xFF]), "e4m3fn")).all()
    assert np.isnan(decode(np.arange(0x7D, 0x80, dtype=np.uint8), "e5m2")).all()
    np.testing.assert_array_equal(decode(np.uint8([0x7C, 0xFC]), "e5m2"), [np.inf, -np.inf])
    np.testing.assert_array_equal(decode(np.uint8([0x7E, 0x01, 0x08, 0x80]), "e4m3fn"),
                                  [448, 2.0**-9, 2.0**-6, 0])
    assert np.signbit(decode(np.uint8([0x80]), "e4m3fn")[0])


def test_e8m0_encode_and_decode():
    powers = np.ldexp(1.0, np.arange(-127, 128))
    codes = encode(powers, "e8m0")
    assert codes.dtype == np.uint8
    np.testing.assert_array_equal(codes, np.arange(255))
    np.testing.assert_array_equal(decode(codes, "e8m0"), powers.astype(np.float32))
    assert encode(np.nan, "e8m0") == 0xFF and np.isnan(decode(np.uint8(0xFF), "e8m0"))
    for bad in (0.0, -1.0, 3.0, 1.5, 2.0**128, 2.0**-128, np.inf, -2.0**-127):
        with pytest.raises(ValueError, match="powers of two"):
            encode([1.0, bad], "e8m0")
    with pytest.raises(ValueError, match="e8m0"):
        round_to(1.0, "e8m0")
    with pytest.raises(ValueError, match="saturate"):
        encode(1.0, "e8m0", saturate=True)


# --- every bf16 / fp16 pattern into every format, both semantics -----------------------------------------

@pytest.mark.parametrize("target", NARROW)
@pytest.mark.parametrize("source", ["bf16", "fp16"])
def test_every_16bit_pattern_against_ml_dtypes(source, target):
    x = all_patterns(source)
    assert_same_codes(x, encode(x, target), ml_codes(x, target), target)
    assert_same_codes(x, encode(x, target, saturate=True), ml_codes(clamp(x, target), target), target)
    assert_same_values(round_to(x, target), decode(ml_codes(x, target), target))


@pytest.mark.parametrize("target", sorted(TORCH))
@pytest.mark.parametrize("source", ["bf16", "fp16"])
def test_every_16bit_pattern_against_torch(source, target):
    x = all_patterns(source)
    # torch 2.13 saturates e4m3fn casts (Inf too): its plain cast is the spec's saturating one.
    plain = encode(x, target, saturate=target == "e4m3fn")
    assert_same_codes(x, plain, torch_codes(x, target), target, nan_sign=False)
    assert_same_codes(x, encode(x, target, saturate=True), torch_codes(clamp(x, target), target), target,
                      nan_sign=False)


def test_torch_e4m3fn_cast_saturates_where_ml_dtypes_gives_nan():
    x = np.float32([464.0, 464.00003, 480.0, 1e9, np.inf, -np.inf])
    np.testing.assert_array_equal(torch_codes(x, "e4m3fn"), [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE])
    np.testing.assert_array_equal(ml_codes(x, "e4m3fn"), [0x7E, 0x7F, 0x7F, 0x7F, 0x7F, 0xFF])
    np.testing.assert_array_equal(encode(x, "e4m3fn"), ml_codes(x, "e4m3fn"))


def test_nan_payloads_differ_between_oracles():
    nan = np.float32([np.nan, -np.nan])
    np.testing.assert_array_equal(encode(nan, "bf16"), [0x7FC0, 0xFFC0])
    np.testing.assert_array_equal(ml_codes(nan, "bf16"), [0x7FC0, 0xFFC0])
    np.testing.assert_array_equal(torch_codes(nan, "bf16"), [0xFFFF, 0xFFFF])
    np.testing.assert_array_equal(encode(nan, "e5m2"), ml_codes(nan, "e5m2"))
    np.testing.assert_array_equal(torch_codes(nan, "e5m2"), [0x7F, 0xFF])
    np.testing.assert_array_equal(encode(nan, "e4m3fn"), [0x7F, 0xFF])


# --- float32 sweeps around every boundary -----------------------------------------------------------------

@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", NARROW)
def test_boundary_sweep(name, saturate):
    x = boundary_points(FORMATS[name])
    ours = encode(x, name, saturate=saturate)
    assert_same_codes(x, ours, ml_codes(clamp(x, name) if saturate else x, name), name)
    assert_same_values(round_to(x, name, saturate=saturate), nearest_even(x.astype(np.float64), FORMATS[name],
                                                                          saturate))
    if name in TORCH:
        oracle = torch_codes(clamp(x, name) if saturate or name == "e4m3fn" else x, name)
        assert_same_codes(x, encode(x, name, saturate=saturate or name == "e4m3fn"), oracle, name,
                          nan_sign=False)


def test_hand_derived_cases():
    # e4m3fn: 464 is the tie between 448 (mantissa 110, even) and 480 (the NaN slot).
    assert_same_values(round_to(np.float32([464, 464.00003, 2.0**-10, 2.0**-10 * 1.0001, -0.0, -2.0**-11]),
                                "e4m3fn"), np.float32([448, np.nan, 0, 2.0**-9, -0.0, -0.0]))
    assert_same_values(round_to(np.float32([464.00003, np.inf, -1e30]), "e4m3fn", saturate=True),
                       np.float32([448, 448, -448]))
    np.testing.assert_array_equal(encode(np.float32([-0.0, np.nan, 2.0**-9, -448]), "e4m3fn"),
                                  [0x80, 0x7F, 0x01, 0xFE])
    # e5m2: 61440 ties between 57344 (mantissa 11, odd) and 65536 = Inf.
    assert_same_values(round_to(np.float32([61440, 61439.996, 2.0**-17, 3 * 2.0**-17]), "e5m2"),
                       np.float32([np.inf, 57344, 0, 2.0**-15]))
    # e2m1: {0, .5, 1, 1.5, 2, 3, 4, 6}; ties to the even code; beyond 6 saturates in both modes.
    grid = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 7, 1e30, np.inf, -np.inf])
    expected = np.float32([0, 1, 1, 2, 2, 4, 4, 6, 6, 6, -6])
    assert_same_values(round_to(grid, "e2m1"), expected)
    assert_same_values(round_to(grid, "e2m1", saturate=True), expected)
    np.testing.assert_array_equal(encode(np.float32([np.nan, -np.nan]), "e2m1"), [0x8, 0x0])
    # bf16 overflow: max + half an ulp ties to 2^128 (max has an odd mantissa).
    assert round_to(np.float64((2 - 2.0**-8) * 2.0**127), "bf16") == np.inf
    assert round_to(np.float64((2 - 2.0**-8) * 2.0**127), "bf16", saturate=True) == BF16.max


# --- float64 inputs: one rounding -----------------------------------------------------------------------

# Each x sits 2^-40 (or 2^-30) off a midpoint of the format; float32 rounds it onto the midpoint, and the tie
# then goes the other way. Expected values derived by hand: the nearer neighbour, once.
FLOAT64_NEAR_MIDPOINTS = {
    "bf16": ([1 + 2.0**-8 + 2.0**-40, 1 + 2.0**-7 + 2.0**-8 - 2.0**-40], [1 + 2.0**-7, 1 + 2.0**-7]),
    "e4m3fn": ([1 + 2.0**-4 + 2.0**-30, 1 + 2.0**-3 + 2.0**-4 - 2.0**-30], [1.125, 1.125]),
    "e5m2": ([1 + 2.0**-3 + 2.0**-30, 1 + 2.0**-2 + 2.0**-3 - 2.0**-30], [1.25, 1.25]),
    "e2m1": ([2.5 + 2.0**-30, 0.75 + 2.0**-40], [3.0, 1.0]),
    "fp16": ([1 + 2.0**-11 + 2.0**-40], [1 + 2.0**-10]),
}
# How each oracle casts float64 to a narrow format, by version: "once", or "twice" (through float32).
# Measured with the FLOAT64_NEAR_MIDPOINTS inputs (bf16 codes: twice [16256, 16258], once [16257, 16257]).
# numpy's own float64 -> float16 cast rounds once in every version.
ML_DTYPES_FLOAT64_CAST = {(0, 5): "twice", (0, 6): "twice", (0, 7): "once"}
TORCH_FLOAT64_CAST = {(2, 13): "twice"}


def version_of(module):
    return tuple(int(part) for part in module.__version__.split("+")[0].split(".")[:2])


def expected_oracle_codes(x, name, rounding):
    return encode(x, name) if rounding == "once" else encode(x.astype(np.float32), name)


@pytest.mark.parametrize("name", sorted(FLOAT64_NEAR_MIDPOINTS))
def test_float64_rounds_once(name):
    x, expected = (np.array(v) for v in FLOAT64_NEAR_MIDPOINTS[name])
    np.testing.assert_array_equal(round_to(x, name), np.float32(expected))
    np.testing.assert_array_equal(round_to(x, name), nearest_even(x, FORMATS[name], False))
    assert (round_to(x, name) != round_to(x.astype(np.float32), name)).any(), "the inputs must tell once from twice"


def float64_sweep(seed, n=200_000):
    """float64 values around every float32 boundary: random bit patterns of every exponent, float32 values and
    their float64 midpoints (ties), ± a float64 ulp, the subnormal range, overflow thresholds, specials."""
    rng = np.random.default_rng(seed)
    with np.errstate(invalid="ignore", over="ignore"):  # signaling NaNs among the bit patterns; Inf spacing
        raw = rng.integers(0, 2**63, n, dtype=np.uint64).view(np.float64)
        f32 = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64)
        step = np.abs(np.spacing(f32.astype(np.float32))).astype(np.float64)
        ties = np.concatenate([f32 + step / 2, f32 - step / 2])
        near = np.concatenate([np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)])
    edge = np.float64([FP32.max, FP32.max + 2.0**103, FP32.max + 2.0**104, 2.0**128, 2.0**-149, 2.0**-150,
                       3 * 2.0**-151, 2.0**-126 - 2.0**-150, 1e-300, 0.0, np.inf, np.nan])
    x = np.concatenate([raw, f32, ties, near, edge])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("saturate", [False, True])
def test_fp32_and_fp64_rounding_is_the_rule(saturate):
    """round_to's fp32 path (the machine's float64 -> float32 conversion) and fp64 path (the identity) give what
    the format-generic RNE rule gives, sign of zero and NaN included, on 1.4 M float64 values."""
    x = float64_sweep(7)
    for fmt in (FP32, FP64):
        with np.errstate(invalid="ignore"):  # the generic rule's frexp of a signaling NaN
            assert_same_values(numerics._round(x, fmt, saturate), numerics._round_rne(x, fmt, saturate))


def test_float64_to_fp32_rounds_once():
    assert round_to(1 + 2.0**-24 + 2.0**-50, "fp32") == np.float32(1 + 2.0**-23)


@pytest.mark.parametrize("name", sorted(FLOAT64_NEAR_MIDPOINTS))
def test_ml_dtypes_float64_cast_as_measured_for_its_version(name):
    version = version_of(ml_dtypes)
    x = np.array(FLOAT64_NEAR_MIDPOINTS[name][0])
    rounding = "once" if name == "fp16" else ML_DTYPES_FLOAT64_CAST.get(version)
    if rounding is None:
        pytest.fail(f"ml_dtypes {ml_dtypes.__version__}: float64 cast not measured for this version; "
                    f"measure it and add it to ML_DTYPES_FLOAT64_CAST")
    np.testing.assert_array_equal(ml_codes(x, name), expected_oracle_codes(x, name, rounding),
                                  err_msg=f"{name}, ml_dtypes {ml_dtypes.__version__} expected to round {rounding}")


@pytest.mark.parametrize("name", sorted(set(FLOAT64_NEAR_MIDPOINTS) & set(TORCH)))
def test_torch_float64_cast_as_measured_for_its_version(name):
    rounding = TORCH_FLOAT64_CAST.get(version_of(torch))
    if rounding is None:
        pytest.fail(f"torch {torch.__version__}: float64 cast not measured for this version; "
                    f"measure it and add it to TORCH_FLOAT64_CAST")
    x = np.array(FLOAT64_NEAR_MIDPOINTS[name][0])
    np.testing.assert_array_equal(torch_codes(x, name), expected_oracle_codes(x, name, rounding),
                                  err_msg=f"{name}, torch {torch.__version__} expected to round {rounding}")


@st.composite
def near_midpoints(draw, fmt):
    """float64 values within a few float64 ulps of a midpoint (or a representable value) of fmt."""
    values, _ = finite_values(fmt)
    i = draw(st.integers(0, len(values) - 2))
    anchor = draw(st.sampled_from([values[i], (values[i] + values[i + 1]) / 2]))
    ulps = draw(st.integers(-3, 3))
    x = anchor + ulps * np.spacing(anchor)
    return -x if draw(st.booleans()) else x


@SETTINGS
@given(data=st.data(), name=st.sampled_from(NARROW + ("fp32",)), saturate=st.booleans())
def test_float64_near_midpoints_match_brute_force(data, name, saturate):
    fmt = FORMATS[name]
    if name == "fp32":  # too many values for brute force; numpy's float64 -> float32 cast rounds once
        x = np.array(data.draw(st.lists(st.floats(width=64), min_size=1, max_size=50)))
        expected = np.clip(x, -fmt.max, fmt.max) if saturate else x
        with np.errstate(over="ignore"):
            assert_same_values(round_to(x, name, saturate=saturate), expected.astype(np.float32))
        return
    x = np.array(data.draw(st.lists(near_midpoints(fmt), min_size=1, max_size=50)))
    expected = nearest_even(x, fmt, saturate).astype(np.float32)
    assert_same_values(round_to(x, name, saturate=saturate), expected)


@SETTINGS
@given(x=hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=6), elements=st.floats(width=64)),
       name=st.sampled_from(NARROW), saturate=st.booleans())
def test_any_float64_matches_brute_force(x, name, saturate):
    ours = round_to(x, name, saturate=saturate)
    assert ours.shape == x.shape and ours.dtype == np.float32
    assert_same_values(ours, nearest_even(x, FORMATS[name], saturate).astype(np.float32))
    assert_same_values(decode(encode(x, name, saturate=saturate), name), ours)


# --- containers and errors ------------------------------------------------------------------------------

def test_output_dtypes_and_shapes():
    x = np.float32([[1.0, -2.5], [3.0, np.nan]])
    for name in NARROW + ("fp32",):
        assert round_to(x, name).dtype == np.float32 and round_to(x, name).shape == (2, 2)
    assert encode(x, "bf16").dtype == np.uint16 and encode(x, "fp16").dtype == np.uint16
    assert encode(x, "e4m3fn").dtype == np.uint8 and encode(x, "e2m1").dtype == np.uint8
    assert encode(x, "e2m1").max() < 16
    assert round_to(2.5, "e4m3fn").shape == ()
    y = np.array([1 / 3, -np.inf, 5e-324, -0.0])
    out = round_to(y, "fp64")
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out.view(np.uint64), y.view(np.uint64))
    np.testing.assert_array_equal(decode(encode(y, "fp64"), "fp64").view(np.uint64), y.view(np.uint64))
    np.testing.assert_array_equal(decode(encode(y, "fp32"), "fp32"), y.astype(np.float32))


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="unknown format"):
        round_to(1.0, "fp8")
    with pytest.raises(ValueError, match="complex"):
        round_to(np.array([1 + 1j]), "bf16")
    with pytest.raises(ValueError, match="integer"):
        decode(np.float32([1.0]), "e4m3fn")
    with pytest.raises(ValueError, match=r"\[0, 2\^4\)"):
        decode(np.uint8([16]), "e2m1")
    with pytest.raises(ValueError, match=r"\[0, 2\^8\)"):
        decode(np.array([256]), "e4m3fn")
    with pytest.raises(ValueError, match=r"\[0, 2\^8\)"):
        decode(np.array([-1]), "e5m2")
    np.testing.assert_array_equal(decode(np.array([0x38, 0x7E]), "e4m3fn"), [1.0, 448.0])


def test_a_signaling_nan_rounds_to_nan_without_a_warning():
    """float32 0x7f800001 / 0xff800001 are signaling NaNs: numpy 2.4 raises FE_INVALID when it widens them (a
    RuntimeWarning, an error under the suite's -W error and in a campaign's comparison); the spec reads them as NaN."""
    x = np.array([0x7F800001, 0xFF800001, 0x7FC00000], np.uint32).view(np.float32)
    for name in ("bf16", "fp32", "e4m3fn"):
        assert np.isnan(np.asarray(round_to(x, name), np.float64)).all()


@pytest.mark.heavy
@pytest.mark.parametrize("name", NARROW)
def test_float32_patterns_strided_against_ml_dtypes(name):
    """Every 97th float32 bit pattern (44M values, all exponents, both signs, NaNs included)."""
    for start in range(0, 2**32, 97 * 2**22):
        x = np.arange(start, min(start + 97 * 2**22, 2**32), 97, dtype=np.uint64).astype(np.uint32)
        x = x.view(np.float32)
        assert_same_codes(x, encode(x, name), ml_codes(x, name), name)
        assert_same_codes(x, encode(x, name, saturate=True), ml_codes(clamp(x, name), name), name)
