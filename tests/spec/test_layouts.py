"""spec/layouts.py: scale layouts as real memory; round trips, strides, and wrong-layout reads."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spec.layouts import (
    ScaleBuffer,
    column_major,
    column_major_tma,
    from_column_major,
    from_column_major_tma,
    from_row_major,
    from_ue8m0_packed,
    is_contiguous,
    pack_ue8m0,
    row_major,
    transpose,
    ue8m0_packed,
    unpack_ue8m0,
    view,
)
from spec.numerics import round_to
from spec.quant import per_token_group_quant_fp8

SETTINGS = settings(deadline=None, max_examples=50)
LAYOUTS = {  # name: (layout, inverse)
    "row_major": (row_major, from_row_major),
    "column_major": (column_major, from_column_major),
    "column_major_tma": (column_major_tma, from_column_major_tma),
}


def distinct_scales(m, g):
    """Scales s[t, j] = (1 + t + m·j)/1024, all distinct, so any transposition or shift changes the values."""
    return ((1 + np.arange(m)[:, None] + m * np.arange(g)[None, :]) / 1024).astype(np.float32)


def quantized_scales(seed, m, k, scale_fmt):
    """Real scales: per_token_group_quant_fp8 of bf16 randn·3 [M, K] with 128-groups."""
    x = round_to(np.random.default_rng(seed).standard_normal((m, k)) * 3, "bf16")
    return per_token_group_quant_fp8(x, 128, scale_fmt=scale_fmt)[1]


@pytest.mark.parametrize("name", LAYOUTS)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 41).filter(lambda m: m % 4), k=st.sampled_from(
    [1024, 1280, 2048, 7168]))
@SETTINGS
def test_round_trip(name, seed, m, k):
    """K >= 1024 (G >= 8) and M not a multiple of 4: layout bugs cannot hide behind a size-1 dimension."""
    layout, inverse = LAYOUTS[name]
    s = quantized_scales(seed, m, k, "fp32")
    buf = layout(s)
    assert buf.data.ndim == 1 and buf.data.dtype == np.float32 and buf.shape == s.shape
    np.testing.assert_array_equal(view(buf), s)
    np.testing.assert_array_equal(inverse(buf.data, *s.shape), s)


def test_strides_and_buffer_sizes():
    m, g = 7, 10
    s = distinct_scales(m, g)
    assert row_major(s)[1:] == ((7, 10), (10, 1))
    assert column_major(s)[1:] == ((7, 10), (1, 7)) and column_major(s).data.size == 70
    tma = column_major_tma(s)
    assert tma[1:] == ((7, 10), (1, 8)) and tma.data.size == 80
    np.testing.assert_array_equal(tma.data.reshape(10, 8)[:, :7], s.T)
    assert not tma.data.reshape(10, 8)[:, 7].any()  # the padded token slot of every group


def test_column_major_transpose_is_flashinfer_hidden_states_scale():
    """docs/semantics.md §5.1: hidden_states_scale is fp32 [H/128, T] contiguous = column_major(s).t(), zero-copy."""
    s = distinct_scales(13, 8)
    cm = column_major(s)
    fi = transpose(cm)
    assert fi.shape == (8, 13) and is_contiguous(fi) and not is_contiguous(cm)
    assert fi.data is cm.data and np.shares_memory(view(fi), cm.data)
    np.testing.assert_array_equal(view(fi), s.T)
    np.testing.assert_array_equal(fi.data.reshape(8, 13), s.T)
    assert is_contiguous(row_major(s)) and not is_contiguous(transpose(row_major(s)))


def test_view_is_zero_copy():
    buf = column_major(distinct_scales(5, 8))
    assert np.shares_memory(view(buf), buf.data)


def test_wrong_layout_reads_wrong_scales():
    """A column-major buffer read as row-major (the `.t().contiguous()` confusion, docs/semantics.md §5.5) gives other
    scales; so does a TMA-padded buffer read without its padding, and a row-major one read transposed."""
    m, g = 13, 8
    s = distinct_scales(m, g)
    assert not np.array_equal(from_row_major(column_major(s).data, m, g), s)
    assert not np.array_equal(from_column_major(row_major(s).data, m, g), s)
    assert not np.array_equal(from_column_major(column_major_tma(s).data[:m * g], m, g), s)
    with pytest.raises(ValueError, match="80|104"):
        from_column_major(column_major_tma(s).data, m, g)  # 8·16 elements where 13·8 are expected


def test_view_refuses_out_of_bounds_strides():
    with pytest.raises(ValueError, match="read past"):
        view(ScaleBuffer(np.zeros(10, np.float32), (3, 4), (1, 3)))


# ---- UE8M0 packed ----------------------------------------------------------------------------------------

def test_pack_ue8m0_hand_example():
    """Byte b of word j = code of group 4j+b, little-endian; the tail of the last word is zero."""
    codes = np.array([[127, 128, 100, 1, 254]], np.uint8)
    words = pack_ue8m0(codes)
    assert words.dtype == np.int32 and words.shape == (1, 2)
    assert list(words[0]) == [127 + 128 * 2**8 + 100 * 2**16 + 1 * 2**24, 254]
    assert list(words.astype("<i4").view(np.uint8)[0]) == [127, 128, 100, 1, 254, 0, 0, 0]
    high = pack_ue8m0(np.array([[0, 0, 0, 200]], np.uint8))
    assert high[0, 0] == 200 * 2**24 - 2**32  # the sign bit of the int32 is group 3's top bit
    np.testing.assert_array_equal(unpack_ue8m0(high, 4), [[0, 0, 0, 200]])


@pytest.mark.parametrize("tma_aligned", [True, False])
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(1, 41).filter(lambda m: m % 4), k=st.sampled_from(
    [1024, 1280, 1536, 7168]))
@SETTINGS
def test_ue8m0_packed_round_trip(tma_aligned, seed, m, k):
    """G = K/128 in {8, 10, 12, 56}: 10 leaves two zero tail bytes per row."""
    s = quantized_scales(seed, m, k, "ue8m0")
    g, w = s.shape[1], -(-s.shape[1] // 4)
    buf = ue8m0_packed(s, tma_aligned=tma_aligned)
    mp = -(-m // 4) * 4
    assert buf.data.dtype == np.int32 and buf.shape == (m, w)
    assert buf.strides == ((1, mp) if tma_aligned else (w, 1))
    assert buf.data.size == (w * mp if tma_aligned else m * w)
    np.testing.assert_array_equal(from_ue8m0_packed(buf.data, m, g, tma_aligned=tma_aligned), s)
    tail = unpack_ue8m0(view(buf), 4 * w)[:, g:]
    assert not tail.any()


def test_ue8m0_packed_layouts_differ_in_memory():
    s = quantized_scales(3, 7, 1280, "ue8m0")
    tma, flat = ue8m0_packed(s), ue8m0_packed(s, tma_aligned=False)
    np.testing.assert_array_equal(view(tma), view(flat))
    assert not np.array_equal(from_ue8m0_packed(tma.data[:7 * 3], 7, 10, tma_aligned=False), s)


def test_ue8m0_packed_refuses_non_power_of_two_scales():
    with pytest.raises(ValueError, match="powers of two"):
        ue8m0_packed(quantized_scales(1, 5, 1024, "fp32"))


def test_bad_buffers_raise():
    s = distinct_scales(5, 8)
    with pytest.raises(ValueError, match="2-D"):
        row_major(s[0])
    with pytest.raises(ValueError, match="float32"):
        column_major(s.astype(np.float64))
    with pytest.raises(ValueError, match="int32"):
        from_ue8m0_packed(np.zeros(16, np.float32), 5, 8)
