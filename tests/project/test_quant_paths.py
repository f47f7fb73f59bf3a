"""One home for the facts of a quant path: spec.quant.QUANT_TABLE (QUANT_PATHS = its names). Adding a path means its
table row, the spec's weight preparation, decoding and activation quantizer, the torch implementation's recipe,
difftest's inputs and case checks and its draw; these tests fail when any of them is missing or disagrees with the
row, and when another module of spec/ or difftest/ spells out a list of paths of its own instead of the table's."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from difftest.checking import check, compare, impl_spec
from difftest.model import case as case_model
from difftest.model import generate, presets, strategies, where
from difftest.model.case import Case, CaseError, MoEConfig, QuantConfig, RoutingConfig
from spec import layer, numerics, quant
from spec.recipes import NAMED

ROOT = Path(__file__).resolve().parents[2]
TABLE = quant.QUANT_TABLE
# Literals naming two or more paths that hold something other than a path's fact, with the reason.
OWN_LISTS = {
    "difftest/checking/impl_torch.py": "FP8_KEYS: which prepared arrays the torch adapter views as float8 codes",
}


def test_the_table_is_the_one_list_of_paths():
    assert quant.QUANT_PATHS == tuple(TABLE) == ("bf16", "fp8_block", "mxfp8", "nvfp4")
    assert layer.QUANT_PATHS is quant.QUANT_PATHS and case_model.QUANT_PATHS is quant.QUANT_PATHS
    assert strategies.SLICES["moe"] == ("quant", quant.QUANT_PATHS) and where.CHOICES["quant"] == quant.QUANT_PATHS


@pytest.mark.parametrize("name", quant.QUANT_PATHS)
def test_each_row_states_facts_its_neighbours_agree_with(name):
    p = TABLE[name]
    numerics.as_format(p.element)  # a format the spec defines
    assert (p.scale is None) == (p.block is None) == (p.scheme is None), p
    assert p.scale is None or numerics.as_format(p.scale)
    assert numerics.SCALE_BLOCKS.get(name) == p.block  # the formats' block table (read by compare/) agrees
    assert p.scheme is None or p.scheme in case_model.QUANT_SCHEMES
    assert presets.QUANT_SCHEME.get(name) == p.scheme
    assert "fp32" in p.scale_fmts and set(p.scale_fmts) <= set(case_model.SCALE_FMTS)
    assert p.weight_forms and set(p.weight_forms) <= set(case_model.EXPERT_WEIGHTS) - {"prepared"}
    assert case_model.SIZE_STEPS[name] == (p.block or 16)
    assert not p.whole_blocks or p.block


def moe(name, **kw):
    H = I = 2 * (TABLE[name].block or 16)
    return Case("moe", MoEConfig(RoutingConfig("renormalize", 3, 4, 2), H, I, quant=name, **kw), "normal", 5)


@pytest.mark.parametrize("name", quant.QUANT_PATHS)
def test_every_path_has_prepared_weights_in_its_formats_and_the_spec_layer(name):
    """The spec prepares and decodes its weights (codes in the element format, block scales in the scale format,
    one per `block` elements of a row), the torch implementation declares its recipe, and compare's moe dispatch
    judges the spec's own output on the path as passing."""
    from impls.torch_eager import RECIPE as TORCH_RECIPES

    p, case = TABLE[name], moe(name)
    w = generate.weights(case).expert(0)
    H = case.config.hidden_size
    if p.block is None:
        assert w["w13"].dtype == np.float32 and np.array_equal(numerics.round_to(w["w13"], p.element), w["w13"])
    else:
        assert w["w13"].dtype == np.uint8 and w["w13_scale"].shape[-1] == -(-H // p.block), w["w13_scale"].shape
        numerics.decode(w["w13"] & 0x0F if p.element == "e2m1" else w["w13"], p.element)
        assert (w["w13_scale"].dtype == np.uint8) == (p.scale != "fp32")
    recipe = NAMED[TORCH_RECIPES[name]["name"]]
    inputs = generate.inputs(case)
    out = impl_spec.expected(case, inputs, recipe)
    verdict = check.compared(case, inputs, out, recipe, "t")
    assert verdict.ok and verdict.ratio <= 1, verdict  # the spec's output is stored in float32: within one flip
    assert compare.contract(case)["out"].shapes == ((3, H),)


@pytest.mark.parametrize("name", quant.QUANT_PATHS)
def test_the_case_checks_read_the_row(name):
    p = TABLE[name]
    for fmt in case_model.SCALE_FMTS:
        ok = fmt in p.scale_fmts
        try:
            moe(name, scale_fmt=fmt)
        except CaseError as e:
            assert not ok and "scale_fmt" in str(e), e
        else:
            assert ok, (name, fmt)
    for form in case_model.EXPERT_WEIGHTS:
        ok = form == "prepared" or form in p.weight_forms
        try:
            moe(name, expert_weights=form)
        except CaseError as e:
            assert not ok and "expert_weights" in str(e), e
        else:
            assert ok, (name, form)
    step = p.block or 16
    odd = dataclasses.replace(moe(name).config, hidden_size=step + step // 2, intermediate_size=step + step // 2)
    if p.whole_blocks:
        with pytest.raises(CaseError, match=f"multiples of {p.block}"):
            case_model.check_moe(odd)
    else:
        case_model.check_moe(odd)
    if p.scheme:  # the quant op quantizes the path's activations
        QuantConfig(p.scheme, 2, 2 * p.block)


def path_lists(path):
    """(line, names) of every tuple/list/set literal, and dict literal's keys, naming two or more paths (not only
    names that are also quant op schemes: mxfp8 and nvfp4 are both)."""
    names, schemes = set(quant.QUANT_PATHS), set(case_model.QUANT_SCHEMES)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and elts:
            found = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
            if len(found) >= 2 and not set(found) <= schemes:
                yield node.lineno, found


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for d in ("spec", "difftest")
                                        for p in (ROOT / d).rglob("*.py")))
def test_no_module_keeps_its_own_list_of_paths(path):
    if path in ("spec/quant.py", "spec/numerics.py") or path in OWN_LISTS:  # the table; the formats' block table
        return
    lists = list(path_lists(ROOT / path))
    assert not lists, f"{path}:{lists[0][0]} lists quant paths {lists[0][1]}: derive it from spec.quant.QUANT_TABLE"
