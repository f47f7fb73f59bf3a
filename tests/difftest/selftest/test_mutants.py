"""The mutation self-test (difftest/selftest/mutants.py): every seeded bug is found by the tester's own search within a
fixed budget of generated cases, while the unpatched copy and the equivalent mutants are never flagged.
Seconds to kill are a benchmark (`python -m difftest mutants`), not asserted here."""

import numpy as np
import pytest

from difftest.checking import interface
from difftest.checking.check import run_case
from difftest.checking.impl_torch import TORCH
from difftest.model.case import QUANT_PATHS, ROUTING_METHODS, Case, MoEConfig, QuantConfig, RoutingConfig
from difftest.selftest import mutants

KILL_BUDGET = 600  # generated cases per mutant (the CLI default, mutants.MAX_EXAMPLES)
NO_TIME_LIMIT = float("inf")  # the example budget alone decides, so a loaded machine cannot fail a test
FAST = ("weights_from_biased_scores", "amax_without_eps", "gate_up_swapped")  # one per op, default suite
IDENTITY_QUICK_BUDGET = 75  # three chunks: one each of routing, quant, moe


def test_patch_must_apply_exactly_once():
    assert mutants.patch("a = b + c", "b + c", "b - c") == "a = b - c"
    with pytest.raises(mutants.MutantError, match="0 times"):
        mutants.patch("a = b + c", "b * c", "b - c")
    with pytest.raises(mutants.MutantError, match="2 times"):
        mutants.patch("b + c; b + c", "b + c", "b - c")


def test_catalogue_builds_and_is_documented():
    names = [m.name for m in mutants.CATALOGUE + mutants.EQUIVALENT]
    assert len(mutants.CATALOGUE) >= 20 and len(set(names)) == len(names)
    for m in mutants.CATALOGUE + mutants.EQUIVALENT + mutants.WIDTH:
        assert m.old != m.new and m.models and m.doc and m.cls in mutants.CLASSES, m.name
        assert mutants.build(m.name).name == f"mutant:{m.name}"
    assert len(SUBTLE) >= 12  # issue 21 item 8: a class of subtle numeric mutants, each to be killed


def test_mutant_reference_resolves_like_a_plugin():
    impl = interface.load("difftest.selftest.mutants:rsf_applied_twice")
    assert impl is mutants.build("rsf_applied_twice")
    with pytest.raises(interface.ImplError, match="no attribute"):
        interface.load("difftest.selftest.mutants:no_such_mutant")


CASES = [
    Case(
        "routing",
        RoutingConfig(
            "deepseek_v3", 5, 16, 4, 4, 2, 2.5, True, bias_dtype="fp32", num_fused_shared_experts=1
        ),
        "normal",
        3,
    ),
    Case(
        "quant",
        QuantConfig("fp8_group", 4, 256, 128, scale_fmt="ue8m0", layout="ue8m0_packed"),
        "pow2_edge",
        5,
    ),
    Case("moe", MoEConfig(RoutingConfig("renormalize", 6, 8, 2), 256, 128, quant="fp8_block"), "normal", 7),
]


@pytest.mark.parametrize("case", CASES, ids=[c.op for c in CASES])
def test_identity_copy_gives_the_same_bits_as_torch(case):
    """The copy mechanism itself (fresh package + the adapter's own source) changes nothing."""
    from difftest.model import generate

    inputs = generate.inputs(case)
    copy, original = mutants.build("identity").run(case, inputs), TORCH.run(case, inputs)
    assert set(copy) == set(original)
    for k in copy:
        assert np.asarray(copy[k]).tobytes() == np.asarray(original[k]).tobytes(), k


def test_a_mutant_changes_what_it_says():
    case = CASES[0]
    from difftest.model import generate

    inputs = generate.inputs(case)
    twice = mutants.build("rsf_applied_twice").run(case, inputs)["weights"][:, :4]
    once = TORCH.run(case, inputs)["weights"][:, :4]
    np.testing.assert_array_equal(twice, once * np.float32(2.5))


FALSE_POSITIVES = [  # shrunk reproducers the equivalent mutant tie_higher_index was once flagged on
    Case("routing", RoutingConfig("sigmoid_renorm", 1, 31, 1, renormalize=False), "underflow", 16),
    # a fused shared expert's weight, Σ(routed)/rsf, compared at the spec's ids rather than the mutant's own
    Case("routing", RoutingConfig("deepseek_v3", 1, 4, 1, 2, 1, renormalize=False, bias_dtype="fp32",
                                  num_fused_shared_experts=1), "glm_bias", 35),
    Case(
        "moe",
        MoEConfig(RoutingConfig("deepseek_v2", 4, 4, 1, 2, 1, renormalize=False, eps=0.0), 16, 16),
        "exact_ties",
        0,
    ),
]


@pytest.mark.parametrize("name", [m.name for m in mutants.EQUIVALENT])
@pytest.mark.parametrize("case", FALSE_POSITIVES, ids=["routing-subnormal-weights", "routing-shared-weight",
                                                       "moe-v2-tied-group"])
def test_equivalent_mutant_passes_where_it_was_flagged(case, name):
    """Subnormal weights at fp32 ties (underflow allowance) and a tied group kept the other way (the layer
    recomputed at the mutant's ids must not gather the spec's group mask), the higher-index tie order declared
    or left unspecified."""
    r = run_case(mutants.build(name), case)
    assert r.status == "pass", r.message
    assert r.near_ties > 0


TIES = Case("routing", RoutingConfig("topk", 3, 8, 2), "exact_ties", 0)


def test_the_tie_rule_decides_whether_the_higher_index_mutant_is_a_bug():
    """Same code, three declarations: lower_index (torch's) fails it on bit-identical keys, higher_index and
    unspecified pass it."""
    assert run_case(TORCH, TIES).status == "pass"
    r = run_case(mutants.build("tie_higher_index"), TIES)
    assert r.status == "fail" and "bit-identical" in r.message, r.message
    for name in ("tie_higher_index_declared", "tie_higher_index_unspecified"):
        assert run_case(mutants.build(name), TIES).status == "pass", name
    assert mutants.build("tie_higher_index_declared").recipe(TIES).tie_rule == "higher_index"


def _hunt(name, budget, tmp_path=None):
    return mutants.hunt(
        name,
        max_examples=budget,
        time_budget=NO_TIME_LIMIT,
        fixtures_root=None if tmp_path is None else tmp_path / "fixtures",
    )


@pytest.mark.parametrize("name", FAST)
def test_fast_mutant_killed_shrunk_and_recorded(name, tmp_path):
    k = _hunt(name, KILL_BUDGET, tmp_path)
    assert k.killed, f"{name} survived {k.examples} cases"
    assert k.examples <= KILL_BUDGET and k.fixture is not None
    assert mutants.reproducer_size(k.case)["tokens"] <= 4, k.case  # shrunk, not the first failing draw
    r = run_case(interface.load(f"difftest.selftest.mutants:{name}"), Case.from_dict(k.case))
    assert r.status in ("fail", "error"), r


def test_identity_not_flagged_quick():
    k = _hunt("identity", IDENTITY_QUICK_BUDGET)
    assert not k.killed, k.message
    assert k.examples >= IDENTITY_QUICK_BUDGET


# fp32_accumulator_truncates dies only on wide layers (tens of CPU seconds to its kill, a third of this file's
# cost): it runs in the heavy tier here and in every `python -m difftest mutants`
COSTLY_SUBTLE = {"fp32_accumulator_truncates"}
SUBTLE = [pytest.param(m.name, marks=pytest.mark.heavy) if m.name in COSTLY_SUBTLE else m.name
          for m in mutants.CATALOGUE if m.cls == "subtle"]


@pytest.mark.parametrize("name", SUBTLE)
def test_subtle_mutant_killed_within_its_budget(name):
    """The subtle class in the default suite: each within the self-test's example budget (they die in 60
    examples or fewer, python -m difftest mutants)."""
    k = _hunt(name, KILL_BUDGET)
    assert k.killed, f"{name} survived {k.examples} generated cases ({mutants.MUTANTS[name].doc})"
    assert any(w in k.message for w in ("bound", "bit-exact", "ids[", "bias test")), k.message  # a value, no crash


@pytest.mark.heavy
@pytest.mark.parametrize("name", [m.name for m in mutants.CATALOGUE])
def test_every_catalogue_mutant_killed(name):
    """Every mutant killed within the budget."""
    k = _hunt(name, KILL_BUDGET)
    assert k.killed, f"{name} survived {k.examples} generated cases ({mutants.MUTANTS[name].doc})"


def test_summary_reports_each_class_and_its_survivors():
    fake = [mutants.Kill("rsf_applied_twice", True, "routing", 4, 0.5, 1.0, CASES[0].to_dict(), "m", None),
            mutants.Kill("router_weight_bf16", True, "moe", 2, 0.3, 0.4, CASES[2].to_dict(), "m", None),
            mutants.Kill("renorm_sum_bf16", False, None, 600, 9.0, 9.0, None, None, None),
            mutants.Kill("fp32_accumulator_truncates", False, None, 600, 90.0, 90.0, None, None, None),
            mutants.Kill("tie_higher_index_unspecified", False, None, 600, 30.0, 30.0, None, None, None)]
    s = mutants.summary(fake)
    assert s["survivors"] == ["renorm_sum_bf16", "fp32_accumulator_truncates"]
    assert s["classes"]["subtle"]["catalogue"] == 3 and s["classes"]["subtle"]["killed"] == 1
    assert s["classes"]["semantic"]["median_seconds"] == 0.5 and not s["equivalent_flagged"]
    table = mutants.class_table(s)
    assert "| subtle | 1 of 3 | 0.30 |" in table and "| semantic | 1 of 1 | 0.50 |" in table


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["identity"] + [m.name for m in mutants.EQUIVALENT])
def test_no_false_positive(name):
    k = _hunt(name, KILL_BUDGET)
    assert not k.killed, k.message


def test_hunt_takes_every_slice_in_turn():
    """A routing-module mutant reaches every method (the renormalizing sigmoid ones, where eps decides, among
    them), alternating with the layer per quant path; a focus narrows its op to one slice."""
    plan = mutants.plan(mutants.MUTANTS["eps_dropped"])
    assert {label for op, label, _ in plan if op == "routing"} == set(ROUTING_METHODS)
    assert {label for op, label, _ in plan if op == "moe"} == set(QUANT_PATHS)
    assert [op for op, _, _ in plan[:4]] == ["routing", "moe"] * 2
    assert [(op, label) for op, label, _ in mutants.plan(mutants.MUTANTS["act_scales_read_transposed"])] == [
        ("moe", "fp8_block")
    ]
