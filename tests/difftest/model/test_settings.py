"""The settings table (difftest/model/settings.py): documented row by row, read where it says, overridable per run;
and the DIFFTEST_* environment variables: at most three in the whole repository, each documented with why it must be
one, and the retired ones refused with their replacement named."""

import json
import multiprocessing
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from difftest.model import settings
from difftest.model.settings import SETTINGS, SettingsError

ROOT = Path(__file__).resolve().parents[3]
# Where the variables are counted: every text file of the repository but the CHANGELOG (history names the retired
# ones) and the generated reproducers (fixtures/*/repro.py embed the adapters, and with them what those read).
TEXT = {".py", ".md", ".sh", ".toml", ".ini", ".cfg", ".txt", ".yml", ".yaml", ".json", ".cu", ".h", ""}
SKIP_DIRS = {".git", ".tox", ".hypothesis", "runs", "__pycache__", ".carry", "node_modules", ".venv"}


PREFIX = "DIFFTEST_"  # the retired names are built from it here, so that this file names none of them


def _repository_files(root=ROOT):
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if not path.is_file() or path.suffix not in TEXT or any(
                part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
            continue
        if rel.as_posix() == "CHANGELOG.md" or (rel.parts[0] == "fixtures" and rel.name == "repro.py"):
            continue
        yield rel, path


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


def test_at_most_three_environment_variables_in_the_whole_repository_each_documented():
    """Issue 37: every knob is a flag, a pytest option or a row of the settings table; a DIFFTEST_* variable remains
    only where a process boundary needs one (settings.ENVIRONMENT), and docs/settings.md says why for each."""
    named = {}
    for rel, path in _repository_files():
        for var in set(re.findall(r"DIFFTEST_[A-Z0-9_]+", path.read_text(encoding="utf-8", errors="replace"))):
            named.setdefault(var, set()).add(rel.as_posix())
    assert len(settings.ENVIRONMENT) <= 3 and "difftest/model/settings.py" in named.get(settings.ENV, ())
    extra = {v: sorted(p) for v, p in named.items() if v not in settings.ENVIRONMENT}
    assert not extra, f"variables beyond settings.ENVIRONMENT (make them settings, flags or options): {extra}"
    section = (ROOT / "docs/settings.md").read_text().split("\n## Environment variables\n")[1].split("\n## ")[0]
    for var in settings.ENVIRONMENT:
        assert f"`{var}`" in section, f"{var}: not in docs/settings.md's section Environment variables"


def test_the_scan_sees_a_new_variable_and_skips_only_history_and_generated_scripts(tmp_path):
    """The repository scan above can fail: a variable in a script, a doc or a campaign is seen; the CHANGELOG, the
    generated reproducers and git's own files are not read."""
    probe = PREFIX + "PROBE"
    for rel in ("tools/x.sh", "manual/x.md", "campaigns/x.py", ".ci/run", "CHANGELOG.md", "fixtures/f/repro.py",
                ".git/config", "fixtures/f/inputs.npz"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"echo ${probe}\n")
    found = sorted(rel.as_posix() for rel, path in _repository_files(tmp_path) if probe in path.read_text())
    assert found == [".ci/run", "campaigns/x.py", "manual/x.md", "tools/x.sh"]


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
    monkeypatch.setenv(PREFIX + "MAX_TOKENS", "4096")
    with pytest.raises(SettingsError, match=PREFIX + r"MAX_TOKENS is no longer read: use --set max_tokens=VALUE"):
        settings.values()


@pytest.mark.parametrize("suffix, replacement", [
    ("CASE_TIMEOUT", "use --timeout SECONDS or --set case_timeout=VALUE"),
    ("FIRST_CASE_TIMEOUT", "use --first-timeout SECONDS or --set first_case_timeout=VALUE"),
    ("CRASH_SHRINK_S", "use --set crash_shrink_s=VALUE"),
    ("DB", "use --db DIR or --set db=VALUE, [tool.difftest] db in pyproject.toml"),
    *((suffix, f"use {text}") for suffix, text in settings.RETIRED.items()),
])
def test_a_variable_retired_for_a_flag_or_an_option_is_refused_naming_it(fresh, monkeypatch, suffix, replacement):
    """The variables issue 37 retired (the name is built here: the repository names only the three that remain)."""
    monkeypatch.setenv(PREFIX + suffix, "1")
    with pytest.raises(SettingsError) as e:
        settings.values()
    assert str(e.value).startswith(f"{PREFIX}{suffix} is no longer read: {replacement}"), str(e.value)
    assert "\n" not in str(e.value)


def test_pytest_refuses_a_retired_variable_before_collecting():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    r = subprocess.run([sys.executable, "-m", "pytest", "tests/difftest/model/test_settings.py", "-k", "bad_name",
                        "-p", "no:xdist", "-p", "no:cacheprovider", "-q"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**env, PREFIX + "PROFILE": "fuzz"})
    assert r.returncode != 0 and "passed" not in r.stdout, r.stdout + r.stderr
    assert PREFIX + "PROFILE is no longer read: use the pytest option --hypothesis-profile NAME" in r.stdout + r.stderr


def test_string_setting_db(fresh, monkeypatch):
    """The one text setting: any one-line string, stripped; empty is none (the default)."""
    assert settings.get("db") == "" and settings.parse("db", " redis://h:6379/1 ") == "redis://h:6379/1"
    with pytest.raises(SettingsError, match="setting db must be a directory or redis://"):
        settings.parse("db", 5)
    from difftest.running import database

    assert database.configured() is None and database.configured("d") == "d"
    monkeypatch.setenv(settings.ENV, json.dumps({"db": str(fresh / "shared")}))
    monkeypatch.setattr(settings, "_values", None)
    assert database.configured() == str(fresh / "shared")
    assert database.database() is not None and database.configured("other") == "other"


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
