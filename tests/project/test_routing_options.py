"""One home for the options of a routing call: spec.routing.OPTIONS. A "case" option is a keyword spelled as the
RoutingConfig field that holds it, a "recipe" option is the spec.recipes.Recipe field of that name (route(...,
recipe=R) reads R's fields by their own names), a "call" option belongs to one call. One check of them,
spec.routing.check_options, which the case model raises as its own. These tests fail when a config field, a recipe
field, the spec's own arithmetic or the torch adapter's keyword mapping drifts from the table, when the case model
and the spec disagree on a constraint's message, or when spec/ or difftest/ spells a rounding option another way."""

import ast
import inspect
from dataclasses import MISSING, fields, replace
from pathlib import Path

import numpy as np
import pytest

from difftest.checking import impl_torch
from difftest.model.case import Case, CaseError, MoEConfig, RoutingConfig
from impls.torch_eager import routing as torch_routing
from spec import routing
from spec.recipes import DEFAULT, FIELD_VALUES, Recipe

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = routing.OPTIONS
# The spellings the spec's rounding options had before they were read from the recipe by its own field names; the
# torch implementation keeps its own keywords (impl_torch.TORCH_ROUTE_KEYWORDS maps them, the one place that may).
OLD_SPELLINGS = ("weights_dtype", "scores_dtype", "bias_add_dtype", "group_scores_dtype", "renorm_dtype")


def test_case_options_are_the_config_fields_of_the_same_name_and_default():
    config = {f.name: f for f in fields(RoutingConfig)}
    assert routing.CASE_OPTIONS and set(routing.CASE_OPTIONS) <= set(config)
    for name in routing.CASE_OPTIONS:  # a required field (top_k) has no default in the table either
        default = None if config[name].default is MISSING else config[name].default
        assert default == OPTIONS[name].default, (name, default, OPTIONS[name].default)
    c = RoutingConfig("deepseek_v3", 3, 8, 2, 4, 2, 2.5, False, 1e-20, num_fused_shared_experts=1)
    assert c.route_kwargs() == {"method": "deepseek_v3", **{name: getattr(c, name) for name in routing.CASE_OPTIONS}}


def test_recipe_options_are_recipe_fields_with_their_default_and_values():
    recipe = {f.name: f for f in fields(Recipe)}
    for name in routing.RECIPE_OPTIONS:
        assert OPTIONS[name].default == recipe[name].default and OPTIONS[name].values is FIELD_VALUES[name], name
    assert set(FIELD_VALUES) == set(recipe) - {"name", "requant_intermediate", "gemm1_out_quant"}


def test_every_row_has_a_known_source_and_the_call_reads_every_row():
    assert {row.source for row in OPTIONS.values()} == set(routing.OPTION_SOURCES)
    assert routing._Options._fields == tuple(OPTIONS)
    assert routing.KEYWORD_OPTIONS == tuple(n for n in OPTIONS if n not in routing.RECIPE_OPTIONS)
    o = routing._options(DEFAULT.but(sigmoid="tanh", routing_weights="bf16"), top_k=3)
    assert (o.top_k, o.sigmoid, o.routing_weights, o.n_group) == (3, "tanh", "bf16", 1)


def _attributes_of_options(path):
    """Names read as `o.<name>` in a module (the routing functions' options are `o`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "o"}


def test_the_spec_reads_every_recipe_option_by_the_recipe_s_name():
    """spec/routing.py reads each recipe row as `o.<field>` (no row unread), and reads no Recipe field that is not
    a row (a rounding point the table would miss)."""
    read = _attributes_of_options(ROOT / "spec" / "routing.py")
    assert set(routing.RECIPE_OPTIONS) <= read, set(routing.RECIPE_OPTIONS) - read
    assert not (read & set(FIELD_VALUES)) - set(routing.RECIPE_OPTIONS)


def test_the_torch_keyword_mapping_carries_recipe_options_to_torch_keywords():
    """impls/torch_eager keeps its own names (it never imports spec/); the adapter's one mapping goes from its
    keywords to recipe options, and torch's route takes every case option by the case's name."""
    params = set(inspect.signature(torch_routing.route).parameters)
    assert params == {"logits", "bias", "method", "ids", *routing.CASE_OPTIONS, *impl_torch.TORCH_ROUTE_KEYWORDS}
    assert set(impl_torch.TORCH_ROUTE_KEYWORDS.values()) <= set(routing.RECIPE_OPTIONS)
    r = DEFAULT.but(bias="bf16", routing_weights="fp16", renorm_order="scale_then_divide", group_score="max")
    assert impl_torch.route_keywords(r) == {"bias_dtype": "bf16", "weights_dtype": "fp16", "group_score": "max",
                                            "renorm_order": "scale_then_divide", "shared_weight": "one"}


# One configuration per constraint of check_options, with the start of its message (the option it names).
VIOLATIONS = {
    "method": (dict(method="softmax"), "method='softmax' is not one of"),
    "top_k": (dict(top_k=9), "top_k=9 must be an integer in [1, num_experts=8]"),
    "n_group": (dict(method="deepseek_v3", n_group=3), "n_group=3 must be an integer >= 1 dividing num_experts=8"),
    "topk_group": (dict(method="deepseek_v3", n_group=2, topk_group=3), "topk_group=3 must be an integer in [1, n"),
    "grouped method": (dict(n_group=2), "n_group=2 > 1 needs a grouped method"),
    "kept experts": (dict(method="deepseek_v3", top_k=5, n_group=4, topk_group=2), "top_k=5 exceeds the 4 experts"),
    "llama4": (dict(method="llama4"), "top_k=2 must be 1: llama4"),
    "bias": (dict(bias_dtype="fp32"), "a correction bias needs a biased method"),
    "renormalize": (dict(renormalize="no"), "renormalize='no' must be a bool"),
    "routed_scaling_factor": (dict(routed_scaling_factor=-1.0), "routed_scaling_factor=-1.0 must be None or"),
    "eps": (dict(eps=float("inf")), "eps=inf must be finite and >= 0"),
    "num_fused_shared_experts": (dict(num_fused_shared_experts=-1), "num_fused_shared_experts=-1 must be"),
    "group_mask_value": (dict(group_mask_value=0.0), "group_mask_value=0.0 applies to deepseek_v2 only"),
}


@pytest.mark.parametrize("constraint", sorted(VIOLATIONS))
def test_the_case_model_raises_the_spec_s_one_message_per_constraint(constraint):
    changes, message = VIOLATIONS[constraint]
    c = replace(RoutingConfig("renormalize", 2, 8, 2), **changes)
    with pytest.raises(CaseError) as case_error:
        Case("routing", c)
    logits = np.zeros((2, 8), np.float32)
    bias = None if c.bias_dtype is None else np.zeros(8, np.float32)
    with pytest.raises(ValueError) as spec_error:
        routing.route(logits, bias, **c.route_kwargs())
    assert str(case_error.value) == str(spec_error.value), (str(case_error.value), str(spec_error.value))
    assert str(spec_error.value).startswith(message) and "\n" not in str(spec_error.value)
    with pytest.raises(CaseError, match="^" + message.replace("[", r"\[")):  # a moe case's routing too
        Case("moe", MoEConfig(c, 16, 16))


def test_a_rounding_option_by_keyword_is_refused_naming_the_recipe():
    with pytest.raises(ValueError, match="^sigmoid is a recipe field: route") as e:
        routing.route(np.zeros((1, 4), np.float32), method="sigmoid", top_k=1, sigmoid="expf")
    assert "\n" not in str(e.value)
    for old in OLD_SPELLINGS:
        with pytest.raises(ValueError, match=f"^routing option '{old}' is not one of"):
            routing.route(np.zeros((1, 4), np.float32), method="sigmoid", top_k=1, **{old: "fp32"})


def _spellings(path):
    """(line, name) of every keyword argument, string constant and attribute spelled as an old option name."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = (node.arg if isinstance(node, ast.keyword) else node.value if isinstance(node, ast.Constant)
                else node.attr if isinstance(node, ast.Attribute) else None)
        if name in OLD_SPELLINGS:
            yield node.lineno, name


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for d in ("spec", "difftest")
                                        for p in (ROOT / d).rglob("*.py")))
def test_no_module_spells_a_rounding_option_another_way(path):
    found = list(_spellings(ROOT / path))
    if path == "difftest/checking/impl_torch.py":  # TORCH_ROUTE_KEYWORDS: torch's own keyword names
        found = [(line, name) for line, name in found if name != "weights_dtype"]
    assert not found, f"{path}:{found[0][0]} spells {found[0][1]}: read the recipe field (spec.routing.OPTIONS)"
