"""Isolation: injected crashes, hangs and errors become outcomes; a killed campaign leaves its case on disk;
atomic writes are never seen half-written."""

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from difftest.model.case import Case, RoutingConfig
from difftest.model.generate import inputs
from difftest.running.isolation import IsolatedRunner, WorkerStartError, pending_cases, settle_pending
from difftest.store.atomic import atomic_write_bytes, atomic_write_text, create_dir_exclusive
from tests.plugins import faulty_impls

ROOT = Path(__file__).resolve().parents[3]
FAULTY = ROOT / "tests" / "plugins" / "faulty_impls.py"


def ref(name):
    return f"{FAULTY}:{name}"


def case(seed=0):
    return Case("routing", RoutingConfig("renormalize", num_tokens=5, num_experts=8, top_k=2), "normal", seed)


def seed_of(fault, k=0, impl=faulty_impls.BY_SEED):
    """A seed on which ``impl`` does ``fault`` (k picks among them)."""
    return impl.cycle.index(fault) + k * len(impl.cycle)


def assert_healthy(outcome, c):
    assert outcome.kind == "ok", f"healthy case gave {outcome.kind}: {outcome.detail}"
    expected = faulty_impls.HEALTHY.run(c, inputs(c))
    assert outcome.outputs.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(outcome.outputs[name], expected[name], err_msg=name)


@pytest.fixture
def runner(tmp_path):
    with IsolatedRunner(ref("BY_SEED"), 30.0, tmp_path) as r:
        yield r


# ---- outcomes of injected faults

@pytest.mark.parametrize("fault, sig, tail", [
    ("abort", signal.SIGABRT, "Fatal Python error: Aborted"),
    ("segfault", signal.SIGSEGV, "Fatal Python error: Segmentation fault"),
])
def test_signal_is_crash_and_fresh_worker_follows(runner, fault, sig, tail):
    first = runner.worker_pid
    outcome = runner.run(case(seed_of(fault)))
    assert outcome.kind == "crash" and outcome.signal == sig and outcome.exit is None
    assert signal.Signals(sig).name in outcome.detail
    assert tail in outcome.output_tail and "faulty_impls.py" in outcome.output_tail
    assert_healthy(runner.run(case(seed_of("none", 1))), case(seed_of("none", 1)))
    assert runner.worker_pid != first


def test_exit_status_is_crash(runner):
    outcome = runner.run(case(seed_of("exit")))
    assert (outcome.kind, outcome.exit, outcome.signal) == ("crash", 3, None)
    assert outcome.detail == "worker exited with status 3"
    assert_healthy(runner.run(case()), case())


def test_hang_is_killed_after_per_case_timeout(runner):
    first = runner.worker_pid
    outcome = runner.run(case(seed_of("hang")), timeout_s=1.0)
    assert outcome.kind == "hang" and outcome.signal in (signal.SIGTERM, signal.SIGKILL)
    assert "no result within 1 s" in outcome.detail
    assert 1.0 <= outcome.seconds < 10.0
    assert "in _hang" in outcome.output_tail, "the SIGTERM stack dump names the hung function"
    assert_healthy(runner.run(case(seed_of("none", 2))), case(seed_of("none", 2)))
    assert runner.worker_pid != first


def test_exception_is_error_and_worker_is_kept(runner):
    first = runner.worker_pid
    outcome = runner.run(case(seed_of("raise")))
    assert (outcome.kind, outcome.outputs, outcome.signal) == ("error", None, None)
    assert outcome.detail == "RuntimeError: injected failure"
    assert "Traceback" in outcome.output_tail
    assert_healthy(runner.run(case()), case())
    assert runner.worker_pid == first, "a Python exception must not cost a process start"


def test_non_array_output_is_error(tmp_path):
    with IsolatedRunner(ref("BAD_OUTPUT"), 30.0, tmp_path) as r:
        outcome = r.run(case())
    assert outcome.kind == "error"
    assert outcome.detail == "TypeError: run() output 'ids' is list, not a numpy array"


def test_worker_is_reused_while_healthy(tmp_path):
    with IsolatedRunner(ref("HEALTHY"), 30.0, tmp_path) as r:
        pid = r.worker_pid
        for seed in range(20):
            assert_healthy(r.run(case(seed)), case(seed))
        assert r.worker_pid == pid, "a healthy worker serves every case"
    assert r.worker_pid is None


def cuda_problem():
    """None, or why no CUDA device is usable (asked without initializing CUDA in this process)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else "no CUDA device (torch.cuda.is_available() is False)"


@pytest.mark.gpu
def test_cuda_sticky_error_is_crash_and_gpu_hang_is_killed(tmp_path):
    if cuda_problem():
        pytest.skip(cuda_problem())
    impl = faulty_impls.BY_SEED_CUDA
    with IsolatedRunner(ref("BY_SEED_CUDA"), 120.0, tmp_path) as r:
        first = r.worker_pid
        outcome = r.run(case(seed_of("cuda_assert", impl=impl)))
        assert outcome.kind == "crash" and outcome.signal is None and outcome.exit is None
        assert "CUDA context unusable" in outcome.detail and "device-side assert" in outcome.detail
        assert_healthy(r.run(case(seed_of("none", 1, impl))), case(seed_of("none", 1, impl)))
        assert r.worker_pid != first
        outcome = r.run(case(seed_of("cuda_hang", impl=impl)), timeout_s=5.0)
        assert outcome.kind == "hang", outcome.detail
        assert "in _cuda_hang" in outcome.output_tail
        assert_healthy(r.run(case(seed_of("none", 2, impl))), case(seed_of("none", 2, impl)))


# ---- bad input

def test_bad_references_and_timeouts_are_rejected(tmp_path):
    with pytest.raises(WorkerStartError, match="has no attribute 'NOPE'"):
        IsolatedRunner(ref("NOPE"), 1.0, tmp_path)
    with pytest.raises(WorkerStartError, match="no such file"):
        IsolatedRunner("missing/file.py:X", 1.0, tmp_path)
    with pytest.raises(WorkerStartError, match="unknown implementation 'nonsense'"):
        IsolatedRunner("nonsense", 1.0, tmp_path)
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        IsolatedRunner(ref("HEALTHY"), 0, tmp_path)
    assert list(tmp_path.glob("wal-*")) == [], "a runner that never started leaves no log"


def test_run_rejects_non_case(runner):
    with pytest.raises(TypeError, match="takes a difftest.model.case.Case, got dict"):
        runner.run(case().to_dict())
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        runner.run(case(), timeout_s=-1)


# ---- write-ahead log

CAMPAIGN = """
import sys
from difftest.model.case import Case
from difftest.running.isolation import IsolatedRunner
with IsolatedRunner(sys.argv[1], 60.0, sys.argv[2]) as r:
    for c in sys.argv[3:]:
        r.run(Case.from_json(c))
"""


def started_entry(run_dir, c, deadline_s=300.0):  # catches a hang only: a loaded machine may take long to start
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for path in run_dir.glob("wal-*.jsonl"):
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if entry.get("case") == c.to_dict():
                    return entry
        time.sleep(0.05)
    raise AssertionError(f"case {c} not started in {run_dir} within {deadline_s} s")


def gone_or_zombie(pid, deadline_s=120.0):  # catches a hang only
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_killed_campaign_leaves_its_case_pending(tmp_path):
    healthy, c = case(seed_of("none")), case(seed_of("hang"))
    argv = [sys.executable, "-c", CAMPAIGN, ref("BY_SEED"), str(tmp_path), healthy.to_json(), c.to_json()]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        entry = started_entry(tmp_path, c)
        assert pending_cases(tmp_path) == [], "a live runner's case is not pending"
    finally:
        proc.kill()
        proc.wait()
    assert pending_cases(tmp_path) == [c], "only the case that was running is pending"
    assert pending_cases(tmp_path, impl_ref=ref("BY_SEED")) == [c]
    assert pending_cases(tmp_path, impl_ref=ref("HEALTHY")) == []
    assert gone_or_zombie(entry["worker_pid"]), "the hung worker outlived its campaign"
    settle_pending(tmp_path, [c])
    assert pending_cases(tmp_path) == []
    assert list(tmp_path.glob("wal-*.jsonl")) == []


def test_settle_keeps_cases_not_named(tmp_path):
    a, b = case(1), case(2)
    wal = tmp_path / "wal-dead.jsonl"
    lines = [{"seq": 0, "impl": "x", "worker_pid": 1, "case": a.to_dict()},
             {"seq": 1, "impl": "x", "worker_pid": 1, "case": b.to_dict()}]
    wal.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"seq": 2, "imp')  # torn last append
    assert pending_cases(tmp_path) == [a, b]
    settle_pending(tmp_path, [a])
    assert pending_cases(tmp_path) == [b]


def test_completed_cases_leave_nothing(tmp_path):
    with IsolatedRunner(ref("BY_SEED"), 30.0, tmp_path) as r:
        assert r.run(case(seed_of("abort"))).kind == "crash"
        assert r.run(case()).kind == "ok"
    assert pending_cases(tmp_path) == []
    assert list(tmp_path.glob("wal-*.jsonl")) == []


def test_pending_cases_needs_existing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pending_cases(tmp_path / "nowhere")


# ---- atomic files

def test_concurrent_reader_never_sees_partial_file(tmp_path):
    path = tmp_path / "report.json"
    versions = (b"a" * 100_000, b"b" * 300_000)
    atomic_write_bytes(path, versions[0])
    done = threading.Event()

    def writer():
        for i in range(200):
            atomic_write_bytes(path, versions[i % 2])
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = []
    while not done.is_set():
        data = path.read_bytes()
        assert data in versions, f"reader saw {len(data)} bytes, a partial file"
        seen.append(data[:1])
    thread.join()
    assert set(seen) == {b"a", b"b"}, "the reader never saw the file change"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"], "temporary files left behind"


def test_atomic_write_text_round_trip_and_missing_dir(tmp_path):
    atomic_write_text(tmp_path / "case.json", "{\"é\": 1}\n")
    assert (tmp_path / "case.json").read_text(encoding="utf-8") == "{\"é\": 1}\n"
    assert oct((tmp_path / "case.json").stat().st_mode & 0o777) == oct(0o644)
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "no" / "case.json", "x")


def test_create_dir_exclusive_refuses_existing(tmp_path):
    d = create_dir_exclusive(tmp_path / "fixtures" / "abc123")
    (d / "case.json").write_text("{}")
    with pytest.raises(FileExistsError) as e:
        create_dir_exclusive(d)
    assert "never overwritten" in str(e.value) and "\n" not in str(e.value)
    assert (d / "case.json").read_text() == "{}"
