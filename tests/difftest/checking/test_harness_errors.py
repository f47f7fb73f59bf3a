"""A failure of the tester's own machinery around a kernel call (difftest/checking/interface.py HarnessError, or any
exception class with ``difftest_harness = True``, such as the trtllm-gen JIT helper's JitError) is a tester error:
the case counts as a skip whose reason starts with check.TESTER_ERROR, one stderr line says so, and no finding or
fixture blames the implementation; in-process, in an isolated worker and in the pipelined runner alike. Any other
exception out of run() stays the implementation's finding (kind error)."""

import pytest
from hypothesis import settings

from difftest.checking import check, interface
from difftest.checking.impl_spec import SPEC
from difftest.model.case import Case, RoutingConfig
from difftest.model.generate import inputs
from difftest.running import campaign, pipeline
from difftest.running.isolation import IsolatedRunner
from difftest.store import fixtures
from impls.flashinfer import _trtllm_gen_jit as jit

# Plug-ins that raise on cases of 3 tokens or more (so the smaller ones are compared), each in its own way.
PLUGIN = """
from difftest.checking.impl_spec import SPEC
from difftest.checking.interface import HarnessError


class BuildRace(RuntimeError):
    difftest_harness = True  # what impls/ does (it imports no difftest): the class marks itself


def raising(make):
    def run(case, inputs):
        if case.config.num_tokens >= 3:
            raise make()
        return SPEC.run(case, inputs)
    return run


RACE = "[Errno 17] File exists: 'trtllmGen_bmm_export'"
HARNESS = SPEC._replace(name="harness", ops=("routing",), run=raising(lambda: HarnessError(f"worker setup: {RACE}")))
MARKED = SPEC._replace(name="marked", ops=("routing",), run=raising(lambda: BuildRace(RACE)))
MARKED_ISOLATED = MARKED._replace(name="marked_isolated", may_crash=True)
ORDINARY = SPEC._replace(name="ordinary", ops=("routing",), run=raising(lambda: RuntimeError(RACE)))


class ShardIndexError(RuntimeError):
    difftest_failure = ("permutation", "shard expert index")  # what impls/ does: the class names what it checked


NAMED = SPEC._replace(name="named", ops=("routing",), run=raising(lambda: ShardIndexError("slot 0 off its shard")))
NAMED_ISOLATED = NAMED._replace(name="named_isolated", may_crash=True)
VALUE_ISOLATED = SPEC._replace(name="value_isolated", ops=("routing",), may_crash=True,
                               run=raising(lambda: ValueError("bad shape")))
"""
CASES = settings(max_examples=60, database=None, derandomize=True)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "_TOLD", set())  # each test sees its own stderr lines
    path = tmp_path / "harness_plugin.py"
    path.write_text(PLUGIN)
    return lambda name: (interface.load(f"{path}:{name}"), f"{path}:{name}")


def routing_case(num_tokens, seed=0):
    return Case("routing", RoutingConfig("renormalize", num_tokens=num_tokens, num_experts=8, top_k=2), "normal",
                seed)


@pytest.mark.parametrize("name", ["HARNESS", "MARKED", "MARKED_ISOLATED"])
def test_a_harness_error_is_a_tester_error_not_a_finding(plugin, name, tmp_path, capsys):
    impl, ref = plugin(name)
    rows = []
    res = campaign.fuzz_cell(impl, ref, "routing", fixtures_root=tmp_path / "fixtures", hypothesis_settings=CASES,
                             record=rows.append)
    assert (res.finding, res.fixture, res.signature) == (None, None, None)
    assert fixtures.discover(tmp_path / "fixtures") == []
    tester = {r: n for r, n in res.skips.items() if r.startswith(check.TESTER_ERROR)}
    assert tester and res.compared > 0, (res.skips, res.compared)
    assert all("File exists: 'trtllmGen_bmm_export'" in r and f"{impl.name} raised" not in r for r in tester), tester
    assert {r["kind"] for r in rows} == {None}
    assert {r["status"] for r in rows if r["message"] in tester} == {"skip"}
    err = capsys.readouterr().err
    assert err.count(f"difftest: {check.TESTER_ERROR}") == len(tester), err  # one line per distinct error


def test_an_ordinary_exception_is_still_a_finding_of_kind_error(plugin, tmp_path):
    impl, ref = plugin("ORDINARY")
    res = campaign.fuzz_cell(impl, ref, "routing", fixtures_root=tmp_path / "fixtures", hypothesis_settings=CASES)
    assert res.finding is not None and "ordinary raised RuntimeError: [Errno 17]" in res.finding, res.finding
    assert res.signature.kind == "error" and fixtures.load(res.fixture).kind == "error"


@pytest.mark.parametrize("name, field, raised", [("NAMED", "permutation", "ShardIndexError: slot 0 off its shard"),
                                                 ("NAMED_ISOLATED", "permutation", "ShardIndexError: slot 0 off its"),
                                                 ("ORDINARY", "RuntimeError", "RuntimeError: [Errno 17]"),
                                                 ("VALUE_ISOLATED", "ValueError", "ValueError: bad shape")])
def test_an_errors_signature_is_what_it_names_or_its_own_type_in_a_worker_too(plugin, name, field, raised, tmp_path):
    """An exception that states ``difftest_failure`` is signed by it (two bugs an adapter stops on with one exception
    type stay two findings, and --known can tell them apart); any other by its type, which an isolated worker relays
    (it was the worker's RuntimeError wrapper before)."""
    impl, ref = plugin(name)
    res = campaign.fuzz_cell(impl, ref, "routing", fixtures_root=tmp_path / "fixtures", hypothesis_settings=CASES)
    assert (res.signature.kind, res.signature.field) == ("error", field), res.signature
    assert f"{impl.name} raised {raised}" in res.finding, res.finding  # the type raised, in a worker too
    stored = campaign.fixture_signatures(fixtures.load(res.fixture).meta)
    assert [(s.kind, s.field) for s in stored] == [("error", field)], stored


def test_the_worker_answers_harness_and_is_kept(plugin, tmp_path):
    _, ref = plugin("MARKED_ISOLATED")
    with IsolatedRunner(ref, 30.0, tmp_path / "workers") as runner:
        first = runner.worker_pid
        outcome = runner.run(routing_case(4))
        assert outcome.kind == "harness"
        assert outcome.detail == "BuildRace: [Errno 17] File exists: 'trtllmGen_bmm_export'"
        assert runner.run(routing_case(2)).kind == "ok" and runner.worker_pid == first


def test_the_pipelined_runner_skips_a_harness_error(plugin):
    impl, _ = plugin("MARKED")
    c = routing_case(4)
    status, message, outputs, _ = pipeline.run_on_device(impl, c, inputs(c))
    assert (status, outputs) == ("skip", None)
    assert message == f"{check.TESTER_ERROR}, not a finding: BuildRace: [Errno 17] File exists: " \
                      "'trtllmGen_bmm_export' [routing, marked]"


class RacingSpec:
    """A JitSpec whose build meets another worker's half-made include root."""

    name = "difftest_racing_sm90a"

    def build_and_load(self):
        raise FileExistsError(17, "File exists", "trtllmGen_bmm_export")


def test_the_jit_helpers_failures_are_harness_errors(monkeypatch):
    monkeypatch.delenv("DIFFTEST_TRTLLM_GEN_PREBUILT", raising=False)
    with pytest.raises(jit.JitError, match=r"FileExistsError: \[Errno 17\] File exists") as e:
        jit.load(RacingSpec())
    assert interface.is_harness_error(e.value) and isinstance(e.value.__cause__, FileExistsError)
    impl = SPEC._replace(name="jit_user", run=lambda case, inputs: jit.load(RacingSpec()))
    r = check.run_case(impl, routing_case(2))
    assert r.status == "skip" and check.is_tester_error(r), r
    assert "JitError: building or loading the trtllm-gen JIT module: FileExistsError" in r.message


def test_a_campaign_with_tester_errors_and_no_finding_is_not_green(plugin, tmp_path):
    """fuzz exits 2, saying so in one line: the tester broke on part of what it drew, so the run proves nothing."""
    import subprocess
    import sys
    from pathlib import Path

    _, ref = plugin("HARNESS")
    r = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--impl", ref, "--op", "routing", "--where",
                        "method=renormalize", "--max-examples", "30", "--workers", "1", "--out", str(tmp_path / "run")],
                       cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines()[-1].startswith("difftest: error: ") and "hit a tester error" in r.stderr, r.stderr
