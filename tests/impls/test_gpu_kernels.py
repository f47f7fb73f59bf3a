"""The GPU kernels themselves: each GPU implementation on a few small cases of the kinds that passed on the H200
(docs/device-results.md), through difftest's own check. The device part of the GPU tier (`python -m pytest -m
gpu`, tox -e gpu); each implementation is skipped with its own reason where it cannot run (no CUDA device, another
compute capability, FlashInfer or sgl-kernel missing, no trtllm-gen headers).

Grouped DeepSeek-V3 cases of the trtllm-gen kernels take a bf16 bias: with an fp32 one the kernel reads it in bf16
(open fixture flashinfer-trtllm_gen_routing-grouped_bias_bf16), which these tests are not about."""

import pytest

from difftest.checking import check, interface
from difftest.model.case import Case, DevKernelConfig, MoEConfig, QuantConfig, RoutingConfig
from tests.helpers import dry_adapters

pytestmark = pytest.mark.gpu

EPS = 1e-20  # the FlashInfer kernels' renormalizing epsilon


def routing(*args, **kw):
    return Case("routing", RoutingConfig(*args, **kw), "normal", 1)


def moe(routing_config, H, I, seed=0, **kw):
    return Case("moe", MoEConfig(routing=routing_config, hidden_size=H, intermediate_size=I, **kw), "normal", seed)


def quant(**kw):
    return Case("quant", QuantConfig(**{**dict(scheme="fp8_group", num_tokens=5, hidden_size=384, group_size=128,
                                               scale_formula="mul_rcp448"), **kw}), "normal", 3)


def dev(*args, **kw):
    return Case("trtllm_ops", DevKernelConfig(*args, **kw), "normal", 2)


DSV3 = RoutingConfig("deepseek_v3", 8, 64, 8, 8, 4, 2.5, eps=EPS, bias_dtype="bf16")
CASES = {
    "flashinfer.fused_topk_deepseek": [
        routing("deepseek_v3", 7, 256, 8, 8, 4, 2.5, eps=EPS, bias_dtype="fp32"),
        routing("deepseek_v3", 33, 64, 4, 4, 2, eps=EPS, bias_dtype="fp32"),
    ],
    "flashinfer.mono_moe": [
        moe(RoutingConfig("renormalize", 2, 256, 8, logits_dtype="bf16"), 2048, 512, quant="fp8_block"),
    ],
    "flashinfer.trtllm_gen_routing": [
        routing("deepseek_v3", 5, 256, 8, 8, 4, 2.5, eps=EPS, bias_dtype="bf16", tile_tokens_dim=8),
        routing("renormalize", 33, 64, 4, tile_tokens_dim=16),
        routing("sigmoid_renorm", 16, 128, 6, eps=EPS, tile_tokens_dim=8),
        routing("llama4", 9, 16, 1, tile_tokens_dim=8),
    ],
    "flashinfer.trtllm_gen_dev_ops": [
        dev("permute", 5, 256, top_k=2, num_experts=8),
        dev("activation", 5, 128, top_k=2, num_experts=8),
        dev("finalize", 5, 256, top_k=2, num_experts=8),
    ],
    "flashinfer.trtllm_gen_nogemm": [
        moe(RoutingConfig("renormalize", 7, 32, 4), 256, 128, seed=101),
        moe(RoutingConfig("sigmoid_renorm", 3, 16, 2, eps=EPS), 256, 128, seed=200, activation="relu2"),
        moe(DSV3, 512, 256, seed=301, quant="fp8_block"),
        # the deepseek-v3 preset's routing at its scaled sizes: the DeepSeek-FP8 activation kernel's re-quantization
        moe(RoutingConfig("deepseek_v3", 5, 256, 8, 8, 4, 2.5, eps=EPS, bias_dtype="bf16"), 256, 128, seed=302,
            quant="fp8_block"),
        moe(DSV3, 256, 128, seed=303, quant="fp8_block", activation="relu2"),  # block FP8 relu2: torch's requant
    ],
    "sglang.moe_fused_gate": [routing("deepseek_v3", 7, 256, 8, 8, 4, 2.5, bias_dtype="fp32")],
    "sglang.moe_fused_gate_bf16": [
        routing("deepseek_v3", 7, 256, 8, 8, 4, 2.5, logits_dtype="bf16", bias_dtype="fp32")],
    "sglang.topk_softmax": [routing("default", 8, 64, 4)],
    "sglang.per_token_group_quant_8bit": [quant(input_dtype="bf16", variant="mul_448_div_amax")],
    "sglang.per_token_group_quant_8bit_v1": [quant(input_dtype="fp32", variant="mul_mufu_rcp_scale", layout="col_tma")],
    "torch-cuda": [
        routing("deepseek_v3", 7, 256, 8, 8, 4, 2.5, bias_dtype="fp32"),
        moe(RoutingConfig("renormalize", 6, 16, 4), 128, 64, seed=3),
    ],
}
PARAMS = [pytest.param(name, case, id=f"{name}-{i}") for name, cases in CASES.items() for i, case in enumerate(cases)]
GPU_IMPLS = {name for name in interface.names() if name.startswith(("flashinfer.", "sglang.")) or name == "torch-cuda"}


def test_every_gpu_implementation_has_cases_or_a_reason_it_has_none():
    """A GPU implementation added without cases here fails, so the tier does not silently leave one out."""
    without = {"flashinfer.cutlass_fused_moe": "opt-in, an hour of JIT (docs/gpu.md)",
               "flashinfer.trtllm_bf16_moe": "SM100 cubins only", "flashinfer.trtllm_fp8_block_scale_moe": "SM100",
               "flashinfer.trtllm_fp4_block_scale_moe": "SM100"}
    assert GPU_IMPLS == set(CASES) | set(without)


@pytest.mark.parametrize("name, case", PARAMS)
def test_cases_are_inside_what_the_implementation_takes(name, case):
    """On any host: each case is one the implementation runs (else the GPU test would only skip it)."""
    impl = interface.load(name)
    assert impl.unsupported(case) is None, impl.unsupported(case)
    if name in dry_adapters.DRY and name != "flashinfer.mono_moe":  # mono_moe: 768 MiB of weights on the CPU
        assert check.run_case(dry_adapters.DRY[name], case).status == "pass"


@pytest.mark.parametrize("name, case", PARAMS)
def test_kernel_passes(name, case):
    impl = interface.load(name)
    reason = impl.available()
    if reason:
        pytest.skip(f"{name}: {reason}")
    result = check.run_case(impl, case)
    assert result.status == "pass", result.message


def test_a_read_only_input_reaches_the_dev_kernels_without_a_warning():
    """A fixture's inputs are read-only arrays; torch warns on one (the H200 GPU tier of 2026-12-02 failed on it,
    the warning raised as an error inside the adapter): the adapter hands torch a copy."""
    import numpy as np

    from impls.flashinfer import trtllm_gen_dev_ops

    a = np.arange(6, dtype=np.int32)
    a.flags.writeable = False
    t = trtllm_gen_dev_ops._tensor(a, "int32", "cpu")  # filterwarnings = error: a warning fails here
    assert t.tolist() == list(range(6))
