"""Fuzzing one (implementation, op) cell with Hypothesis: run, compare, target the error/bound ratio, shrink a
failure and write it as a fixture. Used by tests/test_campaign.py (pytest-xdist spreads the cells) and by
`python -m difftest fuzz` (worker processes, a time budget, a run directory).
"""

import json
import os
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis.database import DirectoryBasedExampleDatabase

from . import fixtures, strategies
from .case import QUANT_PATHS, QUANT_SCHEMES, ROUTING_METHODS, CaseError
from .check import run_case
from .isolation import IsolatedRunner

REPLAY = "replay: python -m difftest replay {path}"
CASE_TIMEOUT_S = float(
    os.environ.get("DIFFTEST_CASE_TIMEOUT", "120")
)  # a may_crash implementation's hang limit
HEALTH = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.differing_executors,
]


class Finding(AssertionError):
    """A failing case; the message names the element, the bound and the replay command."""


class CellResult(NamedTuple):
    examples: int
    finding: str | None  # the shrunk failure's message (with the replay line), or None
    fixture: str | None  # path of the fixture written for it


def slices(op):
    """[(label, configs strategy)]: routing per method, quant per scheme, moe per quant path, so that every
    method / scheme / path gets its share of a campaign instead of what Hypothesis' choice order leaves it."""
    if op == "routing":
        return [(m, strategies.routing_configs(method=m)) for m in ROUTING_METHODS]
    if op == "quant":
        return [(s, strategies.quant_configs(scheme=s)) for s in QUANT_SCHEMES]
    return [(q, strategies.moe_configs(quant=q)) for q in QUANT_PATHS]


def database(path=None):
    """The shared example database (DIFFTEST_DB or --db): campaigns resume from it and share it between
    machines (copy or sync the directory); None keeps Hypothesis' profile default."""
    path = path or os.environ.get("DIFFTEST_DB")
    return DirectoryBasedExampleDatabase(path) if path else None


def case_row(impl_name, case, result):
    """One cases.jsonl line (difftest/rundir.md)."""
    c = case.config
    r = c.routing if case.op == "moe" else c
    return {
        "impl": impl_name,
        "op": case.op,
        "method": getattr(r, "method", None),
        "activation": getattr(c, "activation", None),
        "quant": c.quant if case.op == "moe" else (c.scheme if case.op == "quant" else None),
        "dist": case.dist,
        "case": case.to_dict(),
        "status": result.status,
        "ratio": result.ratio if result.ratio != float("inf") else None,
        "message": result.message,
        "seconds": round(result.seconds, 6),
        "spec_seconds": round(result.spec_seconds, 6),
        "excluded_tokens": result.excluded,
        "near_tie_tokens": result.near_ties,
    }


def fuzz_cell(
    impl,
    impl_ref,
    op,
    *,
    hypothesis_settings=None,
    configs=None,
    record=None,
    fixtures_root=None,
    run_seed=None,
    provenance="",
    special=False,
):
    """Run Hypothesis over cases of `op` for `impl`. A failure is shrunk, written under fixtures_root (if
    given) and returned in CellResult.finding; record(row) sees every example (shrink steps included)."""
    state = {"examples": 0, "last_failure": None}
    runner = (
        IsolatedRunner(impl_ref, CASE_TIMEOUT_S, _worker_dir(fixtures_root))
        if impl.may_crash
        else None
    )

    def check(case):
        result = run_case(impl, case, repeat=state["examples"] % 16 == 0, runner=runner)
        state["examples"] += 1
        if record is not None:
            record(case_row(impl.name, case, result))
        if result.status == "skip":
            event(f"skip: {result.message.split(':')[0]}")
            return
        if result.ratio < float("inf"):
            target(result.ratio, label="error/bound")
        if result.status in ("fail", "error"):
            state["last_failure"] = (case, result)
            raise Finding(result.message)

    test = given(strategies.cases(op, configs, special=special))(check)
    test._hypothesis_internal_add_digest = f"{impl.name}|{op}|{impl_ref}|{configs!r}".encode()
    if hypothesis_settings is not None:
        test = hypothesis_settings(test)
    if run_seed is not None:
        test = hypothesis_seed(run_seed)(test)
    try:
        test()
    except Finding:
        if runner is not None:
            runner.close()
        case, result = state["last_failure"]  # Hypothesis replays the shrunk example last
        path = None
        if fixtures_root is not None:
            expected = _expected(impl, case)
            path = fixtures.write(
                fixtures_root,
                case,
                impl_ref,
                impl,
                impl.recipe(case),
                {"status": result.status, "ratio": result.ratio, "message": result.message},
                expected,
                provenance=provenance or f"difftest fuzz, op {op}",
            )
        message = result.message + ("\n" + REPLAY.format(path=path) if path else f"\ncase: {case.to_json()}")
        return CellResult(state["examples"], message, None if path is None else str(path))
    if runner is not None:
        runner.close()
    return CellResult(state["examples"], None, None)


def _worker_dir(fixtures_root):
    """Worker and write-ahead logs of isolated runs: beside the fixtures (the run directory), else tmp."""
    return (Path(fixtures_root).parent if fixtures_root else Path(tempfile.gettempdir())) / "difftest-workers"


def _expected(impl, case):
    """The spec's output for the fixture; {} when the spec refuses the case."""
    from . import generate, impl_spec

    try:
        return impl_spec.expected(case, generate.inputs(case), impl.recipe(case))
    except CaseError:
        return {}


def cli_settings(max_examples, db=None):
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=False,
        database=database(db),
        suppress_health_check=HEALTH,
        print_blob=True,
        report_multiple_bugs=False,
    )


def jsonl_recorder(path):
    """record(row) appending JSON lines to path (line-buffered: a killed worker loses at most one line)."""
    f = open(path, "a", buffering=1)

    def record(row):
        f.write(json.dumps(row, allow_nan=False) + "\n")

    record.close = f.close
    return record


def timed_cells(cells, deadline, slice_s, run_seed, **kwargs):
    """Fuzz cells round-robin until `deadline` (time.monotonic()), each turn about `slice_s` seconds of one
    cell: the chunk size follows the cell's measured time per example, so slow ops (the layer) do not starve
    fast ones. Each chunk is its own Hypothesis run with its own seed. Yields (cell, CellResult)."""
    per_example = {}
    i = 0
    while time.monotonic() < deadline:
        cell = cells[i % len(cells)]
        impl, impl_ref, op, configs = cell
        left = max(0.0, deadline - time.monotonic())
        chunk = max(2, min(500, int(min(slice_s, left) / per_example.get(i % len(cells), slice_s / 10))))
        t0 = time.monotonic()
        res = fuzz_cell(
            impl,
            impl_ref,
            op,
            hypothesis_settings=cli_settings(chunk, kwargs.get("db")),
            configs=configs,
            record=kwargs.get("record"),
            fixtures_root=kwargs.get("fixtures_root"),
            run_seed=run_seed * 1_000_003 + i,
            special=kwargs.get("special", False),
        )
        per_example[i % len(cells)] = (time.monotonic() - t0) / max(1, res.examples)
        yield cell, res
        i += 1
