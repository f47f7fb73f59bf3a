"""The trtllm_ops op (trtllm-gen dev kernels): the spec's functions on hand-checked values, spec vs torch eager
over the op's strategy, and one deliberately broken torch kernel per kernel that the comparison must find."""

import numpy as np
import pytest
import torch
from hypothesis import find, given, settings

from difftest.checking import check
from difftest.checking.impl_torch import TORCH
from difftest.model import generate, strategies
from difftest.model.case import DEV_KERNELS, Case, CaseError, DevKernelConfig
from impls.torch_eager import trtllm_ops as te_ops
from spec import trtllm_ops
from spec.numerics import E4M3FN, FP32, decode

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FLT_MIN = np.float32(FP32.min_normal)


def test_permute_copies_every_mapped_slot_and_leaves_padding_zero():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    e2p = np.array([[2, 0], [-1, 1]])
    assert trtllm_ops.permute(x, e2p, 4).tolist() == [[1, 2], [3, 4], [1, 2], [0, 0]]


def test_gated_activation_gates_the_second_half_with_controls():
    x = np.array([[2.0, 0.0], [2.0, 50.0]])  # [up | gate]
    assert trtllm_ops.gated_activation(x)[:, 0].tolist() == [0.0, 50.0 * 2.0 / (1 + np.exp(-50.0))]
    y = trtllm_ops.gated_activation(np.array([[9.0, 9.0]]), alpha=2.0, beta=0.5, clamp_limit=3.0)
    assert y[0, 0] == pytest.approx(3.0 / (1 + np.exp(-6.0)) * 3.5, rel=1e-15)


def test_the_layers_requant_quantizer_is_the_activation_kernels():
    """Recipe requant_variant mul_mufu_rcp_scale with requant_scale_formula mul_rcp448_flt_min (the no-GEMM layer's
    fp8_block recipe) quantizes as requant_deepseek_fp8 does, codes and scales bit for bit: also a block whose amax
    is below the other formulas' 1e-10 floor, and an all-zero one."""
    from spec.quant import per_token_group_quant_fp8

    rng = np.random.default_rng(4)
    y = (rng.standard_normal((4, 256)) * np.exp2(rng.integers(-40, 20, (4, 2)).repeat(128, axis=1))).astype(np.float32)
    y[1, :128], y[2, 128:] = 0.0, y[2, 128:] * np.float32(1e-12)
    q, s = per_token_group_quant_fp8(y, 128, variant="mul_mufu_rcp_scale", scale_formula="mul_rcp448_flt_min")
    want_q, want_s = trtllm_ops.requant_deepseek_fp8(y)
    assert np.array_equal(q, want_q) and np.array_equal(s, want_s.T)
    old_q, _ = per_token_group_quant_fp8(y, 128, variant="mul_mufu_rcp_scale", scale_formula="mul_rcp448")
    assert not np.array_equal(old_q[2], want_q[2])  # the 1e-10 amax floor quantizes the tiny block otherwise


def test_gemm1_out_quant_is_a_rounding_point_of_the_layer():
    """The no-GEMM fp8_block recipe's GEMM1 output quantization changes the spec's intermediate: without it the
    layer's output differs (so the field is read), and a typo in its values fails at construction."""
    from difftest.checking import impl_spec
    from difftest.model.case import MoEConfig, RoutingConfig
    from spec.recipes import NAMED, Recipe

    recipe = NAMED["flashinfer_trtllm_gen_nogemm_fp8_block"]
    case = Case("moe", MoEConfig(RoutingConfig("renormalize", 3, 8, 2), 256, 128, quant="fp8_block"), "normal", 2)
    inputs = generate.inputs(case)
    with_quant = impl_spec.layer(case, inputs, recipe).out
    without = impl_spec.layer(case, inputs, recipe.but(gemm1_out_quant=False)).out
    assert not np.array_equal(with_quant, without)
    with pytest.raises(ValueError, match="gemm1_out_quant_scale_formula"):
        Recipe(name="typo", gemm1_out_quant_scale_formula="mul_rcp_448")
    with pytest.raises(ValueError, match="act_scale_formula"):  # the kernels' floor is the intermediate's only
        Recipe(name="hidden", act_scale_formula="mul_rcp448_flt_min")


def test_requant_floors_the_scale_and_multiplies_by_its_reciprocal():
    y = np.zeros((2, 128))
    y[1, 0], y[1, 1] = 448.0, -3.0
    q, s = trtllm_ops.requant_deepseek_fp8(y)
    assert s[0, 0] == FLT_MIN and not q[0].any()  # an all-zero block: 2^-126, codes 0
    assert s[0, 1] == np.float32(448.0) * (np.float32(1) / np.float32(448.0))
    assert decode(q[1, :2], E4M3FN).tolist() == [448.0, -3.0]


def test_finalize_skips_unmapped_slots_and_weighs_the_rest():
    x = np.array([[1.0], [10.0], [100.0]])
    out = trtllm_ops.finalize(x, np.array([[0, 2], [-1, -1], [1, -1]]), np.array([[0.5, 2.0], [3, 3], [4, 4]]))
    assert out[:, 0].tolist() == [200.5, 0.0, 40.0]


def test_finalize_deepseek_fp8_scales_per_block_and_floors_an_all_zero_block():
    x = np.ones((2, 256))
    x_scale = np.array([[0.5, 0.25], [2.0, 4.0]], np.float32)  # [H/128, P]
    e2p = np.array([[0, 1], [-1, -1]])
    acc = trtllm_ops.finalize_deepseek_fp8(x, x_scale, e2p, np.array([[1.0, 2.0], [1.0, 1.0]]))
    assert acc[0, 0] == 0.5 + 2 * 0.25 and acc[0, 128] == 2.0 + 2 * 4.0 and not acc[1].any()
    q, s = trtllm_ops.requant_deepseek_fp8(acc, fmt="bf16")
    assert s[:, 1].tolist() == [2.0**-126] * 2 and not q[1].any()  # an unmapped token: floored scale, zeros
    q0, s0 = trtllm_ops.requant_deepseek_fp8(acc, floor=0.0, fmt="bf16")
    assert s0[:, 1].tolist() == [0.0, 0.0] and np.isnan(q0[1]).all()  # unfloored (the 0.7.2 kernel): NaN
    assert q[0, 0] == 448.0 and s[0, 0] == np.float32(1.0) * (np.float32(1) / np.float32(448))


def test_finalize_order_is_a_recipe():
    """Terms 1, 2^-24, -1, 2^-24: in order, 1 + 2^-24 rounds back to 1 and one 2^-24 is lost; k_split 2 sums
    (1 + -1) + (2^-24 + 2^-24) and loses nothing. Interleaved the other way, the two orders swap."""
    x = np.array([[1.0], [2.0**-24], [-1.0], [2.0**-24]])
    e2p = np.array([[0, 1, 2, 3]])
    assert trtllm_ops.finalize(x, e2p)[0, 0] == 2.0**-23
    assert trtllm_ops.finalize(x, e2p, order="in_order")[0, 0] == 2.0**-24
    assert trtllm_ops.finalize(x, e2p, order=2)[0, 0] == 2.0**-23
    assert trtllm_ops.finalize(x[[0, 2, 1, 3]], e2p, order="in_order")[0, 0] == 2.0**-23
    assert trtllm_ops.finalize(x[[0, 2, 1, 3]], e2p, order=2)[0, 0] == 2.0**-24


@settings(max_examples=60)
@given(case=strategies.cases("trtllm_ops", configs=strategies.dev_kernel_configs("finalize")))
def test_torch_finalize_is_the_in_order_recipe_bit_for_bit(case):
    """torch sums k in order in fp32 with exact products: the spec's "in_order" recipe exactly."""
    from difftest.checking.impl_spec import dev_store, dev_values

    inputs = generate.inputs(case)
    x, e2p = dev_values(inputs["gemm2_out"], case.config.dtype), inputs["expanded_idx_to_permuted_idx"]
    w, hidden = inputs.get("expert_weights"), case.config.hidden_size
    want = dev_store(trtllm_ops.finalize(x, e2p, w, hidden, order="in_order"), case.config.dtype)
    got = TORCH.run(case, inputs)["out"]
    assert np.array_equal(got, want), np.argwhere(got != want)[:3]


@pytest.mark.parametrize("layout", trtllm_ops.SF_LAYOUTS)
def test_convertsf_inverts_the_adapters_swizzle(layout):
    """Two derivations of SfLayoutDecl.h: the spec's offset formulas and _trtllm_gen_ops' reshapes."""
    from impls.flashinfer._trtllm_gen_ops import sf_from_linear

    M, N = 37, 32
    linear = torch.arange(M * N, dtype=torch.int32).view(M, N)
    assert (trtllm_ops.convertsf(sf_from_linear(linear, layout).numpy(), M, N, layout) == linear.numpy()).all()


def test_config_errors_are_one_line():
    with pytest.raises(CaseError, match="activation_deepseek_fp8 takes e4m3"):
        Case("trtllm_ops", DevKernelConfig("activation_deepseek_fp8", 2, 128, dtype="bf16"))
    with pytest.raises(CaseError, match="multiple of 64"):
        Case("trtllm_ops", DevKernelConfig("activation", 2, 96))
    c = Case("trtllm_ops", DevKernelConfig("finalize", 3, 32, top_k=2, weighted=False), "non_local", 7)
    assert Case.from_json(c.to_json()) == c


@pytest.mark.parametrize("kernel", DEV_KERNELS)
@settings(max_examples=60)
@given(data=strategies.st.data())
def test_torch_matches_spec(kernel, data):
    case = data.draw(strategies.cases("trtllm_ops", configs=strategies.dev_kernel_configs(kernel)), label="case")
    res = check.run_case(TORCH, case)
    assert res.status == "pass", res.message


ORIGINAL = {name: getattr(te_ops, name)
            for name in ("permute", "swiglu", "finalize", "convertsf", "finalize_deepseek_fp8")}


def _broken_permute(hidden_states, e2p, num_padded_tokens):
    """Forgets every slot but the first."""
    return ORIGINAL["permute"](hidden_states, torch.where(torch.arange(e2p.shape[1]) == 0, e2p, -1),
                                      num_padded_tokens)


def _broken_swiglu(gemm1_out, alpha, beta, clamp_limit):
    """Gates the first half ([gate; up] read as [up; gate])."""
    up, gate = gemm1_out.float().chunk(2, dim=-1)
    return ORIGINAL["swiglu"](torch.cat([gate, up], dim=-1), alpha, beta, clamp_limit)


def _broken_finalize(gemm2_out, e2p, expert_weights=None, hidden=None):
    """Drops the first slot's weight (applies 1)."""
    if expert_weights is not None:
        expert_weights = expert_weights.clone()
        expert_weights[:, 0] = 1
    return ORIGINAL["finalize"](gemm2_out, e2p, expert_weights, hidden)


def _broken_convertsf(sf, num_tokens, hidden_dim_sf, src_layout):
    """R128c4 with the two row digits (i%32, (i%128)//32) read in the wrong order."""
    if src_layout != "R128c4":
        return ORIGINAL["convertsf"](sf, num_tokens, hidden_dim_sf, src_layout)
    tiles = -(-num_tokens // 128)
    flat = sf.reshape(-1)[: tiles * 128 * hidden_dim_sf].view(tiles, hidden_dim_sf // 4, 32, 4, 4)
    return flat.permute(0, 2, 3, 1, 4).reshape(tiles * 128, hidden_dim_sf)[:num_tokens].contiguous()


def _broken_finalize_deepseek_fp8(gemm2_out, gemm2_out_scale, e2p, expert_weights):
    """Forgets the input block scales (w·x instead of fl(w·s)·x)."""
    return ORIGINAL["finalize_deepseek_fp8"](gemm2_out, torch.ones_like(gemm2_out_scale), e2p, expert_weights)


BROKEN = {  # kernel -> (torch_eager attribute, replacement or value)
    "permute": ("permute", _broken_permute),
    "activation": ("swiglu", _broken_swiglu),
    "activation_deepseek_fp8": ("FLT_MIN", 0.0),  # the requant scale without its floor
    "convertsf": ("convertsf", _broken_convertsf),
    "finalize": ("finalize", _broken_finalize),
    "finalize_deepseek_fp8": ("finalize_deepseek_fp8", _broken_finalize_deepseek_fp8),
}


@pytest.mark.parametrize("kernel", DEV_KERNELS)
def test_broken_kernel_is_found(kernel, monkeypatch):
    monkeypatch.setattr(te_ops, *BROKEN[kernel])
    fails = lambda case: check.run_case(TORCH, case).status == "fail"
    case = find(strategies.cases("trtllm_ops", configs=strategies.dev_kernel_configs(kernel)), fails,
                settings=settings(max_examples=300, database=None, derandomize=True))
    res = check.run_case(TORCH, case)
    assert "[trtllm_ops, torch]" in res.message, res.message


def _truncating_e4m3(v):
    """e4m3 rounding toward zero: one code down wherever nearest-even rounded away from zero."""
    r = v.clamp(-448, 448).to(torch.float8_e4m3fn)
    away = (r.float().abs() > v.abs()) & (r.float() != 0)
    return torch.where(away, r.view(torch.uint8) - 1, r.view(torch.uint8)).view(torch.float8_e4m3fn)


def test_requant_rounding_mode_is_held_to_nearest_even(monkeypatch):
    """The interval rule leaves a code free only near a midpoint: truncation is found."""
    monkeypatch.setattr(te_ops, "to_e4m3", _truncating_e4m3)
    fails = lambda case: check.run_case(TORCH, case).status == "fail"
    case = find(strategies.cases("trtllm_ops", configs=strategies.dev_kernel_configs("activation_deepseek_fp8")), fails,
                settings=settings(max_examples=300, database=None, derandomize=True))
    assert "out (e4m3 value)" in check.run_case(TORCH, case).message


def test_unfloored_finalize_requant_is_found(monkeypatch):
    """finalize_deepseek_fp8 without the scale floor (as the 0.7.2.post1 kernel, dev.cu:1122-1136): an all-zero
    block stores scale 0 and NaN codes, which the floored spec reports at the scale."""
    monkeypatch.setattr(te_ops, "FLT_MIN", 0.0)
    fails = lambda case: check.run_case(TORCH, case).status == "fail"
    case = find(strategies.cases("trtllm_ops", configs=strategies.dev_kernel_configs("finalize_deepseek_fp8")), fails,
                settings=settings(max_examples=300, database=None, derandomize=True))
    assert "out_scale" in check.run_case(TORCH, case).message
