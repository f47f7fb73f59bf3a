"""The settings table (difftest/model/settings.py): documented row by row, read where it says, overridable per run,
and the debt of DIFFTEST_* environment variables that remain in difftest/ stated here, so that a new one fails."""

import json
import multiprocessing
import re
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.model import settings
from difftest.model.settings import SETTINGS, SettingsError

ROOT = Path(__file__).resolve().parents[3]
# The environment variables difftest/ may name: the one that carries the settings into workers.
ALLOWED = {settings.ENV}
# Not converted yet (issue 37): where each is named. Converting one removes it here; a new one fails the test below.
NOT_YET = {
    "DIFFTEST_CASE_TIMEOUT": {"difftest/running/campaign.py", "difftest/cli.py"},
    "DIFFTEST_FIRST_CASE_TIMEOUT": {"difftest/running/campaign.py", "difftest/cli.py"},
    "DIFFTEST_CRASH_SHRINK_S": {"difftest/running/campaign.py"},
    "DIFFTEST_DB": {"difftest/running/database.py", "difftest/running/run.py", "difftest/cli.py",
                    "difftest/artifacts/rundir.md"},
}


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Settings computed afresh from a clean directory and environment; the module's state restored after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(settings.ENV, raising=False)
    monkeypatch.setattr(settings, "_values", None)
    monkeypatch.setattr(settings, "_read", {})
    return tmp_path


def test_docs_table_is_the_settings_table():
    text = (ROOT / "docs/settings.md").read_text()
    table = text.split("<!-- settings table: generated -->\n")[1].split("\n<!-- end of settings table -->")[0]
    assert table == settings.markdown(), "docs/settings.md is stale: regenerate with python -m difftest.model.settings"
    assert "settings.md" in (ROOT / "docs/cli.md").read_text()


def test_every_row_is_documented_and_read_where_it_says():
    for name, row in SETTINGS.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name) and row.doc.strip(), row
        assert row.accepts() and settings.parse(name, row.default) == row.default, row
        source = (ROOT / row.where).read_text()
        assert source.count(f'setting("{name}")') == 1, f"{name}: not read once in {row.where}"
    readers = {p for p in (ROOT / "difftest").rglob("*.py") if 'setting("' in p.read_text()}
    found = {m for p in readers for m in re.findall(r'setting\("([a-z0-9_]+)"\)', p.read_text())}
    assert found == set(SETTINGS), found ^ set(SETTINGS)


def test_no_environment_variable_outside_the_allowed_and_the_stated_debt():
    named = {}
    for path in (ROOT / "difftest").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md"):
            for var in set(re.findall(r"DIFFTEST_[A-Z0-9_]+", path.read_text())):
                named.setdefault(var, set()).add(str(path.relative_to(ROOT)))
    extra = {v: p for v, p in named.items() if v not in ALLOWED and v not in NOT_YET}
    assert not extra, f"new DIFFTEST_* variables (make them settings, difftest/model/settings.py): {extra}"
    for var, paths in NOT_YET.items():  # the debt shrinks: a converted one leaves this list
        assert named.get(var) == paths, f"{var}: named in {named.get(var)}, NOT_YET says {paths}"
    assert len(ALLOWED) + len(NOT_YET) == 5  # issue 37 asks for at most 3


@pytest.mark.parametrize("name, value, accepts", [
    ("max_tokens", "0", "an integer >= 1"), ("max_tokens", "x", "an integer >= 1"),
    ("max_tokens", "1.5", "an integer >= 1"), ("moe_model_odds", "-1", "an integer >= 0"),
    ("model_full", "yes", "true or false"), ("weight_seed", "-1", "an integer in [0, "),
    ("weight_seed", str(2**63), "an integer in [0, "), ("weight_seed", "", "an integer in [0, "),
])
def test_a_bad_value_names_the_setting_and_what_it_accepts(name, value, accepts):
    with pytest.raises(SettingsError) as e:
        settings.parse(name, value)
    assert f"setting {name} must be {accepts}" in str(e.value) and "\n" not in str(e.value)


def test_a_bad_name_is_refused_with_the_nearest():
    with pytest.raises(SettingsError, match="unknown setting 'max_token' .did you mean max_tokens"):
        settings.parse("max_token", "3")
    with pytest.raises(SettingsError, match="expected NAME=VALUE"):
        settings.apply(["max_tokens"])


def test_sources_in_order_default_project_run(fresh, monkeypatch):
    assert settings.get("max_tokens") == 40 and settings.values()["max_tokens"][1] == "default"
    (fresh / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.difftest]\nmax_tokens = 7\nmodel_full = true\n')
    monkeypatch.setattr(settings, "_values", None)
    assert settings.get("max_tokens") == 7 and settings.get("model_full") is True
    monkeypatch.setenv(settings.ENV, json.dumps({"max_tokens": "9"}))
    monkeypatch.setattr(settings, "_values", None)
    assert settings.get("max_tokens") == 9 and settings.get("model_full") is True
    assert settings.values()["max_tokens"][1] == settings.ENV


def test_bad_project_table_and_bad_overrides_are_one_line_errors(fresh, monkeypatch):
    (fresh / "pyproject.toml").write_text("[tool.difftest]\nmax_tokens = 0\n")
    with pytest.raises(SettingsError, match=r"pyproject.toml \[tool.difftest\]: setting max_tokens must be"):
        settings.values()
    (fresh / "pyproject.toml").unlink()
    monkeypatch.setenv(settings.ENV, "max_tokens=3")
    with pytest.raises(SettingsError, match="DIFFTEST_SETTINGS must be a JSON object"):
        settings.values()


def test_a_replaced_variable_is_refused_not_ignored(fresh, monkeypatch):
    monkeypatch.setenv("DIFFTEST_MAX_TOKENS", "4096")
    with pytest.raises(SettingsError, match=r"DIFFTEST_MAX_TOKENS is no longer read: use --set max_tokens=VALUE"):
        settings.values()


def test_apply_merges_into_the_environment_and_refuses_a_setting_already_read(fresh):
    settings.apply(["max_tokens=5", "pair_pool=4"])
    settings.apply(["pair_pool=3"])
    assert json.loads(settings.os.environ[settings.ENV]) == {"max_tokens": 5, "pair_pool": 3}
    assert settings.get("max_tokens") == 5
    settings.apply(["max_tokens=5"])  # the same value: nothing changes
    with pytest.raises(SettingsError, match="--set max_tokens: read already"):
        settings.apply(["max_tokens=6"])


def _read_in_worker(queue):
    from difftest.model import pairs, presets, strategies

    queue.put((strategies.MAX_TOKENS, strategies.MOE_MODEL_ODDS, presets.MODEL_FULL, pairs.POOL))


def test_set_reaches_spawned_workers(fresh):
    """What `fuzz --set` does before its workers start: they read the same values (spawned, not forked)."""
    from difftest import cli

    cli._apply_settings(["--impl", "torch", "--set", "max_tokens=3", "--set=moe_model_odds=0", "--set", "model_full=1",
                         "--set", "pair_pool=5"])
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_read_in_worker, args=(queue,))
    p.start()
    got = queue.get(timeout=120)
    p.join(60)
    assert got == (3, 0, True, 5)


def test_cli_errors_are_one_line_before_anything_runs():
    for argv, words in ((["fuzz", "--time-budget", "0", "--set", "max_tokens=x"],
                         "setting max_tokens must be an integer >= 1, got 'x'"),
                        (["fuzz", "--model", "mono-moe", "--set", "weight_seed=-1"],
                         "setting weight_seed must be an integer in [0, "),
                        (["mutants", "--set", "nope=1", "--list"], "unknown setting 'nope'")):
        r = subprocess.run([sys.executable, "-m", "difftest", *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
