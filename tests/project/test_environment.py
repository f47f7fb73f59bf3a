"""The pinned test environment: tox's default env installs through PIP_CONSTRAINT=constraints.txt, and every
distribution installed in it must be listed there at its installed version, so that a new upstream release
cannot change what `tox` runs (docs/testing.md, "Refreshing the pins")."""

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import lock  # noqa: E402

NOT_PINNED = {
    "pip": "the installer, seeded by virtualenv (whose version is pinned)",
    "moe-difftest": "the project itself, installed editable",
}


def pinned(path):
    """{canonical name: version} of a constraints file."""
    lines = Path(path).read_text().splitlines()
    return dict((lock.canonical(n), v) for n, v in (line.split("==") for line in lines if line and line[0] != "#"))


def test_every_installed_package_is_pinned_at_its_installed_version():
    constraints = os.environ.get("PIP_CONSTRAINT")
    if not constraints:
        pytest.skip("not the pinned environment: PIP_CONSTRAINT is unset (tox -e latest, or a hand-made venv)")
    pins = pinned(constraints)
    installed = {lock.canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    unpinned = sorted(set(installed) - set(pins) - set(NOT_PINNED))
    differ = sorted(f"{n} {v} (pinned {pins[n]})" for n, v in installed.items() if n in pins and pins[n] != v)
    assert not unpinned and not differ, f"not in {constraints}: {unpinned}; other versions: {differ}"


def test_committed_constraints_pin_the_suites_own_requirements():
    pins = pinned(ROOT / "constraints.txt")
    needed = ["numpy", "ml-dtypes", "hypothesis", "pytest", "pytest-xdist", "matplotlib", "torch",
              "flashinfer-python", "apache-tvm-ffi", "nvidia-ml-py", "requests", "tqdm", "packaging", "filelock",
              "setuptools", "tox", "virtualenv", "ruff"]
    assert [n for n in needed if n not in pins] == []
    assert pins["torch"].endswith("+cpu") and pins["flashinfer-python"] == "0.7.2.post1"


def test_lock_keeps_registry_pins_only():
    frozen = "pip==26.3\nmoe-difftest==0.1.0\nNumPy==2.4.6\n# comment\nml_dtypes==0.7.0\n"
    assert lock.pins(frozen) == ["ml_dtypes==0.7.0", "NumPy==2.4.6"]
    with pytest.raises(SystemExit, match="not a registry pin"):
        lock.pins("numpy @ file:///tmp/numpy-2.4.6-cp311-cp311-linux_x86_64.whl\n")
