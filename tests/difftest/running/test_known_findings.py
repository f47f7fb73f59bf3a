"""Known findings (issue 22, item 2): a finding's signature (op, implementation, kind, field, slice) is recorded and
the campaign goes on searching for different failures; ``fuzz --known DIR`` treats the open fixtures of DIR
as known; the summary counts distinct findings and the failing cases of each."""

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

from difftest.checking import interface
from difftest.model import presets
from difftest.running import campaign
from difftest.running.isolation import Outcome
from difftest.store import fixtures, signatures
from difftest.store.signatures import Signature, field_of, slice_of

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "plugin_example.py"
WEIGHTS_BUG = ("w = np.take_along_axis(s, ids, axis=-1)", "w = np.take_along_axis(keys, ids, axis=-1)")
TOKENS_BUG = ("        T, E = x.shape\n",
              "        T, E = x.shape\n        if T > 2:\n            raise ValueError('planted: T > 2')\n")
WEIGHTS_SIG = ["routing", "example:deepseek_v3_numpy", "mismatch", "weights", "deepseek_v3"]
TOKENS_SIG = ["routing", "example:deepseek_v3_numpy", "error", "ValueError", "deepseek_v3"]


def _runs_here(ref):
    """The implementation loads and is available on this machine (the CPU fixtures' bug models)."""
    try:
        return interface.load(ref).available() is None
    except interface.ImplError:
        return False


def two_bugs(tmp_path):
    """The worked example with two planted bugs: weights gathered from the biased keys (a mismatch in
    weights), and a ValueError for more than two tokens."""
    source = EXAMPLE.read_text()
    for right, wrong in (WEIGHTS_BUG, TOKENS_BUG):
        assert source.count(right) == 1
        source = source.replace(right, wrong)
    path = tmp_path / "two_bugs.py"
    path.write_text(source)
    return f"{path}:DEEPSEEK_V3"


def fuzz(ref, out, *extra):
    return subprocess.run(
        [sys.executable, "-m", "difftest", "fuzz", "--impl", ref, "--op", "routing", "--model", "deepseek-v3",
         "--out", str(out), "--max-examples", "40", "--workers", "1", "--seed", "0", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_field_of_names_the_output_or_the_exception():
    impl = "torch"
    assert field_of("mismatch", "weights(by id)[0, 2]=0.27 but spec=0.18: |diff| ... [routing, torch]", impl) \
        == "weights"
    assert field_of("mismatch", "ids[3]=[1, 2] but spec=[1, 4]: ... [routing, torch]", impl) == "ids"
    assert field_of("mismatch", "torch declares deterministic but two runs differ [moe, torch]", impl) \
        == "declares"
    assert field_of("error", "torch raised ValueError: planted [routing, torch]", impl) == "ValueError"
    assert field_of("error", "comparison raised KeyError: 'x' (spec or difftest, not torch)", impl) \
        == "comparison KeyError"
    assert field_of("crash", "torch crash: worker killed by SIGSEGV [routing, torch]", impl) == "worker"


def test_a_known_signature_is_counted_not_reported(tmp_path):
    ref = two_bugs(tmp_path)
    impl = interface.load(ref)
    known = {Signature(*WEIGHTS_SIG), Signature(*TOKENS_SIG)}
    configs = presets.configs("deepseek-v3", "routing")
    res = campaign.fuzz_cell(impl, ref, "routing", configs=configs, fixtures_root=tmp_path / "fx", known=set(known),
                             hypothesis_settings=settings(max_examples=60, database=None, derandomize=True))
    assert res.finding is None and not list((tmp_path / "fx").glob("*"))
    assert set(res.known) <= known and sum(res.known.values()) > 0


def test_a_known_failure_of_another_method_hides_nothing(tmp_path):
    """The same two failures known for the renormalize method: the deepseek_v3 cell reports its own."""
    ref = two_bugs(tmp_path)
    known = {Signature(*WEIGHTS_SIG[:4], "renormalize"), Signature(*TOKENS_SIG[:4], "renormalize")}
    res = campaign.fuzz_cell(interface.load(ref), ref, "routing", configs=presets.configs("deepseek-v3", "routing"),
                             fixtures_root=tmp_path / "fx", known=set(known),
                             hypothesis_settings=settings(max_examples=60, database=None, derandomize=True))
    assert res.finding is not None and res.signature.slice == "deepseek_v3" and not res.known


def test_two_planted_bugs_are_both_reported_in_one_run(tmp_path):
    r = fuzz(two_bugs(tmp_path), tmp_path / "run")
    assert r.returncode == 1, r.stdout + r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    distinct = {tuple(d["signature"]): d for d in summary["distinct_findings"]}
    assert set(distinct) == {tuple(WEIGHTS_SIG), tuple(TOKENS_SIG)}, r.stdout
    assert all(d["cases"] >= 1 for d in distinct.values())
    assert "2 distinct findings (op, implementation, kind, field, slice):" in r.stdout


def test_known_fixtures_are_not_reported_again(tmp_path):
    ref = two_bugs(tmp_path)
    assert fuzz(ref, tmp_path / "first").returncode == 1
    r = fuzz(ref, tmp_path / "again", "--known", str(tmp_path / "first" / "fixtures"))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert not summary["findings"] and summary["known_failures"], summary
    assert "not reported again" in r.stdout


def test_a_variant_that_states_known_as_shares_the_known_fixtures(tmp_path):
    """An implementation stating ``known_as`` (an adapter's variant under another recipe, trtllm_gen_*.AS_BUILT)
    runs the same kernel: `fuzz --known` counts the open fixtures of the implementation it names as its own known
    bugs. The same variant without it reports them again, under its own name."""
    ref = two_bugs(tmp_path)
    path, name = ref.rsplit(":", 1)
    with open(path, "a") as f:
        f.write(f"\n\nclass Unmarked(type({name})):\n    name = {name}.name + '_unmarked'\n\n\n"
                f"class Variant(type({name})):\n    name = {name}.name + '_as_built'\n    known_as = {name}.name\n\n\n"
                "VARIANT, UNMARKED = Variant(), Unmarked()\n")
    assert fuzz(ref, tmp_path / "first").returncode == 1
    known = ("--known", str(tmp_path / "first" / "fixtures"))
    r = fuzz(f"{path}:VARIANT", tmp_path / "variant", *known)
    summary = json.loads((tmp_path / "variant" / "summary.json").read_text())
    assert r.returncode == 0 and not summary["findings"] and summary["known_failures"], r.stdout + r.stderr
    assert all(k["signature"][1].endswith("_as_built") for k in summary["known_failures"]), summary
    assert fuzz(f"{path}:UNMARKED", tmp_path / "unmarked", *known).returncode == 1


def test_known_as_names_another_implementation():
    impl = interface.load("impls.flashinfer.trtllm_gen_routing:AS_BUILT")
    assert impl.known_as == "flashinfer.trtllm_gen_routing" != impl.name
    assert interface.load("impls.flashinfer.trtllm_gen_nogemm:AS_BUILT").known_as == "flashinfer.trtllm_gen_nogemm"
    sig = Signature("routing", "a", "mismatch", "ids", "deepseek_v3")
    variant = interface.Impl("b", "1", ("routing",), True, False, None, None, None, None, known_as="a")
    assert campaign.shared_known({sig}, [variant]) == {sig, sig._replace(impl="b")}
    assert campaign.shared_known({sig}, [variant._replace(known_as=None)]) == {sig}
    with pytest.raises(interface.ImplError, match="known_as"):
        interface.check_protocol(variant._replace(known_as="b"), "b")


def test_fixed_fixtures_are_not_known(tmp_path):
    ref = two_bugs(tmp_path)
    assert fuzz(ref, tmp_path / "first").returncode == 1
    for case_json in (tmp_path / "first" / "fixtures").glob("*/case.json"):
        meta = json.loads(case_json.read_text())
        case_json.write_text(json.dumps({**meta, "status": "fixed"}))
    assert campaign.known_signatures(tmp_path / "first" / "fixtures") == set()
    assert len(campaign.known_signatures(ROOT / "fixtures")) > 0


def test_the_two_bugs_example_reports_both(tmp_path):
    r = fuzz(str(ROOT / "examples" / "plugin_two_bugs.py") + ":TWO_BUGS", tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert r.returncode == 1 and len(summary["distinct_findings"]) == 2, r.stdout + r.stderr


def test_known_must_be_a_directory(tmp_path):
    r = fuzz(two_bugs(tmp_path), tmp_path / "run", "--known", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--known" in r.stderr, r.stderr


def test_past_the_deadline_a_cell_ends_with_its_failure_so_far_or_interrupted(tmp_path, monkeypatch):
    """The time budget is honoured inside a cell (issue 22, item 6): a failure being shrunk is recorded as
    shrunk so far; without one the cell stops."""
    import time
    from types import SimpleNamespace

    ref = two_bugs(tmp_path)
    impl = interface.load(ref)
    configs = presets.configs("deepseek-v3", "routing")
    quick = settings(max_examples=200, database=None, derandomize=True)
    res = campaign.fuzz_cell(impl, ref, "routing", configs=configs, hypothesis_settings=quick,
                             deadline=time.monotonic() - 1)
    assert res.examples == 0 and res.finding is None
    failed, rows = [], []

    def record(row):
        rows.append(row)
        if row["kind"]:
            failed.append(row)

    # the budget runs out right after the first failure
    monkeypatch.setattr(campaign, "time", SimpleNamespace(monotonic=lambda: 1e12 if failed else time.monotonic()))
    res = campaign.fuzz_cell(impl, ref, "routing", configs=configs, hypothesis_settings=quick, record=record,
                             fixtures_root=tmp_path / "fx", deadline=1e11)
    assert res.finding and res.fixture and len(failed) == 1 and rows[-1]["kind"], (len(rows), len(failed))



# ---- known-bug identity that survives (issue 34 item 1, issue 38 item 4): signatures made by the machine from the
# comparison's structured result, stored in the fixture when it is written, never parsed from its message

FIXTURES = ROOT / "fixtures"
KNOWN = campaign.known_signatures(FIXTURES)
META = {p: json.loads((p / "case.json").read_text()) for p in fixtures.discover(FIXTURES)}
OPEN_CPU = [p for p, meta in META.items() if meta["status"] == "open" and _runs_here(meta["impl"]["ref"])]
FRESH = 20_261_207  # seeds from here on: inputs none of the fixtures was recorded with
SLOW = {"K06_weights_by_subtraction_warp_path": 1}  # fresh cases of a fixture whose case takes seconds (T = 257)


def _planted(impl, case, fields):
    """(the implementation with a second bug in the same cell, the field it fails): an output of the op that comes
    before every field the fixture's signatures name (compare.OUTPUT_ORDER: the first failing output names a
    finding, so this one is reported whether or not the known bug shows), else a raise (a new exception type)."""
    from difftest.checking import compare

    first = min(compare.OUTPUT_ORDER.index(f) if f in compare.OUTPUT_ORDER else len(compare.OUTPUT_ORDER)
                for f in fields)
    outputs = {"routing": ("ids", "weights"), "moe": ("ids", "weights", "out"), "quant": ("scales", "q")}[case.op]
    field = next((f for f in outputs if compare.OUTPUT_ORDER.index(f) < first), "RuntimeError")

    def run(case, inputs):
        out = dict(impl.run(case, inputs))
        if field == "ids":  # an expert id out of range
            E = (case.config.routing if case.op == "moe" else case.config).num_experts
            out["ids"] = np.where(np.arange(out["ids"].shape[1]) == 0, E, out["ids"]).astype(out["ids"].dtype)
        elif field in ("weights", "out", "scales"):
            out[field] = (out[field] * 2 + 1).astype(out[field].dtype)
        elif field == "q":
            out["q"] = out["q"] ^ np.uint8(1)
        else:
            raise RuntimeError("planted")
        return out

    return impl._replace(run=run), field


@pytest.mark.parametrize("path", OPEN_CPU, ids=lambda p: p.name)
def test_a_known_bug_is_counted_as_known_and_a_new_one_in_its_cell_is_reported(path):
    """Fresh inputs of an open fixture's case (other seeds) on its implementation: every failure's signature is
    one the open fixtures store (fuzz --known counts it, test_a_known_signature_is_counted_not_reported), and at
    least one fails; the same implementation with a second bug in another output of the cell fails under a
    signature they do not store: reported."""
    fx = fixtures.load(path)
    impl = interface.load(fx.impl_ref)
    fields = {s.field for s in campaign.fixture_signatures(fx.meta)}
    cases = [replace(fx.case, seed=FRESH + i) for i in range(SLOW.get(path.name, 3))]
    seen = []
    for case in cases:
        result, kind, _ = campaign.run_classified(impl, case)
        seen += [signatures.signature(case.op, impl.name, kind, result.failures, case.config)] if kind else []
    assert seen and set(seen) <= KNOWN, (seen, fields)
    planted, field = _planted(impl, fx.case, fields)
    result, kind, _ = campaign.run_classified(planted, cases[0])
    new = signatures.signature(fx.case.op, impl.name, kind, result.failures, fx.case.config)
    assert new not in KNOWN and new.field == field, (new, field, result.message)


def test_fuzz_known_fixtures_reports_only_what_is_new(tmp_path):
    """End to end: a fresh-seed `fuzz --known fixtures/` of a known bug's model finds its failures and reports
    none; the same search (fuzz_cell) of a copy with a planted ids bug in that cell reports it."""
    r = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--impl", "bug:K01", "--out", str(tmp_path / "k1"),
                        "--op", "routing", "--where", "method=deepseek_v3", "--where", "bias_dtype=fp32", "--seed",
                        "7", "--max-examples", "6", "--workers", "1", "--known", str(FIXTURES)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    summary = json.loads((tmp_path / "k1" / "summary.json").read_text())
    assert r.returncode == 0 and not summary["findings"], r.stdout + r.stderr
    assert [k["signature"][3] for k in summary["known_failures"]] == ["weights"], summary["known_failures"]
    fx = fixtures.load(FIXTURES / "K01_deepseek_biased_weights")
    planted, field = _planted(interface.load("bug:K01"), fx.case, {"weights"})
    res = campaign.fuzz_cell(planted, "bug:K01", "routing", configs=st.just(fx.case.config), known=set(KNOWN),
                             hypothesis_settings=settings(max_examples=6, database=None, deadline=None), run_seed=7)
    assert field == "ids" and res.finding and res.signature.field == "ids" and res.signature not in KNOWN, res


def test_every_fixture_stores_its_signatures_for_its_own_case():
    for path in fixtures.discover(FIXTURES):
        meta = fixtures.load(path).meta
        stored = [Signature(*s) for s in meta["signatures"]]
        case = meta["case"]
        assert {(s.op, s.impl, s.kind, s.slice) for s in stored} == {
            (case["op"], meta["impl"]["name"], fixtures.load(path).kind, slice_of(case["op"], case["config"]))
        }, path
        assert all(s.field and " " not in s.field or s.field == "CUDA context" for s in stored), stored


def test_a_stored_signature_survives_a_message_rewritten_by_hand(tmp_path):
    """fixtures.write stores the signatures the comparison named; rewriting the observed message (as the GPU
    fixtures' were) changes nothing that --known matches."""
    from difftest.selftest import known_bugs

    bug = known_bugs.BUGS[0]  # K1: weights from s + b
    model = interface.load("bug:K01")
    result, kind, crash = campaign.run_classified(model, bug.case)
    path = fixtures.write(tmp_path, bug.case, "bug:K01", model, model.recipe(bug.case),
                          campaign.observed(result, crash), {}, kind=kind)
    meta = json.loads((path / "case.json").read_text())
    assert meta["signatures"] == [["routing", model.name, "mismatch", "weights", "deepseek_v3"]]
    before = campaign.known_signatures(tmp_path)
    meta["observed"]["message"] = "DeepSeek-V3 weights gathered from the biased scores: " + meta["observed"]["message"]
    (path / "case.json").write_text(json.dumps(meta))
    assert campaign.known_signatures(tmp_path) == before == {Signature(*meta["signatures"][0])}


def test_signature_fields_come_from_the_comparison_not_the_message():
    """A routing kernel that returns no padded permutation for a case with tile_tokens_dim: the field is
    "permutation" (the message, "<impl> returned no total_num_padded_tokens ...", once gave "the")."""
    from difftest.checking.impl_spec import SPEC
    from difftest.model.case import Case, RoutingConfig

    case = Case("routing", RoutingConfig("deepseek_v3", 4, 16, 2, tile_tokens_dim=8), "normal", 0)
    bare = SPEC._replace(name="bare", run=lambda c, i: {k: SPEC.run(c, i)[k] for k in ("ids", "weights")})
    result, kind, _ = campaign.run_classified(bare, case)
    assert result.failures == (("permutation", "missing"),), result
    assert signatures.signature("routing", "bare", kind, result.failures, case.config).field == "permutation"


@pytest.mark.parametrize("outcome, field", [
    (Outcome("crash", None, "worker killed by SIGSEGV (signal 11)", None, 11, "", 0.1), "SIGSEGV"),
    (Outcome("crash", None, "worker exited with status 3", 3, None, "", 0.1), "exit 3"),
    (Outcome("crash", None, "CUDA context unusable after the case: AcceleratorError: ...", None, None, "", 0.1),
     "CUDA context"),
    (Outcome("hang", None, "no result within 2 s; worker killed by SIGTERM (signal 15)", None, 15, "", 2.0),
     "timeout"),
])
def test_a_crash_or_hang_is_named_by_how_the_worker_ended(outcome, field):
    assert signatures.crash_field(outcome) == field


def _kernel_said(fx):
    """The GPU kernel's outputs as a GPU fixture's record describes them (its observed message's first differing
    element, or the notes' measurement), the spec's everywhere else: what its signatures were migrated from."""
    from difftest.checking import compare, impl_spec

    out = {k: np.array(v) for k, v in impl_spec.expected(fx.case, fx.inputs, fx.recipe).items()}
    c, name = fx.case.config, fx.id.rsplit("-", 1)[-1]
    row = re.match(r"ids\[(\d+)\]=\[([\d, ]+)\]", fx.meta["observed"].get("message") or "")
    if fx.case.op == "moe" and row:  # a layer's selection: the message gives the kernel's whole row
        out["ids"][int(row[1])] = [int(e) for e in row[2].split(",")]
    elif name == "n_group_over_8":  # groups 8..15 never scored: the GPU repeats id 132 (docs/device-results.md F1)
        out["ids"][:] = 132
    elif name == "topk_group_over_4":  # experts from the 4 best groups only (MaxNumTopGroups)
        keys, gkeys, _, _ = compare.keys64(c, fx.inputs, fx.recipe)
        group = np.arange(c.num_experts) // (c.num_experts // c.n_group)
        for t in range(c.num_tokens):
            kept = np.isin(group, np.argsort(-gkeys[t], kind="stable")[:4])
            out["ids"][t] = np.argsort(-np.where(kept, keys[t], -np.inf), kind="stable")[:c.top_k]
    elif name == "finalize_deepseek_fp8_zero_block":  # scale 0, codes 0·rcp(0) = NaN
        out["out_scale"][:], out["out"][:] = 0, np.nan
    elif name == "grouped_bias_bf16":  # ids[0]=[42] but spec=[185], the permutation of its own ids
        out["ids"][0, 0] = 42
        out.update(impl_spec.expert_permutation(c, out["ids"]))
    elif name in ("llama4_warp_path_shard", "shared_experts_off_last_shard"):  # total_num_padded_tokens=8 / =0
        out["total_num_padded_tokens"][0] = 8 if name.startswith("llama4") else 0
    elif name == "ue8m0_exponent_plus_one":  # scales[0, 0]=0x3d800000 but spec=0x3d000000: its byte one up
        out["scales"] = out["scales"] * 2
        out["scale_buffer"] = out["scale_buffer"] + np.eye(1, out["scale_buffer"].size, dtype=np.uint8)[0]
    elif name == "ue8m0_tail_unwritten":  # scale_buffer word 0xa5a5a584: the tail bytes left at the poison
        out["scale_buffer"] = np.where(np.arange(out["scale_buffer"].size) % 4, 0xA5, out["scale_buffer"])
    return out


GPU_MISMATCHES = [p for p, meta in META.items() if p.name.startswith(("flashinfer-", "sglang-"))
                  and meta["kind"] == "mismatch"]


@pytest.mark.parametrize("path", GPU_MISMATCHES, ids=lambda p: p.name)
def test_a_gpu_fixtures_signatures_are_what_the_comparison_names_on_what_the_kernel_returned(path):
    """The open GPU fixtures cannot run here: their signatures were migrated from the comparison of the outputs
    their record describes. Today's comparison must still name exactly those fields, the first first."""
    from difftest.checking import check

    fx = fixtures.load(path)
    v = check.compared(fx.case, fx.inputs, _kernel_said(fx), fx.recipe, "t", fx.meta["impl"]["name"])
    assert [f.field for f in v.failures] == [s.field for s in campaign.fixture_signatures(fx.meta)], v


def test_a_finding_two_workers_meet_is_printed_once(tmp_path):
    """Workers share the run directory: the first to meet a signature prints it, the others stay quiet; another
    signature is printed again; run_campaign clears the markers, so a resumed run prints its findings anew."""
    from difftest.running import run

    workers = tmp_path / "difftest-workers"
    first = ("routing", "plugin", "mismatch", "weights", "deepseek_v3")
    assert run._first_to_report(workers, first) and not run._first_to_report(workers, first)
    assert run._first_to_report(workers, (*first[:3], "ids", first[4]))
    assert len(list(workers.glob("reported-*"))) == 2
