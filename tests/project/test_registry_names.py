"""The self-test's implementations have registry names (difftest/checking/interface.py SELF_TEST: bug:K01 ...,
bug:<name>, tie_order:<name>) and committed fixtures name them by those, not by a module path that regrouping difftest/
would break; the module references still load the same objects."""

import json
from pathlib import Path

import pytest

from difftest.checking import interface
from difftest.model import generate
from difftest.selftest import bug_models, known_bugs, tie_orders
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "obj"), [
    *((f"bug:{b.model}", getattr(known_bugs, b.model)) for b in known_bugs.BUGS),
    ("bug:deepseek_biased_weights", bug_models.DEEPSEEK_BIASED_WEIGHTS),
    ("bug:rsf_twice", bug_models.RSF_TWICE),
    ("tie_order:reversed", tie_orders.REVERSED_TIES),
])
def test_a_registry_name_loads_its_implementation(name, obj):
    assert interface.load(name) is obj
    module, attr = interface.self_test_ref(name).split(":")
    assert interface.load(f"{module}:{attr}") is obj


@pytest.mark.parametrize("name", ["bug:K99", "bug:nope", "tie_order:nope", "bug:", "bug:../x"])
def test_an_unknown_registry_name_is_a_one_line_error(name):
    with pytest.raises(interface.ImplError) as e:
        interface.load(name)
    assert "\n" not in str(e.value)


def test_committed_fixtures_name_no_difftest_module():
    refs = {p.name: json.loads((p / "case.json").read_text())["impl"]["ref"]
            for p in fixtures.discover(ROOT / "fixtures")}
    assert refs, "no fixtures found"
    named_by_path = {k: v for k, v in refs.items() if v.startswith("difftest.")}
    assert not named_by_path, named_by_path
    assert sum(v.startswith(("bug:", "tie_order:")) for v in refs.values()) >= 17


def test_committed_fixtures_name_their_generators_not_modules():
    """case.json's generator fields hold difftest/model/generate.py's GENERATORS names."""
    metas = [json.loads((p / "case.json").read_text()) for p in fixtures.discover(ROOT / "fixtures")]
    labels = {m["inputs"]["generator"] for m in metas} | {m["weights"]["generator"] for m in metas if m["weights"]}
    assert labels == set(generate.GENERATORS.values())
