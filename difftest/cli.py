"""`python -m difftest`: fuzz, replay, impls, show. Exit codes: 0 clean, 1 findings, 2 usage or bad input
(one line on stderr, no traceback)."""

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from pathlib import Path

from . import fixtures, interface
from .case import OPS, CaseError

DEFAULT_BUDGET_S = 120
SLICE_S = 8.0  # seconds per turn of one (implementation, op) cell in a timed campaign
PROGRESS_EVERY_S = 10


class UsageError(Exception):
    """Bad arguments or input: printed as one line, exit 2."""


# ---- fuzz


def _default_impls():
    """torch on CPU plus every available GPU implementation."""
    refs = ["torch"]
    for name, _, _, reason in interface.listing():
        if reason is None and name not in ("spec", "torch"):
            refs.append(name)
    return refs


def _cells(impl_refs, ops, model):
    """(impl, ref, op, configs) per implementation × op slice (campaign.slices), or per op around a model."""
    from . import campaign, presets

    cells = []
    for ref in impl_refs:
        impl = interface.load(ref)
        for op in (o for o in ops if o in impl.ops):
            if model:
                configs = presets.configs(model, op)
                cells += [(impl, ref, op, configs)] if configs is not None else []
            else:
                cells += [(impl, ref, op, configs) for _, configs in campaign.slices(op)]
    return cells


def _worker(w, args, out, deadline, queue):
    from . import campaign

    try:
        cells = _cells(args.impl, args.op, args.model)
        cells = cells[w % len(cells) :] + cells[: w % len(cells)]
        record = campaign.jsonl_recorder(out / f"cases-{w}.jsonl")
        found = []
        if args.max_examples is None:
            runs = campaign.timed_cells(
                cells,
                deadline,
                SLICE_S,
                args.seed * 64 + w,
                record=record,
                fixtures_root=out / "fixtures",
                db=args.db or str(out / "db"),
                special=args.special,
            )
        else:
            runs = (
                (
                    cell,
                    campaign.fuzz_cell(
                        *cell[:3],
                        configs=cell[3],
                        record=record,
                        fixtures_root=out / "fixtures",
                        run_seed=args.seed * 64 + w,
                        special=args.special,
                        hypothesis_settings=campaign.cli_settings(
                            args.max_examples, args.db or str(out / "db")
                        ),
                    ),
                )
                for cell in cells
            )
        for (impl, _, op, _), res in runs:
            if res.finding:
                found.append({"impl": impl.name, "op": op, "message": res.finding, "fixture": res.fixture})
        record.close()
        queue.put((w, found, None))
    except Exception as e:  # reported by the parent as one line
        queue.put((w, [], f"{type(e).__name__}: {e}"))


def _count_lines(paths):
    n = 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                n += sum(1 for _ in f)
        except FileNotFoundError:
            pass
    return n


def summarize(out):
    """Merge cases-*.jsonl into cases.jsonl and write summary.json (format: difftest/rundir.md)."""
    rows = []
    parts = sorted(out.glob("cases-*.jsonl"))
    with open(out / "cases.jsonl", "w") as merged:
        for p in parts:
            for line in p.read_text().splitlines():
                if line.strip():
                    rows.append(json.loads(line))
                    merged.write(line + "\n")
    for p in parts:
        p.unlink()
    counts = {k: Counter() for k in ("op", "method", "activation", "quant", "dist", "impl")}
    status, skips = Counter(), Counter()
    ratio_max, worst = 0.0, None
    for r in rows:
        status[r["status"]] += 1
        if r["status"] == "skip":
            skips[r["message"]] += 1
            continue
        for k in counts:
            if r.get(k) is not None:
                counts[k][f"{r['op']}:{r[k]}" if k not in ("op", "impl") else r[k]] += 1
        if r["status"] == "pass" and r["ratio"] is not None and r["ratio"] > ratio_max:
            ratio_max, worst = r["ratio"], r["case"]
    summary = {
        "cases": len(rows),
        "status": dict(status),
        "max_ratio_passing": ratio_max,
        "max_ratio_case": worst,
        "by": {k: dict(sorted(v.items())) for k, v in counts.items()},
        "skips": dict(skips.most_common()),
    }
    return summary


def cmd_fuzz(args):
    if args.workers < 1:
        raise UsageError("--workers must be >= 1")
    args.impl = args.impl or _default_impls()
    args.op = args.op or list(OPS)
    if args.model:
        from . import presets

        if args.model not in presets.PRESETS:
            raise UsageError(f"unknown model {args.model!r}; known: {', '.join(sorted(presets.PRESETS))}")
    for ref in args.impl:
        reason = interface.load(ref).available()
        if reason:
            raise UsageError(f"implementation {ref} is unavailable: {reason}")
    if not _cells(args.impl, args.op, args.model):
        raise UsageError(f"no implementation among {args.impl} runs the ops {args.op}")
    out = Path(args.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    budget = args.time_budget if args.time_budget is not None else DEFAULT_BUDGET_S
    t0 = time.monotonic()
    deadline = t0 + budget
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(w, args, out, deadline, queue)) for w in range(args.workers)]
    for p in procs:
        p.start()
    results, last = [], time.monotonic()
    while len(results) < len(procs):
        try:
            results.append(queue.get(timeout=1.0))
        except Exception:  # queue.Empty: print progress and keep waiting
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
        if time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            n = _count_lines(out.glob("cases-*.jsonl"))
            print(
                f"[{last - t0:6.0f}s/{budget:.0f}s] {n} cases, {args.workers} workers",
                file=sys.stderr,
                flush=True,
            )
    for p in procs:
        p.join()
    errors = [e for _, _, e in results if e]
    findings = [f for _, fs, _ in results for f in fs]
    summary = summarize(out)
    summary.update(
        {
            "seconds": round(time.monotonic() - t0, 1),
            "workers": args.workers,
            "impls": args.impl,
            "ops": args.op,
            "model": args.model,
            "seed": args.seed,
            "findings": findings,
            "worker_errors": errors,
        }
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    rate = summary["cases"] / max(summary["seconds"], 1e-9)
    print(
        f"{summary['cases']} cases in {summary['seconds']} s ({rate:.0f}/s): {summary['status']}; "
        f"max passing error/bound {summary['max_ratio_passing']:.3g}; run directory {out}"
    )
    for f in findings:
        print(f"FINDING [{f['op']}, {f['impl']}] {f['message']}")
    if errors:
        raise UsageError(f"worker failed: {errors[0]}")
    return 1 if findings else 0


# ---- replay


def _fixture_paths(paths):
    out = []
    for p in map(Path, paths):
        if (p / "case.json").is_file() or p.name == "case.json":
            out.append(p)
        elif p.is_dir():
            out.extend(fixtures.discover(p))
        else:
            raise UsageError(f"{p}: not a fixture directory or a directory of fixtures")
    return out


def replay_fixture(fx, impl_refs=None):
    """[(impl name, outcome, detail)] with outcome pass | fail | error | n/a; recorded impl first.
    A spec whose output changed since recording comes first, as ("spec", "spec-changed", why)."""
    from . import generate, impl_spec
    from .check import run_case

    rows = []
    try:
        now = generate.digest(impl_spec.expected(fx.case, fx.inputs, fx.recipe))
        if now != fx.meta["expected"]["sha256"]:
            rows.append(("spec", "spec-changed", "the spec's expected output differs from the recorded one"))
    except CaseError as e:
        rows.append(("spec", "spec-changed", f"the spec now refuses the case: {e}"))
    refs = [fx.impl_ref] + [r for r in (impl_refs or interface.names()) if r != fx.impl_ref]
    for ref in refs:
        try:
            impl = interface.load(ref)
        except interface.ImplError as e:
            rows.append((ref, "n/a", str(e)))
            continue
        reason = impl.available() or (None if fx.case.op in impl.ops else f"does not implement {fx.case.op}")
        if reason:
            rows.append((impl.name, "n/a", reason))
            continue
        r = run_case(impl, fx.case, fx.inputs)
        outcome = {"skip": "n/a"}.get(r.status, r.status)
        rows.append((impl.name, outcome, r.message))
    return rows


def recorded_outcome(fx, rows):
    """The replay row of the implementation the fixture was recorded with (None if it did not run)."""
    return next((r for r in rows if r[0] == fx.meta["impl"]["name"]), None)


def expectation_met(fx, rows):
    """No spec change; other implementations do not fail; the recorded one fails as recorded (open: the same
    status, fail or error) or passes (fixed). An unavailable recorded implementation cannot contradict."""
    recorded = recorded_outcome(fx, rows)
    if any(
        outcome in ("spec-changed", "fail", "error")
        for name, outcome, _ in rows
        if recorded is None or name != recorded[0]
    ):
        return False
    if recorded is None or recorded[1] == "n/a":
        return True
    return recorded[1] == (fx.meta["observed"]["status"] if fx.status == "open" else "pass")


def cmd_replay(args):
    paths = _fixture_paths(args.paths)
    ok = True
    for p in paths:
        fx = fixtures.load(p)
        rows = replay_fixture(fx, args.impl)
        met = expectation_met(fx, rows)
        ok &= met
        print(
            f"{fx.id} ({fx.status}, recorded with {fx.meta['impl']['name']}): "
            f"{'as recorded' if met else 'NOT as recorded'}"
        )
        for name, outcome, detail in rows:
            print(f"  {name:32s} {outcome:12s} {detail}")
    return 0 if ok else 1


# ---- impls, show


def cmd_impls(args):
    for name, version, ops, reason in interface.listing():
        state = "available" if reason is None else f"unavailable: {reason}"
        print(f"{name:36s} {version:24s} {','.join(ops):18s} {state}")
    return 0


def cmd_show(args):
    fx = fixtures.load(args.fixture)
    m = fx.meta
    print(f"fixture {fx.id}  status {fx.status}")
    print(f"implementation {m['impl']['ref']} ({m['impl']['name']} {m['impl']['version']}) on {m['device']}")
    print(f"case: op={fx.case.op} dist={fx.case.dist} seed={fx.case.seed}")
    print(json.dumps(m["case"]["config"], indent=1))
    print(f"recipe: {json.dumps(m['recipe'])}")
    print(f"observed: {json.dumps(m['observed'])}")
    print(f"provenance: {m['provenance']}")
    for k, a in fx.inputs.items():
        print(f"input {k}: {a.dtype} {a.shape}")
    for name, outcome, detail in replay_fixture(fx, [fx.impl_ref]):
        print(f"now: {name} {outcome} {detail}")
    return 0


def parser():
    p = argparse.ArgumentParser(prog="python -m difftest", description=__doc__)
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser(
        "fuzz", help="fuzz implementations against the spec (default: torch CPU + available GPUs)"
    )
    f.add_argument(
        "--impl", action="append", help="name, package.module:NAME or path/file.py:NAME (repeatable)"
    )
    f.add_argument("--op", action="append", choices=OPS, help="op to fuzz (repeatable; default all)")
    f.add_argument("--model", help="fuzz around a model preset (difftest/presets.py)")
    budget = f.add_mutually_exclusive_group()
    budget.add_argument(
        "--max-examples", type=int, help="examples per (implementation, op) cell, no time limit"
    )
    budget.add_argument("--time-budget", type=float, help=f"seconds (default {DEFAULT_BUDGET_S})")
    f.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    f.add_argument("--seed", type=int, default=0, help="campaign seed (workers and chunks derive theirs)")
    f.add_argument("--out", help="run directory (default runs/<timestamp>); format in difftest/rundir.md")
    f.add_argument("--special", action="store_true", help="also draw NaN/Inf input distributions")
    f.add_argument(
        "--db", help="shared Hypothesis example database directory (default DIFFTEST_DB or OUT/db)"
    )
    r = sub.add_parser("replay", help="replay fixtures against every available implementation")
    r.add_argument("paths", nargs="+", help="fixture directories, or directories of fixtures")
    r.add_argument(
        "--impl", action="append", help="restrict to these implementations (plus the recorded one)"
    )
    sub.add_parser("impls", help="list implementations and why any is unavailable")
    s = sub.add_parser("show", help="a fixture's case, recipe and current diff")
    s.add_argument("fixture")
    return p


COMMANDS = {"fuzz": cmd_fuzz, "replay": cmd_replay, "impls": cmd_impls, "show": cmd_show}


def main(argv=None):
    p = parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["fuzz"]
    try:
        args = p.parse_args(argv)
    except SystemExit as e:  # argparse printed its one-line usage error
        return 2 if e.code else 0
    try:
        return COMMANDS[args.command](args)
    except (UsageError, fixtures.FixtureError, interface.ImplError, CaseError) as e:
        print(f"difftest: error: {e}", file=sys.stderr)
        return 2
