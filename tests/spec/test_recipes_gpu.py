"""The GPU-kernel recipe fields (mono_moe, fused_topk_deepseek) on tiny hand-checkable inputs."""

import numpy as np
import pytest

from spec.layer import StackedWeights, moe_layer
from spec.numerics import E4M3FN, decode
from spec.quant import quant_448_div_amax
from spec.recipes import FUSED_TOPK_DEEPSEEK, MONO_MOE, Recipe
from spec.routing import route

TANH = Recipe(name="tanh_sigmoid", sigmoid="tanh")

def test_tanh_sigmoid_is_half_tanh_half_and_zero_below_minus_18():
    x = np.array([[0.0, 2.0, -18.0, -18.1]], np.float32)
    s = route(x, None, method="sigmoid", top_k=4, recipe=TANH).weights[0]
    by_id = dict(zip(route(x, None, method="sigmoid", top_k=4, recipe=TANH).ids[0], s, strict=True))
    assert by_id[0] == 0.5
    assert by_id[1] == np.float32(0.5) * np.float32(np.tanh(1.0)) + np.float32(0.5)
    assert by_id[2] == 2.0**-25, "tanh(-9) rounds to -1 + 2^-24: s = 2^-25"
    assert by_id[3] == 0.0, "below -26 ln 2 tanhf rounds to -1"


def test_quant_448_div_amax_maps_nan_to_zero_and_scales_by_amax_rcp448():
    x = np.zeros((1, 64), np.float32)
    x[0, :3] = [np.nan, 448.0 / 3, -1.0]
    q, s = quant_448_div_amax(x, 64)
    amax = np.float32(448.0 / 3)
    assert s[0, 0] == amax * (np.float32(1) / np.float32(448))
    v = decode(q[0, :3], E4M3FN)
    assert v[0] == 0 and v[1] == 448.0
    assert v[2] == np.float32(-1.0 * (np.float32(448) / amax)), "-3 is an e4m3 value: exact"


def test_requant_group_must_be_64_or_128():
    with pytest.raises(ValueError, match="requant_group"):
        Recipe(name="x", requant_group=32)


def _tiny_layer(recipe):
    """One expert, I = H = 128, w13 = [gate; up] scaled identities, w2 = identity: out = w·silu(x)·x."""
    eye = np.eye(128, dtype=np.float32)
    code_one = np.uint8(0x38)  # e4m3 1.0
    w13 = np.where(np.concatenate([eye, eye])[None] > 0, code_one, np.uint8(0))
    w2 = np.where(eye[None] > 0, code_one, np.uint8(0))
    weights = StackedWeights(dict(w13=w13, w13_scale=np.ones((1, 2, 1), np.float32), w2=w2,
                                  w2_scale=np.ones((1, 1, 1), np.float32)))
    h = np.zeros((1, 128), np.float32)
    h[0, 0], h[0, 64] = 2.0, 1.0
    return moe_layer(h, np.zeros((1, 1), np.float32), None, weights, routing=dict(method="sigmoid", top_k=1),
                     activation="swiglu", quant="fp8_block", recipe=recipe)


def test_mono_router_weight_before_requant_and_64_groups():
    r = _tiny_layer(MONO_MOE)  # w = σ(0) = 0.5; act = silu(x)·x, weighted before the 1×64 re-quantization
    silu = lambda v: v / (1 + np.exp(-v))
    assert r.weights[0, 0] == 0.5
    # each element is alone in its 64-group: it re-quantizes to 448 × amax/448, so only the bf16 write rounds
    for col, expected in ((0, 0.5 * silu(2.0) * 2.0), (64, 0.5 * silu(1.0) * 1.0)):
        assert abs(r.out[0, col] - expected) <= 2.0**-8 * expected, (col, r.out[0, col], expected)
    assert np.count_nonzero(r.out) == 2
    assert np.all(r.errors.hard >= 0) and np.isfinite(r.errors.hard).all()


def test_named_gpu_recipes():
    assert FUSED_TOPK_DEEPSEEK.sigmoid == "tanh" and FUSED_TOPK_DEEPSEEK.renorm_order == "scale_then_divide"
    assert (MONO_MOE.requant_group, MONO_MOE.router_weight_at, MONO_MOE.act_out, MONO_MOE.expert_out) == \
        (64, "before_requant", "fp32", "fp32")
