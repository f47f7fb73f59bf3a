"""The moe case space of issue 21 item 7: UE8M0 scales on the fp8 path, unquantized expert weights that the
implementation prepares itself (the spec prepares the same values by the declared recipe), near-tie counts in
moe verdicts, and recipe(case) asked only of cases unsupported(case) accepts."""

import importlib
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import settings

from difftest.checking import compare, impl_spec
from difftest.checking.check import run_case
from difftest.checking.impl_torch import TORCH
from difftest.model import generate
from difftest.model.case import Case, MoEConfig, RoutingConfig
from difftest.running import campaign
from difftest.selftest import mutants
from spec import bounds
from spec.layer import PreparedWeights, moe_layer, quantize
from spec.quant import w13_block_quant
from spec.recipes import NAMED

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def moe(quant="fp8_block", scale_fmt="fp32", expert_weights="prepared", activation="swiglu", T=4, H=256, I=256,
        method="renormalize", E=4, k=2, dist="normal", seed=3):
    return Case("moe", MoEConfig(RoutingConfig(method, T, E, k), H, I, activation=activation, quant=quant,
                                 scale_fmt=scale_fmt, expert_weights=expert_weights), dist, seed)


def is_power_of_two(a):
    m, _ = np.frexp(np.asarray(a, np.float64))
    return bool(np.all(m == 0.5))


def test_ue8m0_scales_are_powers_of_two_and_the_fp32_ones_are_not():
    case = moe(scale_fmt="ue8m0")
    w = generate.weights(case).expert(0)
    assert is_power_of_two(w["w13_scale"]) and is_power_of_two(w["w2_scale"])
    assert not is_power_of_two(generate.weights(moe()).expert(0)["w13_scale"])
    x = generate.inputs(case)["hidden"]
    recipe = NAMED["torch_eager_fp8_block"]
    ue8m0 = quantize(x, "fp8_block", recipe, recipe.act_quant_variant, recipe.act_scale_formula, scale_fmt="ue8m0")
    fp32 = quantize(x, "fp8_block", recipe, recipe.act_quant_variant, recipe.act_scale_formula)
    assert is_power_of_two(ue8m0.fp8[1]) and not is_power_of_two(fp32.fp8[1])
    assert np.all(ue8m0.fp8[1] >= fp32.fp8[1]) and not ue8m0.linear_scale  # rounded up: moves in powers of two


def test_ue8m0_is_refused_where_it_has_no_meaning():
    with pytest.raises(Exception, match="scale_fmt"):
        moe(quant="mxfp8", scale_fmt="ue8m0", H=128, I=128)
    mono = NAMED["flashinfer_mono_moe"]
    with pytest.raises(ValueError, match="mul_448_div_amax"):
        quantize(np.ones((1, 128), np.float32), "fp8_block", mono, mono.act_quant_variant, mono.act_scale_formula,
                 scale_fmt="ue8m0")


FORMS = [("fp8_block", "ue8m0", "prepared"), ("fp8_block", "ue8m0", "bf16"), ("fp8_block", "fp32", "fp32"),
         ("mxfp8", "fp32", "bf16"), ("nvfp4", "fp32", "fp32"), ("bf16", "fp32", "fp32")]


@pytest.mark.parametrize("activation", ["swiglu", "relu2"])
@pytest.mark.parametrize("quant, scale_fmt, expert_weights", FORMS, ids=["-".join(f) for f in FORMS])
def test_torch_passes_every_new_form(quant, scale_fmt, expert_weights, activation):
    r = run_case(TORCH, moe(quant, scale_fmt, expert_weights, activation))
    assert r.status == "pass", r.message


@pytest.mark.parametrize("name, case", [
    ("act_ue8m0_ignored", moe(scale_fmt="ue8m0")),
    ("weight_prep_scale_bf16", moe(expert_weights="bf16")),
    ("mxfp8_weights_ocp_rule", moe("mxfp8", expert_weights="fp32", H=128, I=128)),
])
def test_a_wrong_scale_format_or_weight_preparation_fails(name, case):
    """The new paths bite: torch copies that ignore UE8M0, or prepare the given weights otherwise than their recipe
    declares, fail on these cases (and pass on the default forms, where the mutated code does not run)."""
    bad = mutants.build(name)
    assert run_case(bad, case).status == "fail"
    default = replace(case, config=replace(case.config, scale_fmt="fp32", expert_weights="prepared"))
    assert run_case(bad, default).status == "pass"


def test_the_spec_prepares_given_weights_as_the_recipe_declares():
    case = moe(expert_weights="bf16", I=128)
    recipe = NAMED["torch_eager_fp8_block"]
    weights, quant = impl_spec.expert_weights(case, recipe)
    assert isinstance(weights, PreparedWeights) and quant == "fp8_block"
    raw, prepared = generate.weights(case).expert(1), weights.expert(1)
    q, s = w13_block_quant(raw["w13"][:128], raw["w13"][128:])  # each half of W13 on its own
    assert np.array_equal(prepared["w13"], q) and np.array_equal(prepared["w13_scale"], s)
    assert np.array_equal(prepared["w13_values"], raw["w13"])
    assert impl_spec.expert_weights(case, None) == (generate.weights(case), "bf16")  # the ideal reads the values


def _decoded(weights, quant, gated):
    """ExpertWeights of the prepared experts' decoded values, to read as exact bf16-path weights."""
    from spec.layer import _slabs, _weight

    def expert(e):
        wd = weights.expert(e)
        return {name: np.concatenate([_weight(wd, name, quant, rows, sr).values
                                      for rows, sr in _slabs(wd, name, quant, gated and name == "w13")])
                for name in ("w13", "w2")}

    return type("Decoded", (), {"num_experts": weights.num_experts, "expert": lambda self, e: expert(e)})()


def _without_values(weights):
    """The same prepared experts with their given values dropped: the layer then charges no preparation error."""
    return type("Bare", (), {"num_experts": weights.num_experts, "expert": lambda self, e: {
        k: v for k, v in weights.expert(e).items() if not k.endswith("_values")}})()


@pytest.mark.parametrize("quant, expert_weights", [("bf16", "fp32"), ("fp8_block", "bf16"), ("mxfp8", "fp32"),
                                                   ("nvfp4", "fp32")])
def test_the_ideal_bound_carries_the_weight_preparation(quant, expert_weights):
    """The float64 ideal reads the given (unquantized) weights, and bound_vs_ideal holds the preparation's error
    (|x| + δ)·|W − W_given|ᵀ: the recipe-exact result is within it, and what the term adds to the bound covers the
    whole effect of the preparation, the ideal layer on the prepared weights minus the ideal on the given ones
    (both exact float64: nothing else differs). Without the term that part of the bound is 0."""
    case = moe(quant, expert_weights=expert_weights, H=128, I=128)
    c, inputs, recipe = case.config, generate.inputs(case), TORCH.recipe(case)
    spec = impl_spec.layer(case, inputs, recipe)
    ideal = impl_spec.layer(case, inputs, None)
    assert np.all(np.abs(spec.out - ideal.out) <= bounds.bound_vs_ideal(spec, recipe))
    w, _ = impl_spec.expert_weights(case, recipe)
    kw = dict(routing=c.routing.route_kwargs(), activation=c.activation)
    on_prepared = moe_layer(inputs["hidden"], inputs["logits"], None, _decoded(w, quant, c.gated), quant="bf16", **kw)
    effect = np.abs(on_prepared.out - ideal.out)
    without = moe_layer(inputs["hidden"], inputs["logits"], None, _without_values(w), quant=quant, recipe=recipe, **kw)
    assert np.array_equal(without.out, spec.out) and effect.max() > 0
    term = bounds.bound_vs_ideal(spec, recipe) - bounds.bound_vs_ideal(without, recipe)
    assert np.all(effect <= term), float(np.max(effect / np.where(term > 0, term, np.nan)))


def test_moe_verdicts_count_near_ties():
    """A moe implementation that exposes ids decided other ways at ties reports them in its verdict."""
    case = Case("moe", MoEConfig(RoutingConfig("topk", 3, 8, 2), 16, 16), "exact_ties", 0)
    r = run_case(mutants.build("tie_higher_index_unspecified"), case)
    assert r.status == "pass" and r.near_ties > 0, r
    inputs = generate.inputs(case)
    out = mutants.build("tie_higher_index_unspecified").run(case, inputs)
    v = compare.compare_moe(case, inputs, out, None, "t")
    assert v.ok and v.near_ties == r.near_ties


def test_recipe_is_asked_only_of_supported_cases(tmp_path):
    """unsupported(case) first: an adapter whose recipe_for has no recipe for what it declines runs clean."""
    def unsupported(case):
        return None if case.config.method == "renormalize" else "renormalize only"

    def recipe(case):
        if unsupported(case):
            raise KeyError(f"no recipe for {case.config.method}")
        return TORCH.recipe(case)

    picky = TORCH._replace(name="picky", unsupported=unsupported, recipe=recipe)
    rows = []
    res = campaign.fuzz_cell(picky, "picky", "routing", record=rows.append,
                             hypothesis_settings=settings(max_examples=40, database=None, derandomize=True))
    assert res.finding is None and res.compared > 0 and res.skips
    assert {r["recipe"] for r in rows if r["status"] == "skip"} == {None}


ADAPTERS = [("mono_moe", "fp8_block"), ("trtllm_bf16_moe", "bf16"), ("trtllm_fp8_block_scale_moe", "fp8_block"),
            ("trtllm_fp4_block_scale_moe", "nvfp4"), ("cutlass_fused_moe", "fp8_block"),
            ("trtllm_gen_nogemm", "fp8_block"), ("trtllm_gen_nogemm", "bf16")]


@pytest.mark.parametrize("adapter, quant", ADAPTERS, ids=["-".join(a) for a in ADAPTERS])
def test_flashinfer_moe_adapters_decline_the_forms_they_do_not_take(adapter, quant):
    module = importlib.import_module(f"impls.flashinfer.{adapter}")
    for field, value in (("scale_fmt", "ue8m0"), ("expert_weights", "fp32")):
        if field == "scale_fmt" and quant != "fp8_block":
            continue  # no such case: MoEConfig refuses UE8M0 off the fp8_block path
        config = moe(quant, **{field: value}, H=128, I=128).config
        assert field in (module.unsupported(config) or ""), module.unsupported(config)
