"""The K1-K15 reproduction fixtures (difftest/selftest/known_bugs.py, fixtures/): each is in the catalogue, triggers
its bug's mechanism, fails on its bug model, passes on the spec and torch, is not applicable (with a reason)
to the implementations that cannot run here, and still holds the spec's current output."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from difftest.checking import check, impl_spec, interface
from difftest.model import generate
from difftest.model.case import Case
from difftest.readers import replay
from difftest.selftest import known_bugs
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[3]
PREFIX = "bug:K"  # registry names (difftest/checking/interface.py SELF_TEST)
PATHS = [p for p in fixtures.discover(ROOT / "fixtures")
         if json.loads((p / "case.json").read_text())["impl"]["ref"].startswith(PREFIX)]
CORRECT = ("spec", "torch")
MAX_BYTES = 1 << 20


def _key(path):
    return json.loads((path / "case.json").read_text())["provenance"].split(":", 1)[0]


def test_every_catalogued_bug_has_its_fixture():
    recorded = {_key(p): Case.from_dict(json.loads((p / "case.json").read_text())["case"]) for p in PATHS}
    assert [b.key for b in known_bugs.BUGS] == [f"K{i}" for i in range(1, 16)]
    assert recorded == {b.key: b.case for b in known_bugs.BUGS}, \
        "fixtures/ and difftest/selftest/known_bugs.py differ: run python tools/make_known_bug_fixtures.py"


@pytest.mark.parametrize("path", PATHS, ids=_key)
def test_fixture_fails_on_its_model_and_passes_on_correct_implementations(path):
    fx = fixtures.load(path)
    rows = replay.replay_fixture(fx)
    outcome = {name: (result, detail) for name, result, detail in rows}
    model = fx.meta["impl"]["name"]
    assert fx.status == "open" and outcome[model][0] == "fail", outcome[model]
    for name in CORRECT:
        assert outcome[name] == ("pass", ""), f"{name}: {outcome[name]}"
    for name, (result, detail) in outcome.items():
        if name not in (model, *CORRECT):
            assert result == "n/a" and detail, f"{name}: {result} {detail}"
    assert replay.expectation_met(fx, rows)
    assert sum(f.stat().st_size for f in path.iterdir()) < MAX_BYTES
    report = fx.meta["provenance"].splitlines()[1]
    assert report.startswith("report: ") and "/" in report and "#" in report and "20" in report


@pytest.mark.parametrize("path", PATHS, ids=_key)
def test_fixture_stores_the_signatures_its_model_fails_with(path):
    """The signatures a K fixture stores (what `fuzz --known fixtures/` matches) are those its model's failure has
    under today's comparison: every failing output, the first first (a change of compare.OUTPUT_ORDER or of a
    check shows here, and the fixtures are migrated with it)."""
    from difftest.running import campaign
    from difftest.store import signatures

    fx = fixtures.load(path)
    result, kind, _ = campaign.run_classified(interface.load(fx.impl_ref), fx.case, fx.inputs)
    stored = campaign.fixture_signatures(fx.meta)
    assert [s.field for s in stored] == list(dict.fromkeys(f for f, _ in result.failures)), result
    assert stored[0] == signatures.signature(fx.case.op, fx.meta["impl"]["name"], kind, result.failures, fx.case.config)


def test_replay_flags_a_changed_spec(monkeypatch):
    """A spec whose output for a recorded case changes makes the fixture "NOT as recorded"."""
    fx = fixtures.load(PATHS[0])
    real = impl_spec.expected

    def changed(case, inputs, recipe):
        out = real(case, inputs, recipe)
        return {k: np.nextafter(v, np.inf) if v.dtype.kind == "f" else v for k, v in out.items()}
    monkeypatch.setattr(impl_spec, "expected", changed)
    rows = replay.replay_fixture(fx, list(CORRECT))
    assert ("spec", "spec-changed") in [r[:2] for r in rows]
    assert not replay.expectation_met(fx, rows)


def _bug(key):
    return next(b for b in known_bugs.BUGS if b.key == key)


def test_k5_trigger_exact_ties_straddle_rank_k_and_the_sigmoid_vanishes():
    case = _bug("K5").case
    inputs = generate.inputs(case)
    r = impl_spec.route(case.config, inputs, None)
    keys = 1 / (1 + np.exp(-inputs["logits"].astype(np.float32))) + inputs["bias"]
    assert (r.expert_margin == 0).all()
    assert (keys == inputs["bias"]).all()


def test_k6_model_is_correct_up_to_the_single_cluster_path():
    case = _bug("K6").case
    assert case.config.routing.num_tokens == known_bugs.K6_SINGLE_CLUSTER_MAX_TOKENS + 1
    small = replace(case, config=replace(case.config, routing=replace(
        case.config.routing, num_tokens=known_bugs.K6_SINGLE_CLUSTER_MAX_TOKENS)))
    assert check.run_case(known_bugs.K06, small).status == "pass"


def test_k14_and_k15_triggers_present():
    x = generate.inputs(_bug("K14").case)["x"].reshape(4, -1, 128)
    s = np.abs(x).max(axis=-1) / np.float32(448)
    m, _ = np.frexp(s.astype(np.float32))
    assert (m == np.float32(0.5) + np.float32(2.0**-24)).any()  # a scale one fp32 ulp above a power of two
    x = generate.inputs(_bug("K15").case)["x"].reshape(2, -1, 128)
    assert (np.abs(x).max(axis=-1) == 0).any()  # an all-zero group


def _moved(case, **changes):
    """The case with configuration fields changed (a moe case's routing fields in its routing)."""
    c = case.config
    if case.op == "moe":
        routing = {k: v for k, v in changes.items() if not hasattr(c, k)}
        c = replace(c, routing=replace(c.routing, **routing)) if routing else c
        changes = {k: v for k, v in changes.items() if k not in routing}
    return replace(case, config=replace(c, **changes))


@pytest.mark.parametrize("key, changes", [
    ("K4", {"quant": "bf16"}), ("K6", {"quant": "nvfp4"}), ("K7", {"quant": "mxfp8"}), ("K8", {"quant": "fp8_block"}),
    ("K7", {"method": "minimax2"}), ("K9", {"quant": "bf16"}), ("K10", {"quant": "mxfp8"}), ("K11", {"quant": "bf16"}),
    ("K11", {"activation": "swiglu"}), ("K11", {"expert_weights": "bf16"}), ("K12", {"quant": "nvfp4"}),
    ("K13", {"quant": "fp8_block"}),
    ("K14", {"scheme": "mxfp8", "group_size": 32}), ("K14", {"scale_fmt": "fp32"}), ("K15", {"scale_fmt": "fp32"})])
def test_a_model_declines_the_kernel_paths_it_does_not_model(key, changes):
    """Each layer and quantizer model is of its bug's kernel path: elsewhere it declines, naming the value, as a
    plug-in does. Applied to every path, a fresh `fuzz --impl bug:K09 --known fixtures/` reported KeyError
    'w13_scale', float32 scales on mxfp8 cases and the like as new bugs."""
    bug = _bug(key)
    model = getattr(known_bugs, bug.model)
    assert model.unsupported(bug.case) is None
    reason = model.unsupported(_moved(bug.case, **changes))
    field = next(iter(changes))
    assert reason and reason.refused == {field: changes[field]}, reason


@pytest.mark.parametrize("key", ["K7", "K8"])
def test_the_rsf_models_scale_nothing_without_an_rsf(key):
    """rsf applied twice is invisible without one: the models once multiplied by np.float32(None), NaN, and a fresh
    `fuzz --impl bug:K07 --known fixtures/` reported that as a new bug."""
    bug = _bug(key)
    routing = replace(bug.case.config.routing, routed_scaling_factor=None)
    case = replace(bug.case, config=replace(bug.case.config, routing=routing))
    assert check.run_case(getattr(known_bugs, bug.model), case).status == "pass"
    assert check.run_case(getattr(known_bugs, bug.model), bug.case).status == "fail"


@pytest.mark.parametrize("key, changes", [("K2", {"method": "minimax2"}), ("K2", {"num_fused_shared_experts": 1}),
                                          ("K3", {"renormalize": True}), ("K3", {"method": "deepseek_v2"}),
                                          ("K5", {"num_fused_shared_experts": 1}), ("K5", {"bias_dtype": None})])
def test_a_routing_model_is_torch_outside_its_mechanism(key, changes):
    """A routing bug model fails where its kernel path does and is correct elsewhere, as the K1 model is: applied to
    every method, K2, K3 and K5 raised KeyError, IndexError or wrong weights there, and a fresh `fuzz --known
    fixtures/` reported each as a new bug."""
    bug = _bug(key)
    case = replace(bug.case, config=replace(bug.case.config, **changes))
    assert check.run_case(getattr(known_bugs, bug.model), case).status == "pass", changes


def test_the_fixture_index_is_the_tools_output(tmp_path):
    """fixtures/README.md is what `tools/make_known_bug_fixtures.py --index-only` writes from the committed case.json
    files (every op's fixtures summarized: the tool once failed on trtllm_ops cases and the index was hand-edited)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    shutil.copytree(root / "fixtures", tmp_path / "fixtures")
    subprocess.run([sys.executable, "tools/make_known_bug_fixtures.py", "--index-only", "--root",
                    str(tmp_path / "fixtures")], cwd=root, check=True, capture_output=True, timeout=120)
    assert (tmp_path / "fixtures" / "README.md").read_text() == (root / "fixtures" / "README.md").read_text()
