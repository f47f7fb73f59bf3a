"""The trtllm-gen routing recipes: grouped DeepSeekV3 rounds the bias to bf16 before the add (deepseek.cu:159-162),
which explains the H200's grouped disagreements with float64; the ungrouped kernels keep it fp32.
docs/trtllm_gen_routing.md §3."""

import importlib

import ml_dtypes
import numpy as np
import pytest

from difftest.checking.compare import check_ids
from difftest.model.case import RoutingConfig
from spec import routing
from spec.recipes import DEFAULT, NAMED, TRTLLM_GEN_ROUTING, TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT

SHAPES = ((64, 8, 4, 8), (256, 8, 4, 8))  # E, n_group, topk_group, top_k (the H200 measurement's shapes)


def grouped_kernel_model(x, b, n_group, topk_group, top_k):
    """routingMainKernel's selection: key = fl32(σ(x) + bf16(b)) (σ in fp32), group score = top-2 key sum,
    the topk_group best groups, then the top_k keys in them; ties to the lower group / expert index."""
    T, E = x.shape
    s = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    key = s + b.astype(ml_dtypes.bfloat16).astype(np.float32)
    grouped = key.reshape(T, n_group, E // n_group)
    top2 = -np.sort(-grouped, axis=-1)[..., :2].sum(axis=-1)
    groups = np.argsort(-top2, axis=-1, kind="stable")[:, :topk_group]
    kept = np.zeros((T, n_group), bool)
    np.put_along_axis(kept, groups, True, axis=-1)
    masked = np.where(np.repeat(kept, E // n_group, axis=-1), key, -np.inf)
    return np.argsort(-masked, axis=-1, kind="stable")[:, :top_k]


def draw(E, T=2048, seed=0):
    """The measurement's distribution: logits N(0, 1), fp32 bias N(0, 0.1²)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((T, E)).astype(np.float32), (0.1 * rng.standard_normal(E)).astype(np.float32)


def test_trtllm_gen_routing_recipe_selector():
    from impls.flashinfer.trtllm_gen_routing import AS_BUILT, recipe_for

    def name(method, n_group, recipe_for=recipe_for):
        return recipe_for(RoutingConfig(method, 1, 64, 2, n_group, 1))

    assert name("deepseek_v3", 8) == TRTLLM_GEN_ROUTING.name  # declared: the FP32 bias
    assert name("deepseek_v3", 8, AS_BUILT.recipe_for) == TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT.name
    assert name("deepseek_v3", 1, AS_BUILT.recipe_for) == name("renormalize", 1, AS_BUILT.recipe_for) == \
        TRTLLM_GEN_ROUTING.name
    assert NAMED[TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT.name].bias == "bf16"
    assert NAMED[TRTLLM_GEN_ROUTING.name].bias == "fp32"


@pytest.mark.parametrize("module", ["trtllm_gen_routing", "trtllm_gen_nogemm"])
def test_as_built_is_the_adapter_under_its_own_name_and_the_as_built_recipe(module):
    """``--impl impls.flashinfer.<module>:AS_BUILT`` (it replaced an environment variable that changed what the
    adapter declared): the same kernel call and space, another name (one run can fuzz both), the grouped as-built
    recipe where the adapter declares the FP32 bias; its reproducer embeds the adapter module itself."""
    from difftest.checking import interface
    from difftest.model.case import Case, MoEConfig
    from difftest.readers.reproducer import kind_of_reference

    ref = f"impls.flashinfer.{module}:AS_BUILT"
    variant, adapter = interface.load(ref), interface.load(f"flashinfer.{module}")
    assert variant.name == f"{adapter.name}_as_built" and variant.space == adapter.space
    grouped = RoutingConfig("deepseek_v3", 2, 64, 2, 8, 1, bias_dtype="fp32")
    config = grouped if module == "trtllm_gen_routing" else MoEConfig(grouped, 128, 128, quant="fp8_block")
    case = Case(variant.ops[0], config, "normal", 0)
    assert (adapter.recipe(case).bias, variant.recipe(case).bias) == ("fp32", "bf16")
    assert variant.recipe(case).name == adapter.recipe(case).name + "_grouped_as_built"
    assert kind_of_reference(ref) == ("adapter", f"impls.flashinfer.{module}")
    source = importlib.import_module(f"impls.flashinfer.{module}")
    assert source.AS_BUILT.run is source.run and source.AS_BUILT.unsupported is source.unsupported


@pytest.mark.parametrize("E,G,tg,k", SHAPES)
def test_grouped_recipe_reproduces_the_kernel_model(E, G, tg, k):
    x, b = draw(E)
    model = np.sort(grouped_kernel_model(x, b, G, tg, k), axis=1)
    spec = routing.deepseek_v3(x, b, top_k=k, n_group=G, topk_group=tg,
                               recipe=DEFAULT.but(bias=TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT.bias))
    ideal = routing.deepseek_v3(x, b, top_k=k, n_group=G, topk_group=tg, ideal=True)
    differ = (model != np.sort(ideal.ids, axis=1)).any(axis=1)
    assert (model == np.sort(spec.ids, axis=1)).all(), "spec under the grouped recipe != the kernel model"
    assert 0.002 <= differ.mean() <= 0.02, f"model vs float64 differ on {differ.mean():.3%} (H200: 0.5-1 %)"


@pytest.mark.parametrize("E,G,tg,k", SHAPES)
def test_grouped_kernel_ids_pass_only_under_the_grouped_recipe(E, G, tg, k):
    x, b = draw(E, seed=1)
    config = RoutingConfig("deepseek_v3", len(x), E, k, n_group=G, topk_group=tg, bias_dtype="fp32")
    ids = grouped_kernel_model(x, b, G, tg, k)
    inputs = {"logits": x, "bias": b}
    ok, _, _ = check_ids(config, inputs, ids, TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT, "grouped")
    assert ok.ok, ok.message
    # The bias field alone decides: with the model's exact σ (no tanh.approx allowance 2^-12·|tanh| in δ, which
    # hides many of these flips), bf16-bias ids pass under bias="bf16" and fail under bias="fp32".
    exact = TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT.but(sigmoid="exact")
    ok, _, _ = check_ids(config, inputs, ids, exact, "bf16 bias, exact σ")
    wrong, _, _ = check_ids(config, inputs, ids, exact.but(bias="fp32"), "fp32 bias, exact σ")
    assert ok.ok, ok.message
    assert not wrong.ok, "the bf16-bias selection passed under an fp32-bias recipe: the bias field would not matter"


def test_ungrouped_path_keeps_the_bias_fp32():
    x, b = draw(384, seed=2)
    ideal = routing.deepseek_v3(x, b, top_k=8, ideal=True)
    fp32 = routing.deepseek_v3(x, b, top_k=8, recipe=DEFAULT.but(bias=TRTLLM_GEN_ROUTING.bias))
    assert (np.sort(fp32.ids, axis=1) == np.sort(ideal.ids, axis=1)).mean() > 0.999


def test_the_nogemm_bias_fixtures_case_fails_as_the_kernel_reads_the_bias():
    """tools/nogemm_bias_fixture.py's CPU-made case (the H200's no-GEMM bf16-bias finding, docs/gpu.md): the
    routing kernel's model above picks its as-built ids, and the spec's as-built output fails under the adapter's
    recipe on ids, which the GPU host's fixture then records from the kernel itself."""
    import importlib.util
    from pathlib import Path

    from difftest.checking import check, impl_spec
    from difftest.model import generate

    path = Path(__file__).resolve().parents[2] / "tools" / "nogemm_bias_fixture.py"
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("nogemm_bias_fixture", path))
    module.__spec__.loader.exec_module(module)
    case, want, as_built = module.find()
    r, inputs = case.config.routing, generate.inputs(case)
    assert (r.num_experts, r.n_group, r.topk_group, r.bias_dtype) == (256, 8, 4, "fp32")
    model = grouped_kernel_model(inputs["logits"], inputs["bias"], r.n_group, r.topk_group, r.top_k)
    assert np.array_equal(np.sort(model, axis=1), np.sort(as_built, axis=1))
    assert not np.array_equal(np.sort(model, axis=1), np.sort(want, axis=1))
    verdict = check.compared(case, inputs, impl_spec.expected(case, inputs, module.AS_BUILT), module.RECIPE, "t")
    assert not verdict.ok and verdict.message.startswith("ids[")
