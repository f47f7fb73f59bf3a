"""impls/torch_eager against hand-computed values, numpy + ml_dtypes formulas and float64 torch references.

Independent of spec/: expected values come from the documented math (docs/semantics.md),
evaluated with python math, numpy float32 and ml_dtypes casts, or a dense float64 torch layer.
"""

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from impls.torch_eager import (
    RECIPE,
    ROUTING_METHODS,
    column_major,
    column_major_tma,
    e2m1_decode,
    e2m1_encode,
    moe_layer,
    mxfp8_dequant,
    mxfp8_quant,
    nvfp4_dequant,
    nvfp4_global_scale,
    nvfp4_quant,
    per_token_group_quant_fp8,
    quantize_expert_weights,
    route,
    scale_buffer,
    swap_w13_halves,
    ue8m0_ceil,
    ue8m0_packed,
    unpack_ue8m0,
    weight_block_quant,
    weight_dequant,
)
from impls.torch_eager.quant import pack_e2m1
from tests.helpers.within import assert_within

U32 = 2.0 ** -24  # fp32 unit roundoff
U_BF16 = 2.0 ** -8
DEVICES = [pytest.param("cpu"),
           pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
               not torch.cuda.is_available(), reason="torch.cuda.is_available() is False")])]


def logit(p):
    return math.log(p / (1 - p))


def sig(x):
    return 1 / (1 + math.exp(-x))


def grouped(method):
    return method in ("deepseek_v3", "deepseek_v2")


# ---------------------------------------------------------------------------------------------- routing

@pytest.mark.parametrize("device", DEVICES)
def test_route_deepseek_v3(device):
    p = [0.9, 0.1, 0.2, 0.3, 0.6, 0.5, 0.4, 0.45]
    bias = [0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    # biased keys [.9 .1 .7 .8 .6 .5 .4 .45]; group top-2 sums [1.0 1.5 1.1 .85] keep groups 1, 2, so expert 0
    # (largest key) is out; top-2 of experts 2..5 by key: 3, 2; weights from the unbiased sigmoid.
    x = torch.tensor([[logit(v) for v in p]], dtype=torch.float32, device=device)
    ids, w = route(x, torch.tensor(bias, device=device), method="deepseek_v3", top_k=2, n_group=4,
                   topk_group=2, routed_scaling_factor=2.5)
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert ids.tolist() == [[3, 2]]
    s = [sig(float(v)) for v in x[0, [3, 2]].tolist()]
    expected = [v / sum(s) * 2.5 for v in s]
    torch.testing.assert_close(w.cpu().double(), torch.tensor([expected], dtype=torch.float64),
                               rtol=8 * U32, atol=0)  # 4 fp32 roundings (sigmoid, sum, divide, rsf)


def softmax_list(xs):
    m = max(xs)
    e = [math.exp(v - m) for v in xs]
    return [v / sum(e) for v in e]


L6 = [0.5, -1.0, 2.0, 1.0, 0.0, -0.5]
B6 = [0.0, 0.0, -1.0, 0.0, 0.9, 0.0]
SM6 = softmax_list(L6)
SG6 = [sig(v) for v in L6]
HAND = {  # method: (kwargs, expected ids, expected weights), from the definitions in docs/semantics.md §1.1-§1.2
    "default": (dict(top_k=3), [2, 3, 0], [SM6[2], SM6[3], SM6[0]]),
    "renormalize": (dict(top_k=3), [2, 3, 0], softmax_list([2.0, 1.0, 0.5])),
    "renormalize_naive": (dict(top_k=3), [2, 3, 0], softmax_list([2.0, 1.0, 0.5])),
    "topk": (dict(top_k=3), [2, 3, 0], [2.0, 1.0, 0.5]),
    "sigmoid": (dict(top_k=3), [2, 3, 0], [SG6[2], SG6[3], SG6[0]]),
    "sigmoid_renorm": (dict(top_k=3), [2, 3, 0],
                       [v / (SG6[2] + SG6[3] + SG6[0]) for v in SG6[2:4] + SG6[:1]]),
    "topk_sigmoid": (dict(top_k=3), [2, 3, 0], [SG6[2], SG6[3], SG6[0]]),
    "llama4": (dict(top_k=1), [2], [SG6[2]]),
    # keys sigmoid + bias = [.62 .27 -.12 .73 1.4 .38]: select 4, 3, 0; weights unbiased, normalized, x rsf
    "minimax2": (dict(top_k=3, routed_scaling_factor=2.0), [4, 3, 0],
                 [2 * v / (SG6[4] + SG6[3] + SG6[0]) for v in (SG6[4], SG6[3], SG6[0])]),
    # group max over pairs: [s0, s2, s4]; keep group 1 only -> experts 2, 3, renormalized
    "deepseek_v2": (dict(top_k=2, n_group=3, topk_group=1, group_mask_value=0.0), [2, 3],
                    [SM6[2] / (SM6[2] + SM6[3]), SM6[3] / (SM6[2] + SM6[3])]),
}


@pytest.mark.parametrize("method", sorted(HAND))
def test_route_methods_by_hand(method):
    kwargs, ids_expected, w_expected = HAND[method]
    bias = torch.tensor(B6) if method == "minimax2" else None
    ids, w = route(torch.tensor([L6]), bias, method=method, **kwargs)
    assert ids.tolist() == [ids_expected]
    expected = torch.tensor([w_expected], dtype=torch.float64)
    torch.testing.assert_close(w.double(), expected, rtol=8 * U32, atol=0)


def test_every_method_has_a_hand_example():
    assert set(HAND) == set(ROUTING_METHODS) - {"deepseek_v3"}


@pytest.mark.parametrize("method", ROUTING_METHODS)
def test_route_ties_go_to_lower_index(method):
    kw = dict(n_group=4, topk_group=2) if grouped(method) else {}
    k = 1 if method == "llama4" else 3
    bias = torch.zeros(16) if method in ("deepseek_v3", "minimax2") else None
    ids, _ = route(torch.zeros(2, 16), bias, method=method, top_k=k, **kw)
    assert ids.tolist() == [list(range(k))] * 2  # equal groups keep groups 0, 1; equal keys pick 0, 1, 2


def test_route_group_tie_keeps_lower_group():
    x = torch.zeros(1, 8)
    x[0, 6] = 5.0  # group 3 strictly best; groups 0..2 tie, so group 0 is the second kept group
    ids, _ = route(x, torch.zeros(8), method="deepseek_v3", top_k=3, n_group=4, topk_group=2)
    assert ids.tolist() == [[6, 0, 1]]


def test_route_bias_bf16_rounding_changes_a_near_tie():
    bias = torch.tensor([1.0, 1.0 + 2 ** -9, 0.0, 0.0])  # bf16(1 + 2^-9) == 1.0
    x = torch.zeros(1, 4)
    assert route(x, bias, method="deepseek_v3", top_k=1)[0].item() == 1
    assert route(x, bias, method="deepseek_v3", top_k=1, bias_dtype="bf16")[0].item() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_route_fused_shared_experts(device):
    torch.manual_seed(0)
    x, b = torch.randn(5, 16, device=device), torch.randn(16, device=device) * 0.1
    ids, w = route(x, b, method="deepseek_v3", top_k=4, n_group=4,
                   topk_group=2, routed_scaling_factor=2.5, num_fused_shared_experts=2)
    ids, w = ids.cpu(), w.cpu()
    assert ids[:, 4:].tolist() == [[16, 17]] * 5
    routed_sum = w[:, :4].double().sum(1)
    torch.testing.assert_close(routed_sum, torch.full((5,), 2.5, dtype=torch.float64), rtol=16 * U32, atol=0)
    torch.testing.assert_close(w[:, 4:].double(), (routed_sum / 2.5).unsqueeze(1).expand(5, 2),
                               rtol=4 * U32, atol=0)


def test_route_underflowing_sigmoid():
    ids, w = route(torch.full((1, 4), -100.0), method="sigmoid_renorm", top_k=2)
    assert w.tolist() == [[0.5, 0.5]]  # sigmoid(-100) is the fp32 subnormal 27 * 2^-149, not expf's 0
    _, w = route(torch.full((1, 4), -200.0), method="sigmoid_renorm", top_k=2)
    assert torch.isnan(w).all()  # 0 / (0 + eps) with eps = 0
    _, w = route(torch.full((1, 4), -200.0), method="sigmoid_renorm", top_k=2, eps=1e-20)
    assert w.tolist() == [[0.0, 0.0]]


def test_route_sigmoid_is_rounded_once_not_torchs_fp32_kernel():
    """Why torch eager declares sigmoid "exact" on CPU and CUDA alike (RECIPE; spec.recipes.TORCH_EAGER_CUDA), not
    "torch_cpu" / "torch_cuda": its routing σ is the float64 value rounded once, so the weights of sigmoid routing
    are the correctly rounded σ (python math) where torch's fp32 kernel differs: issue 36's logits, whose six
    distinct σ its fp32 sigmoid merges into one value, and -100, which it flushes to 0 (the float64 path is the same
    on CUDA, whose fp32 sigmoid also returns 0 from -88.72 down, docs/semantics.md §1.8)."""
    logits = [0.5078125, 0.5078128576278687, 0.5078127384185791, -100.0]
    x = torch.tensor([logits])
    _, w = route(x, method="sigmoid", top_k=4)
    want = sorted((np.float32(1 / (1 + math.exp(-v))) for v in logits), reverse=True)
    assert w[0].tolist() == [float(v) for v in want]
    assert sorted(torch.sigmoid(x)[0].tolist(), reverse=True) != w[0].tolist()


def test_route_renorm_orders_are_their_fp32_formulas():
    torch.manual_seed(1)
    x = torch.randn(64, 8)
    ids, raw = route(x, method="sigmoid", top_k=2)
    r, s = raw.numpy(), np.float32(raw[:, 0].numpy()) + np.float32(raw[:, 1].numpy())
    rsf = np.float32(2.5)
    _, dts = route(x, method="sigmoid_renorm", top_k=2, routed_scaling_factor=2.5)
    _, std = route(x, method="sigmoid_renorm", top_k=2, routed_scaling_factor=2.5,
                   renorm_order="scale_then_divide")
    np.testing.assert_array_equal(dts.numpy(), r / s[:, None] * rsf)
    np.testing.assert_array_equal(std.numpy(), r * rsf / s[:, None])
    assert (dts != std).any()  # the orders really differ in rounding


def test_route_forced_ids_gather_weights():
    torch.manual_seed(2)
    x, b = torch.randn(4, 16), torch.randn(16) * 0.1
    kw = dict(method="deepseek_v3", top_k=4, n_group=4, topk_group=2, routed_scaling_factor=2.5)
    ids, w = route(x, b, **kw)
    perm = [2, 0, 3, 1]
    ids2, w2 = route(x, b, **kw, ids=ids[:, perm])
    assert torch.equal(ids2, ids[:, perm])
    torch.testing.assert_close(w2, w[:, perm], rtol=8 * U32, atol=0)  # sum order changes


BAD_ROUTES = [
    (dict(method="nope", top_k=2), "method"),
    (dict(method="deepseek_v3", top_k=2, n_group=3), "divisible by n_group"),
    (dict(method="deepseek_v3", top_k=2, n_group=4, topk_group=5), "topk_group"),
    (dict(method="deepseek_v3", top_k=5, n_group=4, topk_group=1), "available experts"),
    (dict(method="default", top_k=17), "available experts"),
    (dict(method="llama4", top_k=2), "top_k == 1"),
    (dict(method="default", top_k=2, n_group=2, topk_group=1), "grouped method"),
    (dict(method="default", top_k=2, routed_scaling_factor=0.0), "positive"),
    (dict(method="default", top_k=2, renorm_order="x"), "renorm_order"),
    (dict(method="default", top_k=2, bias_dtype="fp16"), "bias_dtype"),
]


@pytest.mark.parametrize("kwargs,message", BAD_ROUTES, ids=[m for _, m in BAD_ROUTES])
def test_route_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):
        route(torch.zeros(2, 16), **kwargs)


def test_route_rejects_bad_shapes_and_bias():
    with pytest.raises(ValueError, match=r"\[T, E\]"):
        route(torch.zeros(16), method="default", top_k=2)
    with pytest.raises(ValueError, match="bias must have shape"):
        route(torch.zeros(2, 16), torch.zeros(8), method="deepseek_v3", top_k=2)
    with pytest.raises(ValueError, match="only used by"):
        route(torch.zeros(2, 16), torch.zeros(16), method="renormalize", top_k=2)


# ---------------------------------------------------------------------------------------------- quantization

def e4m3_codes(v):
    """numpy float32 -> e4m3fn codes through ml_dtypes (RNE), after the +-448 clamp."""
    return np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def test_group_quant_by_hand():
    x = torch.zeros(2, 128, dtype=torch.bfloat16)
    x[0, :3] = torch.tensor([448.0, 1.0625, 1.1875])  # s = 1; ties to even: 1.0625 -> 1.0, 1.1875 -> 1.25
    x[1, :2] = torch.tensor([896.0, -3.0])  # s = 2
    q, s = per_token_group_quant_fp8(x, 128)
    assert s.tolist() == [[1.0], [2.0]]
    assert q.float()[0, :3].tolist() == [448.0, 1.0, 1.25] and q.float()[1, :2].tolist() == [448.0, -1.5]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["div", "mul_rcp_scale", "mul_rcp_amax"])
@pytest.mark.parametrize("scale_formula", ["div448", "mul_rcp448"])
def test_group_quant_matches_numpy_formula(device, variant, scale_formula):
    g = np.random.Generator(np.random.PCG64(3))
    xb = torch.tensor(g.standard_normal((16, 256)) * 3).bfloat16()
    q, s = per_token_group_quant_fp8(xb.to(device), 64, variant=variant, scale_formula=scale_formula)
    x = xb.float().numpy().reshape(16, 4, 64)
    amax = np.maximum(np.abs(x).max(-1, keepdims=True), np.float32(1e-10))
    es = amax / np.float32(448) if scale_formula == "div448" else amax * np.float32(1 / 448)
    v = {"div": lambda: x / es, "mul_rcp_scale": lambda: x * (np.float32(1) / es),
         "mul_rcp_amax": lambda: x * (np.float32(448) * (np.float32(1) / amax))}[variant]()
    np.testing.assert_array_equal(s.cpu().numpy(), es[..., 0])
    np.testing.assert_array_equal(q.cpu().view(torch.uint8).numpy(), e4m3_codes(v).reshape(16, 256))


def test_ue8m0_ceil_uses_exponent_bits():
    above = np.nextafter(np.float32(2 ** -20), np.float32(1))
    s = torch.tensor([2.0 ** -20, above, 3 * 2.0 ** 5, 1.0, 2.0 ** -130])
    assert ue8m0_ceil(s).tolist() == [107, 108, 134, 127, 1]  # 1 ulp above 2^k: 2^(k+1); subnormal: 2^-126


def test_ue8m0_scales_are_powers_of_two_covering_amax():
    g = np.random.Generator(np.random.PCG64(4))
    x = torch.tensor(g.standard_normal((8, 512))).bfloat16()
    _, s = per_token_group_quant_fp8(x, 128, scale_ue8m0=True)
    raw = x.float().view(8, 4, 128).abs().amax(-1) / 448
    assert (s >= raw).all() and (s < 2 * raw).all()
    assert (torch.frexp(s).mantissa == 0.5).all()


@pytest.mark.parametrize("M", [1, 5, 8])
@pytest.mark.parametrize("G", [1, 3, 4, 5])
def test_scale_layouts_strides_and_round_trip(M, G):
    s = torch.arange(1, M * G + 1, dtype=torch.float32).view(M, G)
    M4 = -(-M // 4) * 4
    col, tma = column_major(s), column_major_tma(s)
    assert col.stride() == (1, M) and scale_buffer(col).numel() == G * M
    assert tma.stride() == (1, M4) and scale_buffer(tma).numel() == G * M4
    assert torch.equal(col.contiguous(), s) and torch.equal(tma.contiguous(), s)
    assert torch.equal(scale_buffer(col), s.t().flatten())
    assert scale_buffer(tma).view(G, M4)[:, M:].eq(0).all()
    codes = (torch.arange(M * G) % 251 + 1).to(torch.uint8).view(M, G)
    packed = ue8m0_packed(codes)
    assert packed.dtype == torch.int32 and packed.shape == (M, -(-G // 4)) and packed.stride() == (1, M4)
    assert torch.equal(unpack_ue8m0(packed, G), codes)


def test_ue8m0_packed_byte_order():
    packed = ue8m0_packed(torch.tensor([[1, 2, 3, 4, 5]], dtype=torch.uint8))
    assert packed.tolist() == [[0x04030201, 0x05]]  # byte b of int j = group 4j+b; tail bytes zero


@pytest.mark.parametrize("flags", [dict(), dict(column_major_scales=True),
                                   dict(column_major_scales=True, scale_tma_aligned=True),
                                   dict(scale_ue8m0=True, column_major_scales=True, scale_tma_aligned=True)],
                         ids=["row", "col", "col_tma", "ue8m0_packed"])
def test_group_quant_layouts_hold_the_row_major_values(flags):
    g = np.random.Generator(np.random.PCG64(5))
    x = torch.tensor(g.standard_normal((6, 640))).bfloat16()
    q_row, s_row = per_token_group_quant_fp8(x, 128, scale_ue8m0=flags.get("scale_ue8m0", False))
    q, s = per_token_group_quant_fp8(x, 128, **flags)
    assert torch.equal(q.view(torch.uint8), q_row.view(torch.uint8))
    if s.dtype == torch.int32:
        s = torch.exp2(unpack_ue8m0(s, 5).double() - 127).float()
    assert torch.equal(s.contiguous(), s_row)


def test_group_quant_rejects():
    x = torch.zeros(2, 256)
    with pytest.raises(ValueError, match="divisible by group_size"):
        per_token_group_quant_fp8(x, 96)
    with pytest.raises(ValueError, match="scale_tma_aligned needs column_major"):
        per_token_group_quant_fp8(x, 128, scale_tma_aligned=True)
    with pytest.raises(ValueError, match="UE8M0"):
        per_token_group_quant_fp8(x, 128, scale_ue8m0=True, column_major_scales=True)
    with pytest.raises(ValueError, match="variant"):
        per_token_group_quant_fp8(x, 128, variant="rcp")


def test_weight_block_quant_partial_blocks():
    g = np.random.Generator(np.random.PCG64(6))
    w = torch.tensor(g.standard_normal((2, 130, 260)) * 0.02).bfloat16()
    q, s = weight_block_quant(w)
    assert q.shape == w.shape and s.shape == (2, 2, 3)
    wf = w.float().numpy()
    assert s[1, 1, 2].item() == np.float32(np.abs(wf[1, 128:, 256:]).max()) / np.float32(448)
    s_full = s.repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :130, :260]
    # e4m3 RNE: half a quantum, 2^-4 relative for normals, 2^-10 * s in the subnormal range (+ fp32 rounding)
    bound = torch.maximum(w.float().abs() * 2 ** -4, s_full * 2 ** -10) * (1 + 2 ** -20)
    assert_within("dequantized weight", weight_dequant(q, s).double(), w.double(), bound.double())


def test_mxfp8_rules_by_hand():
    x = torch.zeros(1, 32)
    x[0, :2] = torch.tensor([500.0, 1.0])
    q, codes = mxfp8_quant(x, rule="ocp")
    assert codes.tolist() == [[127]] and q.float()[0, :2].tolist() == [448.0, 1.0]  # 2^(8-8); 500 saturates
    q, codes = mxfp8_quant(x, rule="ceil448")
    assert codes.tolist() == [[128]] and q.float()[0, :2].tolist() == [256.0, 0.5]  # 250 -> 256 (quantum 16)
    assert mxfp8_dequant(q, codes)[0, :2].tolist() == [512.0, 1.0]
    assert mxfp8_quant(torch.zeros(1, 32))[1].tolist() == [[0]]


def test_e2m1_encoding_by_hand():
    v = torch.tensor([0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.3, -0.0, float("nan")])
    expected = [0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5, -0.0, 6.0]
    assert e2m1_decode(e2m1_encode(v)).tolist() == expected
    assert pack_e2m1(torch.tensor([1, 2, 15, 8], dtype=torch.uint8)).tolist() == [0x21, 0x8F]


@pytest.mark.parametrize("device", DEVICES)
def test_nvfp4_quant_matches_numpy_formula(device):
    g = np.random.Generator(np.random.PCG64(7))
    xb = torch.tensor(g.standard_normal((4, 64))).bfloat16()
    gs = nvfp4_global_scale(xb.to(device), dim=-1)
    packed, sf = (t.cpu() for t in nvfp4_quant(xb.to(device), gs))
    gs = gs.cpu()
    amax = np.abs(xb.float().numpy()).max(-1, keepdims=True)
    np.testing.assert_array_equal(gs.numpy(), np.float32(2688) / amax)  # one correctly rounded division
    x, gn = xb.float().numpy().reshape(4, 4, 16), gs.numpy()[:, :, None]
    sf_np = gn * (np.abs(x).max(-1, keepdims=True) * np.float32(1 / 6))
    sf8 = np.clip(sf_np, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    scaled = x * (np.float32(1) / (sf8 * (np.float32(1) / gn)))
    codes = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    np.testing.assert_array_equal(sf.float().numpy(), sf8[..., 0])
    flat = codes.reshape(4, 64)
    np.testing.assert_array_equal(packed.numpy(), flat[:, 0::2] | (flat[:, 1::2] << 4))
    deq = nvfp4_dequant(packed, sf, gs).numpy()
    expected = (codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32) * sf8).reshape(4, 64) / gn[:, :, 0]
    np.testing.assert_array_equal(deq, expected)


# ---------------------------------------------------------------------------------------------- layer

def bf16(t):
    """float64 values that are exact in fp32 -> their bf16 rounding, as float64."""
    return t.float().bfloat16().double()


def dense_reference(x, w13, w2, ids, w, activation, *, rsf_combine=1.0, on_input=False):
    """float64 MoE over (token, slot) pairs with the declared bf16 rounding points; exact when every value
    before a rounding point is exact in fp32 (dyadic inputs)."""
    T, H = x.shape
    out = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        for j in range(ids.shape[1]):
            e, wt = int(ids[t, j]), float(w[t, j])
            h = x[t].double() @ w13[e].double().T * (wt if on_input else 1.0)
            a = bf16({"relu2": lambda v: torch.relu(v) ** 2, "identity": lambda v: v}[activation](bf16(h)))
            y = a @ w2[e].double().T
            out[t] += bf16(y if on_input else y * wt)
    return bf16(out * rsf_combine)


def dyadic(gen, shape, levels):
    k = gen.integers(-levels, levels + 1, size=shape)
    return torch.tensor(k / levels, dtype=torch.float32).bfloat16()


def small_layer(seed, T=6, E=8, H=32, I=16, S=0, activation="relu2"):
    g = np.random.Generator(np.random.PCG64(seed))
    x = dyadic(g, (T, H), 2)
    N1 = 2 * I if activation == "swiglu" else I
    w13, w2 = dyadic(g, (E + S, N1, H), 4), dyadic(g, (E + S, H, I), 4)
    logits = torch.tensor(g.permuted(np.tile(2.0 ** -np.arange(E), (T, 1)), axis=1), dtype=torch.float32)
    return x, logits, w13, w2


@pytest.mark.parametrize("activation", ["relu2", "identity"])
@pytest.mark.parametrize("rsf_placement", ["routing", "combine"])
def test_layer_exact_against_dense_float64(activation, rsf_placement):
    x, logits, w13, w2 = small_layer(0, S=1, activation=activation)
    routing = dict(method="topk", top_k=2, routed_scaling_factor=2.0, num_fused_shared_experts=1)
    res = moe_layer(x, logits, None, {"w13": w13, "w2": w2}, routing=routing, activation=activation,
                    rsf_placement=rsf_placement)
    assert res.out.dtype == torch.bfloat16 and res.out.shape == x.shape
    top = torch.sort(logits, dim=1, descending=True).indices[:, :2]  # distinct powers of two: no ties
    assert torch.equal(res.ids[:, :2].long(), top) and (res.ids[:, 2] == 8).all()
    wt = logits.gather(1, top).double()
    one = torch.ones_like(wt[:, :1])  # the shared expert counts once (shared_weight "one", the default)
    if rsf_placement == "routing":
        w, rsf_combine = torch.cat([wt * 2, one], 1), 1.0
    else:
        w, rsf_combine = torch.cat([wt, one / 2], 1), 2.0
    ref = dense_reference(x, w13, w2, res.ids, w, activation, rsf_combine=rsf_combine)
    assert torch.equal(res.out.double(), ref)


def test_layer_router_weight_on_input_exact():
    x, logits, w13, w2 = small_layer(1, activation="relu2")
    res = moe_layer(x, logits, None, {"w13": w13, "w2": w2}, routing=dict(method="topk", top_k=1),
                    activation="relu2", router_weight_on_input=True)
    ref = dense_reference(x, w13, w2, res.ids, logits.gather(1, res.ids.long()), "relu2", on_input=True)
    assert torch.equal(res.out.double(), ref)


@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "mxfp8", "nvfp4"])
def test_layer_half_order_conversion(quant):
    g = np.random.Generator(np.random.PCG64(9))
    T, E, H, I = 5, 4, 128, 128
    x = torch.tensor(g.standard_normal((T, H))).bfloat16()
    w13 = torch.tensor(g.standard_normal((E, 2 * I, H)) / 8).bfloat16()
    w2 = torch.tensor(g.standard_normal((E, H, I)) / 8).bfloat16()
    logits = torch.tensor(g.standard_normal((T, E)), dtype=torch.float32)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant=quant)
    gate_up = quantize_expert_weights(w13, w2, quant)
    up_gate = {k: swap_w13_halves(v) if k in ("w13", "w13_scale") else v for k, v in gate_up.items()}
    a = moe_layer(x, logits, None, gate_up, half_order="gate_up", **kw).out
    b = moe_layer(x, logits, None, up_gate, half_order="up_gate", **kw).out
    c = moe_layer(x, logits, None, up_gate, half_order="gate_up", **kw).out
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("quant", ["bf16", "fp8_block", "nvfp4"])
def test_layer_expert_parallel_shards_sum_to_full(quant):
    g = np.random.Generator(np.random.PCG64(10))
    T, E, H, I, S = 6, 8, 128, 128, 1
    x = torch.tensor(g.standard_normal((T, H))).bfloat16()
    w = quantize_expert_weights(torch.tensor(g.standard_normal((E + S, 2 * I, H)) / 8).bfloat16(),
                                torch.tensor(g.standard_normal((E + S, H, I)) / 8).bfloat16(), quant)
    logits = torch.tensor(g.standard_normal((T, E)), dtype=torch.float32)
    kw = dict(routing=dict(method="deepseek_v3", top_k=3, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                           num_fused_shared_experts=S), activation="swiglu", quant=quant)
    full = moe_layer(x, logits, torch.zeros(E), w, **kw).out.double()
    shards = [moe_layer(x, logits, torch.zeros(E), w, local_expert_offset=o, local_num_experts=n, **kw)
              .out.double() for o, n in ((0, 3), (3, 3), (6, 3))]
    total = sum(shards)
    # each output is one bf16 rounding of an fp32 sum of the same per-expert bf16 terms
    bound = U_BF16 * (full.abs() + sum(s.abs() for s in shards)) * (1 + 2 ** -6)
    assert_within("out (shards summed vs whole)", total, full, bound)
    assert not torch.equal(shards[0], full)


def test_layer_callable_source_touches_only_routed_experts():
    x, logits, w13, w2 = small_layer(11, T=3, E=16)
    seen = []

    def source(e):
        seen.append(e)
        return {"w13": w13[e], "w2": w2[e]}

    kw = dict(routing=dict(method="topk", top_k=2), activation="relu2")
    a = moe_layer(x, logits, None, source, **kw)
    b = moe_layer(x, logits, None, {"w13": w13, "w2": w2}, **kw)
    assert torch.equal(a.out, b.out)
    assert sorted(seen) == sorted(set(a.ids.flatten().tolist()))


def test_layer_forced_ids():
    x, logits, w13, w2 = small_layer(12)
    kw = dict(routing=dict(method="topk", top_k=2), activation="relu2")
    res = moe_layer(x, logits, None, {"w13": w13, "w2": w2}, **kw)
    assert torch.equal(moe_layer(x, logits, None, {"w13": w13, "w2": w2}, ids=res.ids, **kw).out, res.out)
    forced = (res.ids.flip(1) + 1) % 8
    other = moe_layer(x, logits, None, {"w13": w13, "w2": w2}, ids=forced, **kw)
    assert torch.equal(other.ids, forced) and torch.equal(other.weights, logits.gather(1, forced.long()))


def lossless_fp8_layer(seed, T=4, E=4, H=256, I=128):
    """fp8_block inputs whose hidden-state quantization is exact: each 128-group holds 448 * 2^j and small
    integers * 2^j (s = 2^j per token); weights are small-integer e4m3 codes with power-of-two scales."""
    g = np.random.Generator(np.random.PCG64(seed))
    j = torch.tensor(g.integers(-2, 3, size=(T, 1, 1)), dtype=torch.float32)
    xg = torch.tensor(g.integers(-4, 5, size=(T, H // 128, 128)), dtype=torch.float32)
    xg[..., 0] = 448.0
    x = (xg * torch.exp2(j)).flatten(1).bfloat16()

    def codes(shape):
        return torch.tensor(g.integers(-3, 4, size=shape), dtype=torch.float32).to(torch.float8_e4m3fn)

    def scales(shape):
        return torch.exp2(torch.tensor(g.integers(-9, -5, size=shape), dtype=torch.float32))

    w = {"w13": codes((E, I, H)), "w13_scale": scales((E, I // 128, H // 128)),
         "w2": codes((E, H, I)), "w2_scale": scales((E, H // 128, I // 128))}
    logits = torch.tensor(g.permuted(np.tile(2.0 ** -np.arange(E), (T, 1)), axis=1), dtype=torch.float32)
    return x, logits, w


def test_layer_fp8_block_exact_against_numpy_recipe():
    x, logits, w = lossless_fp8_layer(13)
    res = moe_layer(x, logits, None, w, routing=dict(method="topk", top_k=2), activation="identity",
                    quant="fp8_block")
    W13 = weight_dequant(w["w13"], w["w13_scale"]).double().numpy()
    W2q, W2s = w["w2"].float().double().numpy(), w["w2_scale"].repeat_interleave(128, 1).numpy()[..., 0]
    T, H = x.shape
    out = np.zeros((T, H))
    for t in range(T):
        for e, wt in zip(res.ids[t].tolist(), logits[t, res.ids[t].long()].tolist(), strict=True):
            h = x[t].double().numpy() @ W13[e].T  # exact: integer codes times powers of two
            a = np.float32(h).astype(ml_dtypes.bfloat16).astype(np.float32)
            s = np.abs(a).max() / np.float32(448)  # one group and one K block: I = 128
            dot = e4m3_codes(a / s).view(ml_dtypes.float8_e4m3fn).astype(np.float64) @ W2q[e].T
            assert np.array_equal(np.float32(dot), dot)  # precondition: the code-domain dot is exact in fp32
            y = np.float32(dot) * s * W2s[e]  # (dot * a_s) * w_s in fp32
            out[t] += (y * np.float32(wt)).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(res.out.double().numpy(),
                                  np.float32(out).astype(ml_dtypes.bfloat16).astype(np.float64))


def test_layer_rejects():
    x, logits, w13, w2 = small_layer(14)
    kw = dict(routing=dict(method="topk", top_k=2), activation="relu2")
    with pytest.raises(ValueError, match="must share T"):
        moe_layer(x[:2], logits, None, {"w13": w13, "w2": w2}, **kw)
    with pytest.raises(ValueError, match="local experts"):
        moe_layer(x, logits, None, {"w13": w13, "w2": w2}, local_expert_offset=6, local_num_experts=4, **kw)
    with pytest.raises(ValueError, match="do not match"):
        moe_layer(x, logits, None, {"w13": w13, "w2": w2}, routing=kw["routing"], activation="swiglu")
    with pytest.raises(ValueError, match="lacks weights"):
        moe_layer(x, logits, None, {"w13": w13, "w2": w2}, quant="fp8_block", **kw)
    with pytest.raises(ValueError, match="activation"):
        moe_layer(x, logits, None, {"w13": w13, "w2": w2}, routing=kw["routing"], activation="tanh")


def test_recipe_declares_every_quant_path_with_recipe_fields():
    from dataclasses import fields

    from spec.recipes import Recipe  # the field list only; spec/ numerics are not used here
    names = {f.name for f in fields(Recipe)}
    assert set(RECIPE) == {"bf16", "fp8_block", "mxfp8", "nvfp4"}
    for path, declared in RECIPE.items():
        assert set(declared) == names, path
        Recipe.from_dict(declared)
    assert RECIPE["bf16"]["requant_intermediate"] is False
    assert RECIPE["fp8_block"]["requant_intermediate"] is True


@pytest.mark.heavy
def test_layer_deepseek_v3_size_reads_only_routed_experts():
    E, H, I, T = 256, 7168, 2048, 2
    seen = []

    def source(e):  # fp8 codes in [-8, 8] and scales 2^-8, generated from the expert id alone
        seen.append(e)
        gen = torch.Generator().manual_seed(e)
        return {"w13": torch.randint(-8, 9, (2 * I, H), generator=gen).float().to(torch.float8_e4m3fn),
                "w13_scale": torch.full((2 * I // 128, H // 128), 2.0 ** -8),
                "w2": torch.randint(-8, 9, (H, I), generator=gen).float().to(torch.float8_e4m3fn),
                "w2_scale": torch.full((H // 128, I // 128), 2.0 ** -8)}

    g = np.random.Generator(np.random.PCG64(15))
    x = torch.tensor(g.standard_normal((T, H))).bfloat16()
    logits, bias = torch.tensor(g.standard_normal((T, E)), dtype=torch.float32), torch.zeros(E)
    kw = dict(routing=dict(method="deepseek_v3", top_k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5),
              activation="swiglu", quant="fp8_block")
    res = moe_layer(x, logits, bias, source, **kw)
    assert sorted(seen) == sorted(set(res.ids.flatten().tolist())) and len(seen) <= T * 8
    assert res.out.shape == (T, H) and torch.isfinite(res.out.float()).all()
    halves = [moe_layer(x, logits, bias, source, local_expert_offset=o, local_num_experts=128, **kw)
              .out.double() for o in (0, 128)]
    bound = U_BF16 * (res.out.double().abs() + halves[0].abs() + halves[1].abs()) * (1 + 2 ** -6)
    assert_within("out (halves summed vs whole)", halves[0] + halves[1], res.out.double(), bound)
