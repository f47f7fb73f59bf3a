"""Nothing that compared nothing is reported as success: a campaign cell whose every case was skipped is a
pytest skip with the reasons, a fuzz run that compared no case (or only cases without tokens) and a replay of a
directory without fixtures exit 2 with one line, and a plug-in that does not even import is a one-line error (exit 2,
not 1: findings)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from difftest.checking import interface
from difftest.checking.impl_spec import SPEC
from difftest.model import strategies
from difftest.running import campaign

ROOT = Path(__file__).resolve().parents[3]
DECLINER = """
from difftest.checking.impl_spec import SPEC

DECLINES = SPEC._replace(name="decliner", ops=("routing",), unsupported=lambda case: "declines every case")
"""


def difftest(*args):
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)


@pytest.fixture
def decliner(tmp_path):
    path = tmp_path / "decliner.py"
    path.write_text(DECLINER)
    return f"{path}:DECLINES"


def test_cell_result_counts_compared_and_skipped_examples(decliner):
    quick = settings(max_examples=20, database=None, derandomize=True)
    declined = campaign.fuzz_cell(interface.load(decliner), decliner, "routing", hypothesis_settings=quick)
    assert declined.finding is None and declined.compared == 0 and declined.examples >= 20
    assert declined.skipped_all() == f"all {declined.examples} examples skipped: declines every case " \
                                     f"({declined.examples})"
    compared = campaign.fuzz_cell(SPEC, "spec", "routing", hypothesis_settings=quick)
    assert compared.compared > 0 and compared.skipped_all() == ""


def test_campaign_cell_that_skipped_every_case_is_a_pytest_skip(decliner):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    r = subprocess.run([sys.executable, "-m", "pytest", "tests/difftest/running/test_campaign.py", "-k", "decliner",
                        "-p", "no:xdist", "-p", "no:cacheprovider", "-rs", "-q", "--impl", decliner], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=env)
    cells = len(strategies.slices("routing"))
    assert r.returncode == 0 and f"{cells} skipped" in r.stdout and "passed" not in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("examples skipped: declines every case") == cells, r.stdout


def test_fuzz_that_ran_no_case_exits_2(tmp_path):
    r = difftest("fuzz", "--impl", "spec", "--time-budget", "0", "--workers", "1", "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == "difftest: error: fuzz compared no case: none ran (--time-budget 0 s)\n"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["compared"] == 0


def test_fuzz_whose_cases_were_all_declined_exits_2(tmp_path, decliner):
    r = difftest("fuzz", "--impl", decliner, "--max-examples", "10", "--workers", "1", "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.fullmatch(r"difftest: error: fuzz compared no case: all (\d+) cases were skipped: "
                        r"declines every case \(\1\)\n", r.stderr), r.stderr


def test_fuzz_whose_compared_cases_all_had_no_tokens_exits_2(tmp_path):
    """A plug-in that declines every case with tokens compares only cases without: nothing computed, no clean run
    (it read "pass" with exit 0, issue 33)."""
    path = tmp_path / "no_tokens.py"
    path.write_text(DECLINER.replace('"declines every case"', '"tokens" if case.config.num_tokens else None'))
    r = difftest("fuzz", "--impl", f"{path}:DECLINES", "--where", "num_tokens=0..1", "--max-examples", "10",
                 "--seed", "0", "--workers", "1", "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.fullmatch(r"difftest: error: fuzz compared no case with tokens: all [1-9]\d* compared cases had "
                        r"num_tokens=0\n", r.stderr), r.stderr


def test_fuzz_that_compared_cases_exits_0(tmp_path):
    r = difftest("fuzz", "--impl", "spec", "--op", "routing", "--max-examples", "5", "--workers", "1",
                 "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["compared"] > 0


def test_replay_of_a_directory_without_fixtures_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    r = difftest("replay", str(tmp_path / "empty"))
    line = f"difftest: error: no fixtures found in {tmp_path / 'empty'}\n"
    assert (r.returncode, r.stdout, r.stderr) == (2, "", line)
    some = sorted(p for p in (ROOT / "fixtures").iterdir() if (p / "case.json").is_file())[0]
    r = difftest("replay", str(some), str(tmp_path / "empty"))  # one empty directory among others: still nothing
    assert (r.returncode, r.stderr) == (2, line)


@pytest.mark.parametrize("source, error", [
    ("x = (\n", "SyntaxError: '(' was never closed (broken.py, line 1)"),
    ("raise RuntimeError('needs a GPU driver')\n", "RuntimeError: needs a GPU driver"),
    ("import no_such_module_here\n", "No module named 'no_such_module_here'"),
])
def test_plugin_that_does_not_import_is_a_one_line_error(tmp_path, source, error):
    plugin = tmp_path / "broken.py"
    plugin.write_text(source)
    r = difftest("fuzz", "--impl", f"{plugin}:X")
    assert (r.returncode, r.stderr) == (2, f"difftest: error: cannot import {plugin}: {error}\n"), r.stderr
    with pytest.raises(interface.ImplError, match="cannot import"):
        interface.load(f"{plugin}:X")
