"""`python -m difftest`: fuzz, replay, report, merge, impls, show, mutants. Exit codes: 0 clean, 1 findings, 2 usage
or bad input (one line on stderr, no traceback; nothing run, nothing written)."""

import argparse
import json
import math
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from . import fixtures, interface
from .case import OPS, CaseError
from .isolation import atomic_write_text
from .report import ReportError

DEFAULT_BUDGET_S = 120
SLICE_S = 8.0  # seconds per turn of one (implementation, op) cell in a timed campaign
PROGRESS_EVERY_S = 10
STOP_GRACE_S = 10.0  # after SIGINT/SIGTERM: workers finish their case, then get SIGTERM, then SIGKILL
# Workers stop at the budget themselves (campaign.fuzz_cell's deadline, checked before each example; a failure
# being shrunk is recorded as shrunk so far). Past the budget by OVERRUN_S they are stopped like on SIGTERM: a
# case in flight, or Hypothesis' target optimiser spinning on cached examples without calling the test.
OVERRUN_S = 5.0
MAX_WORKERS = 256  # a typo like --workers 20000 must not fork-bomb the machine
REPLAY_OUTCOME = {"mismatch": "fail", "error": "error", "crash": "crash", "hang": "hang"}  # by fixture kind


class UsageError(Exception):
    """Bad arguments or input: printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block), so every exit-2 message is one line."""

    def error(self, message):
        one_line = message.replace("\r", "\\r").replace("\n", "\\n")  # an argument may hold a line break
        self.exit(2, f"difftest: error: {self.prog.split()[-1]}: {one_line}\n")


# ---- fuzz


def _default_impls():
    """torch on CPU plus every available GPU implementation."""
    refs = ["torch"]
    for name, _, _, reason in interface.listing():
        if reason is None and name not in ("spec", "torch"):
            refs.append(name)
    return refs


def _cells(impl_refs, ops, model, filters=None):
    """(impl, ref, op, configs) per implementation × op slice (campaign.slices), or per op around a model;
    inside --where and the implementation's ``space`` (difftest/where.py)."""
    from . import presets, where

    cells = []
    for ref in impl_refs:
        impl = interface.load(ref)
        space = getattr(impl, "space", None)
        inside = where.merge(filters or {}, {} if space is None else where.from_space(space, impl.name))
        for op in (o for o in ops if o in impl.ops):
            base = presets.configs(model, op) if model else None
            if model and base is None:
                continue
            cells += [(impl, ref, op, configs) for _, configs in where.slices(op, inside, base)]
    return cells


def _interrupt(signum, frame):
    from .campaign import Interrupted

    raise Interrupted()


def _worker(w, args, out, deadline, queue, stop):
    from hypothesis.errors import Unsatisfiable

    from . import campaign, presets

    # SIGINT is ignored (inherited from the parent across exec): Ctrl-C reaches the whole process group, and
    # the parent decides. Its SIGTERM, sent when a case outlasts the grace period, stops us mid-case.
    signal.signal(signal.SIGTERM, _interrupt)
    found, record, op_seconds = [], None, Counter()
    runners = campaign.Runners(out / "difftest-workers", args.timeout, args.first_timeout)
    try:
        cells = _cells(args.impl, args.op, args.model, args.where)
        cells = cells[w % len(cells) :] + cells[: w % len(cells)]
        record = campaign.jsonl_recorder(out / f"cases-{w}.jsonl")
        db, local_db = args.db or str(out / "db"), out / "db"
        campaign.warn_once_per(out / "difftest-workers" / "redis-warned")
        common = dict(record=record, fixtures_root=out / "fixtures", special=args.special, runners=runners,
                      stop=stop, weight_seed=presets.weight_seed(args.model) if args.model else None,
                      known=set(args.known_signatures))  # grows with each finding: later ones must differ
        if args.max_examples is None:
            runs = campaign.timed_cells(cells, deadline, SLICE_S, args.seed * 64 + w, db=db, local_db=local_db,
                                        **common)
        else:
            runs = (
                (cell, res)
                for cell in cells
                for res in campaign.until_no_new_finding(lambda i, cell=cell: campaign.fuzz_cell(
                    *cell[:3], configs=cell[3], run_seed=args.seed * 64 + w + i * 1_000_003,  # i = 0: as before
                    hypothesis_settings=campaign.cli_settings(args.max_examples, db, cell[0].name, local_db),
                    **common))
            )
        unsatisfiable, last = set(), time.monotonic()
        for (impl, _, op, configs), res in runs:
            op_seconds[op] += time.monotonic() - last  # the wall time this cell's turn took, startup excluded
            last = time.monotonic()
            if res.unsatisfiable:
                unsatisfiable.add(id(configs))
            if res.finding:
                found.append({"impl": impl.name, "op": op, "message": res.finding, "fixture": res.fixture,
                              "signature": list(res.signature)})
        if cells and len(unsatisfiable) == len(cells):
            raise Unsatisfiable()
        queue.put((w, found, None, dict(op_seconds)))
    except campaign.Interrupted:
        queue.put((w, found, None, dict(op_seconds)))
    except Unsatisfiable:
        queue.put((w, found, "no drawn configuration inside --where (and the implementation's space) meets "
                             "the case constraints of difftest/case.py", dict(op_seconds)))
    except Exception as e:  # reported by the parent as one line
        queue.put((w, found, f"{type(e).__name__}: {e}", dict(op_seconds)))
    finally:
        runners.close()
        if record is not None:
            record.close()


def _count_lines(paths):
    n = 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                n += sum(1 for _ in f)
        except FileNotFoundError:
            pass
    return n


def _row(line):
    """A case row (cases.jsonl.gz, cases-*.jsonl), or None for a line torn by a killed worker."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) and {"op", "status", "message", "ratio", "case"} <= set(row) else None


def this_run(out):
    """(cases, compared, Counter of skip reasons) of the rows in the workers' cases-*.jsonl, before the merge:
    this run's alone, whatever earlier runs left in cases.jsonl.gz."""
    cases, skips = 0, Counter()
    for p in out.glob("cases-*.jsonl"):
        for row in filter(None, map(_row, p.read_text(errors="replace").splitlines())):
            cases += 1
            skips.update([row["message"]] if row["status"] == "skip" else [])
    return cases, cases - sum(skips.values()), skips


def failures_by_signature(out):
    """Counter of campaign.Signature over this run's failing rows (cases-*.jsonl, before the merge; shrink
    steps included): the cases behind each finding, known ones too."""
    from .campaign import signature

    n = Counter()
    for p in out.glob("cases-*.jsonl"):
        for row in filter(None, map(_row, p.read_text(errors="replace").splitlines())):
            if row.get("kind"):
                n[signature(row["op"], row.get("impl", ""), row["kind"], row["message"])] += 1
    return n


def bias_cells(out):
    """difftest/bias.py over this run's rows (cases-*.jsonl, before the merge): (the cells whose errors push one
    way, [{impl, op, quant, cases, evidence, message}]; every cell's evidence, Monitor.cells_summary)."""
    from .bias import Monitor

    monitor = Monitor()
    for p in sorted(out.glob("cases-*.jsonl")):
        for row in filter(None, map(_row, p.read_text(errors="replace").splitlines())):
            monitor.add(row)
    return monitor.findings(), monitor.cells_summary()


def nothing_compared(cases, skips, limit):
    """The one-line reason a campaign compared no case (exit 2); limit: what ended it."""
    if cases:
        top = "; ".join(f"{reason} ({n})" for reason, n in skips.most_common(2))
        more = f"; {len(skips) - 2} more reasons" if len(skips) > 2 else ""
        return f"fuzz compared no case: all {cases} cases were skipped: {top}{more}"
    return f"fuzz compared no case: none ran ({limit})"


def summarize(out):
    """Merge cases-*.jsonl into cases.jsonl.gz (after the rows of earlier runs into the same directory, from
    a plain cases.jsonl too; torn lines dropped and counted) and count (format: difftest/rundir.md). The
    merged file replaces the old one atomically before the parts are removed: a kill in between can
    duplicate rows, never lose them."""
    from . import rundir

    parts = sorted(out.glob("cases-*.jsonl"))
    lines = rundir.read_lines(out) if rundir.cases_file(out) else []
    for p in parts:
        lines += p.read_text(errors="replace").splitlines()
    rows, kept, torn = [], [], 0
    for line in filter(str.strip, lines):
        row = _row(line)
        if row is None:
            torn += 1
            continue
        rows.append(row)
        kept.append(line + "\n")
    rundir.write_lines(out, kept)
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
    return {
        "cases": len(rows),
        "torn_lines": torn,
        "status": dict(status),
        "max_ratio_passing": ratio_max,
        "max_ratio_case": worst,
        "by": {k: dict(sorted(v.items())) for k, v in counts.items()},
        "skips": dict(skips.most_common()),
    }


def _finite(value, name, low, inclusive):
    if value is not None and not (math.isfinite(value) and (value >= low if inclusive else value > low)):
        raise UsageError(f"{name} must be a finite number {'>=' if inclusive else '>'} {low:g}, got {value}")


def _free_dir(path, flag):
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise UsageError(f"{flag} {path} exists and is not a directory")


def cmd_fuzz(args):
    from . import campaign

    if not 1 <= args.workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be in [1, {MAX_WORKERS}], got {args.workers}")
    if args.max_examples is not None and args.max_examples < 1:
        raise UsageError(f"--max-examples must be >= 1, got {args.max_examples}")
    _finite(args.time_budget, "--time-budget", 0, True)
    _finite(args.timeout, "--timeout", 0, False)
    _finite(args.first_timeout, "--first-timeout", 0, False)
    _free_dir(args.out, "--out")
    args.db = args.db or os.environ.get("DIFFTEST_DB") or None
    if args.db and campaign.is_redis(args.db):
        _redis_url(args.db)
    else:
        _free_dir(args.db, "--db")
    from . import where

    args.where = where.merge(*(dict([where.parse(w)]) for w in args.where or []))
    if args.model:  # before the implementations load (torch, kernel libraries): a typo fails at once
        from . import presets

        if args.model not in presets.PRESETS:
            raise UsageError(f"unknown model {args.model!r}; known: {', '.join(sorted(presets.PRESETS))}")
        presets.weight_seed(args.model)  # a bad DIFFTEST_WEIGHT_SEED: exit 2 before anything runs
    args.known_signatures = set()
    if args.known is not None:  # a directory of fixtures, read before the implementations load too
        from .campaign import known_signatures

        if not Path(args.known).is_dir():
            raise UsageError(f"--known {args.known} must be a directory of fixtures")
        try:
            args.known_signatures = known_signatures(args.known)
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # a case.json that is no fixture's
            raise UsageError(f"--known {args.known}: a fixture's case.json is unreadable "
                             f"({type(e).__name__}: {e})") from None
    args.impl = args.impl or _default_impls()
    args.op = args.op or list(OPS)
    for ref in args.impl:
        reason = interface.load(ref).available()
        if reason:
            raise UsageError(f"implementation {ref} is unavailable: {reason}")
    if not _cells(args.impl, args.op, args.model, args.where):
        inside = f" inside --where {where.describe(args.where)}" if args.where else ""
        raise UsageError(f"no implementation among {args.impl} runs the ops {args.op}{inside}")
    out = Path(args.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    if args.db and campaign.is_redis(args.db):  # one warning line for the campaign, here or from one worker
        (out / "difftest-workers").mkdir(exist_ok=True)
        marker = out / "difftest-workers" / "redis-warned"
        marker.unlink(missing_ok=True)
        campaign.warn_once_per(marker)
        campaign.redis_reachable(args.db)
    return run_campaign(args, out)


def drawn_inside(args):
    """summary.json's record of what the campaign drew from (the report greys the rest): --where, each
    implementation's declared space, and whether the NaN/Inf distributions were on (--special)."""
    from . import where

    spaces = {}
    for ref in args.impl:
        impl = interface.load(ref)
        if getattr(impl, "space", None) is not None:
            spaces[impl.name] = where.to_json(where.from_space(impl.space, impl.name))
    return {"where": where.to_json(args.where), "spaces": spaces, "special": bool(args.special)}


def finding_lines(findings):
    """The FINDING lines of the summary. Two workers may record the same finding (signature) before either
    knows of the other's: it is printed once, the second fixture on one line under it."""
    groups = {}  # this run's findings by signature, in order of first appearance; earlier ones each alone
    for i, f in enumerate(findings):
        key = ("earlier", i) if f["earlier"] else tuple(f["signature"] or ("?", f["impl"], f["kind"] or "?", "?"))
        groups.setdefault(key, []).append(f)
    lines = []
    for first, *again in groups.values():
        earlier = ", earlier" if first["earlier"] else ""
        lines.append(f"FINDING [{first['op']}, {first['impl']}, {first['kind']}{earlier}] {first['message']}")
        lines += [f"  (the same finding, recorded by another worker too: {f['fixture']})" for f in again]
    return lines


def distinct_findings(findings, per_signature):
    """One entry per signature among the findings (two workers may record the same one): its first
    fixture and this run's failing cases with that signature."""
    out = {}
    for f in findings:
        sig = tuple(f["signature"] or ("?", f["impl"], f["kind"] or "?", "?"))
        if sig not in out:
            out[sig] = {"signature": list(sig), "fixture": f["fixture"], "cases": per_signature.get(sig, 0)}
    return list(out.values())


def _redis_url(url):
    """A redis://HOST:PORT[/N] URL the client accepts, and the client installed; else a one-line error."""
    from . import campaign

    try:
        campaign.redis_client(url)
    except ValueError as e:
        raise UsageError(f"--db {e}") from None


def _collect(procs, queue, stop, received, t0, budget, out):
    """Results of the workers; after a stop request, SIGTERM then SIGKILL to those that outlast the grace."""
    results, last, stopped_at, escalated = {}, time.monotonic(), None, 0
    while len(results) < len(procs):
        try:
            w, found, error, op_seconds = queue.get(timeout=1.0)
            results[w] = (found, error, op_seconds)
        except Exception:  # queue.Empty (or a signal): print progress, escalate a stop, keep waiting
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
        now = time.monotonic()
        if not stop.is_set() and now - t0 - budget > OVERRUN_S:
            received.append(f"budget exceeded by {OVERRUN_S:.0f} s")
            stop.set()
        if stop.is_set() and stopped_at is None:
            stopped_at = now
            print(f"difftest: {received[0]}: stopping (findings are kept, summary follows)", file=sys.stderr)
        if stopped_at is not None and escalated < 2 and now - stopped_at > STOP_GRACE_S * (escalated + 1):
            for w, p in enumerate(procs):
                if w not in results and p.is_alive():
                    (p.terminate if escalated == 0 else p.kill)()
            escalated += 1
        if now - last >= PROGRESS_EVERY_S:
            last = now
            n = _count_lines(out.glob("cases-*.jsonl"))
            progress = f"[{now - t0:6.0f}s/{budget:.0f}s] {n} cases, {len(procs)} workers"
            print(progress, file=sys.stderr, flush=True)
    for w, p in enumerate(procs):
        p.join()
        if w not in results:  # died without a word (the OOM killer, our SIGKILL)
            results[w] = ([], None if stop.is_set() else f"worker {w} exited with code {p.exitcode}", {})
    return results


def _findings(reported, out):
    """Findings reported by the workers (one per fixture), then every other fixture of the run directory
    (written by a killed worker, recovered from a write-ahead log, or by an earlier run): "earlier"."""
    seen, findings = set(), []
    for f in reported:
        if f["fixture"] is None or f["fixture"] not in seen:
            seen.add(f["fixture"])
            findings.append({**f, "earlier": False})
    for path in fixtures.discover(out / "fixtures"):
        if str(path) not in seen:
            meta = json.loads((path / "case.json").read_text())
            message = f"{meta['observed'].get('message')}\nreplay: python -m difftest replay {path}"
            findings.append({"impl": meta["impl"]["name"], "op": meta["case"]["op"], "message": message,
                             "fixture": str(path), "earlier": True})
    for f in findings:
        f["kind"] = _kind(f["fixture"])
        if "signature" not in f:
            f["signature"] = _signature(f["fixture"])
    return findings


def _signature(path):
    from .campaign import fixture_signature

    try:
        return list(fixture_signature(json.loads((Path(path) / "case.json").read_text())))
    except (TypeError, OSError, ValueError, KeyError, AttributeError):
        return None


def _kind(path):
    try:
        meta = json.loads((Path(path) / "case.json").read_text())
        return meta.get("kind") or fixtures.kind_of(meta["observed"])
    except (TypeError, OSError, ValueError, KeyError, AttributeError):  # no fixture (no --out) or unreadable
        return None


def run_campaign(args, out):
    """The campaign proper, in a validated run directory: recover crashes of a killed earlier run, run the
    workers, stop cleanly on SIGINT/SIGTERM, write summary.json and the report."""
    from . import campaign, merge, report

    for path in campaign.recover_pending(out / "difftest-workers", out / "fixtures"):
        print(f"difftest: crash recovered from an earlier run's write-ahead log: {path}", file=sys.stderr)
    budget = args.time_budget if args.time_budget is not None else DEFAULT_BUDGET_S
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # spawned workers inherit it: one pool per core, not one per worker
    t0 = time.monotonic()
    ctx = multiprocessing.get_context("spawn")
    queue, stop, received = ctx.Queue(), ctx.Event(), []
    procs = [ctx.Process(target=_worker, args=(w, args, out, t0 + budget, queue, stop))
             for w in range(args.workers)]

    def on_signal(signum, frame):
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the spawned workers (see _worker)
    try:
        for p in procs:
            p.start()
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        results = _collect(procs, queue, stop, received, t0, budget, out)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    errors = [e for _, e, _ in results.values() if e]
    findings = _findings([f for fs, _, _ in results.values() for f in fs], out)
    op_seconds = sum((Counter(secs) for _, _, secs in results.values()), Counter())
    ran, compared, skips = this_run(out)
    per_signature = failures_by_signature(out)
    biased, evidence = bias_cells(out)
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
            "interrupted": received[0] if received else None,
            "compared": compared,
            "distinct_findings": distinct_findings(findings, per_signature),
            "bias_findings": biased,
            "bias_cells": evidence,
            "known_failures": [{"signature": list(sig), "cases": n} for sig, n in per_signature.most_common()
                               if sig in args.known_signatures],
            **drawn_inside(args),
            "host": merge.host_info(),
            "seconds_by_op": {op: round(secs, 1) for op, secs in sorted(op_seconds.items())},
        }
    )
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    rate = summary["cases"] / max(summary["seconds"], 1e-9)
    print(
        f"{summary['cases']} cases in {summary['seconds']} s ({rate:.0f}/s): "
        f"{', '.join(f'{n} {status}' for status, n in summary['status'].items()) or 'none ran'}; "
        f"max passing error/bound {summary['max_ratio_passing']:.3g} (1.0 = exactly at the derived bound); "
        f"run directory {out}"
    )
    for line in finding_lines(findings):
        print(line)
    distinct = summary["distinct_findings"]
    if distinct:
        print(f"{len(distinct)} distinct finding{'s' * (len(distinct) > 1)} (op, implementation, kind, field):")
        for d in distinct:
            print(f"  [{', '.join(d['signature'])}] {d['cases']} failing cases, fixture {d['fixture']}")
    for b in biased:
        print(f"FINDING [{b['op']}, {b['impl']}, bias] {b['cases']} cases: {b['message']}")
    for k in summary["known_failures"]:
        print(f"known (--known): [{', '.join(k['signature'])}] {k['cases']} failing cases, not reported again")
    print(report.maybe_render(out))
    if errors:
        raise UsageError(f"worker failed: {errors[0]}")
    if not findings and not biased and not compared:  # a campaign that compared nothing is no clean run
        limit = (f"stopped by {received[0]}" if received else f"--time-budget {budget:g} s"
                 if args.max_examples is None else f"--max-examples {args.max_examples}")
        raise UsageError(nothing_compared(ran, skips, limit))
    return 1 if findings or biased else 0


# ---- replay


def _fixture_paths(paths):
    out = []
    for p in map(Path, paths):
        if (p / "case.json").is_file() or p.name == "case.json":
            out.append(p)
        elif p.is_dir():
            found = fixtures.discover(p) or fixtures.discover(p / "fixtures")  # a run directory: its findings
            if not found:  # replaying nothing is no pass
                raise UsageError(f"no fixtures found in {p}")
            out.extend(found)
        else:
            raise UsageError(f"{p}: not a fixture directory or a directory of fixtures")
    return out


def replay_fixture(fx, impl_refs=None, timeout_s=None, first_timeout_s=None):
    """[(impl name, outcome, detail)] with outcome pass | fail | error | crash | hang | n/a; recorded impl
    first. A spec whose output changed since recording comes first, as ("spec", "spec-changed", why).
    A may_crash implementation runs in an isolated worker, so a crash fixture replays as "crash"."""
    from . import campaign, generate, impl_spec

    rows = []
    recorded_sha = fx.meta["expected"]["sha256"]
    try:
        now = generate.digest(impl_spec.expected(fx.case, fx.inputs, fx.recipe))
        if now != recorded_sha:
            rows.append(("spec", "spec-changed", "the spec's expected output differs from the recorded one"))
    except (CaseError, ValueError) as e:  # ValueError: not a precondition, the spec broke (impl_spec.refusals)
        if recorded_sha != generate.digest({}):  # recorded as refused by the spec: unchanged
            rows.append(("spec", "spec-changed", f"the spec now refuses the case: {str(e).splitlines()[0]}"))
    refs = [fx.impl_ref] + [r for r in (impl_refs or interface.names()) if r != fx.impl_ref]
    with tempfile.TemporaryDirectory(prefix="difftest-replay-") as workdir:
        runners = campaign.Runners(workdir, timeout_s, first_timeout_s)
        try:
            for ref in refs:
                rows.append(_replay_one(fx, ref, runners))
        finally:
            runners.close()
    return rows


def _replay_one(fx, ref, runners):
    from . import campaign

    try:
        impl = interface.load(ref)
    except interface.ImplError as e:
        return ref, "n/a", str(e)
    reason = impl.available() or (None if fx.case.op in impl.ops else f"does not implement {fx.case.op}")
    if reason:
        return impl.name, "n/a", reason
    r, kind, _ = campaign.run_classified(impl, fx.case, fx.inputs, runner=runners.get(impl, ref))
    return impl.name, "n/a" if r.status == "skip" else REPLAY_OUTCOME.get(kind, "pass"), r.message


def recorded_outcome(fx, rows):
    """The replay row of the implementation the fixture was recorded with (None if it did not run)."""
    return next((r for r in rows if r[0] == fx.meta["impl"]["name"]), None)


def expectation_met(fx, rows):
    """The spec is unchanged and every other implementation the case applies to passes (n/a: does not
    apply); the recorded one fails as recorded when open (same kind: fail, error, crash or hang), passes when
    fixed. An unavailable recorded implementation cannot contradict."""
    recorded = recorded_outcome(fx, rows)
    if any(row[1] not in ("pass", "n/a") for row in rows if row is not recorded):
        return False
    if recorded is None or recorded[1] == "n/a":
        return True
    return recorded[1] == (REPLAY_OUTCOME[fx.kind] if fx.status == "open" else "pass")


def now_fixed(fx, rows):
    """An open fixture whose recorded implementation now passes, with the spec unchanged and every other
    implementation passing (or not applying): what ``replay --update`` marks fixed."""
    recorded = recorded_outcome(fx, rows)
    others_ok = all(row[1] in ("pass", "n/a") for row in rows if row is not recorded)
    return fx.status == "open" and recorded is not None and recorded[1] == "pass" and others_ok


def replay_line(rows, recorded):
    """The outcomes of one fixture on one line: the recorded implementation first, the others by name, the
    implementations that do not apply grouped by reason."""
    ran = [f"{name} {outcome}" for name, outcome, _ in rows if outcome != "n/a" or (name, outcome, _) == recorded]
    na = Counter(detail for name, outcome, detail in rows if outcome == "n/a" and (name, outcome, detail) != recorded)
    reasons = "; ".join(f"{reason} ({n})" for reason, n in na.most_common())
    return ", ".join(ran) + (f"; n/a {sum(na.values())}: {reasons}" if na else "")


def cmd_replay(args):
    paths = _fixture_paths(args.paths)
    ok, tally = True, Counter()
    for p in paths:
        fx = fixtures.load(p)
        rows = replay_fixture(fx, args.impl, args.timeout, args.first_timeout)
        met = expectation_met(fx, rows)
        fixed = not met and now_fixed(fx, rows)
        if fixed and args.update:
            fixtures.set_status(fx.path, "fixed")
            met = True
        ok &= met
        status = "fixed (was open)" if fixed and args.update else fx.status
        tally["as recorded" if met else "NOT as recorded"] += 1
        tally["marked fixed"] += fixed and args.update
        print(
            f"{fx.id} ({status} {fx.kind}, recorded with {fx.meta['impl']['name']}): "
            f"{'as recorded' if met else 'NOT as recorded'}: {replay_line(rows, recorded_outcome(fx, rows))}"
        )
        shown = [r for r in rows if args.verbose or (not met and r[1] not in ("pass", "n/a"))]
        for line in table(shown):
            print(f"  {line}")
        if fixed and args.update:
            print(f"  updated: {fx.path} open -> fixed ({fx.meta['impl']['name']} now passes; it must keep passing)")
        elif fixed:
            print(f"  hint: {fx.meta['impl']['name']} now passes; `python -m difftest replay --update {fx.path}` "
                  "marks the fixture fixed")
    if len(paths) > 1:
        print(f"replayed {len(paths)} fixtures: " + ", ".join(f"{n} {what}" for what, n in tally.items() if n))
    return 0 if ok else 1


# ---- impls, show


def table(rows):
    """Rows of strings as lines, every column but the last padded to its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)] if rows else []
    return ["  ".join([c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]).rstrip() for r in rows]


def cmd_impls(args):
    rows = [(name, version, ",".join(ops), "available" if reason is None else f"unavailable: {reason}")
            for name, version, ops, reason in interface.listing()]
    for line in table(rows):
        print(line)
    return 0


def cmd_show(args):
    fx = fixtures.load(args.fixture)
    m = fx.meta
    print(f"fixture {fx.id}  status {fx.status}")
    print(f"implementation {m['impl']['ref']} ({m['impl']['name']} {m['impl']['version']}) on {m['device']}")
    weights = "" if fx.case.weight_seed is None else f" weight_seed={fx.case.weight_seed}"
    print(f"case: op={fx.case.op} dist={fx.case.dist} seed={fx.case.seed}{weights}")
    print(json.dumps(m["case"]["config"], indent=1))
    print(f"recipe: {json.dumps(m['recipe'])}")
    print(f"observed: {json.dumps(m['observed'])}")
    print(f"provenance: {m['provenance']}")
    from . import reproducer

    for line in reproducer.show_lines(fx):
        print(line)
    for name, outcome, detail in replay_fixture(fx, [fx.impl_ref]):
        print(f"now: {name} {outcome} {detail}")
    if args.script:
        script, npz = reproducer.write_script(fx, args.script)
        print(f"reproducer: python {script} (inputs, expected values and bounds in {npz})")
    return 0


def cmd_report(args):
    from . import report

    return report.main([args.run_dir] + ([] if args.top is None else ["--top", str(args.top)]))


def cmd_merge(args):
    from . import merge, report

    summary = merge.merge(args.run_dirs, args.out)
    hosts = summary["hosts"]
    print(f"merged {len(args.run_dirs)} run directories from {len(hosts)} hosts into {args.out}: "
          f"{summary['cases']} cases, {len(summary['findings'])} findings, "
          f"{len(list(Path(args.out).glob('fixtures/*/case.json')))} fixtures")
    for name, h in hosts.items():
        print(f"  {name}: {h['cases']} cases {h['status']}")
    print(report.maybe_render(args.out))
    return 0


def _timeouts(p):
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="per-case limit for implementations that may crash or hang (default "
                        "DIFFTEST_CASE_TIMEOUT or 120); past it the case is a hang finding")
    p.add_argument("--first-timeout", type=float, metavar="SECONDS",
                   help="limit for the first case of each fresh worker, which may JIT-build its kernel "
                        "(default DIFFTEST_FIRST_CASE_TIMEOUT or 900)")


def parser():
    p = Parser(prog="python -m difftest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog=f"The main job: python -m difftest fuzz ({DEFAULT_BUDGET_S} s, spec vs torch on CPU and any "
                      "available GPU implementation;\nrun directory runs/<timestamp>). Each command's options: "
                      "python -m difftest COMMAND --help")
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser(
        "fuzz", help="fuzz implementations against the spec (default: torch CPU + available GPUs)"
    )
    f.add_argument(
        "--impl", action="append", help="name, package.module:NAME or path/file.py:NAME (repeatable)"
    )
    f.add_argument("--op", action="append", choices=OPS, help="op to fuzz (repeatable; default all)")
    f.add_argument("--model", help="fuzz around a model preset (difftest/presets.py)")
    f.add_argument("--where", action="append", metavar="FIELD=V|LO..HI|A,B,C",
                   help="draw only configurations with FIELD (method, quant, activation, logits_dtype, "
                        "num_experts or E, top_k, ...) in the value, range or set (repeatable; with --model too)")
    budget = f.add_mutually_exclusive_group()
    budget.add_argument(
        "--max-examples", type=int, help="examples per (implementation, op) cell, no time limit"
    )
    budget.add_argument("--time-budget", type=float, help=f"seconds (default {DEFAULT_BUDGET_S})")
    f.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    f.add_argument("--seed", type=int, default=0, help="campaign seed (workers and chunks derive theirs)")
    f.add_argument("--out", help="run directory (default runs/<timestamp>); format in difftest/rundir.md")
    f.add_argument("--special", action="store_true", help="also draw NaN/Inf input distributions")
    f.add_argument("--known", metavar="DIR",
                   help="fixtures whose signatures (op, implementation, kind, field) are known: failures "
                        "matching an open one are counted, not reported; the search goes on for others")
    f.add_argument(
        "--db", help="Hypothesis example database: a directory, or redis://HOST:PORT[/N] shared by many machines "
                     "and multiplexed with OUT/db (default DIFFTEST_DB, else OUT/db)"
    )
    _timeouts(f)
    r = sub.add_parser("replay", help="replay fixtures against every available implementation")
    r.add_argument("paths", nargs="+", help="fixture directories, directories of fixtures, or run directories "
                                            "(their fixtures/)")
    r.add_argument(
        "--impl", action="append", help="restrict to these implementations (plus the recorded one)"
    )
    r.add_argument("-v", "--verbose", action="store_true",
                   help="one line per implementation and fixture (default: one line per fixture, with the "
                        "details of unexpected outcomes)")
    r.add_argument("--update", action="store_true",
                   help="mark an open fixture fixed when its recorded implementation now passes (one line each)")
    _timeouts(r)
    rp = sub.add_parser("report", help="render RUN_DIR/report.html and report.json from a run directory")
    rp.add_argument("run_dir", help="a run directory written by python -m difftest fuzz --out DIR")
    rp.add_argument("--top", type=int, help="worst cases listed")
    m = sub.add_parser("merge", help="merge run directories from many hosts into one (per-host provenance kept)")
    m.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (fuzz --out, or merged)")
    m.add_argument("--out", required=True, help="the merged run directory (new)")
    sub.add_parser("impls", help="list implementations and why any is unavailable")
    s = sub.add_parser("show", help="a fixture's case, recipe and current diff")
    sub.add_parser("mutants", help="mutation self-test: is every seeded bug found? "
                                   "(python -m difftest mutants --help)", add_help=False)
    s.add_argument("fixture")
    s.add_argument("--script", metavar="OUT.py",
                   help="also write a standalone reproducer (numpy inputs in OUT.npz, the call, the expected "
                        "values and bounds) that runs without Hypothesis and exits 1 while the bug is there")
    return p


COMMANDS = {
    "fuzz": cmd_fuzz, "replay": cmd_replay, "report": cmd_report, "impls": cmd_impls, "show": cmd_show,
    "merge": cmd_merge,
}


def main(argv=None):
    p = parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # the main job is `fuzz`, asked for by name: a bare call starts no 120 s campaign
        p.print_help()
        return 0
    if argv[0] == "mutants":  # its own parser: the mutation self-test (difftest/mutants.py)
        from . import mutants

        return mutants.main(argv[1:])
    try:
        args = p.parse_args(argv)
    except SystemExit as e:  # argparse printed its one-line error (or the help, code 0)
        return 2 if e.code else 0
    try:
        if args.command in ("fuzz", "replay"):  # replay reads them too
            _finite(args.timeout, "--timeout", 0, False)
            _finite(args.first_timeout, "--first-timeout", 0, False)
        return COMMANDS[args.command](args)
    except (UsageError, fixtures.FixtureError, interface.ImplError, CaseError, ReportError, OSError) as e:
        # OSError: an unreadable input or an unwritable run directory, named by the message
        print(f"difftest: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
