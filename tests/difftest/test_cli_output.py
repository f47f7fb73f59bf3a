"""CLI polish (issue 22, item 6, in part): a bare `python -m difftest` prints the help (every subcommand,
mutants included) and starts nothing; replay prints one line per fixture (the implementations that do not
apply grouped by reason) and a closing summary; the fuzz summary explains the error/bound ratio."""

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[2]
K1 = ROOT / "fixtures" / "routing-bug_deepseek_biased_weights-a601b764f199"


def difftest(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_bare_invocation_prints_help_and_runs_nothing(tmp_path):
    r = difftest(cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "{fuzz,replay,report,merge,impls,show,mutants}" in r.stdout and "mutation self-test" in r.stdout
    assert "The main job: python -m difftest fuzz (120 s" in r.stdout
    assert not (tmp_path / "runs").exists()


def test_replay_is_one_line_per_fixture_with_a_summary(tmp_path):
    for name in ("K03_raw_logit_weights", "K04_fp32_bias_read_as_bf16"):
        (tmp_path / name).symlink_to(ROOT / "fixtures" / name, target_is_directory=True)
    r = difftest("replay", str(tmp_path), "--impl", "torch", "--impl", "no_such_impl")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "replayed 2 fixtures: 2 as recorded", r.stdout
    assert lines[0].startswith("K03_raw_logit_weights (open mismatch, recorded with bug:K03_raw_logit_weights): "
                               "as recorded: bug:K03_raw_logit_weights fail, torch pass; n/a 1: ")
    r = difftest("replay", str(tmp_path / "K03_raw_logit_weights"), "--impl", "torch", "-v")
    assert "  torch                      pass" in r.stdout and "replayed" not in r.stdout


def test_replay_shows_the_detail_of_an_unexpected_outcome(tmp_path):
    fixed = tmp_path / K1.name
    shutil.copytree(K1, fixed)
    fixtures.set_status(fixed, "fixed")  # but the bug model still fails
    r = difftest("replay", str(fixed), "--impl", "torch")
    assert r.returncode == 1, r.stdout + r.stderr
    head, detail = r.stdout.splitlines()
    assert head.endswith("NOT as recorded: bug:deepseek_biased_weights fail, torch pass"), head
    assert detail.startswith("  bug:deepseek_biased_weights") and "weights(by id)[0, 0]=1.08061" in detail


def test_fuzz_summary_explains_the_ratio_in_words(tmp_path):
    r = difftest("fuzz", "--impl", "torch", "--op", "routing", "--max-examples", "3", "--workers", "1",
                 "--out", str(tmp_path / "run"))
    assert r.returncode == 0 and "(1.0 = exactly at the derived bound)" in r.stdout, r.stdout + r.stderr
    assert "{" not in r.stdout.splitlines()[0] and " pass" in r.stdout.splitlines()[0]


def test_tables_align_on_the_longest_name():
    from difftest import usage

    lines = usage.table([("flashinfer.trtllm_fp8_block_scale_moe_long", "1", "why"), ("torch", "22", "ok")])
    assert lines[0].index("1") == lines[1].index("22") and lines[1].endswith("ok")


def test_an_unknown_model_fails_before_any_implementation_loads(monkeypatch, capsys):
    from difftest import cli
    from difftest.checking import interface
    from difftest.running import run

    def no(*args):
        raise AssertionError("an implementation was loaded before the model was checked")

    monkeypatch.setattr(run, "_default_impls", no)
    monkeypatch.setattr(interface, "load", no)
    assert cli.main(["fuzz", "--model", "deepseek"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("difftest: error: unknown model 'deepseek'; known: deepseek-r1") and err.count("\n") == 1


def test_zero_token_ue8m0_packed_case_is_compared_not_skipped_with_a_numpy_error():
    """Was the skip "spec refuses: cannot reshape array of size 0 into shape (0,newaxis,4)"."""
    import numpy as np

    from difftest.checking import check, interface
    from difftest.model.case import Case, QuantConfig
    from spec import layouts

    assert layouts.pack_ue8m0(np.zeros((0, 5), np.uint8)).shape == (0, 2)
    assert layouts.unpack_ue8m0(np.zeros((0, 2), np.int32), 5).shape == (0, 5)
    case = Case("quant", QuantConfig("fp8_group", 0, 640, 128, scale_fmt="ue8m0", layout="ue8m0_packed"),
                "normal", 1)
    assert check.run_case(interface.load("torch"), case).status == "pass"


FAST_USAGE_ERRORS = [
    ["fuzz", "--model", "deepseek"],
    ["fuzz", "--workers", "0"],
    ["fuzz", "--max-examples", "0"],
    ["fuzz", "--time-budget", "-1"],
    ["fuzz", "--timeout", "nan"],
    ["fuzz", "--where", "no_such_field=1"],
    ["fuzz", "--where", "top_k=3..1"],
    ["fuzz", "--known", "/no/such/fixtures"],
    ["fuzz", "--impl", "no_such_impl"],
    ["fuzz", "--op", "no_such_op"],
    ["fuzz", "--db", "redis://localhost:no_port"],
    ["replay", "--timeout", "nan", "/no/such/fixture"],
    ["replay", "/no/such/fixture"],
    ["show", "/no/such/fixture"],
    ["report", "/no/such/run"],
]


def test_usage_errors_fail_before_torch_or_any_kernel_library_is_imported(tmp_path):
    """A typo is answered at once: no usage error waits for torch (seconds to import) or a kernel library.
    Checked by what was imported, not by the clock (the suite holds no timed assertions)."""
    probe = ("import json, sys\nfrom difftest import cli\nrcs = [cli.main(a) for a in json.loads(sys.argv[1])]\n"
             "print(json.dumps([rcs, sorted(m for m in ('torch', 'flashinfer') if m in sys.modules)]))")
    r = subprocess.run([sys.executable, "-c", probe, json.dumps(FAST_USAGE_ERRORS)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr  # a traceback: some usage error escaped as an exception
    rcs, imported = json.loads(r.stdout.splitlines()[-1])
    assert rcs == [2] * len(FAST_USAGE_ERRORS) and imported == [], (rcs, imported, r.stderr)
    errors = r.stderr.splitlines()
    assert len(errors) == len(FAST_USAGE_ERRORS) and all(e.startswith("difftest: error: ") for e in errors), errors
    assert not (tmp_path / "runs").exists()


def test_a_malformed_command_line_is_answered_before_numpy_is_imported(tmp_path):
    """What argparse alone can reject (an unknown flag or op, a missing command) costs the interpreter's start and
    nothing else: no numpy, no spec, no hypothesis. The command names its ops from difftest.model's package init."""
    probe = ("import json, sys\nfrom difftest import cli\n"
             "rcs = [cli.main(a) for a in (['fuzz', '--bogus'], ['fuzz', '--op', 'nope'], ['nope'])]\n"
             "print(json.dumps([rcs, sorted(m for m in ('numpy', 'spec', 'hypothesis') if m in sys.modules)]))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    rcs, imported = json.loads(r.stdout.splitlines()[-1])
    assert rcs == [2, 2, 2] and imported == [], (rcs, imported, r.stderr)


def test_a_spec_precondition_is_a_refusal_in_the_specs_words():
    import pytest

    from difftest.checking import impl_spec
    from difftest.model import generate
    from difftest.model.case import Case, CaseError, QuantConfig

    case = Case("quant", QuantConfig("nvfp4", 2, 64, group_size=16), "nonfinite", 3)
    with pytest.raises(CaseError, match=r"^spec refuses: nvfp4_quant: x must be finite \(e2m1 has no NaN or Inf\)$"):
        impl_spec.expected(case, generate.inputs(case), None)


def test_a_runtime_warning_inside_the_comparison_is_an_error(monkeypatch):
    """An invalid value the spec did not expect (inf·0, 0/0) would leave a NaN in a bound; the comparison raises
    it, and the case is a finding against the spec or difftest, in a campaign as under the test suite's -W error."""
    import warnings

    import numpy as np

    from difftest.checking import check, compare, interface
    from difftest.model.case import Case, RoutingConfig

    routing = compare.COMPARE["routing"]

    def nan_in_a_bound(*args):
        np.array([np.inf]) * np.array([0.0])
        return routing(*args)

    monkeypatch.setitem(compare.COMPARE, "routing", nan_in_a_bound)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # as a campaign process runs, without the suite's -W error
        r = check.run_case(interface.load("torch"), Case("routing", RoutingConfig("renormalize", 2, 4, 2), "normal", 1))
    assert r.status == "error" and r.message.startswith("comparison raised RuntimeWarning: invalid value"), r


def test_a_signaling_nan_output_is_the_implementations_finding():
    """An output holding a signaling NaN (garbage memory) fails as a NaN output, not as a comparison error."""
    import numpy as np

    from difftest.checking import check, interface
    from difftest.model.case import Case, RoutingConfig

    torch_impl = interface.load("torch")

    def garbage(case, inputs):
        out = torch_impl.run(case, inputs)
        weights = np.array(out["weights"], np.float32)
        weights.view(np.uint32)[0, 0] = 0x7F800001
        return {**out, "weights": weights}

    r = check.run_case(torch_impl._replace(run=garbage), Case("routing", RoutingConfig("renormalize", 2, 4, 2),
                                                              "normal", 1))
    assert r.status == "fail" and "comparison raised" not in r.message, r


def test_a_numpy_error_inside_the_spec_is_an_error_not_a_skip(monkeypatch):
    """The reshape of an empty array that once made a skip reason: now a finding that names the comparison."""
    import numpy as np

    from difftest.checking import check, impl_spec, interface
    from difftest.model.case import Case, QuantConfig
    from spec import layouts, numerics

    def old_pack_ue8m0(codes):  # how pack_ue8m0 failed on 0 tokens
        return codes.reshape(codes.shape[0], -1, 4)

    monkeypatch.setattr(layouts, "pack_ue8m0", old_pack_ue8m0)
    case = Case("quant", QuantConfig("fp8_group", 0, 640, 128, scale_fmt="ue8m0", layout="ue8m0_packed"),
                "normal", 1)
    r = check.run_case(interface.load("torch"), case)
    assert r.status == "error" and r.message.startswith("comparison raised ValueError: cannot reshape"), r
    assert "(spec or difftest, not torch)" in r.message
    try:  # the same kind of numpy error raised on a line of spec/ itself is no precondition either
        numerics.round_to(np.array(["x"]), "bf16")
    except ValueError as e:
        assert not impl_spec.spec_precondition(e)
    try:
        numerics.encode(np.array([3.0]), "e8m0")
    except ValueError as e:
        assert impl_spec.spec_precondition(e)


def test_runs_are_compressed_and_rows_of_an_older_plain_run_are_kept(tmp_path):
    """cases.jsonl.gz, not ~24 MB of plain rows per 2 minutes; a directory of an older run (plain cases.jsonl)
    resumed into keeps its rows, now compressed, and report reads both forms."""
    from difftest.checking.check import Result
    from difftest.model.case import Case, RoutingConfig
    from difftest.readers import report
    from difftest.running import campaign
    from difftest.store import rundir

    out = tmp_path / "run"
    out.mkdir()
    old = campaign.case_row("torch", Case("routing", RoutingConfig("topk", 2, 8, 2), "normal", 7),
                            Result("pass", 0.5, ""))
    (out / "cases.jsonl").write_text(json.dumps(old) + "\n")
    assert report.read_run(out)[0] == [old]  # the plain file of an older run reads as it is
    r = difftest("fuzz", "--impl", "torch", "--op", "routing", "--max-examples", "3", "--workers", "1",
                 "--out", str(out), "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (out / "cases.jsonl").exists() and not list(out.glob("cases-*.jsonl"))
    rows = [json.loads(line) for line in gzip.decompress((out / "cases.jsonl.gz").read_bytes()).splitlines()]
    assert rows[0] == old and len(rows) > 1 and rundir.read_lines(out) == [json.dumps(r) for r in rows]
    assert json.loads((out / "summary.json").read_text())["cases"] == len(rows)
    assert json.loads((out / "report.json").read_text())["totals"]["cases"] == len(rows)
    assert (out / "cases.jsonl.gz").stat().st_size < len(gzip.decompress((out / "cases.jsonl.gz").read_bytes())) / 3
    r = difftest("replay", str(out))  # a run directory: its fixtures (none here: replaying nothing is no pass)
    assert r.returncode == 2 and "no fixtures found" in r.stderr, r.stdout + r.stderr


def test_replay_of_a_run_directory_replays_its_fixtures(tmp_path):
    from difftest.readers import replay

    shutil.copytree(ROOT / "fixtures" / "K03_raw_logit_weights", tmp_path / "run" / "fixtures" / "K03")
    assert replay.fixture_paths([tmp_path / "run"]) == [tmp_path / "run" / "fixtures" / "K03"]


def test_a_cut_off_gzip_is_a_one_line_error(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    whole = gzip.compress(b'{"op": "routing"}\n' * 50)
    (out / "cases.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    for args in (("report", str(out)), ("merge", str(out), "--out", str(tmp_path / "merged"))):
        r = difftest(*args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert "cases.jsonl.gz: not a complete gzip file" in r.stderr, r.stderr


def test_a_finding_two_workers_recorded_is_printed_once():
    from difftest.running import run

    def finding(fixture, kind, field, earlier=False):
        return {"op": "routing", "impl": "mine", "kind": kind, "earlier": earlier, "fixture": fixture,
                "message": f"{field} is off\nreplay: python -m difftest replay {fixture}",
                "signature": ["routing", "mine", kind, field]}

    lines = "\n".join(run.finding_lines([finding("run/a", "error", "ValueError"),
                                         finding("run/b", "mismatch", "weights"),
                                         finding("run/c", "error", "ValueError"),
                                         finding("old/d", "error", "ValueError", earlier=True)])).splitlines()
    assert [line.split(" ")[0] for line in lines] == ["FINDING", "replay:", "", "FINDING", "replay:", "FINDING",
                                                      "replay:"]
    assert lines[2] == "  (the same finding, recorded by another worker too: run/c)"
    assert lines[5].startswith("FINDING [routing, mine, error, earlier]")
