"""spec/layer.py: hand-checked tiny layers, the single-expert reduction, EP shards, half orders, shared
experts."""

import math
import os
import resource
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spec import bounds, mlp, quant
from spec.layer import LayerResult, StackedWeights, moe_layer
from spec.numerics import round_to
from spec.recipes import Recipe
from tests.helpers.within import assert_within

PATHS = ("bf16", "fp8_block", "mxfp8", "nvfp4")
PLAIN = Recipe(name="plain")  # bf16 stores, fp32 accumulation, fp32 combine


def bf16(a):
    return round_to(a, "bf16")


def quantized_weights(w13, w2, path):
    """ExpertWeights of float weights [E, N1, H], [E, H, I] on a quant path, and their exact float64
    values."""
    if path == "bf16":
        return StackedWeights({"w13": w13, "w2": w2}), w13.astype(np.float64), w2.astype(np.float64)
    arrays, values = {}, []
    for name, w in (("w13", w13), ("w2", w2)):
        if path == "fp8_block":
            half = w.shape[1] // 2
            q, s = (
                quant.w13_block_quant(w[:, :half], w[:, half:])
                if name == "w13" and w13.shape[1] % 256 == 0
                else quant.weight_block_quant(w)
            )
            v = (
                quant.w13_dequant(q, s)
                if name == "w13" and w13.shape[1] % 256 == 0
                else quant.weight_dequant(q, s)
            )
            arrays |= {name: q, name + "_scale": s}
        elif path == "mxfp8":
            q, s = zip(*(quant.mxfp8_quant(m) for m in w), strict=True)
            arrays |= {name: np.stack(q), name + "_scale": np.stack(s)}
            v = np.stack([quant.mxfp8_dequant(a, b) for a, b in zip(q, s, strict=True)])
        else:
            gs = [quant.nvfp4_global_scale(m) for m in w]
            q, s = zip(*(quant.nvfp4_quant(m, g) for m, g in zip(w, gs, strict=True)), strict=True)
            arrays |= {
                name: np.stack(q),
                name + "_scale": np.stack(s),
                name + "_global": np.array(gs, np.float32),
            }
            v = np.stack([quant.nvfp4_dequant(a, b, g) for a, b, g in zip(q, s, gs, strict=True)])
        values.append(v.astype(np.float64))
    return StackedWeights(arrays), *values


def problem(seed, T=8, H=128, I=128, E=4, gated=True, scale=1.0):
    rng = np.random.default_rng(seed)
    x = bf16(rng.standard_normal((T, H)) * scale)
    logits = rng.standard_normal((T, E)).astype(np.float32)
    w13 = bf16(rng.standard_normal((E, (2 if gated else 1) * I, H)) / math.sqrt(H))
    w2 = bf16(rng.standard_normal((E, H, I)) / math.sqrt(I))
    return x, logits, w13, w2


@pytest.mark.parametrize("activation", mlp.ACTIVATIONS)
def test_tiny_hand_checked_layer(activation):
    """T=1, H=2, I=1, two experts, top-1: gate = x0 = 1, up = x1 = 2 (or the non-gated h = x0 - x1 = -1),
    w2 = [1, -1]ᵀ; out = ±f(gate)·up (±f(h)), ideal exact, recipe-exact its bf16 rounding."""
    gated = activation in mlp.GATED_ACTIVATIONS
    w13 = np.array([[[1, 0], [0, 1]]] * 2 if gated else [[[1, -1]]] * 2, np.float32)
    w2 = np.array([[[1], [-1]]] * 2, np.float32)
    x, logits = np.array([[1.0, 2.0]], np.float32), np.array([[0.0, 3.0]], np.float32)
    weights = StackedWeights({"w13": w13, "w2": w2})
    f = {
        "swiglu": lambda: mlp.silu(1.0) * 2,
        "geglu": lambda: 0.8413447460685429 * 2,
        "geglu_tanh": lambda: mlp.gelu_tanh(1.0) * 2,
        "relu2": lambda: 0.0,
        "silu": lambda: mlp.silu(-1.0),
        "gelu": lambda: -1 * (1 - 0.8413447460685429),
        "identity": lambda: -1.0,
    }[activation]()
    kw = dict(routing=dict(method="renormalize", top_k=1), activation=activation)
    ideal = moe_layer(x, logits, None, weights, **kw)
    assert ideal.ids.tolist() == [[1]] and ideal.weights.tolist() == [[1.0]]
    np.testing.assert_allclose(ideal.out, [[f, -f]], rtol=1e-15, atol=0)
    exact = moe_layer(x, logits, None, weights, **kw, recipe=PLAIN)
    np.testing.assert_array_equal(exact.out, bf16(np.array([[f, -f]])))


@pytest.mark.parametrize("quant_path", PATHS)
@pytest.mark.parametrize("activation", ["swiglu", "relu2"])
def test_top1_weight1_is_one_expert_mlp(quant_path, activation):
    """top_k = 1 with renormalized weight 1: the ideal layer is expert_mlp on the decoded weights of the
    chosen expert; the recipe-exact layer lies within bound_vs_ideal of it."""
    gated = activation in mlp.GATED_ACTIVATIONS
    x, logits, w13, w2 = problem(3, T=6, gated=gated)
    weights, v13, v2 = quantized_weights(w13, w2, quant_path)
    kw = dict(routing=dict(method="renormalize", top_k=1), activation=activation, quant=quant_path)
    ideal = moe_layer(x, logits, None, weights, **kw)
    for t, (e,) in enumerate(ideal.ids):
        # quant's dequant rounds code × scale to fp32 (2^-24 relative per weight); the layer's is exact
        np.testing.assert_allclose(
            ideal.out[t], mlp.expert_mlp(x[t : t + 1], v13[e], v2[e], activation)[0], rtol=1e-5, atol=1e-6
        )
    exact = moe_layer(x, logits, None, weights, **kw, recipe=PLAIN)
    assert_within("recipe-exact out vs ideal", exact.out, ideal.out, bounds.bound_vs_ideal(exact, PLAIN))


@pytest.mark.parametrize("quant_path", PATHS)
def test_hand_checked_quant_paths(quant_path):
    """Hidden 0.875, w13 0.875, w2 0.21875 = 0.875/4 quantize exactly on every path (fp8 block scale amax/448
    = 2^-9, NVFP4 block scale 448 = e4m3 max, MX power-of-two scales), so the ideal is the hand value
    silu(h)·h·0.21875·I with h = 0.875²·H = 98, and the recipe-exact layer with fp32 stores is its fp32
    rounding."""
    H, I = 128, 128
    x = np.full((1, H), 0.875, np.float32)
    w13 = np.full((2, 2 * I, H), 0.875, np.float32)
    w2 = np.full((2, H, I), 0.21875, np.float32)
    weights, _, _ = quantized_weights(w13, w2, quant_path)
    all32 = Recipe(
        name="fp32",
        gemm1_out="fp32",
        act_out="fp32",
        expert_out="fp32",
        out="fp32",
        requant_intermediate=False,
    )
    kw = dict(routing=dict(method="renormalize", top_k=1), activation="swiglu", quant=quant_path)
    ideal = moe_layer(x, np.zeros((1, 2), np.float32), None, weights, **kw)
    np.testing.assert_allclose(ideal.out, np.full((1, H), mlp.silu(98.0) * 98 * 0.21875 * I), rtol=1e-15)
    exact = moe_layer(x, np.zeros((1, 2), np.float32), None, weights, **kw, recipe=all32)
    np.testing.assert_array_equal(exact.out, np.full((1, H), 268912.0, np.float32))


@settings(deadline=None, max_examples=20)
@given(seed=st.integers(0, 2**32 - 1), offset=st.integers(0, 7), rsf=st.sampled_from([None, 2.5]))
def test_expert_parallel_shards_sum_to_the_full_layer(seed, offset, rsf):
    """Two shards [0, o) and [o, 8): their ideal outputs add up to the full ideal layer, up to the float64
    rounding of the regrouped sum of k = 3 terms (γ_{k+2}(2^-53)·Σ|terms|); a shard without a token's experts
    gives that token exactly 0."""
    x, logits, w13, w2 = problem(seed % 1000, T=4, H=32, I=16, E=8)
    weights = StackedWeights({"w13": w13, "w2": w2})
    kw = dict(routing=dict(method="renormalize", top_k=3, routed_scaling_factor=rsf), activation="swiglu")
    full = moe_layer(x, logits, None, weights, **kw)
    parts = [
        moe_layer(x, logits, None, weights, **kw, local_expert_offset=o, local_num_experts=n)
        for o, n in ((0, offset), (offset, 8 - offset))
    ]
    terms = [
        np.abs(w) * np.abs(mlp.expert_mlp(x[t : t + 1], w13[e], w2[e], "swiglu")[0])
        for t in range(len(x))
        for e, w in zip(full.ids[t], full.weights[t], strict=True)
    ]
    magnitude = np.array(terms).reshape(len(x), 3, -1).sum(axis=1)
    assert_within("out (two shards vs whole)", parts[0].out + parts[1].out, full.out,
                  bounds.gamma(5, bounds.U64) * magnitude)
    assert np.all(parts[0].out[~np.isin(full.ids, np.arange(offset)).any(axis=1)] == 0)


@pytest.mark.parametrize("quant_path", PATHS)
@pytest.mark.parametrize("recipe", [None, PLAIN], ids=["ideal", "plain"])
def test_half_order_conversion(quant_path, recipe):
    """A [gate; up] layer equals the same weights converted with swap_halves and read as up_gate (bitwise);
    read as up_gate without the conversion it differs (the K12 bug)."""
    x, logits, w13, w2 = problem(5, T=6)
    weights, _, _ = quantized_weights(w13, w2, quant_path)
    swapped = StackedWeights(
        {
            k: mlp.swap_halves(v) if k.startswith("w13") and v.ndim == 3 else v
            for k, v in weights.arrays.items()
        }
    )
    kw = dict(
        routing=dict(method="renormalize", top_k=2), activation="swiglu", quant=quant_path, recipe=recipe
    )
    ref = moe_layer(x, logits, None, weights, **kw)
    np.testing.assert_array_equal(
        moe_layer(x, logits, None, swapped, **kw, half_order="up_gate").out, ref.out
    )
    assert np.abs(moe_layer(x, logits, None, weights, **kw, half_order="up_gate").out - ref.out).max() > 1e-2


def test_fused_shared_expert_is_the_last_expert_with_weight_one():
    """S = 1 with rsf 2.5 in the routing: the shared expert (id E, the source's last expert) adds exactly its
    MLP (weight Σw/rsf = 1 after renormalization); with rsf in the combine the routed part scales and the
    shared part does not."""
    x, logits, w13, w2 = problem(7, T=5, H=32, I=16, E=5)
    weights = StackedWeights({"w13": w13, "w2": w2})
    routed = StackedWeights({"w13": w13[:4], "w2": w2[:4]})
    kw = dict(activation="swiglu")
    shared_mlp = mlp.expert_mlp(x, w13[4], w2[4], "swiglu")
    r = dict(method="renormalize", top_k=2, routed_scaling_factor=2.5)
    with_shared = moe_layer(
        x, logits[:, :4], None, weights, routing=r | {"num_fused_shared_experts": 1}, **kw
    )
    without = moe_layer(x, logits[:, :4], None, routed, routing=r, **kw)
    assert (with_shared.ids[:, 2] == 4).all()
    np.testing.assert_allclose(with_shared.out - without.out, shared_mlp, rtol=1e-12, atol=1e-13)
    combine = moe_layer(
        x,
        logits[:, :4],
        None,
        weights,
        routing=r | {"num_fused_shared_experts": 1},
        **kw,
        rsf_placement="combine",
    )
    np.testing.assert_allclose(combine.out, with_shared.out, rtol=1e-12, atol=1e-13)


def test_router_weight_on_input_equals_on_output_for_a_linear_expert():
    """identity activation: W2·W13·(w·x) = w·W2·W13·x (Llama4 top-1)."""
    x, logits, w13, w2 = problem(9, T=6, gated=False)
    weights = StackedWeights({"w13": w13, "w2": w2})
    kw = dict(routing=dict(method="llama4", top_k=1), activation="identity")
    on_out = moe_layer(x, logits, None, weights, **kw)
    assert not np.allclose(on_out.weights, 1.0)
    np.testing.assert_allclose(
        moe_layer(x, logits, None, weights, **kw, router_weight_on_input=True).out,
        on_out.out,
        rtol=1e-12,
        atol=1e-14,
    )


def test_bad_input_is_a_value_error():
    x, logits, w13, w2 = problem(11, T=2, H=32, I=16)
    weights = StackedWeights({"w13": w13, "w2": w2})
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu")
    for bad, match in (
        (dict(quant="int4"), "quant="),
        (dict(activation="swish"), "activation="),
        (dict(rsf_placement="end"), "rsf_placement="),
        (dict(accumulate="fp16"), "accumulate="),
    ):
        with pytest.raises(ValueError, match=match):
            moe_layer(x, logits, None, weights, **(kw | bad))
    with pytest.raises(ValueError, match="num_experts"):
        moe_layer(x, logits[:, :3], None, weights, **kw)


@pytest.mark.parametrize("recipe, H, I", [("MONO_MOE", 256, 256), ("MONO_MOE", 256, 192),
                                          ("SGLANG_TRITON_FP8_BLOCK", 384, 256)])
def test_hopper_layer_fast_path_is_the_reference(recipe, H, I, monkeypatch):
    """A hopper_fp8 recipe's layer (emulated block sums, accumulate=None) is the same, bit for bit, with
    spec.hopper.hopper_block_sums (as spec.quant calls it) replaced by the reference chain of hopper_fp8_step:
    out, all three shadows, flips; and within the hard bound of the layer with exact block sums, which covers
    any accumulation (the blocks' scales, 4× apart from one 128-row block to the next, included). MONO_MOE
    re-quantizes 1×64 (K blocks of 64 in GEMM2), also where I is not a multiple of 128 (a 128-wide weight block
    then holds two groups but the last block only one: the weight scales are spread per 64-wide group and cut
    at ceil(I/64))."""
    from spec import hopper, recipes

    R = getattr(recipes, recipe)
    x, logits, w13, w2 = problem(5, T=6, H=H, I=I, E=4)
    w13, w2 = (w * 4.0 ** (np.arange(w.shape[1])[:, None] // 128 % 2) for w in (w13, w2))  # scales 4x apart
    q13, s13 = quant.w13_block_quant(w13[:, :I], w13[:, I:])
    q2, s2 = quant.weight_block_quant(w2)
    weights = StackedWeights({"w13": q13, "w13_scale": s13, "w2": q2, "w2_scale": s2})
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant="fp8_block", recipe=R)
    fast = moe_layer(x, logits, None, weights, **kw)
    calls = []

    def reference(aq, wq, block=128):
        calls.append(block)
        return hopper.hopper_block_sums_reference(quant.E4M3_VALUES[aq] * 1.0, quant.E4M3_VALUES[wq] * 1.0, block)

    monkeypatch.setattr(quant, "hopper_block_sums", reference)
    ref = moe_layer(x, logits, None, weights, **kw)
    assert calls and (64 in calls) == (R.requant_group == 64)
    for name in ("out", "ids", "weights", "flips"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(ref, name), err_msg=name)
    for name in ("hard", "prob", "ideal"):
        np.testing.assert_array_equal(getattr(fast.errors, name), getattr(ref.errors, name), err_msg=name)
    exact = moe_layer(x, logits, None, weights, **kw, accumulate="exact")  # its bound covers any block sums
    assert np.any(fast.out != exact.out)
    assert_within("emulated vs exact block sums", fast.out, exact.out, bounds.bound_vs_recipe(exact, R)[0])


class OnDemandFp8Weights:
    """DeepSeek-V3-shaped FP8 experts generated from (seed, expert id): codes of magnitude 2^-3..7.5, scales
    ~2^-7, so each expert is 44 MB of codes and only one is decoded at a time. One random byte per code and a
    few byte operations: the generator costs about 1 ns per code, little next to the layer."""

    def __init__(self, seed, num_experts, H, I):
        self.seed, self.num_experts, self.H, self.I = seed, num_experts, H, I

    def expert(self, e):
        rng = np.random.Generator(np.random.PCG64([self.seed, e]))

        def codes(shape):  # sign bit, and 32 + (0..63)·3/4: codes 32..79
            raw = rng.bit_generator.random_raw(math.prod(shape) // 8).view(np.uint8).reshape(shape)
            return (raw & 0x80) | (32 + ((raw & 0x3F) * np.uint8(3) >> 2))

        H, I = self.H, self.I
        return {
            "w13": codes((2 * I, H)),
            "w13_scale": np.full((2 * I // 128, H // 128), 2.0**-9, np.float32),
            "w2": codes((H, I)),
            "w2_scale": np.full((H // 128, I // 128), 2.0**-8, np.float32),
        }


@pytest.mark.heavy
def test_deepseek_v3_shaped_fp8_layer():
    """E=256, H=7168, I=2048, top-8, n_group=8, topk_group=4, 16 tokens, weights on demand, under a hopper_fp8
    recipe with its own reference (accumulate=None: the tensor core's block sums emulated bit-exactly, the tight
    bound, its truncation term bounds.hopper_truncation where a re-quantized code may differ): runs, finite, hard
    bound finite, within bound_vs_ideal of the ideal; prints time and peak RSS. The emulation used to cost ~19 ns
    per product; hopper_block_sums takes 1-2 (benchmarks/RESULTS.md)."""
    from spec.recipes import SGLANG_TRITON_FP8_BLOCK as R

    rng = np.random.default_rng(0)
    T, E, H, I = 16, 256, 7168, 2048
    x = bf16(rng.standard_normal((T, H)))
    logits, bias = (
        rng.standard_normal((T, E)).astype(np.float32),
        (rng.standard_normal(E) * 0.1).astype(np.float32),
    )
    weights = OnDemandFp8Weights(0, E, H, I)
    kw = dict(
        routing=dict(method="deepseek_v3", top_k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5),
        activation="swiglu",
        quant="fp8_block",
    )
    start, cpu = time.time(), time.process_time()
    emulated = moe_layer(x, logits, bias, weights, **kw, recipe=R)
    mid, cpu = time.time(), time.process_time() - cpu
    ideal = moe_layer(x, logits, bias, weights, **kw, ids=None)
    end = time.time()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"\nDeepSeek-V3 FP8 layer: recipe-exact (emulated Hopper block sums) {mid - start:.1f} s ({cpu:.1f} s CPU, "
        f"weight generation included), ideal "
        f"{end - mid:.1f} s, peak RSS {rss:.2f} GiB, load {os.getloadavg()[0]:.1f}"
    )
    assert isinstance(emulated, LayerResult) and np.isfinite(emulated.out).all()
    hard = bounds.bound_vs_recipe(emulated, R)[0]
    assert np.isfinite(hard).all() and (hard >= 0).all()
    assert_within("recipe-exact out vs ideal", emulated.out, ideal.out, bounds.bound_vs_ideal(emulated, R))
