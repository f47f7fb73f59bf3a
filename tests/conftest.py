"""Hypothesis profiles, selected explicitly, and one GPU per xdist worker.

Profiles: "difftest-ci" (derandomized, no deadline, small budget, print_blob), "dev" (the default off CI),
"fuzz" (large budget, all phases). DIFFTEST_PROFILE picks one; without it CI (CI=true) gets "difftest-ci"
and everything else "dev". Selecting ours is what keeps Hypothesis' own auto-loaded "ci" profile (no
database, ...) out. DIFFTEST_DB names a shared example database directory (resume / share campaigns).
"""

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, settings

from difftest.running.database import database

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
PROFILE = os.environ.get("DIFFTEST_PROFILE") or ("difftest-ci" if os.environ.get("CI") else "dev")
settings.load_profile(PROFILE)


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
    return f"hypothesis profile: {PROFILE} (DIFFTEST_PROFILE / CI)"


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny tensors: torch's intra-op threads only contend for the shared cores (10x slower here)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
