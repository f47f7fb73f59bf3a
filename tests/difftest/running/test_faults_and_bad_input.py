"""Reliability of `python -m difftest`: injected crashes and hangs become findings and the campaign finishes;
a campaign killed earlier leaves its running case as a crash finding; SIGINT/SIGTERM stop cleanly; SIGKILL at
random points loses no finding; bad fixtures and bad command lines are one-line errors (exit 2), fuzzed with
Hypothesis; inputs are bit-identical across processes."""

import atexit
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from difftest import cli
from difftest.checking import check, impl_spec
from difftest.model import generate
from difftest.model.case import Case, CaseError, QuantConfig, RoutingConfig
from difftest.running import run as fuzz_run
from difftest.running.isolation import pending_cases
from difftest.selftest import bug_models
from difftest.store import fixtures, rundir

ROOT = Path(__file__).resolve().parents[3]
FAULTY = "tests/plugins/faulty_impls.py"
K1 = "difftest.selftest.bug_models:DEEPSEEK_BIASED_WEIGHTS"
# --model deepseek-v3: one routing cell around DeepSeek-V3, where K1's bug shows on the first examples
K1_CAMPAIGN = ["fuzz", "--impl", K1, "--model", "deepseek-v3", "--workers", "1"]
CASE = Case("routing", RoutingConfig("deepseek_v3", 3, 8, 2, 2, 1, 2.5, bias_dtype="fp32"), "normal", 4)
TRIED = {"fixtures": 0, "argv": 0}  # bad inputs tried, for the figures of docs/measured.md (printed with -s)


def difftest(*args, timeout=240, **kw):
    return subprocess.run(
        [sys.executable, "-m", "difftest", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def start(*args, out):
    """A campaign in its own process group, so that a signal reaches it and its workers as a Ctrl-C would."""
    with open(out.parent / f"{out.name}.log", "w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "difftest", *args, "--out", str(out)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def loadable(out):
    """{fixture id} of every fixture directory under out/fixtures; each must load."""
    return {fixtures.load(p).id for p in fixtures.discover(out / "fixtures")}


def wait_for(predicate, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


# ---- injected faults through the CLI


def test_injected_faults_are_findings_and_the_campaign_finishes(tmp_path):
    out = tmp_path / "run"
    # a campaign that died while its isolated worker ran this case (a write-ahead log nobody holds)
    died = Case("routing", RoutingConfig("renormalize", 5, 8, 2), "normal", 7)
    (out / "difftest-workers").mkdir(parents=True)
    entry = {"seq": 0, "impl": f"{FAULTY}:HANGS", "worker_pid": 12345, "case": died.to_dict()}
    (out / "difftest-workers" / "wal-dead.jsonl").write_text(json.dumps(entry) + "\n")
    faults = {
        "ABORTS": ("crash", signal.SIGABRT),
        "SEGFAULTS": ("crash", signal.SIGSEGV),
        "HANGS": ("hang", None),
        "RAISES": ("error", None),
    }
    impls = [a for name in faults for a in ("--impl", f"{FAULTY}:{name}")]
    r = difftest(
        "fuzz",
        *impls,
        "--model",
        "deepseek-v3",
        "--max-examples",
        "5",
        "--workers",
        "1",
        "--timeout",
        "2",
        "--first-timeout",
        "2",
        "--out",
        str(out),
        "--resume",  # the dead campaign's directory: continuing it is explicit
        "--set",
        "crash_shrink_s=2",  # two seconds of shrinking per crash suffice
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "crash recovered from an earlier run's write-ahead log" in r.stderr
    found = [fixtures.load(p) for p in fixtures.discover(out / "fixtures")]
    for name, (kind, sig) in faults.items():
        fx = next((f for f in found if f.impl_ref == f"{ROOT / FAULTY}:{name}" and f.case != died), None)
        assert fx is not None and fx.kind == kind, f"{name}: no {kind} fixture among {[f.id for f in found]}"
        observed = fx.meta["observed"]
        if sig is not None:
            assert observed["signal"] == sig and "Fatal Python error" in observed["output_tail"]
        if kind == "hang":
            assert "no result within 2 s" in observed["message"] and "in _hang" in observed["output_tail"]
    recovered = [f for f in found if f.case == died]
    assert (
        len(recovered) == 1
        and recovered[0].kind == "crash"
        and "write-ahead log" in recovered[0].meta["observed"]["message"]
    )
    assert pending_cases(out / "difftest-workers") == [], "a recovered case is settled"
    summary = json.loads((out / "summary.json").read_text())
    assert {f["kind"] for f in summary["findings"]} == {"crash", "hang", "error"} and not summary[
        "worker_errors"
    ]
    rows = [json.loads(line) for line in rundir.read_lines(out)]
    assert rows and all("recipe" in row and "kind" in row for row in rows)
    assert "report: " in r.stdout and (out / "report.html").is_file()
    (out / "report.html").unlink()
    assert cli.main(["report", str(out)]) == 0 and (out / "report.html").is_file()


def test_report_of_a_missing_run_directory_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such run directory" in err


def test_first_case_of_a_fresh_worker_gets_the_first_timeout(tmp_path):
    from difftest.running.isolation import IsolatedRunner

    """A case of 2 s (faulty_impls.SLOW) passes as the first case of a fresh worker, whose limit (120 s: worker start
    and imports included, however loaded the machine) is the first timeout, and hangs as a later one (limit 1 s);
    the worker that replaces the killed one gets the first timeout again. No assertion on how long anything took."""
    from difftest.checking.interface import load

    case = Case("routing", RoutingConfig("renormalize", 5, 8, 2), "normal", 0)
    assert load(f"{ROOT / FAULTY}:SLOW").name == "faulty_slow_cpu"
    with IsolatedRunner(f"{ROOT / FAULTY}:SLOW", 1.0, tmp_path, first_timeout_s=120.0) as r:
        first = r.run(case)
        later = r.run(case)
        replacement = r.run(case)  # the first case of the worker that replaced the killed one
    assert (first.kind, later.kind, replacement.kind) == ("ok", "hang", "ok"), (first, later, replacement)
    assert "within 1 s" in later.detail


# ---- signals


# SIGTERM is heavy only to keep the default suite within its time (it takes the same path after the handler)
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, id="SIGINT"),
        pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.heavy),
    ],
)
def test_signal_stops_cleanly_with_summary_and_findings(tmp_path, sig):
    out = tmp_path / "run"
    # no time limit: the campaign runs until the signal; the waits below catch hangs, however loaded the machine
    proc = start(*K1_CAMPAIGN, "--max-examples", "1000000", "--db", str(tmp_path / "db"), out=out)
    try:
        assert wait_for(lambda: fixtures.discover(out / "fixtures"), 600), "no finding within 600 s"
        # SIGINT as Ctrl-C sends it (the whole process group); SIGTERM as `kill` sends it (the parent only)
        (os.killpg if sig == signal.SIGINT else os.kill)(proc.pid, sig)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = (tmp_path / "run.log").read_text()
    assert rc == 1 and "Traceback" not in log, log
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == signal.Signals(sig).name and summary["findings"]
    assert {Path(f["fixture"]).name for f in summary["findings"]} <= loadable(out)
    assert not list(out.glob("cases-*.jsonl")), "worker parts are merged into cases.jsonl.gz"


# ---- SIGKILL at random points: no finding lost


def kill_campaigns(tmp_path, kills, seed, after_finding=False):
    """Start K1 campaigns sharing one example database and SIGKILL each (parent and workers) at a random
    moment (with after_finding: within 2 s after its first fixture appeared); before each kill note the
    fixtures that load, after it demand that all of them still load and that every fixture directory present
    loads. Returns (fixtures checked, findings lost)."""
    rng = random.Random(seed)
    db, seen, lost = tmp_path / "db", {}, []
    for i in range(kills):
        out = tmp_path / f"run{i}"
        # after a finding: no time limit, the kill ends it; else short budgets, so that some kills hit the final writes
        limit = ("--max-examples", "1000000") if after_finding else ("--time-budget", str(rng.uniform(1, 6)))
        proc = start(*K1_CAMPAIGN, *limit, "--db", str(db), out=out)
        if after_finding:
            assert wait_for(lambda o=out: fixtures.discover(o / "fixtures"), 600), "no finding within 600 s"
        time.sleep(rng.uniform(0, 2) if after_finding else rng.uniform(0.5, 10))
        before = {d: loadable(tmp_path / d) for d in seen} | {
            out.name: loadable(out) if out.exists() else set()
        }
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        seen[out.name] = set()
        for d in seen:
            now = loadable(tmp_path / d)  # raises if a fixture directory present is incomplete
            lost += sorted(before.get(d, set()) - now)
            seen[d] = now
    return sum(len(v) for v in seen.values()), lost


def resume_finds_again(tmp_path):
    """A campaign resumed with the shared database finds the bug again among its first examples."""
    out = tmp_path / "resumed"
    r = difftest(*K1_CAMPAIGN, "--max-examples", "3", "--db", str(tmp_path / "db"), "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    rows = [json.loads(line) for line in rundir.read_lines(out)]
    first = next(i for i, row in enumerate(rows) if row["status"] == "fail")
    assert first < 3, f"the database's failing example was not replayed first ({first} examples before)"


def test_sigkill_loses_no_finding(tmp_path):
    checked, lost = kill_campaigns(tmp_path, kills=1, seed=1, after_finding=True)
    assert lost == [] and checked > 0
    resume_finds_again(tmp_path)


@pytest.mark.heavy
def test_sigkill_25_times_loses_no_finding(tmp_path):
    checked, lost = kill_campaigns(tmp_path, kills=25, seed=2)
    print(f"25 SIGKILLs: {checked} fixtures checked after the kills, {len(lost)} lost")
    assert lost == [] and checked > 0
    resume_finds_again(tmp_path)


# ---- fuzzed bad fixtures


def _k1(root):
    impl = bug_models.DEEPSEEK_BIASED_WEIGHTS
    r = check.run_case(impl, CASE)
    expected = impl_spec.expected(CASE, generate.inputs(CASE), None)
    return fixtures.write(
        root, CASE, K1, impl, None, {"status": r.status, "ratio": r.ratio, "message": r.message}, expected
    )


VALID = _k1(Path(tempfile.mkdtemp(prefix="difftest-valid-")) / "fixtures")
atexit.register(shutil.rmtree, VALID.parent.parent, True)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _paths(obj, prefix=()):
    """Every (key path) into a JSON object, for replacing one value."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))


@st.composite
def mutations(draw):
    """(file, how, argument): flip bytes, truncate, or (case.json) replace one value by random JSON."""
    file = draw(st.sampled_from(["case.json", "inputs.npz", "expected.npz"]), label="file")
    how = draw(
        st.sampled_from(["flip", "truncate", "value"] if file == "case.json" else ["flip", "truncate"])
    )
    if how == "value":
        meta = json.loads((VALID / file).read_text())
        return file, how, (draw(st.sampled_from(sorted(_paths(meta)))), draw(JSON_VALUES, label="value"))
    size = (VALID / file).stat().st_size
    flips = st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 255)), min_size=1, max_size=4)
    return file, how, draw(flips if how == "flip" else st.integers(0, size - 1), label="where")


def mutate(path, file, how, arg):
    f = path / file
    data = bytearray(f.read_bytes())
    if how == "flip":
        for at, bits in arg:
            if data:  # (an earlier truncation may have emptied the file)
                data[at % len(data)] ^= bits
    elif how == "truncate":
        data = data[:arg]
    else:
        keys, value = arg
        try:
            meta = json.loads(data)
            node = meta
            for k in keys[:-1]:
                node = node[k]
        except (ValueError, KeyError, TypeError):  # an earlier change removed the path: nothing to replace
            return
        if keys and not isinstance(node, dict):
            return
        if keys:
            node[keys[-1]] = value
        else:
            meta = value
        data = json.dumps(meta).encode()
    f.write_bytes(bytes(data))


@settings(max_examples=1000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(mutations(), min_size=1, max_size=3))
def test_mutated_fixture_loads_and_round_trips_or_is_a_one_line_error(changes):
    TRIED["fixtures"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / VALID.name
        shutil.copytree(VALID, path)
        for change in changes:
            mutate(path, *change)
        try:
            fx = fixtures.load(path)
        except (fixtures.FixtureError, CaseError) as e:
            assert "\n" not in str(e) and str(e)
            return
        # loaded: it must be a fixture of the same case, and write + load must round trip it
        again = fixtures.load(
            fixtures.write(
                Path(tmp) / "again",
                fx.case,
                fx.impl_ref,
                bug_models.DEEPSEEK_BIASED_WEIGHTS,
                fx.recipe,
                fx.meta["observed"],
                fx.expected or {},
                status=fx.status,
                kind=fx.kind,
            )
        )
        assert (again.case, again.status, again.kind) == (fx.case, fx.status, fx.kind)
        assert (
            generate.digest(again.inputs)
            == generate.digest(fx.inputs)
            == generate.digest(generate.inputs(fx.case))
        )


# ---- fuzzed command lines

FLAGS = [
    "--impl",
    "--op",
    "--model",
    "--max-examples",
    "--time-budget",
    "--workers",
    "--seed",
    "--out",
    "--db",
    "--special",
    "--timeout",
    "--first-timeout",
    "--resume",
    "--skip-unavailable",
    "--top",
    "--help",
    "-h",
]
VALUES = [
    "torch",
    "spec",
    "routing",
    "quant",
    "moe",
    "deepseek-v3",
    "nosuchmodel",
    "0",
    "1",
    "-3",
    "2.5",
    "nan",
    "inf",
    "99999",
    "1e308",
    "",
    "no_such_impl",
    "x.py:NOPE",
    "difftest.selftest.bug_models:NOPE",
    "../..",
    "/",
    "\x00",
    "é",
    "--",
    "-",
    "out",
    "afile",
    "run",
    "fixture",
    "badfixture",
    K1,
]


def _argv_token(tmp):
    """Tokens: the real subcommands and flags, values that mean something, paths inside tmp, junk."""
    paths = {
        "afile": str(tmp / "afile"),
        "fixture": str(tmp / "fx" / VALID.name),
        "badfixture": str(tmp / "bad"),
        "run": str(tmp / "run"),
        "out": str(tmp / "new-out"),
    }
    return st.sampled_from(["fuzz", "replay", "report", "impls", "show"] + FLAGS + VALUES).map(
        lambda t: paths.get(t, t)
    ) | st.text(max_size=6).filter(lambda t: not t.startswith("/") and ".." not in t)
    # (an absolute junk path after --out would be a legitimate request to create it: junk stays relative)


def _tree(root):
    skip = {".git", "__pycache__", ".hypothesis", ".tox", ".pytest_cache", ".ruff_cache"}
    return {str(p) for p in root.rglob("*") if not skip & set(p.relative_to(root).parts)}


@pytest.fixture(scope="module")
def argv_sandbox():
    """A temporary directory with a file, a valid fixture, a corrupt one and a small run directory."""
    tmp = Path(tempfile.mkdtemp(prefix="difftest-argv-"))
    (tmp / "afile").write_text("x")
    shutil.copytree(VALID, tmp / "fx" / VALID.name)
    shutil.copytree(VALID, tmp / "bad")
    (tmp / "bad" / "case.json").write_text("{")
    (tmp / "run").mkdir()
    row = {
        "impl": "torch",
        "op": "routing",
        "status": "pass",
        "case": CASE.to_dict(),
        "ratio": 0.0,
        "message": "",
        "seconds": 0.0,
        "spec_seconds": 0.0,
        "recipe": None,
    }
    (tmp / "run" / "cases.jsonl").write_text(json.dumps(row) + "\n")
    yield tmp
    shutil.rmtree(tmp)


def test_fuzzed_command_lines_exit_0_1_2_with_one_line_errors(argv_sandbox, monkeypatch):
    ran = []
    # a valid fuzz command line is validated for real, then not run (a campaign takes minutes)
    monkeypatch.setattr(fuzz_run, "run_campaign", lambda args, out, after=None: ran.append(out) or 0)
    before = _tree(ROOT)
    cwd = os.getcwd()

    @settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_argv_token(argv_sandbox), max_size=6))
    def run(argv):
        TRIED["argv"] += 1
        err, out = io.StringIO(), io.StringIO()
        os.chdir(argv_sandbox)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                code = cli.main(argv)
        finally:
            os.chdir(cwd)
        assert code in (0, 1, 2), (argv, code)
        assert "Traceback" not in err.getvalue()
        if code == 2:
            assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("difftest: error:"), (
                argv,
                err.getvalue(),
            )

    run()
    assert _tree(ROOT) == before, "a command line created files outside its temporary directory"
    print(f"bad inputs tried: {TRIED}")


# ---- determinism across processes

DETERMINISM = [
    CASE,
    Case("quant", QuantConfig("fp8_group", 4, 256), "pow2_edge", 3),
    Case("routing", RoutingConfig("renormalize", 7, 16, 4), "exact_ties", 11),
]


def test_inputs_are_bit_identical_in_another_process():
    script = (
        "import sys; from difftest.model.case import Case; from difftest.model.generate import digest, inputs\n"
        "for line in sys.stdin: print(digest(inputs(Case.from_json(line))))"
    )
    stdin = "".join(c.to_json() + "\n" for c in DETERMINISM)
    digests = []
    for hash_seed in ("0", "12345"):  # a different str-hash seed: no dict or set order leaks into the bits
        r = subprocess.run(
            [sys.executable, "-c", script],
            input=stdin,
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.split())
    here = [generate.digest(generate.inputs(c)) for c in DETERMINISM]
    assert digests[0] == digests[1] == here
    assert np.unique(here).size == len(here)


@pytest.mark.parametrize("argv", [["fuzz", "\n"], ["replay", "a\r\nb", "--bogus"]])
def test_an_argument_with_a_line_break_still_gets_a_one_line_error(argv, capsys):
    """Found by test_fuzzed_command_lines_...: argparse quoted the raw argument, so its message spanned lines."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("difftest: error:"), err
