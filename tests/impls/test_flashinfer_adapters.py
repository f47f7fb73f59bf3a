"""FlashInfer adapters on CPU: weight preparation against its inverse, argument layouts, availability reasons."""

import importlib.util

import numpy as np
import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="flashinfer-python not installed "
                       "(pip install --no-deps flashinfer-python==0.7.2.post1 apache-tvm-ffi)"),
]
torch = pytest.importorskip("torch")

import impls  # noqa: E402
from impls.flashinfer import _prep, adapter  # noqa: E402

FLASHINFER = [name.partition(".")[2] for name in impls.adapters() if name.startswith("flashinfer.")]  # one registry


def rows(M, K=4):
    """[M, K] bf16 whose row r holds r in every column: a row permutation reads off as a vector."""
    return torch.arange(M, dtype=torch.bfloat16).repeat_interleave(K).view(M, K)


def test_up_gate_rows_swaps_halves_and_is_its_own_inverse():
    w = rows(8)[None]
    swapped = _prep.up_gate_rows(w, "gate_up")
    assert swapped[0, :, 0].tolist() == [4, 5, 6, 7, 0, 1, 2, 3]
    assert torch.equal(_prep.up_gate_rows(swapped, "gate_up"), w)
    assert _prep.up_gate_rows(w, "up_gate") is w


def test_reorder_gated_interleaves_up_and_gate():
    got = _prep.reorder_gated(rows(8))[:, 0].tolist()
    assert got == [0, 4, 1, 5, 2, 6, 3, 7], f"reorder_rows_for_gated_act_gemm gave {got}"


@pytest.mark.parametrize("tile, block", [(128, 32), (64, 16)])
def test_shuffle_rows_matches_documented_permutation_and_inverts(tile, block):
    M = 128
    w = rows(M)
    got = _prep.shuffle_rows(w, tile)[:, 0].to(torch.int64)
    r = torch.arange(block)
    # docs/semantics.md §5.2: output row r of a block = input row (r%8)*(block/8) + r//8
    within = (r % 8) * (block // 8) + r // 8
    expected = (torch.arange(M) // block * block) + within.repeat(M // block)
    assert torch.equal(got, expected), f"tile {tile}: first rows {got[:block].tolist()}"
    inverse = torch.empty_like(got)
    inverse[got] = torch.arange(M)
    assert torch.equal(_prep.shuffle_rows(w, tile)[inverse], w)


@pytest.mark.parametrize("dtype, per_block", [(torch.bfloat16, 64), (torch.float8_e4m3fn, 128)])
def test_block_major_k_shape_strides_and_inverse(dtype, per_block):
    M, K = 16, 256
    w = torch.arange(M * K, dtype=torch.float32).remainder(251).view(M, K).to(dtype)
    b = _prep.block_major_k(w)
    assert b.shape == (K // per_block, M, per_block) and b.is_contiguous()
    assert b.stride() == (M * per_block, per_block, 1)
    back = b.permute(1, 0, 2).reshape(M, K)
    assert torch.equal(back.view(torch.uint8), w.view(torch.uint8)), "BlockMajorK is not [K/blk, M, blk] of w"


def test_transposed_hidden_scale_is_zero_copy_of_column_major():
    T, G = 5, 3
    buf = torch.arange(G * T, dtype=torch.float32).view(G, T)
    col_major = buf.t()  # [T, G], strides (1, T): SGLang's column_major_scales=True
    t = _prep.transposed_hidden_scale(col_major)
    assert t.shape == (G, T) and t.is_contiguous() and t.data_ptr() == buf.data_ptr()


def test_transposed_hidden_scale_refuses_row_major():
    with pytest.raises(ValueError, match="column-major"):
        _prep.transposed_hidden_scale(torch.zeros(5, 3))


def test_fp8_quantize_hidden_layout_and_values():
    mod = adapter("trtllm_fp8_block_scale_moe")
    x = torch.linspace(-3, 3, 4 * 256).view(4, 256).to(torch.bfloat16)
    q, s = mod.quantize_hidden(x)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (4, 256)
    assert s.shape == (4, 2) and s.stride() == (1, 4), f"scales strides {s.stride()}, want column-major (1, 4)"
    amax = x.float().view(4, 2, 128).abs().amax(-1)
    assert torch.equal(s, amax * torch.tensor(1 / 448, dtype=torch.float32))
    deq = q.float().view(4, 2, 128) * s[..., None]
    err = (deq - x.float().view(4, 2, 128)).abs() / amax[..., None]
    # q = x·448/amax lies in [-448, 448]; the e4m3 quantum in [256, 448] is 32, so |error| <= 16/448 of amax
    assert err.max() <= 16 / 448 * (1 + 2.0 ** -20), f"max |dequant error|/amax {err.max():.3g}"


def test_mono_moe_gate_up_rows():
    mod = adapter("mono_moe")
    w = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    assert mod.gate_up_rows(w, "up_gate")[0, :, 0].tolist() == [4, 5, 6, 7, 0, 1, 2, 3]
    assert mod.gate_up_rows(w, "gate_up") is w


@pytest.mark.parametrize("half_order", ["gate_up", "up_gate"])
def test_mono_moe_prepares_scales_with_their_rows(half_order, monkeypatch):
    """The kernel reads [gate; up] codes and their block scales: an up_gate layer's scale row blocks move with its
    rows (the H200 mono-moe preset campaign of 2026-12-03 found up_gate cases failing while the codes alone moved).
    Every array equals the preparation of the same layer given in gate_up order. Small shapes: E, I, H patched."""
    mod = adapter("mono_moe")
    monkeypatch.setattr(mod, "E", 2)
    monkeypatch.setattr(mod, "I", 256)
    monkeypatch.setattr(mod, "H", 256)
    B, rng = mod.BLOCK, np.random.default_rng(0)
    w13 = rng.integers(0, 0x7E, (2, 512, 256), dtype=np.uint8)  # finite e4m3 codes
    w13_scale = rng.uniform(0.5, 2, (2, 512 // B, 256 // B)).astype(np.float32)
    w2, w2_scale = rng.integers(0, 0x7E, (2, 256, 256), dtype=np.uint8), np.ones((2, 2, 2), np.float32)
    given = (w13, w13_scale) if half_order == "gate_up" else (
        np.concatenate([w13[:, 256:], w13[:, :256]], 1), np.concatenate([w13_scale[:, 2:], w13_scale[:, :2]], 1))
    got = mod.prepare_weights(*given, w2, w2_scale, half_order=half_order, device="cpu")
    want = mod.prepare_weights(w13, w13_scale, w2, w2_scale, half_order="gate_up", device="cpu")
    def bits(t):
        return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t

    for name in want:
        assert torch.equal(bits(got[name]), bits(want[name])), name


def test_mono_moe_interleave_pairs_gate_and_up_rows():
    from flashinfer.fused_moe.monomoe import interleave_for_tma_wgmma_up

    E, N = 1, 64
    w = torch.arange(2 * N, dtype=torch.float32).repeat_interleave(2).view(E, 2 * N, 2)
    got = interleave_for_tma_wgmma_up(w)[0, :, 0].to(torch.int64).tolist()
    assert got[:16] == list(range(8)) + list(range(N, N + 8)), got[:16]
    assert sorted(got) == list(range(2 * N))


def test_enums_are_members():
    from flashinfer.fused_moe import RoutingMethodType

    from impls.flashinfer import _trtllm

    assert _trtllm.routing_method("deepseek_v3") is RoutingMethodType.DeepSeekV3
    assert _trtllm.routing_method("sigmoid") is RoutingMethodType.Sigmoid
    with pytest.raises(ValueError, match="RoutingMethodType"):
        _trtllm.routing_method("deepseek_v2")


@pytest.mark.parametrize("name", FLASHINFER)
def test_availability_names_the_reason_on_cpu(name, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the CPU reasons do not apply")
    monkeypatch.delenv("DIFFTEST_ENABLE_CUTLASS", raising=False)
    reason = adapter(name).available()
    expected = ("cutlass_fused_moe is opt-in" if name == "cutlass_fused_moe"
                else "no CUDA device (torch.cuda.is_available() is False)")
    assert reason is not None and reason.startswith(expected), reason


def test_availability_reports_wrong_version(monkeypatch):
    from impls.flashinfer import _env

    monkeypatch.setattr(_env, "_dist_version", lambda name: "0.6.13")
    assert _env.flashinfer_problem() == "flashinfer-python 0.6.13 is installed, expected 0.7.2.post1"


def test_cubin_problem_names_missing_file(monkeypatch, tmp_path):
    from impls.flashinfer import _env

    monkeypatch.setattr(_env, "cubin_dir", lambda: tmp_path)
    problem = _env.cubin_problem()
    assert problem.startswith("trtllm-gen cubins unavailable offline") and "checksums.txt" in problem


def test_capability_gate_message(monkeypatch):
    from impls.flashinfer import _env, _trtllm

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (9, 0))
    assert _env.cuda_problem(_trtllm.CAPABILITIES) == "compute capability 9.0 not supported (needs 10.0/10.3)"


def test_fused_topk_limits():
    from impls.flashinfer.fused_topk_deepseek import _limits

    assert _limits(256, 8, 4, 8) is None
    assert _limits(512, 8, 4, 8) == "num_experts/n_group=64 > 32"
    # FlashInfer's own check requires topk_group*n_group >= top_k, so n_group=1 means top_k=1
    assert _limits(256, 1, 1, 1) is None and _limits(512, 1, 1, 1) == "num_experts=512 > 384 with n_group=1"
    assert _limits(256, 1, 1, 8).startswith("needs topk_group <= n_group and topk_group*n_group >= top_k")
    assert _limits(256, 8, 4, 9) == "top_k=9 > 8"


def test_fused_topk_deepseek_refuses_bf16_logits_with_the_recipe_reason():
    import dataclasses

    from difftest.model.case import RoutingConfig

    c = RoutingConfig(method="deepseek_v3", num_tokens=2, num_experts=256, top_k=8, n_group=8, topk_group=4,
                      eps=1e-20, logits_dtype="bf16")
    assert "flashinfer_fused_topk_deepseek_bf16" in adapter("fused_topk_deepseek").unsupported(c)
    assert adapter("fused_topk_deepseek").unsupported(dataclasses.replace(c, logits_dtype="fp32")) is None


def test_adapters_name_recipes_the_spec_defines():
    from spec.recipes import NAMED

    for name in ("fused_topk_deepseek", "mono_moe"):
        assert adapter(name).RECIPE in NAMED, name


def test_fused_topk_refuses_zero_tokens_with_the_f4_reason():
    from difftest.model.case import RoutingConfig
    from impls.flashinfer import fused_topk_deepseek as ft

    ok = RoutingConfig("deepseek_v3", 4, 256, 8, 8, 4, 2.5, renormalize=True, eps=ft.EPS)
    assert ft.unsupported(ok) is None
    reason = ft.unsupported(RoutingConfig("deepseek_v3", 0, 256, 8, 8, 4, 2.5, renormalize=True, eps=ft.EPS))
    assert reason and "num_tokens=0" in reason and "zero_tokens" in reason


def test_mono_moe_preset_draws_the_kernel_shape():
    """`fuzz --model mono-moe` draws E=256, I=512, H=2048, T <= 8; only T = 0 is refused (by the adapter)."""
    from hypothesis import given, settings

    from difftest.model import presets
    from impls.flashinfer import mono_moe

    reasons = []

    @settings(max_examples=40, database=None, deadline=None)
    @given(presets.configs("mono-moe", "moe"))
    def draw(c):
        reasons.append(mono_moe.unsupported(c))
        assert (c.routing.num_experts, c.intermediate_size, c.hidden_size) == (256, 512, 2048)

    draw()
    assert None in reasons and set(reasons) <= {None, "num_tokens=0 outside 1..8"}
