"""The tester's settings: one table (SETTINGS), one row per knob, each read where it acts with ``get(name)``: the case
space's sizes and odds, and the campaign's own knobs (timeouts, crash shrinking, the example database).

A value comes from, last wins: the row's default; the ``[tool.difftest]`` table of ``pyproject.toml`` in the current
directory, if there is one; the per-run overrides in the environment variable DIFFTEST_SETTINGS (a JSON object of
name: value), which is how they cross into spawned workers. ``python -m difftest fuzz --set NAME=VALUE`` (and
``mutants``) adds to those overrides before anything that reads them is imported. The modules read their settings once,
at import (module constants), so a run's draws depend on its settings alone. docs/settings.md is this table, rendered
(``python -m difftest.model.settings``; tests/difftest/model/test_settings.py keeps the two equal).

A bad name or value is a one-line usage error naming the setting and what it accepts (exit 2). The environment variables
the settings replaced (DIFFTEST_ + the name in capitals), and those that became flags or options (RETIRED), are
refused, not ignored: a script that still sets one would otherwise run with the defaults unawares. The variables that
remain, each because a process boundary needs one: ENVIRONMENT (docs/settings.md, "Environment variables").
"""

import difflib
import json
import os
from pathlib import Path
from typing import NamedTuple

from ..usage import UsageError

try:
    import tomllib
except ImportError:  # Python 3.10: tomli, where installed (_project() says when neither is)
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

ENV = "DIFFTEST_SETTINGS"
PYPROJECT = "pyproject.toml"
# The only DIFFTEST_* variables the project reads (tests/difftest/model/test_settings.py holds the whole repository to
# this set): the settings' carrier into spawned workers; the folder of prebuilt trtllm-gen libraries, which the
# standalone reproducer scripts (fixtures/*/repro.py, run without this project) read too; the opt-in of an adapter whose
# JIT build takes an hour, which the adapter itself reads (impls/ cannot read the settings: it never imports difftest).
ENVIRONMENT = (ENV, "DIFFTEST_TRTLLM_GEN_PREBUILT", "DIFFTEST_ENABLE_CUTLASS")
# Variables retired for a flag or an option, by the part after DIFFTEST_: what replaces each. Refused like those the
# settings replaced (the names are written once, here, and in the CHANGELOG).
RETIRED = {
    "PROFILE": "the pytest option --hypothesis-profile NAME (tests/conftest.py registers difftest-ci, dev and fuzz)",
    "IMPLS": "the pytest option --impl NAME (repeatable, or comma-separated) of tests/conftest.py",
    "TRTLLM_GEN_AS_BUILT": "--impl impls.flashinfer.trtllm_gen_routing:AS_BUILT (or trtllm_gen_nogemm:AS_BUILT), "
                           "the adapter declared as built",
    "TRTLLM_GEN_ARCH": "the arch argument of impls.flashinfer._trtllm_gen_jit.routing_spec / dev_kernels_spec "
                       "(tools/make_carry.sh prebuilds with '90a')",
}


class SettingsError(UsageError):
    """A bad setting name or value: one line, exit 2."""


class Setting(NamedTuple):
    name: str
    default: int | bool | str
    where: str  # the module that reads it
    doc: str
    low: int = 1  # integers: the least accepted value
    high: int | None = None  # integers: the largest accepted value
    flag: str = ""  # the command-line flag that overrides it for one command, if there is one
    form: str = ""  # text: what it accepts

    def accepts(self):
        if isinstance(self.default, bool):
            return "true or false (1 or 0)"
        if isinstance(self.default, str):
            return self.form
        if self.high is not None:
            return f"an integer in [{self.low}, {self.high}]"
        return f"an integer >= {self.low}" + (" (0: never)" if self.name.endswith("_odds") and self.low == 0 else "")


S, P, G, PR = "difftest/model/strategies.py", "difftest/model/presets.py", "difftest/model/generate.py", \
    "difftest/model/pairs.py"
C, D = "difftest/running/campaign.py", "difftest/running/database.py"
_ROWS = (
    # The bulk of the drawn cases (strategies: routing, quant, trtllm_ops; their caps on the layer too).
    Setting("max_tokens", 40, S, "tokens of a case at most (routing, quant, trtllm_ops; the path regime goes beyond)"),
    Setting("max_experts", 64, S, "experts of a routing case at most (the kernel-tier regime reaches beyond)"),
    Setting("max_hidden", 512, S, "hidden size at most (quant, trtllm_ops; caps the moe sizes too)"),
    Setting("max_intermediate", 384, S, "intermediate size of a moe case at most (caps the moe sizes)"),
    Setting("zero_token_odds", 50, S, "one case in N has no tokens (T = 0)", low=0),
    # The routing kernels' limits.
    Setting("max_kernel_experts", 512, S, "expert counts of the kernel-tier regime at most"),
    Setting("many_experts_odds", 6, S, "one routing case in N draws the kernels' expert tiers", low=0),
    Setting("max_top_k", 32, S, "top_k of the large-top_k regime at most"),
    Setting("large_top_k_odds", 8, S, "one draw in N (where the experts allow it) has top_k above 8", low=0),
    Setting("many_tokens_odds", 16, S, "one routing case in N draws the kernels' path token counts", low=0),
    Setting("many_tokens_logits", 2**20, S, "logits (tokens x experts) of a path-token case at most"),
    Setting("one_expert_group_odds", 4, S, "one grouped draw in N has one expert a group", low=0),
    # The layer (moe): its own, smaller limits, and its regimes.
    Setting("moe_max_tokens", 8, S, "tokens of a moe case at most"),
    Setting("moe_max_experts", 8, S, "experts of a moe case at most (outside the many-experts regime)"),
    Setting("moe_max_size", 128, S, "hidden and intermediate size of a moe case at most (outside the regimes)"),
    Setting("moe_wide_size", 256, S, "sizes of a wide (several quant blocks) moe case at most"),
    Setting("moe_wide_odds", 6, S, "one quantized moe case in N is wide", low=0),
    Setting("moe_wide_max_tokens", 6, S, "tokens of a wide moe case at most"),
    Setting("moe_wide_max_experts", 4, S, "experts of a wide moe case at most"),
    Setting("moe_many_max_experts", 512, S, "expert counts of the moe many-experts regime at most"),
    Setting("moe_many_experts_odds", 10, S, "one moe case in N has the kernels' expert counts", low=0),
    Setting("moe_many_experts_size", 64, S, "sizes of a many-experts or many-tokens moe case at most"),
    Setting("moe_many_max_tokens", 1025, S, "token counts of the moe many-tokens regime at most"),
    Setting("moe_many_tokens_odds", 16, S, "one moe case in N has the routing kernels' token counts", low=0),
    Setting("moe_model_min_hidden", 512, S, "hidden size of a model-width moe case at least"),
    Setting("moe_model_hidden", 2048, S, "hidden size of a model-width moe case at most"),
    Setting("moe_model_min_intermediate", 256, S, "intermediate size of a model-width moe case at least"),
    Setting("moe_model_intermediate", 512, S, "intermediate size of a model-width moe case at most"),
    Setting("moe_model_odds", 8, S, "one moe case in N is of model width", low=0),
    Setting("moe_model_max_tokens", 16, S, "tokens of a model-width moe case at most"),
    Setting("moe_model_max_experts", 4, S, "experts of a model-width (or full-width) moe case at most"),
    Setting("moe_full_hidden", 7168, S, "hidden size of a full-width moe case at most"),
    Setting("moe_full_odds", 8, S, "one model-width moe case in N is full width (released models' widths)", low=0),
    Setting("moe_full_max_tokens", 4, S, "tokens of a full-width moe case at most"),
    Setting("moe_full_intermediate", 256, S, "intermediate size of a full-width moe case at most"),
    Setting("dev_edge_odds", 8, S, "one trtllm_ops case in N sits on finalize's small-grid edge or has a large top_k",
            low=0),
    # fuzz --model NAME (presets).
    Setting("model_hidden", 256, P, "a preset's hidden size scaled down to at most this (a multiple of its block)"),
    Setting("model_intermediate", 128, P, "a preset's intermediate size scaled down to at most this"),
    Setting("model_full", False, P, "presets at their real sizes (slow on CPU)"),
    Setting("model_max_tokens", 16, P, "tokens of a preset case at most"),
    Setting("mono_max_tokens", 8, P, "tokens of a mono-moe case at most"),
    Setting("trtllm_gen_max_tokens", 8192, P, "tokens of a trtllm-gen-routing case at most"),
    Setting("weight_seed", 0, P, "the expert-weight seed of presets with fixed weights (mono-moe), the whole campaign",
            low=0, high=2**63 - 1),
    # Pairwise steering (pairs).
    Setting("pair_steer_odds", 3, PR, "one draw in N is steered onto a value pair not yet covered", low=0),
    Setting("pair_steer_spread", 48, PR, "with few pairs left, one draw in ceil(N / pairs left) is steered", low=0),
    Setting("pair_pool", 16, PR, "configurations drawn per cell to search for a pair's witness"),
    # Inputs (generate).
    Setting("weight_cache_mb", 1024, G, "MiB of generated expert weights kept for reuse", low=0),
    # The campaign (running/): an implementation that may crash runs in a worker process (running/isolation.py).
    Setting("case_timeout", 120, C, "seconds a case of a may_crash implementation may take; past it, a hang finding",
            flag="--timeout SECONDS"),
    Setting("first_case_timeout", 900, C, "seconds for the first case of each fresh worker, which may JIT-build its "
            "kernel (minutes for a FlashInfer module on a cold cache)", flag="--first-timeout SECONDS"),
    Setting("crash_shrink_s", 120, C, "seconds a crash finding is shrunk after its first crash (each crash costs a "
            "fresh worker)", low=0),
    Setting("db", "", D, "the Hypothesis example database shared by runs and hosts (fuzz: else OUT/db; pytest: else "
            "Hypothesis' default)", flag="--db DIR", form="a directory or redis://HOST:PORT[/N]; empty: none"),
)
SETTINGS = {row.name: row for row in _ROWS}

_values = None  # name -> (value, source), computed on first use
_read = {}  # name -> the value a get() returned: an override applied later cannot reach it


def parse(name, value, source="--set"):
    """The value of setting ``name`` from a string (or a TOML / JSON scalar), or a SettingsError."""
    row = SETTINGS.get(name)
    if row is None:
        near = difflib.get_close_matches(name, SETTINGS, 1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise SettingsError(f"{source}: unknown setting {name!r} ({hint}the settings: docs/settings.md)")
    text = str(value).strip().lower()
    if isinstance(row.default, str):
        if isinstance(value, str) and "\n" not in value:
            return value.strip()
    elif isinstance(row.default, bool):
        if isinstance(value, bool) or text in ("1", "0", "true", "false"):
            return value if isinstance(value, bool) else text in ("1", "true")
    elif not isinstance(value, (bool, float)) and text.lstrip("-").isdecimal():
        n = int(text)
        if n >= row.low and (row.high is None or n <= row.high):
            return n
    raise SettingsError(f"{source}: setting {name} must be {row.accepts()}, got {value!r}")


def refuse_retired():
    """A SettingsError naming the first retired environment variable that is set (a setting's, or RETIRED's) and what
    replaces it; nothing when none is."""
    stale = [f"DIFFTEST_{name.upper()}" for name in SETTINGS if f"DIFFTEST_{name.upper()}" in os.environ]
    if stale:
        row = SETTINGS[stale[0][len("DIFFTEST_"):].lower()]
        flag = f"{row.flag} or " if row.flag else ""
        raise SettingsError(f"{stale[0]} is no longer read: use {flag}--set {row.name}=VALUE, [tool.difftest] "
                            f"{row.name} in {PYPROJECT} or {ENV}='{{\"{row.name}\": VALUE}}' (docs/settings.md)")
    retired = [suffix for suffix in RETIRED if f"DIFFTEST_{suffix}" in os.environ]
    if retired:
        raise SettingsError(f"DIFFTEST_{retired[0]} is no longer read: use {RETIRED[retired[0]]} (docs/settings.md)")


def overrides():
    """The per-run overrides in DIFFTEST_SETTINGS, checked: {name: value}."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SettingsError(f"{ENV} must be a JSON object of setting: value ({e})") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{ENV} must be a JSON object of setting: value, got {text[:60]!r}")
    return {name: parse(name, value, ENV) for name, value in raw.items()}


def _project():
    path = Path(PYPROJECT)
    if not path.is_file():
        return {}
    if tomllib is None:
        if "[tool.difftest" in path.read_text(errors="replace"):
            raise SettingsError(f"{path.resolve()}: reading [tool.difftest] needs Python >= 3.11 (tomllib) or tomli")
        return {}
    try:
        table = tomllib.loads(path.read_text()).get("tool", {}).get("difftest", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SettingsError(f"{path.resolve()}: unreadable ({e})") from None
    return {name: parse(name, value, f"{path.resolve()} [tool.difftest]") for name, value in table.items()}


def values():
    """{name: (value, source)}: source is "default", the pyproject.toml path or DIFFTEST_SETTINGS."""
    global _values
    if _values is None:
        refuse_retired()
        found = {name: (row.default, "default") for name, row in SETTINGS.items()}
        found |= {name: (v, str(Path(PYPROJECT).resolve())) for name, v in _project().items()}
        found |= {name: (v, ENV) for name, v in overrides().items()}
        _values = found
    return _values


def get(name):
    """The value of setting ``name`` (a row of SETTINGS) in effect."""
    if name not in SETTINGS:
        raise KeyError(f"no setting {name!r} in difftest/model/settings.py")  # a typo in the code, not in the input
    value = values()[name][0]
    _read[name] = value
    return value


def apply(items):
    """Add ``NAME=VALUE`` strings (``--set``) to the per-run overrides, checked, in this process and its children. A
    setting already read in this process (its module imported) with another value is refused: it would not act.
    Every source is checked, with or without items: a bad one fails here, before a command starts."""
    new = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        if not eq:
            raise SettingsError(f"--set {item!r}: expected NAME=VALUE (the settings: docs/settings.md)")
        new[name.strip()] = parse(name.strip(), value)
    stale = [n for n, v in new.items() if n in _read and _read[n] != v]
    if stale:
        raise SettingsError(f"--set {stale[0]}: read already in this process (set it before the model is imported, "
                            f"or in {ENV})")
    global _values
    if new:
        os.environ[ENV] = json.dumps({**overrides(), **new}, sort_keys=True)
        _values = None
    values()
    return new


def markdown():
    """docs/settings.md's table."""
    lines = ["| setting | default | accepts | read by | what |", "|---|---|---|---|---|"]
    for row in _ROWS:
        default = str(row.default).lower() if isinstance(row.default, bool) else str(row.default) or "(none)"
        flag = f" (`{row.flag}` for one command)" if row.flag else ""
        lines.append(f"| `{row.name}` | {default} | {row.accepts()} | {row.where} | {row.doc}{flag} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
