"""Hypothesis profiles, selected explicitly, the implementations under test, and one GPU per xdist worker.

Profiles: "difftest-ci" (derandomized, no deadline, small budget, print_blob), "dev" (the default off CI),
"fuzz" (large budget, all phases). Hypothesis' own option ``--hypothesis-profile NAME`` picks one; without it CI
(CI=true) gets "difftest-ci" and everything else "dev". Selecting ours is what keeps Hypothesis' own auto-loaded "ci"
profile (no database, ...) out. The setting db (docs/settings.md: ``[tool.difftest] db`` or DIFFTEST_SETTINGS) names a
shared example database (resume / share campaigns). ``--impl NAME`` (repeatable or comma-separated) picks the
implementations of tests/difftest/running/test_campaign.py.
"""

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, settings

from difftest.model.settings import SettingsError, refuse_retired
from difftest.running.database import database

try:  # a variable retired for an option (the profile, the implementations) fails the run, not silently ignored
    refuse_retired()
except SettingsError as e:
    raise pytest.UsageError(str(e)) from None

HEALTH = [
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.filter_too_much,
    HealthCheck.differing_executors,
]
settings.register_profile(
    "difftest-ci",
    derandomize=True,
    deadline=None,
    max_examples=150,  # ~2.5 CPU-minutes for the torch campaign (tox's default run)
    print_blob=True,
    database=database(),
    suppress_health_check=HEALTH,
)
settings.register_profile(
    "dev", deadline=None, max_examples=40, print_blob=True, database=database(), suppress_health_check=HEALTH
)
settings.register_profile(
    "fuzz",
    deadline=None,
    max_examples=10_000,
    print_blob=True,
    database=database(),
    suppress_health_check=HEALTH,
)
PROFILE = "difftest-ci" if os.environ.get("CI") else "dev"  # --hypothesis-profile NAME loads another, later
settings.load_profile(PROFILE)


def pytest_addoption(parser):
    parser.addoption("--impl", action="append", metavar="NAME",
                     help="implementations for tests/difftest/running/test_campaign.py (repeatable or "
                          "comma-separated): registry names, module:NAME or file.py:NAME references; default every "
                          "known one")


def selected_impls(config):
    """The --impl references, or None (every known implementation)."""
    chosen = [r.strip() for option in config.getoption("impl") or () for r in option.split(",") if r.strip()]
    return chosen or None


def _gpus():
    """Device indices from `nvidia-smi -L` (asking CUDA itself would initialize it before the pinning)."""
    if not shutil.which("nvidia-smi"):
        return []
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return [str(i) for i, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def pytest_configure(config):
    """Pin xdist worker gwN to one GPU before anything initializes CUDA: entry N (mod count) of the outer
    CUDA_VISIBLE_DEVICES when set, so an outer restriction is never escaped; else of the machine's GPUs."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not worker.startswith("gw"):
        return
    outer = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d for d in outer.split(",") if d.strip()] if outer is not None else _gpus()
    if devices:
        os.environ["CUDA_VISIBLE_DEVICES"] = devices[int(worker[2:]) % len(devices)]


def pytest_report_header(config):
    return f"hypothesis profile: {settings.get_current_profile_name()} (--hypothesis-profile / CI)"


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny tensors: torch's intra-op threads only contend for the shared cores (10x slower here)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
