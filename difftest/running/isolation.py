"""Run implementations that can crash or hang in worker processes; never lose the case that killed one.

An ``IsolatedRunner`` keeps one worker process per implementation, started with the ``spawn`` method
(a forked child of a process with CUDA initialized is unusable). Only case JSON goes in: the worker
rebuilds the implementation with ``difftest.checking.interface.load(impl_ref)`` and the inputs with
``difftest.model.generate.inputs(case)``; outputs come back as npz bytes. A healthy worker serves case after
case (a pipe round trip per case); after a crash or a hang it is replaced on the next case. The first
case of each fresh worker may get a longer timeout (``first_timeout_s``): a JIT-compiled kernel is built
on its first call, in that worker. ``run``
returns an ``Outcome`` of kind

    ok     outputs is the dict of arrays
    error  run() raised (or returned something other than a dict of arrays); detail is the exception line
    harness the worker's own machinery raised, not the implementation: reading the case, making its inputs,
           or run() raising a harness error (checking/interface.py ``is_harness_error``, e.g. a JIT build that
           failed); detail is "Type: message"
    crash  the worker died (abort, SIGSEGV, a C extension exiting; signal or exit says how), or its
           CUDA context is unusable after the case (illegal address, device-side assert: torch raises
           these as exceptions, but they are sticky; detail names the CUDA error)
    hang   no answer within the case's timeout; the worker gets SIGTERM, then SIGKILL after GRACE_S

The worker's stdout and stderr (file descriptors 1 and 2, so C-level output too) go to a log file in
the run directory; ``output_tail`` is what the worker wrote during the case. faulthandler in the worker
prints the Python stack on a fatal signal and on the watchdog's SIGTERM, so a hang's tail says where.

Write-ahead: before a case is sent, the runner appends it to its log ``wal-*.jsonl`` (flushed and
fsynced) and marks it done afterwards. A runner holds an exclusive flock on its log while alive, so
``pending_cases`` reads only the logs of runners that died: their started-but-unfinished cases are the
ones that took the whole campaign down. ``settle_pending`` marks them once the campaign has recorded them.

Why not the ready-made pools: ``concurrent.futures.ProcessPoolExecutor`` reports a dead worker as
``BrokenProcessPool`` on every pending future (without the signal, and the pool must be rebuilt), and
cannot stop one running task that hangs: ``cancel`` leaves it running and shutdown waits for it.
pytest-xdist restarts a crashed test worker (``--max-worker-restart``) but the Hypothesis example
inside dies with it and a hang is never stopped. Hypothesis runs examples in-process. So each xdist
worker owns its runners, and a runner is a ``multiprocessing`` Process and Pipe, with
``multiprocessing.connection.wait`` on the pipe and the process sentinel as the watchdog.
A runner is not thread-safe; create it on the thread that uses it (the worker's parent-death signal
follows the creating thread). As with any ``spawn`` child, the worker imports the main script again, so
a script that creates runners keeps its work under ``if __name__ == "__main__":``.
"""

import ctypes
import faulthandler
import fcntl
import io
import itertools
import json
import multiprocessing
import os
import secrets
import signal
import sys
import time
import traceback
import weakref
from contextlib import contextmanager
from multiprocessing.connection import wait
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..checking.interface import failure_of, is_harness_error
from ..model.case import Case
from ..store.atomic import _fsync_dir

GRACE_S = 1.0  # between SIGTERM (stack dump) and SIGKILL, and for a dead worker to be reaped
TAIL_CHARS = 16000  # a fatal-signal dump ends with the list of extension modules (long with torch)
STARTUP_TIMEOUT_S = 300.0  # importing torch + flashinfer on a cold cache takes minutes
PR_SET_PDEATHSIG = 1  # linux/prctl.h

_CTX = multiprocessing.get_context("spawn")


class Outcome(NamedTuple):
    kind: str  # "ok" | "error" | "harness" | "crash" | "hang"
    outputs: dict | None  # name -> np.ndarray when kind == "ok"
    detail: str  # one line: the exception, the signal, or the timeout
    exit: int | None  # the worker's exit status when it exited by itself
    signal: int | None  # the signal that ended the worker
    output_tail: str  # the worker's output during this case (+ the traceback of an error)
    seconds: float
    failure: tuple | None = None  # an error's (field, check) pair (checking/interface.py ``failure_of``)


class WorkerStartError(RuntimeError):
    """The worker could not load the implementation or died while starting; the message says why. Raised for a
    case (a worker restarted after a crash), it is the tester's failure, not the case's (``difftest_harness``)."""

    difftest_harness = True


# ---- the worker process

def _redirect_output(log_path):
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)  # a crash must not swallow what was printed


def _die_with_parent(parent_pid):
    """Linux: SIGKILL this worker when the campaign dies, so an orphaned hung kernel cannot hold the GPU."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)


def _to_npz(outputs):
    if not isinstance(outputs, dict):
        raise TypeError(f"run() must return a dict of numpy arrays, got {type(outputs).__name__}")
    for name, value in outputs.items():
        if not isinstance(value, np.ndarray):
            raise TypeError(f"run() output {name!r} is {type(value).__name__}, not a numpy array")
    buf = io.BytesIO()
    np.savez(buf, **outputs)
    return buf.getvalue()


def _cuda_problem():
    """None, or why this process's CUDA context is unusable. torch raises an illegal address or a
    device-side assert as a Python exception, but the error is sticky: every later CUDA call fails.
    Synchronizing also charges an asynchronous kernel fault to the case that launched it."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as e:  # any failure here means the context is gone
        return f"{type(e).__name__}: {_first_line(str(e))}"
    return None


def _harness_reply(e):
    return b"harness\n" + f"{type(e).__name__}: {_first_line(str(e))}\n".encode() + traceback.format_exc().encode()


def _error_reply(e):
    """The implementation's exception: its (field, check) pair (interface.failure_of, made here where its class is
    known), its "Type: first line", then the traceback."""
    field, check = failure_of(e)
    return (b"error\n" + f"{field}\t{check}\n{type(e).__name__}: {_first_line(str(e))}\n".encode()
            + traceback.format_exc().encode())


def _serve(impl, request, inputs):
    try:
        case = Case.from_json(request.decode())
        args = inputs(case)
    except Exception as e:  # the worker's machinery, before the implementation runs
        return _harness_reply(e)
    try:
        reply = b"ok\n" + _to_npz(impl.run(case, args))
    except Exception as e:  # a Python exception is the implementation's answer, not a crash
        reply = _harness_reply(e) if is_harness_error(e) else _error_reply(e)
    problem = _cuda_problem()
    if problem:
        return b"crash\n" + f"CUDA context unusable after the case: {problem}\n".encode() + reply
    return reply


def _worker_main(conn, impl_ref, log_path, parent_pid):
    _redirect_output(log_path)
    faulthandler.enable()
    faulthandler.register(signal.SIGTERM, chain=True)  # the watchdog's SIGTERM: dump the hung stack, then die
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the campaign, which then stops the worker
    _die_with_parent(parent_pid)
    try:
        from ..checking.interface import load
        from ..model.generate import inputs

        impl = load(impl_ref)
    except Exception as e:
        conn.send_bytes(b"error\n" + f"{type(e).__name__}: {e}\n".encode() + traceback.format_exc().encode())
        return
    conn.send_bytes(b"ready\n" + str(impl.name).encode())
    while True:
        try:
            request = conn.recv_bytes()
        except EOFError:  # the runner closed the pipe: a clean stop
            return
        reply = _serve(impl, request, inputs)
        conn.send_bytes(reply)
        if reply.startswith(b"crash\n"):  # a fresh worker gets a fresh CUDA context
            return


# ---- the runner

def _split(message):
    kind, _, payload = message.partition(b"\n")
    return kind.decode(), payload


def _first_line(text):
    return text.strip().splitlines()[0] if text.strip() else ""


def _last_line(text):
    return text.strip().splitlines()[-1] if text.strip() else ""


def _ended_by(exitcode):
    """(exit, signal, words) for a multiprocessing exitcode (negative: killed by that signal)."""
    if exitcode is None:
        return None, None, "did not exit after SIGKILL"
    if exitcode < 0:
        return None, -exitcode, f"killed by {signal.Signals(-exitcode).name} (signal {-exitcode})"
    return exitcode, None, f"exited with status {exitcode}"


def _stop(proc, conn):
    """Close the pipe (the worker exits on EOF); kill it if it does not."""
    conn.close()
    proc.join(GRACE_S)
    if proc.exitcode is None:
        proc.kill()
        proc.join(GRACE_S)


def _positive(value, name):
    # finite: multiprocessing's wait() cannot take an infinite timeout
    if not (isinstance(value, (int, float)) and 0 < value < float("inf")):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


class IsolatedRunner:
    """``run(case)`` in a reusable worker process; crashes and hangs become ``Outcome``s."""

    def __init__(self, impl_ref, timeout_s, workdir, *, startup_timeout_s=STARTUP_TIMEOUT_S,
                 first_timeout_s=None):
        if not isinstance(impl_ref, str) or not impl_ref:
            raise ValueError(f"impl_ref must be a non-empty implementation reference, got {impl_ref!r}")
        self.impl_ref = impl_ref
        self.timeout_s = _positive(timeout_s, "timeout_s")
        first = None if first_timeout_s is None else _positive(first_timeout_s, "first_timeout_s")
        self.first_timeout_s = first  # None: the first case gets the same timeout as the others
        self._fresh = True  # the worker has not run a case yet
        self.startup_timeout_s = _positive(startup_timeout_s, "startup_timeout_s")
        self.workdir = Path(workdir).absolute()
        self.workdir.mkdir(parents=True, exist_ok=True)
        token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._log_path = self.workdir / f"worker-{token}.log"
        self._proc = self._conn = self._finalizer = None
        self.name = None
        self._start()
        self._wal = _WriteAheadLog(self.workdir / f"wal-{token}.jsonl", impl_ref)

    @property
    def worker_pid(self):
        return self._proc.pid if self._proc else None

    def _start(self):
        conn, child = _CTX.Pipe()
        proc = _CTX.Process(target=_worker_main, name=f"difftest-{self.impl_ref}",
                            args=(child, self.impl_ref, str(self._log_path), os.getpid()))
        offset = self._log_size()
        proc.start()
        child.close()  # else the worker's death would not close the pipe here
        if not wait([conn, proc.sentinel], self.startup_timeout_s):
            proc.kill()
            _stop(proc, conn)
            raise WorkerStartError(f"worker for {self.impl_ref} not ready after {self.startup_timeout_s:g} s")
        try:
            kind, payload = _split(conn.recv_bytes())
        except (EOFError, OSError):
            _stop(proc, conn)
            words = _ended_by(proc.exitcode)[2]
            tail = _last_line(self._tail(offset))
            raise WorkerStartError(f"worker for {self.impl_ref} {words} while starting: {tail}") from None
        if kind != "ready":
            _stop(proc, conn)
            raise WorkerStartError(f"worker could not load {self.impl_ref}: {_first_line(payload.decode())}")
        self.name = payload.decode()
        self._proc, self._conn, self._fresh = proc, conn, True
        self._finalizer = weakref.finalize(self, _stop, proc, conn)  # at exit, before multiprocessing joins

    def _log_size(self):
        try:
            return self._log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _tail(self, offset):
        try:
            with open(self._log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", errors="replace")[-TAIL_CHARS:]
        except FileNotFoundError:  # the worker died before redirecting its output (see the parent's stderr)
            return ""

    def _discard_worker(self):
        self._finalizer.detach()
        self._proc = self._conn = self._finalizer = None

    def run(self, case, timeout_s=None):
        """Run one case; ``timeout_s`` overrides the runner's timeout for this case."""
        if not isinstance(case, Case):
            raise TypeError(f"run() takes a difftest.model.case.Case, got {type(case).__name__}")
        timeout = self.timeout_s if timeout_s is None else _positive(timeout_s, "timeout_s")
        if self._proc is None:
            self._start()
        if self._fresh and self.first_timeout_s is not None:
            timeout = max(timeout, self.first_timeout_s)
        self._fresh = False
        offset = self._log_size()
        seq = self._wal.start(case, self._proc.pid)
        try:
            outcome = self._exchange(case, timeout, offset)
        except BaseException:  # interrupted here, not killed by the case: the worker's state is unknown
            _stop(self._proc, self._conn)
            self._discard_worker()
            self._wal.done(seq, "interrupted")
            raise
        self._wal.done(seq, outcome.kind)
        return outcome

    def _exchange(self, case, timeout, offset):
        t0 = time.monotonic()
        try:
            self._conn.send_bytes(case.to_json().encode())
            if not wait([self._conn, self._proc.sentinel], timeout):
                return self._hang(timeout, offset, time.monotonic() - t0)
            kind, payload = _split(self._conn.recv_bytes())
        except (EOFError, OSError):
            return self._crash(offset, time.monotonic() - t0)
        seconds = time.monotonic() - t0
        if kind == "ok":
            with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
                outputs = {name: npz[name] for name in npz.files}
            return Outcome("ok", outputs, "", None, None, self._tail(offset), seconds)
        text = payload.decode(errors="replace")
        if kind == "crash":
            _stop(self._proc, self._conn)
            self._discard_worker()
            return Outcome("crash", None, _first_line(text), None, None, self._tail(offset) + text, seconds)
        if kind == "harness":
            return Outcome("harness", None, _first_line(text), None, None, self._tail(offset) + text, seconds)
        named, _, text = text.partition("\n")
        return Outcome("error", None, _first_line(text), None, None, self._tail(offset) + text, seconds,
                       tuple(named.split("\t", 1)))

    def _crash(self, offset, seconds):
        _stop(self._proc, self._conn)
        exit_, sig, words = _ended_by(self._proc.exitcode)
        self._discard_worker()
        return Outcome("crash", None, f"worker {words}", exit_, sig, self._tail(offset), seconds)

    def _hang(self, timeout, offset, seconds):
        self._proc.terminate()
        _stop(self._proc, self._conn)
        exit_, sig, words = _ended_by(self._proc.exitcode)
        self._discard_worker()
        detail = f"no result within {timeout:g} s; worker {words}"
        return Outcome("hang", None, detail, exit_, sig, self._tail(offset), seconds)

    def close(self):
        if self._proc is not None:
            _stop(self._proc, self._conn)
            self._discard_worker()
        self._wal.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the write-ahead log

class _WriteAheadLog:
    """One JSON line per started case ({seq, impl, worker_pid, case}) and per finished one ({seq, done})."""

    def __init__(self, path, impl_ref):
        self.path, self.impl_ref = path, impl_ref
        self._f = open(path, "x", encoding="utf-8")
        fcntl.flock(self._f, fcntl.LOCK_EX)  # held while alive: pending_cases skips this log
        _fsync_dir(path.parent)
        self._seq = itertools.count()
        self._open = set()

    def _append(self, entry):
        self._f.write(json.dumps(entry, sort_keys=True) + "\n")
        self._f.flush()

    def start(self, case, worker_pid):
        seq = next(self._seq)
        self._append({"seq": seq, "impl": self.impl_ref, "worker_pid": worker_pid, "case": case.to_dict()})
        os.fsync(self._f.fileno())  # on disk before the kernel runs: a machine reset must not lose it
        self._open.add(seq)
        return seq

    def done(self, seq, kind):
        # Not fsynced: a flushed line survives the death of this process; only a machine crash could
        # lose it, and then the case reappears as pending (a spurious finding, never a lost one).
        self._append({"seq": seq, "done": kind})
        self._open.discard(seq)

    def close(self):
        if not self._open:
            self.path.unlink()  # unlinked while still locked, so no reader sees a half-closed log
        self._f.close()


def _entries(f):
    for line in f:
        try:
            yield json.loads(line)
        except json.JSONDecodeError:  # a torn append from a machine crash: that case was never sent
            continue


def _pending_entries(f):
    started = {}
    for entry in _entries(f):
        if "done" in entry:
            started.pop(entry["seq"], None)
        else:
            started[entry["seq"]] = entry
    return list(started.values())


@contextmanager
def _dead_logs(run_dir, lock):
    """(path, open file) of each write-ahead log in run_dir whose runner is gone, locked with ``lock``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    logs = []
    try:
        for path in sorted(run_dir.glob("wal-*.jsonl")):
            try:
                f = open(path, "r+", encoding="utf-8")
            except FileNotFoundError:  # its runner closed cleanly meanwhile
                continue
            try:
                fcntl.flock(f, lock | fcntl.LOCK_NB)
            except BlockingIOError:  # a live runner owns it
                f.close()
                continue
            logs.append((path, f))
        yield logs
    finally:
        for _, f in logs:
            f.close()


def pending(run_dir):
    """[(impl_ref, case, worker_pid)] started but never finished by runners that died."""
    with _dead_logs(run_dir, fcntl.LOCK_SH) as logs:
        return [(e["impl"], Case.from_dict(e["case"]), e["worker_pid"])
                for _, f in logs for e in _pending_entries(f)]


def pending_cases(run_dir, impl_ref=None):
    """Cases started but never finished by runners that died (optionally only those of ``impl_ref``)."""
    return [case for ref, case, _ in pending(run_dir) if impl_ref in (None, ref)]


def settle_pending(run_dir, cases, impl_ref=None):
    """Mark ``cases`` (as returned by pending_cases, once recorded as findings) finished; a log with
    nothing left pending is removed."""
    wanted = {case.to_json() for case in cases}
    with _dead_logs(run_dir, fcntl.LOCK_EX) as logs:
        for path, f in logs:
            pending = _pending_entries(f)
            settled = [e for e in pending
                       if impl_ref in (None, e["impl"]) and Case.from_dict(e["case"]).to_json() in wanted]
            if len(settled) == len(pending):
                path.unlink()
                continue
            f.seek(0, os.SEEK_END)
            f.write("\n" + "".join(  # the leading newline ends a torn last line
                json.dumps({"seq": e["seq"], "done": "settled"}) + "\n" for e in settled))
            f.flush()
            os.fsync(f.fileno())
