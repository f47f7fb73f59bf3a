"""One home for the facts of a routing method: spec.routing.METHODS. Adding a method means a spec function and
its table row, the torch implementation and (where trtllm-gen has it) the FlashInfer enum map; these tests fail
when any of them is missing, and when another module of spec/ or difftest/ spells out a list of methods of its
own instead of deriving it from the table."""

import ast
from pathlib import Path

import pytest

from difftest.model import presets
from impls.flashinfer import _trtllm
from impls.torch_eager import routing as torch_routing
from spec import routing

ROOT = Path(__file__).resolve().parents[2]
# Methods trtllm-gen's RoutingMethodType has no member for (docs/semantics.md §1.1), with the reason.
NO_TRTLLM_ENUM = {"deepseek_v2": "SGLang's grouped softmax; FlashInfer has no RoutingMethodType member for it"}
# Named lists that hold an order, not a fact: their set is checked against its home below.
ORDERS = {"TRTLLM_GEN_METHODS": "the trtllm-gen preset's draw order (biased methods first); the set is the enum map's"}


def test_every_spec_method_function_has_one_table_row():
    assert set(routing._METHODS) == set(routing.METHODS), "a routing function and the METHODS rows differ"
    for name, row in routing.METHODS.items():
        assert row.function is routing._METHODS[name] and getattr(routing, name) is row.function, name
        assert row.keys in routing.KEY_CLASSES and row.scores in routing.SCORES, (name, row)
        assert row.normalizes in routing.NORMALIZATIONS, (name, row)
        assert row.function.__doc__, f"{name}: the formula belongs in the docstring"


def test_group_score_method_reads_the_row():
    """recipe field group_score="method" means the row's own group score; only a grouped method's can be top2_sum."""
    for name, row in routing.METHODS.items():
        assert row.group_score in ("top2_sum", "max"), (name, row.group_score)
        assert row.grouped or row.group_score == "max", f"{name}: an ungrouped method has no group score to choose"
        for biased in (False, True):
            assert routing.group_rule(name, "method", biased) == row.group_score, name
    assert routing.METHODS["deepseek_v3"].group_score == "top2_sum"  # FlashInfer's DeepSeekV3 routing
    assert routing.METHODS["deepseek_v2"].group_score == "max"  # SGLang's grouped_topk


def test_the_torch_implementation_routes_every_method_and_agrees_on_groups_and_bias():
    assert set(torch_routing.ROUTING_METHODS) == set(routing.METHODS)
    assert set(torch_routing.GROUPED) == set(routing.GROUPED_METHODS)
    assert set(torch_routing.BIASED) == set(routing.BIASED_METHODS)


def test_the_flashinfer_enum_map_names_every_method_trtllm_gen_has():
    assert set(_trtllm.METHODS) == set(routing.METHODS) - set(NO_TRTLLM_ENUM)
    assert set(NO_TRTLLM_ENUM) <= set(routing.METHODS)
    assert set(presets.TRTLLM_GEN_METHODS) == set(_trtllm.METHODS)
    assert len(presets.TRTLLM_GEN_METHODS) == len(_trtllm.METHODS)


def method_lists(path):
    """(line, names) of every tuple/list/set literal, and dict literal's keys, naming two or more methods."""
    names = set(routing.METHODS)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    orders = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id in ORDERS for t in a.targets) for n in ast.walk(a.value)}
    for node in ast.walk(tree):
        if id(node) in orders:
            continue
        elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and elts:
            found = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
            if len(found) >= 2:
                yield node.lineno, found


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for d in ("spec", "difftest")
                                        for p in (ROOT / d).rglob("*.py")))
def test_no_module_keeps_its_own_list_of_methods(path):
    if path == "spec/routing.py":  # the table itself
        return
    lists = list(method_lists(ROOT / path))
    assert not lists, f"{path}:{lists[0][0]} lists methods {lists[0][1]}: derive it from spec.routing.METHODS"
