"""The plug-in contract (issue 33, item 2): plug-ins import difftest.plugin; the module names of earlier layouts still
resolve; a field added to the case model after a plug-in's contract reaches it only at its neutral value; frozen
copies of plug-ins written against earlier contracts pass unchanged. Campaigns count examples, never seconds."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from difftest import plugin
from difftest.checking import impl_torch
from difftest.model import case as case_module
from difftest.model import where

ROOT = Path(__file__).resolve().parents[2]
FROZEN = ROOT / "tests" / "plugins" / "frozen"


def ref(file, name):
    return f"{FROZEN / file}:{name}"


def test_every_name_the_docs_show_is_in_the_contract_module():
    text = (ROOT / "docs" / "plugins.md").read_text()
    for name in ("CONTRACT", "CAPABILITIES", "Decline", "Impl", "Recipe", "RECIPES", "weights", "fuzz", "Case"):
        assert f"plugin.{name}" in text and hasattr(plugin, name), name
    assert set(plugin.__all__) <= set(dir(plugin))


def test_module_names_of_the_flat_layout_resolve_to_the_modules_they_became():
    import difftest.case
    import difftest.generate

    from difftest import campaign, interface
    from difftest.model import case, generate
    from difftest.running import campaign as running_campaign

    assert difftest.case is case and difftest.generate is generate and campaign is running_campaign
    assert interface.load("torch").name == "torch" and case.__spec__.name == "difftest.model.case"


def test_a_plugin_of_2026_11_29_passes_unchanged():
    """examples/plugin_example.py as it was on 2026-11-29: no space, no contract, no permutation outputs. Today's
    case model draws tile_tokens_dim (and shards) for routing; for a contract-1 plug-in they stay neutral."""
    found = plugin.fuzz(ref("2026_11_29/plugin_example.py", "DEEPSEEK_V3"), "routing", max_examples=40)
    assert found.compared >= 30 and not found.findings, found.findings


def test_without_the_contract_the_same_plugin_fails(monkeypatch):
    """The control: drawing every field for it (no neutral pins) makes the same plug-in fail on the permutation."""
    monkeypatch.setattr(where, "unknown_fields", lambda *a, **k: {})
    found = plugin.fuzz(ref("2026_11_29/plugin_example.py", "DEEPSEEK_V3"), "routing", max_examples=40)
    assert found.findings and any("tile_tokens_dim" in f for f in found.findings), found.findings


@pytest.mark.parametrize("file, name, op", [("2026_12_02/plugin_example.py", "DEEPSEEK_V3", "routing"),
                                            ("2026_12_02/plugin_moe_example.py", "FUSED_MOE", "moe")])
def test_the_examples_of_2026_12_02_pass_unchanged(file, name, op):
    found = plugin.fuzz(ref(file, name), op, max_examples=12 if op == "moe" else 40)
    assert found.compared >= 12 and not found.findings, found.findings


def test_the_two_bugs_example_of_2026_12_02_still_finds_both():
    found = plugin.fuzz(ref("2026_12_02/plugin_two_bugs.py", "TWO_BUGS"), "routing", max_examples=100)
    kinds = {"weights" if "weights(by id)" in f else "ValueError" if "raised ValueError" in f else f for f in
             found.findings}
    assert kinds == {"weights", "ValueError"}, found.findings


def renormalizing_only(case, inputs):
    """torch eager that always renormalizes: right wherever renormalize is True, wrong wherever it is False."""
    from dataclasses import replace

    c = case.config
    if case.op == "routing" and not c.renormalize:
        case = replace(case, config=replace(c, renormalize=True))
    return impl_torch.TORCH.run(case, inputs)


WRITTEN_TODAY = impl_torch.TORCH._replace(name="written-today", ops=("routing",), run=renormalizing_only,
                                          contract=case_module.CONTRACT)


@pytest.mark.parametrize("field_is_new", [True, False])
def test_a_field_added_tomorrow_reaches_no_plugin_written_today(monkeypatch, field_is_new):
    """A contract row added after the plug-in's contract, as the next release adds a field: the field (here
    renormalize, whose neutral value True is all WRITTEN_TODAY knows) is drawn for it only at that value, and it
    passes; drawn freely (the row absent: as if the plug-in had declared the field), it fails."""
    if field_is_new:
        monkeypatch.setattr(case_module, "CAPABILITIES", {**case_module.CAPABILITIES, "renormalize_off": (
            case_module.Capability(case_module.CONTRACT + 1, "routing", {"renormalize": True}))})
    found = plugin.fuzz("tests.difftest.test_plugin_contract:WRITTEN_TODAY", "routing", max_examples=30)
    assert found.compared >= 30
    assert bool(found.findings) != field_is_new, found.findings


@pytest.mark.parametrize("bad, message", [({"contract": 99}, "contract 99 is not an integer in [1, "),
                                          ({"capabilities": ("teleport",)}, "capabilities must be a tuple of")])
def test_a_bad_contract_is_a_one_line_error(bad, message):
    from difftest.checking import interface

    impl = impl_torch.TORCH._replace(**bad) if "contract" in bad else impl_torch.TORCH._replace(**bad)
    with pytest.raises(interface.ImplError, match=message.replace("[", r"\[")):
        interface.check_protocol(impl, "x")


@pytest.mark.parametrize("capable", [False, True])
def test_the_kernels_limits_reach_only_a_plugin_that_takes_them(capable):
    """A plug-in of contract 2 is drawn what contract 2 drew (at most 64 experts, top_k 8, no one-expert groups),
    unless it lists the capability kernel_limits (case.CAPABILITIES)."""
    impl = impl_torch.TORCH._replace(contract=2, capabilities=("kernel_limits",) if capable else ())
    inside = where.for_impl(None, impl, "routing")
    (_, configs), = where.slices("routing", {**inside, "method": where.Constraint(("deepseek_v3",))}, None)
    seen = []

    @settings(max_examples=300, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(configs)
    def draw(config):
        seen.append(config)

    draw()
    reach = (max(c.num_experts for c in seen) > 64 or max(c.top_k for c in seen) > 8
             or any(c.n_group == c.num_experts > 1 for c in seen))
    assert reach == capable
