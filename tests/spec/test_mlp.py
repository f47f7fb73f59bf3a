"""spec/mlp.py: activation values, the gate/up half order, one expert's MLP."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from spec import mlp

finite = st.floats(-30, 30, allow_nan=False, width=64)


def test_activation_values():
    """Hand values: Φ(1) = 0.8413447460685429, tanh-GELU(1) from its formula, σ(±1000) without overflow."""
    assert mlp.silu(1.0) == pytest.approx(1 / (1 + math.exp(-1)), rel=1e-15)
    assert mlp.gelu(1.0) == pytest.approx(0.8413447460685429, rel=1e-15)
    assert mlp.gelu_tanh(1.0) == pytest.approx(
        0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * 1.044715)), rel=1e-15
    )
    assert mlp.relu2(-2.0) == 0.0 and mlp.relu2(3.0) == 9.0 and mlp.identity(-1.5) == -1.5
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert mlp.sigmoid(np.array([-1000.0, 1000.0])).tolist() == [0.0, 1.0]


@settings(deadline=None, max_examples=100)
@given(g=arrays(np.float64, 8, elements=finite), u=arrays(np.float64, 8, elements=finite))
def test_gated_is_nonlinearity_times_up(g, u):
    for name, f in (("swiglu", mlp.silu), ("geglu", mlp.gelu), ("geglu_tanh", mlp.gelu_tanh)):
        np.testing.assert_array_equal(getattr(mlp, name)(g, u), f(g) * u, err_msg=name)
        assert mlp.NONLINEARITY[name] is f
    np.testing.assert_allclose(mlp.silu(g), g / (1 + np.exp(-g)), rtol=1e-14, atol=1e-300)


def test_swap_halves_is_an_involution_on_values_codes_and_block_scales():
    w = np.arange(2 * 6 * 4).reshape(2, 6, 4)
    s = np.arange(2 * 4 * 2, dtype=np.float32).reshape(2, 4, 2)  # [E, 2·ceil(I/128), ceil(H/128)]
    for a in (w, w.astype(np.uint8), s):
        swapped = mlp.swap_halves(a)
        h = a.shape[-2] // 2
        np.testing.assert_array_equal(swapped[..., :h, :], a[..., h:, :])
        np.testing.assert_array_equal(mlp.swap_halves(swapped), a)
        assert swapped.dtype == a.dtype
    with pytest.raises(ValueError, match="even number of rows"):
        mlp.swap_halves(np.zeros((3, 4)))


@pytest.mark.parametrize("activation", mlp.GATED_ACTIVATIONS)
def test_expert_mlp_half_orders(activation):
    """[gate; up] read as gate_up equals its swap read as up_gate; without the swap the result differs."""
    rng = np.random.default_rng(1)
    x, w13, w2 = rng.standard_normal((3, 8)), rng.standard_normal((10, 8)), rng.standard_normal((8, 5))
    ref = mlp.expert_mlp(x, w13, w2, activation, "gate_up")
    gate, up = x @ w13[:5].T, x @ w13[5:].T
    np.testing.assert_allclose(ref, (mlp.NONLINEARITY[activation](gate) * up) @ w2.T, rtol=1e-12)
    # equal up to float64 summation order (BLAS blocks the reordered rows differently)
    np.testing.assert_allclose(
        mlp.expert_mlp(x, mlp.swap_halves(w13), w2, activation, "up_gate"), ref, rtol=1e-13
    )
    assert not np.allclose(mlp.expert_mlp(x, w13, w2, activation, "up_gate"), ref)


def test_expert_mlp_non_gated_and_bad_names():
    x, w13, w2 = np.array([[1.0, -2.0]]), np.array([[1.0, 1.0], [2.0, 0.0]]), np.array([[1.0, 1.0]])
    assert mlp.expert_mlp(x, w13, w2, "relu2")[0, 0] == 0.0 + 4.0  # relu2(-1) + relu2(2)
    with pytest.raises(ValueError, match="activation="):
        mlp.expert_mlp(x, w13, w2, "swish")
    with pytest.raises(ValueError, match="half_order="):
        mlp.expert_mlp(x, w13, w2, "relu2", "gate_first")
