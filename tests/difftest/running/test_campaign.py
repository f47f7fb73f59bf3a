"""Differential campaigns: every available implementation against the spec, one Hypothesis run per (impl, op,
slice); pytest-xdist spreads the cells over workers (GPU workers pinned in conftest.py). Budget per cell:
the loaded profile's max_examples (--hypothesis-profile; the setting db shares the example database).
Also: a deliberately broken copy of torch is found, shrunk, recorded and replayed."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from difftest.checking import interface
from difftest.model import strategies
from difftest.model.case import OPS
from difftest.running import campaign
from difftest.store import fixtures

ROOT = Path(__file__).resolve().parents[3]
SLICES = [(op, label) for op in OPS for label, _ in strategies.slices(op)]
pytestmark = pytest.mark.campaign


def _cells(chosen):
    """Every slice of every implementation chosen with --impl (tests/conftest.py; names or module:NAME / file.py:NAME
    references), default every known one; one skipped cell (with reason) per unavailable one."""
    for name in chosen or interface.names():
        if name == "spec":
            continue
        try:
            impl = interface.load(name)
            reason = impl.available()
        except Exception as e:  # an adapter that cannot even load is unavailable, with that reason
            impl, reason = None, f"{type(e).__name__}: {e}"
        if reason:
            yield pytest.param(name, None, None, id=f"{name}-unavailable")
            continue
        for op, label in SLICES:
            if op in impl.ops:
                yield pytest.param(name, op, label, id=f"{name}-{op}-{label}")


def pytest_generate_tests(metafunc):
    if metafunc.definition.name == "test_campaign":
        from tests.conftest import selected_impls

        metafunc.parametrize("impl_name, op, label", list(_cells(selected_impls(metafunc.config))))


def test_campaign(impl_name, op, label, tmp_path):
    impl = interface.load(impl_name)
    if op is None:
        pytest.skip(f"{impl_name}: {impl.available()}")
    configs = dict(strategies.slices(op))[label]
    res = campaign.fuzz_cell(impl, impl_name, op, configs=configs, fixtures_root=tmp_path / "fixtures")
    assert res.finding is None, res.finding
    if res.skipped_all():  # a cell that compared nothing is no pass
        pytest.skip(f"{impl_name} {op}/{label}: {res.skipped_all()}")


def test_deliberate_bug_is_found_shrunk_recorded_and_replayed(tmp_path):
    ref = "difftest.selftest.bug_models:DEEPSEEK_BIASED_WEIGHTS"
    impl = interface.load(ref)
    res = campaign.fuzz_cell(
        impl,
        ref,
        "routing",
        fixtures_root=tmp_path,
        hypothesis_settings=settings(max_examples=300, database=None, derandomize=True),
    )
    assert res.finding and "weights" in res.finding and "replay: python -m difftest replay" in res.finding
    fx = fixtures.load(res.fixture)
    c = fx.case.config
    assert (fx.case.op, c.method, fx.status) == ("routing", "deepseek_v3", "open")
    assert c.num_tokens == 1 and c.num_experts <= 2 and c.bias_dtype is not None  # shrunk to the essentials
    r = subprocess.run(
        [sys.executable, "-m", "difftest", "replay", res.fixture, "--impl", "torch"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "as recorded" in r.stdout, r.stdout + r.stderr
    assert "bug:deepseek_biased_weights fail" in r.stdout and "torch pass" in r.stdout


@pytest.mark.parametrize(
    "outer, worker, expected",
    [
        (None, "gw1", None),
        ("3,5", "gw0", "3"),
        ("3,5", "gw3", "5"),
        ("", "gw2", ""),
    ],
)
def test_gpu_pinning_respects_outer_mask(monkeypatch, outer, worker, expected):
    from tests import conftest

    monkeypatch.setattr(conftest, "_gpus", lambda: [])
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    if outer is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", outer)
    conftest.pytest_configure(None)
    import os

    assert os.environ.get("CUDA_VISIBLE_DEVICES") == expected


PLUGIN = """
import os
from difftest.checking.impl_spec import SPEC

def run(case, inputs):
    if case.config.num_tokens >= 3:
        os.abort()  # a kernel that takes the process down on one shape
    return SPEC.run(case, inputs)

CRASHY = SPEC._replace(name="crashy", ops=("routing",), may_crash=True, run=run)
"""


def test_crashing_plugin_is_isolated_found_and_recorded(tmp_path):
    plugin = tmp_path / "crashy.py"
    plugin.write_text(PLUGIN)
    ref = f"{plugin}:CRASHY"
    res = campaign.fuzz_cell(
        interface.load(ref),
        ref,
        "routing",
        fixtures_root=tmp_path / "fixtures",
        hypothesis_settings=settings(max_examples=60, database=None, derandomize=True),
    )
    assert res.finding is not None and "crash: worker killed by SIGABRT" in res.finding, res.finding
    fx = fixtures.load(res.fixture)
    assert (fx.kind, fx.meta["observed"]["signal"]) == ("crash", signal.SIGABRT)
    assert "Fatal Python error: Aborted" in fx.meta["observed"]["output_tail"]
    assert fx.case.config.num_tokens == 3  # shrunk to the edge (within CRASH_SHRINK_S)


def test_a_campaign_weight_seed_reaches_every_moe_case(monkeypatch):
    from hypothesis import strategies as st

    from difftest.checking.impl_spec import SPEC
    from difftest.model.case import MoEConfig, RoutingConfig

    class Clock:  # 50 ms at every reading: the budget below lasts the same number of readings on any machine
        now = 0.0

        def monotonic(self):
            self.now += 0.05
            return self.now

    rows = []
    config = MoEConfig(RoutingConfig("renormalize", 2, 4, 2), 32, 16)
    cells = [(SPEC, "spec", "moe", st.just(config))]
    monkeypatch.setattr(campaign, "time", Clock())
    for _, res in campaign.timed_cells(cells, 1.0, 1.0, 0, record=rows.append, weight_seed=3):
        assert res.finding is None, res.finding
    assert rows and {r["case"]["weight_seed"] for r in rows} == {3} and len({r["case"]["seed"] for r in rows}) > 1


def test_bad_weight_seed_setting_is_a_usage_error():
    """Through the variable that carries the settings into workers (difftest/model/settings.py): exit 2, one line."""
    r = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--model", "mono-moe", "--impl", "torch"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "DIFFTEST_SETTINGS": '{"weight_seed": -1}'})
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "DIFFTEST_SETTINGS: setting weight_seed must be an integer in [0, " in r.stderr, r.stderr


def test_database_key_separates_fixed_weights_and_keeps_older_keys():
    """Saved examples must not replay against other weights; a cell without a weight seed keeps the key earlier
    versions wrote, so an existing database still replays."""
    from difftest.checking.impl_spec import SPEC
    from difftest.running.database import database_key as key

    assert key(SPEC, "moe", "spec", None) == f"{SPEC.name}|moe|spec|None".encode()
    assert len({key(SPEC, "moe", "spec", None), key(SPEC, "moe", "spec", None, 0),
                key(SPEC, "moe", "spec", None, 1)}) == 3
