"""difftest.store.fixtures and the CLI: fixtures round trip, bad fixtures are one-line errors (exit 2), replay
reproduces a recorded finding, exit codes."""

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from difftest import cli
from difftest.checking import check, impl_spec
from difftest.model import generate
from difftest.model.case import Case, RoutingConfig
from difftest.readers import replay
from difftest.selftest import bug_models
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[3]
K1 = "difftest.selftest.bug_models:DEEPSEEK_BIASED_WEIGHTS"
CASE = Case("routing", RoutingConfig("deepseek_v3", 3, 8, 2, 2, 1, 2.5, bias_dtype="fp32"), "normal", 4)


def record(root, case=CASE, impl=bug_models.DEEPSEEK_BIASED_WEIGHTS, ref=K1, status="open", id=None):
    r = check.run_case(impl, case)
    expected = impl_spec.expected(case, generate.inputs(case), impl.recipe(case))
    return fixtures.write(
        root,
        case,
        ref,
        impl,
        impl.recipe(case),
        {"status": r.status, "ratio": r.ratio, "message": r.message},
        expected,
        status=status,
        provenance="K1, vllm-project/vllm PR #12002 (test)",
        id=id,
    )


@pytest.fixture
def k1(tmp_path):
    return record(tmp_path / "fixtures")


def run_cli(*args, process=False):
    """`python -m difftest ARGS` from the repository root: in this process (cli.main, its output captured), or in a
    new interpreter with process=True, as test_cli_exit_codes does once for the exit status of `-m difftest`."""
    if process:
        return subprocess.run(
            [sys.executable, "-m", "difftest", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_round_trip(k1):
    fx = fixtures.load(k1)
    assert fx.case == CASE and fx.impl_ref == K1 and fx.status == "open"
    assert generate.digest(fx.inputs) == generate.digest(generate.inputs(CASE))
    assert fx.meta["observed"]["status"] == "fail" and fx.meta["observed"]["ratio"] > 1
    assert set(fx.meta["packages"]) >= {"python", "numpy"}
    assert record(k1.parent) == k1  # the same (case, implementation) is not recorded twice


def test_replay_reproduces_an_open_finding(k1):
    rows = replay.replay_fixture(fixtures.load(k1), ["torch", "spec"])
    assert rows[0][:2] == ("bug:deepseek_biased_weights", "fail")
    assert ("torch", "pass") in [r[:2] for r in rows] and ("spec", "pass") in [r[:2] for r in rows]
    assert replay.expectation_met(fixtures.load(k1), rows)


def test_fixed_fixture_that_fails_is_not_as_recorded(tmp_path):
    path = record(tmp_path, status="fixed")
    fx = fixtures.load(path)
    assert not replay.expectation_met(fx, replay.replay_fixture(fx, ["torch"]))


def test_spec_change_is_flagged(k1):
    # a consistent fixture whose recorded spec output differs from what the spec computes now
    changed = {k: v + 1 if v.dtype.kind == "f" else v for k, v in fixtures.load(k1).expected.items()}
    np.savez(k1 / "expected.npz", **changed)
    _edit_json(k1, lambda m: m["expected"].update(sha256=generate.digest(changed)))
    rows = replay.replay_fixture(fixtures.load(k1), ["torch"])
    assert rows[0][:2] == ("spec", "spec-changed")
    assert not replay.expectation_met(fixtures.load(k1), rows)


def _edit_json(path, fn):
    meta = json.loads((path / "case.json").read_text())
    fn(meta)
    (path / "case.json").write_text(json.dumps(meta))


def _bad_npz(path, arrays):
    np.savez(path / "inputs.npz", **arrays)


BAD = {
    "bad JSON": (lambda p: (p / "case.json").write_text("{not json"), "not valid JSON"),
    "schema": (lambda p: _edit_json(p, lambda m: m.update(schema=99)), "unknown schema version 99"),
    "status": (lambda p: _edit_json(p, lambda m: m.update(status="maybe")), "status 'maybe'"),
    "id with separator": (lambda p: _edit_json(p, lambda m: m.update(id="../evil")), "no path separators"),
    "object array": (
        lambda p: np.savez(p / "inputs.npz", logits=np.array([object()]), bias=np.zeros(8)),
        "object arrays / pickles are refused",
    ),
    "missing array": (lambda p: _bad_npz(p, {"logits": generate.inputs(CASE)["logits"]}), "but expected"),
    "extra array": (lambda p: _bad_npz(p, {**generate.inputs(CASE), "x": np.zeros(1)}), "but expected"),
    "wrong shape": (
        lambda p: _bad_npz(p, {**generate.inputs(CASE), "bias": np.zeros(9, np.float32)}),
        "bias is float32 \\(9,\\)",
    ),
    "wrong dtype": (
        lambda p: _bad_npz(p, {**generate.inputs(CASE), "bias": np.zeros(8, np.float64)}),
        "bias is float64",
    ),
    "changed bits": (
        lambda p: _bad_npz(p, {**generate.inputs(CASE), "bias": np.ones(8, np.float32)}),
        "SHA-256",
    ),
    "bad case": (lambda p: _edit_json(p, lambda m: m["case"]["config"].update(top_k=99)), "top_k=99"),
    "kind": (lambda p: _edit_json(p, lambda m: m.update(kind="meltdown")), "kind 'meltdown'"),
    "file path": (
        lambda p: _edit_json(p, lambda m: m["inputs"].update(file="../../etc/passwd")), "no other paths"
    ),
    "symlink outside": (lambda p: _symlink(p / "inputs.npz", "/etc/passwd"), "inputs.npz is a symlink"),
    "symlinked case.json": (lambda p: _symlink(p / "case.json", "/etc/hostname"), "case.json is a symlink"),
    "huge declared size": (
        lambda p: _edit_json(p, lambda m: m["case"]["config"].update(num_tokens=10**12)),
        "case declares 8000000000008 input",
    ),
    "huge npz header": (lambda p: _huge_header(p / "inputs.npz"), "declares float32 \\(1000000000000,\\)"),
    "truncated npz": (lambda p: _truncate(p / "inputs.npz"), "inputs.npz: not a readable npz"),
    "pickle in expected": (
        lambda p: np.savez(p / "expected.npz", ids=np.array([{"x": 1}], dtype=object)),
        "expected.npz: ids is an object array",
    ),
    "expected tampered": (
        lambda p: np.savez(p / "expected.npz", **{k: v + 1 for k, v in np.load(p / "expected.npz").items()}),
        "expected.npz does not match its recorded SHA-256",
    ),
    "observed": (lambda p: _edit_json(p, lambda m: m.update(observed=[])), "observed must be an object"),
    "other generator": (lambda p: _edit_json(p, lambda m: m["inputs"].update(generator="mylab:inputs/7")),
                        "inputs.generator 'mylab:inputs/7' is not 'difftest:inputs/2'"),
    "signature of another cell": (lambda p: _edit_json(p, lambda m: m["signatures"][0].__setitem__(4, "llama4")),
                                  "is not of this fixture's case and kind \\(op, kind, slice \\['routing', "
                                  "'mismatch', 'deepseek_v3'\\]\\)"),
}


def _symlink(path, target):
    path.unlink()
    path.symlink_to(target)


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _huge_header(path):
    """An npz whose logits header declares 10^12 float32 (4 TB): refused from the header, nothing read."""
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    bias = io.BytesIO()
    np.save(bias, generate.inputs(CASE)["bias"])
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("logits.npy", header.getvalue() + b"\0" * 64)
        z.writestr("bias.npy", bias.getvalue())


@pytest.mark.parametrize("name", BAD)
def test_bad_fixture_is_a_one_line_error(k1, name):
    corrupt, message = BAD[name]
    corrupt(k1)
    with pytest.raises(fixtures.FixtureError, match=message) as e:
        fixtures.load(k1)
    assert "\n" not in str(e.value)


def test_curated_id_is_used_and_validated(tmp_path):
    impl = bug_models.DEEPSEEK_BIASED_WEIGHTS
    r = check.run_case(impl, CASE)
    args = (CASE, K1, impl, None, {"status": r.status, "ratio": r.ratio, "message": r.message}, {})
    path = fixtures.write(tmp_path, *args, id="K01_deepseek_biased_weights")
    assert path.name == "K01_deepseek_biased_weights" and fixtures.load(path).kind == "mismatch"
    for bad in ("../K01", "a/b", ".hidden", "", "K01.partial-1"):
        with pytest.raises(fixtures.FixtureError, match="must match"):
            fixtures.write(tmp_path, *args, id=bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["K01_deepseek_biased_weights"]


def test_half_written_fixture_is_not_discovered_and_does_not_block(k1):
    stale = k1.parent / f"{k1.name}.partial-99999-abc"  # a writer killed before its rename
    shutil.copytree(k1, stale)
    shutil.rmtree(k1)
    assert fixtures.discover(k1.parent) == []
    assert record(k1.parent) == k1 and fixtures.discover(k1.parent) == [k1]


def test_open_fixture_failed_by_a_correct_implementation_is_not_as_recorded(k1):
    # RSF_TWICE stands in for an implementation believed correct that fails this case too
    rows = replay.replay_fixture(fixtures.load(k1), ["torch", "difftest.selftest.bug_models:RSF_TWICE"])
    assert ("bug:rsf_twice", "fail") in [r[:2] for r in rows]
    assert not replay.expectation_met(fixtures.load(k1), rows)
    r = run_cli("replay", str(k1), "--impl", "difftest.selftest.bug_models:RSF_TWICE")
    assert r.returncode == 1 and "NOT as recorded" in r.stdout, r.stdout + r.stderr


OTHERWISE = """import numpy as np

from difftest.selftest import bug_models

K1 = bug_models.DEEPSEEK_BIASED_WEIGHTS


def _raising(case, inputs):
    raise ValueError("planted: another failure")


def _out_of_range(case, inputs):
    out = dict(K1.run(case, inputs))
    return {**out, "ids": np.full_like(out["ids"], case.config.num_experts)}


RAISES = K1._replace(run=_raising)
OUT_OF_RANGE = K1._replace(run=_out_of_range)
"""


def test_an_open_fixture_failing_otherwise_is_not_its_bug(tmp_path, capsys):
    """The recorded implementation still fails, but not with the signatures the fixture stores (an exception,
    or a mismatch in ids, where a mismatch in weights was recorded): NOT as recorded, exit 1, with both failures
    named, never "the bug is still there". The same model replays as recorded."""
    plugin = tmp_path / "models.py"
    plugin.write_text(OTHERWISE)
    path = record(tmp_path / "fixtures", ref=f"{plugin}:K1")
    assert fixtures.load(path).meta["signatures"] == [["routing", "bug:deepseek_biased_weights", "mismatch",
                                                       "weights", "deepseek_v3"]]
    for name, now in (("K1", None), ("RAISES", "error (ValueError)"), ("OUT_OF_RANGE", "mismatch (ids)")):
        _edit_json(path, lambda m, name=name: m["impl"].update(ref=f"{plugin}:{name}"))
        fx = fixtures.load(path)
        rows = replay.replay_fixture(fx, ["torch"])
        recorded = replay.recorded_outcome(fx, rows)
        if now is None:
            assert recorded[1] == "fail" and replay.verdict(fx, rows) == replay.AS_RECORDED, rows
            continue
        assert recorded[1] == replay.DIFFERENT and replay.verdict(fx, rows) == replay.NOT_AS_RECORDED, rows
        assert recorded[2].startswith(f"now {now}, recorded mismatch (weights): "), recorded
    assert cli.main(["replay", str(path), "--impl", "torch"]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert (": NOT as recorded: bug:deepseek_biased_weights fails differently (now mismatch (ids), recorded "
            "mismatch (weights)), torch pass") in line, line


def test_cli_exit_codes(k1, tmp_path):
    r = run_cli("replay", str(k1), "--impl", "torch", process=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "as recorded" in r.stdout and "bug:deepseek_biased_weights" in r.stdout
    bad = tmp_path / "bad"
    shutil.copytree(k1, bad / k1.name)
    (bad / k1.name / "case.json").write_text("[")
    r = run_cli("replay", str(bad / k1.name), process=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = run_cli("fuzz", "--impl", "no_such_impl")
    assert r.returncode == 2 and "unknown implementation" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("impls")
    assert r.returncode == 0 and "torch-cuda" in r.stdout and "unavailable" in r.stdout
    r = run_cli("show", str(k1))
    assert (
        r.returncode == 0
        and "deepseek_v3" in r.stdout
        and "now: bug:deepseek_biased_weights fail" in r.stdout
    )


def test_fixture_of_a_fixed_weight_case_keeps_its_weight_seed(tmp_path, capsys):
    from difftest.model.case import MoEConfig

    case = Case("moe", MoEConfig(RoutingConfig("renormalize", 2, 4, 2), 32, 16), "normal", 9, weight_seed=0)
    recipe = impl_spec.SPEC.recipe(case)
    path = fixtures.write(tmp_path, case, "spec", impl_spec.SPEC, recipe,
                          {"status": "fail", "ratio": 2.0, "message": "test"},
                          impl_spec.expected(case, generate.inputs(case), recipe))
    fx = fixtures.load(path)
    assert fx.case == case and fx.meta["case"]["weight_seed"] == 0
    assert cli.main(["show", str(path)]) == 0 and "seed=9 weight_seed=0" in capsys.readouterr().out
    _edit_json(path, lambda m: m["case"].update(weight_seed=1))  # weights regenerated from another seed
    with pytest.raises(fixtures.FixtureError, match="regenerated expert weights do not match"):
        fixtures.load(path)


def test_a_case_edited_away_from_its_inputs_is_refused(tmp_path):
    """inputs.npz is digest-checked, and the case must regenerate it: an edited seed (the inputs file untouched)
    would otherwise replay inputs that no longer belong to the case it names."""
    src = Path(__file__).resolve().parents[3] / "fixtures" / "routing-torch-eb818553aeb7"
    path = tmp_path / src.name
    shutil.copytree(src, path)
    fixtures.load(path)
    meta = json.loads((path / "case.json").read_text())
    meta["case"]["seed"] += 1
    (path / "case.json").write_text(json.dumps(meta))
    with pytest.raises(fixtures.FixtureError, match="does not regenerate its recorded inputs"):
        fixtures.load(path)


def test_a_non_finite_number_in_observed_is_refused(tmp_path):
    """write() stores strict JSON; a case.json whose observed block holds Infinity (edited by hand, or a nested
    value) is refused at load with one line instead of failing later when the fixture is written again."""
    src = Path(__file__).resolve().parents[3] / "fixtures" / "routing-torch-eb818553aeb7"
    path = tmp_path / src.name
    shutil.copytree(src, path)
    meta = json.loads((path / "case.json").read_text())
    meta["observed"]["message"] = [float("inf")]
    (path / "case.json").write_text(json.dumps(meta))
    with pytest.raises(fixtures.FixtureError, match="non-finite number"):
        fixtures.load(path)


@pytest.mark.parametrize("label", ["difftest.generate.inputs", "difftest:inputs/1"])
def test_a_legacy_generator_label_still_loads(tmp_path, label):
    """Fixtures written before the generators had names recorded a module path that no longer exists; inputs/1
    computed what inputs/2 computes except under the moe distribution nonneg."""
    path = record(tmp_path)
    _edit_json(path, lambda m: m["inputs"].update(generator=label))
    assert fixtures.load(path).meta["inputs"]["generator"] == label


# ---- issue 34, item 4: no pass by not running; renamed and unreadable fixtures

ELSEWHERE = """from difftest.selftest import bug_models

K1_ELSEWHERE = bug_models.DEEPSEEK_BIASED_WEIGHTS._replace(available=lambda: "needs a device this machine lacks")
"""


def test_a_recorded_implementation_that_does_not_run_is_never_as_recorded(k1, tmp_path):
    """Torch and the spec pass every one of these; only k1's recorded implementation runs. Exit 2 for a fixture
    that cannot run (here); --skip-unavailable skips only the unavailable one, and skipping everything is no pass."""
    plugin = tmp_path / "elsewhere.py"
    plugin.write_text(ELSEWHERE)
    unavailable = record(k1.parent, ref=f"{plugin}:K1_ELSEWHERE", id="unavailable_here")
    missing = record(k1.parent, ref=f"{tmp_path / 'gone.py'}:K1", id="missing_plugin")
    for path, want in ((k1, replay.AS_RECORDED), (unavailable, replay.UNAVAILABLE), (missing, replay.BROKEN)):
        fx = fixtures.load(path)
        rows = replay.replay_fixture(fx, ["torch"])
        assert ("torch", "pass") in [r[:2] for r in rows] and replay.verdict(fx, rows) == want, rows
        assert replay.expectation_met(fx, rows) == (want == replay.AS_RECORDED)
    r = run_cli("replay", str(k1.parent), "--impl", "torch")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "missing_plugin (open mismatch, recorded with bug:deepseek_biased_weights): cannot run: " in r.stdout
    assert "unavailable_here (open mismatch, recorded with bug:deepseek_biased_weights): cannot run here: " \
           "bug:deepseek_biased_weights n/a (needs a device this machine lacks)" in r.stdout, r.stdout
    assert "replayed 3 fixtures: 1 cannot run, 1 as recorded, 1 cannot run here" in r.stdout, r.stdout
    r = run_cli("replay", str(k1.parent), "--impl", "torch", "--skip-unavailable")
    assert r.returncode == 2 and "1 cannot run, 1 as recorded, 1 skipped (--skip-unavailable)" in r.stdout, r.stdout
    shutil.rmtree(missing)
    r = run_cli("replay", str(k1.parent), "--impl", "torch", "--skip-unavailable")
    assert r.returncode == 0 and "replayed 2 fixtures: 1 as recorded, 1 skipped (--skip-unavailable)" in r.stdout
    r = run_cli("replay", str(unavailable), "--impl", "torch", "--skip-unavailable")
    assert r.returncode == 2 and "unavailable_here (open mismatch" in r.stdout, r.stdout + r.stderr


def test_a_renamed_fixture_loads_under_its_directory_name(k1, tmp_path):
    """The fixture is its directory: renamed, it loads and replays under the new name (case.json keeps the name it
    was written under); an id that is no valid name is still refused (BAD: "id with separator")."""
    renamed = tmp_path / "renamed" / "k1_biased_weights_seen_in_vllm"
    shutil.copytree(k1, renamed)
    fx = fixtures.load(renamed)
    assert (fx.id, fx.meta["id"], fx.case, fx.impl_ref) == (renamed.name, k1.name, CASE, K1)
    r = run_cli("replay", str(renamed.parent), "--impl", "torch")
    assert r.returncode == 0 and r.stdout.startswith(f"{renamed.name} (open mismatch") and ": as recorded: " \
        in r.stdout, r.stdout + r.stderr


def test_one_unreadable_fixture_is_one_line_and_the_others_still_replay(tmp_path):
    root = tmp_path / "fixtures"
    paths = sorted(record(root, case=Case("routing", CASE.config, "normal", seed)) for seed in (4, 5, 6))
    (paths[1] / "case.json").write_text("[")
    r = run_cli("replay", str(root), "--impl", "torch")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and paths[1].name in r.stderr and "not valid JSON" in r.stderr, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines[:2]] == [paths[0].name, paths[2].name], r.stdout
    assert all(": as recorded: " in line for line in lines[:2]), r.stdout
    assert lines[2:] == ["replayed 3 fixtures: 2 as recorded, 1 unreadable"], r.stdout
