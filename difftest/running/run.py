"""`python -m difftest fuzz`'s campaign: arguments checked before anything loads, worker processes over the
(implementation, op) cells, a time budget, a clean stop on SIGINT/SIGTERM, the run directory's rows merged and
summarized (format: difftest/store/rundir.md), and the summary lines."""

import hashlib
import json
import math
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from ..model import OPS
from ..usage import UsageError, finite, free_dir

DEFAULT_BUDGET_S = 120  # without --max-examples; with it the examples alone decide (campaign_budget)
SLICE_S = 8.0  # seconds per turn of one (implementation, op) cell in a timed campaign
PROGRESS_EVERY_S = 10
STOP_GRACE_S = 10.0  # after SIGINT/SIGTERM: workers finish their case, then get SIGTERM, then SIGKILL
# Workers stop at the budget themselves (campaign.fuzz_cell's deadline, checked before each example; a failure
# being shrunk is recorded as shrunk so far). Past the budget by OVERRUN_S they are stopped like on SIGTERM: a
# case in flight, or Hypothesis' target optimiser spinning on cached examples without calling the test.
OVERRUN_S = 5.0
OVERRUN = f"budget exceeded by {OVERRUN_S:.0f} s"  # the stop reason then: the time budget's, not a signal's
MAX_WORKERS = 256  # a typo like --workers 20000 must not fork-bomb the machine


def _default_impls():
    """torch on CPU plus every available GPU implementation."""
    from ..checking import interface

    refs = ["torch"]
    for name, _, _, reason in interface.listing():
        if reason is None and name not in ("spec", "torch"):
            refs.append(name)
    return refs


def campaign_cells(impl_refs, ops, model, filters=None):
    """(impl, ref, op, configs) per implementation × op slice (strategies.slices), or per op around a model;
    inside --where and the implementation's ``space`` (difftest/model/where.py)."""
    from ..checking import interface
    from ..model import presets, where

    found = []
    for ref in impl_refs:
        impl = interface.load(ref)
        for op in (o for o in ops if o in impl.ops):
            base = presets.configs(model, op) if model else None
            if model and base is None:
                continue
            inside = where.for_impl(filters, impl, op, model)  # --where, its space and its contract
            space = getattr(impl, "space", None)  # with what it says per slice
            found += [(impl, ref, op, configs) for _, configs in where.slices(op, inside, base, space)]
    return found


def _first_to_report(workers_dir, signature):
    """True for the one worker that reports this signature first: a finding two workers both meet is printed once
    (an exclusive create of a marker named by the signature; run_campaign clears the markers of an earlier run)."""
    from .database import first_to_claim

    try:
        workers_dir.mkdir(exist_ok=True)
    except OSError:  # an unwritable run directory: better twice than never
        return True
    digest = hashlib.sha256("\x1f".join(signature).encode()).hexdigest()[:16]
    return first_to_claim(workers_dir / f"reported-{digest}")


def _interrupt(signum, frame):
    from .campaign import Interrupted

    raise Interrupted()


def _worker(w, args, out, start, deadline, queue, stop):
    from hypothesis.errors import Unsatisfiable

    from ..model import pairs, presets
    from . import campaign, database

    # SIGINT is ignored (inherited from the parent across exec): Ctrl-C reaches the whole process group, and
    # the parent decides. Its SIGTERM, sent when a case outlasts the grace period, stops us mid-case.
    signal.signal(signal.SIGTERM, _interrupt)
    found, record, op_seconds = [], None, Counter()
    learned, cells = {}, []  # learned: (implementation ref, op) -> learn.Refusals, what it declines is not drawn again
    runners = campaign.Runners(out / "difftest-workers", args.timeout, args.first_timeout)
    try:
        cells = campaign_cells(args.impl, args.op, args.model, args.where)
        cells = cells[w % len(cells) :] + cells[: w % len(cells)]
        record = campaign.jsonl_recorder(out / f"cases-{w}.jsonl", start)
        db, local_db = args.db or str(out / "db"), out / "db"
        database.warn_once_per(out / "difftest-workers" / "redis-warned")
        common = dict(record=record, fixtures_root=out / "fixtures", special=args.special, runners=runners,
                      stop=stop, weight_seed=presets.weight_seed(args.model) if args.model else None,
                      known=set(args.known_signatures),  # grows with each finding: later ones must differ
                      pairwise=pairs.Pairwise(args.where, args.model, (w, args.workers)))  # steers to uncovered pairs
        if args.max_examples is None:
            runs = campaign.timed_cells(cells, deadline, SLICE_S, args.seed * 64 + w, db=db, local_db=local_db,
                                        refusals=learned, **common)
        else:
            runs = (
                (cell, res)
                for cell in cells
                for res in campaign.until_no_new_finding(lambda i, cell=cell: campaign.in_examples(
                    lambda k, n: campaign.fuzz_cell(
                        *cell[:3], configs=cell[3],
                        run_seed=args.seed * 64 + w + i * 1_000_003 + k * 7_919,  # i = k = 0: as before
                        hypothesis_settings=campaign.cli_settings(n, db, cell[0].name, local_db),
                        deadline=None if math.isinf(deadline) else deadline,
                        refusals=campaign.refusals_of(learned, cell[1], cell[2]), **common),
                    args.max_examples))
            )
        unsatisfiable, last = set(), time.monotonic()
        for (impl, _, op, configs), res in runs:
            op_seconds[op] += time.monotonic() - last  # the wall time this cell's turn took, startup excluded
            last = time.monotonic()
            if res.unsatisfiable:
                unsatisfiable.add(id(configs))
            if res.finding:
                found.append({"impl": impl.name, "op": op, "message": res.finding, "fixture": res.fixture,
                              "signature": list(res.signature), "seconds": round(time.monotonic() - start, 1),
                              "cases": _count_lines(out.glob("cases-*.jsonl"))})
                if _first_to_report(out / "difftest-workers", res.signature):
                    print(f"difftest: FINDING after {found[-1]['seconds']:g} s and {found[-1]['cases']} cases "
                          f"[{', '.join(res.signature)}] {res.finding.splitlines()[0]}", file=sys.stderr, flush=True)
        if cells and len(unsatisfiable) == len(cells):
            raise Unsatisfiable()
        error = None
    except campaign.Interrupted:
        error = None
    except Unsatisfiable:
        error = ("no drawn configuration inside --where (and the implementation's space) meets the case constraints "
                 "of difftest/model/case.py")
    except Exception as e:  # reported by the parent as one line
        error = f"{type(e).__name__}: {e}"
    finally:
        runners.close()
        if record is not None:
            record.close()
    names = {ref: impl.name for impl, ref, _, _ in cells}
    refused = {f"{names.get(ref, ref)} {op}": r.describe() for (ref, op), r in learned.items() if r}
    queue.put((w, found, error, dict(op_seconds), refused))


def _count_lines(paths):
    n = 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                n += sum(1 for _ in f)
        except FileNotFoundError:
            pass
    return n


def failures_by_signature(out):
    """Counter of signatures.Signature over this run's failing rows (cases-*.jsonl, before the merge; shrink
    steps included): the cases behind each finding, known ones too."""
    from ..store.rundir import worker_rows
    from ..store.signatures import row_fields, signature

    n = Counter()
    for row in worker_rows(out):
        if row.get("kind"):
            n[signature(row["op"], row.get("impl", ""), row["kind"], row_fields(row), row["case"]["config"])] += 1
    return n


def bias_cells(out):
    """difftest/checking/bias.py over this run's rows (cases-*.jsonl, before the merge): (the cells whose errors push
    one way, [{impl, op, quant, cases, evidence, message}]; every cell's evidence, Monitor.cells_summary)."""
    from ..checking.bias import Monitor
    from ..store.rundir import worker_rows

    monitor = Monitor()
    for row in worker_rows(out):
        monitor.add(row)
    return monitor.findings(), monitor.cells_summary()


def pairwise(args, out):
    """summary.json's "pairwise": the pairs of field values that this run's compared cases (cases-*.jsonl, before
    the merge) have, among those reachable in its cells (difftest/model/pairs.py)."""
    from ..model import pairs
    from ..store.rundir import worker_rows

    cells = campaign_cells(args.impl, args.op, args.model, args.where)
    return pairs.coverage(worker_rows(out), cells, args.where, args.model)


def nothing_compared(cases, skips, limit):
    """The one-line reason a campaign compared no case (exit 2); limit: what ended it."""
    if cases:
        top = "; ".join(f"{reason} ({n})" for reason, n in skips.most_common(2))
        more = f"; {len(skips) - 2} more reasons" if len(skips) > 2 else ""
        return f"fuzz compared no case: all {cases} cases were skipped: {top}{more}"
    return f"fuzz compared no case: none ran ({limit})"


def campaign_budget(args):
    """Seconds the campaign may run: --time-budget; else DEFAULT_BUDGET_S, unless --max-examples is given, which
    then alone decides (inf: every cell runs its examples however long they take). With both, whichever ends
    first ends the campaign."""
    if args.time_budget is not None:
        return args.time_budget
    return DEFAULT_BUDGET_S if args.max_examples is None else math.inf


def fuzz(args, after=None):
    """Check the arguments (a usage error before any implementation loads, and the plain ones before Hypothesis
    loads), then run the campaign; `after` as run_campaign's."""
    if not 1 <= args.workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be in [1, {MAX_WORKERS}], got {args.workers}")
    if args.max_examples is not None and args.max_examples < 1:
        raise UsageError(f"--max-examples must be >= 1, got {args.max_examples}")
    finite(args.time_budget, "--time-budget", 0, True)
    finite(args.timeout, "--timeout", 0, False)
    finite(args.first_timeout, "--first-timeout", 0, False)
    free_dir(args.out, "--out")
    from ..store import rundir

    used = [] if getattr(args, "resume", False) or args.out is None else rundir.used_by_a_run(args.out)
    if used:
        # Refused rather than started afresh inside: a fresh run would have to delete the old rows and fixtures
        # (findings perhaps copied nowhere yet) or mix them with its own under one summary (a clean run of a fixed
        # plug-in then reported the old finding, exit 1). Continuing a run (a killed one: crash recovery from its
        # write-ahead log) is explicit: --resume.
        raise UsageError(f"--out {args.out} holds a run already ({', '.join(used[:3])}): give another --out, or "
                         "--resume to continue that run")
    from ..checking import interface
    from . import campaign, database

    args.db = database.configured(args.db)
    if args.db and database.is_redis(args.db):
        _redis_url(args.db)
    else:
        free_dir(args.db, "--db")
    from ..model import where

    args.where = where.merge(*(dict([where.parse(w)]) for w in args.where or []))
    if args.model:  # before the implementations load (torch, kernel libraries): a typo fails at once
        from ..model import presets

        if args.model not in presets.PRESETS:
            raise UsageError(f"unknown model {args.model!r}; known: {', '.join(sorted(presets.PRESETS))}")
        presets.weight_seed(args.model)  # a bad weight_seed setting: exit 2 before anything runs
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
    loaded = [interface.load(ref) for ref in args.impl]
    for ref, impl in zip(args.impl, loaded, strict=True):
        reason = impl.available()
        if reason:
            raise UsageError(f"implementation {ref} is unavailable: {reason}")
    args.known_signatures = campaign.shared_known(args.known_signatures, loaded)
    if not campaign_cells(args.impl, args.op, args.model, args.where):
        inside = f" inside --where {where.describe(args.where)}" if args.where else ""
        raise UsageError(f"no implementation among {args.impl} runs the ops {args.op}{inside}")
    out = Path(args.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    if args.db and database.is_redis(args.db):  # one warning line for the campaign, here or from one worker
        (out / "difftest-workers").mkdir(exist_ok=True)
        marker = out / "difftest-workers" / "redis-warned"
        marker.unlink(missing_ok=True)
        database.warn_once_per(marker)
        database.redis_reachable(args.db)
    return run_campaign(args, out, after)


def drawn_inside(args):
    """summary.json's record of what the campaign drew from: --where, each implementation's space (``spaces``: the
    limits that hold in every slice, which the report greys; ``declared_spaces``: the space as declared, its limits
    per slice and its joint limits too, which exclude a value only where a slice or condition holds), and whether
    the NaN/Inf distributions were on (--special)."""
    from ..checking import interface
    from ..model import where

    spaces, declared = {}, {}
    for ref in args.impl:
        impl = interface.load(ref)
        if getattr(impl, "space", None) is not None:
            spaces[impl.name] = where.to_json(where.from_space(impl.space, impl.name))
            declared[impl.name] = where.declared_json(impl.space)
    return {"where": where.to_json(args.where), "spaces": spaces, "declared_spaces": declared,
            "special": bool(args.special)}


def share_lines(shares, refused):
    """The summary's lines on what was compared of what was drawn, per implementation and op, with the top reasons
    for the rest and what the campaign learned the implementation declines (difftest/model/learn.py)."""
    lines = []
    for cell, c in shares.items():
        why = "; ".join(f"{reason} ({n})" for reason, n in c["declined"])
        lines.append(f"compared {c['compared']} of {c['drawn']} drawn ({100 * c['share']:.1f} %) for {cell}"
                     + (f", {c['empty']} with no tokens" if c["empty"] else "") + (f"; declined: {why}" if why else ""))
        lines += [f"  learned: {cell.split()[0]} declines {r}" for r in refused.get(cell, [])]
    return lines


def finding_lines(findings):
    """The FINDING lines of the summary. Two workers may record the same finding (signature) before either
    knows of the other's: it is printed once, the second fixture on one line under it."""
    groups = {}  # this run's findings by signature, in order of first appearance; earlier ones each alone
    for i, f in enumerate(findings):
        key = ("earlier", i) if f["earlier"] else _signature_key(f)
        groups.setdefault(key, []).append(f)
    lines = []
    for first, *again in groups.values():
        earlier = ", earlier" if first["earlier"] else ""
        lines.append(f"FINDING [{first['op']}, {first['impl']}, {first['kind']}{earlier}] {first['message']}")
        lines += [f"  (the same finding, recorded by another worker too: {f['fixture']})" for f in again]
    return lines


def _signature_key(f):
    """A finding's signature as a tuple; one whose fixture could not be read is keyed by what is known of it."""
    return tuple(f["signature"] or ("?", f["impl"], f["kind"] or "?", "?", "?"))


def distinct_findings(findings, per_signature):
    """One entry per signature among the findings (two workers may record the same one): its first
    fixture and this run's failing cases with that signature."""
    out = {}
    for f in findings:
        sig = _signature_key(f)
        if sig not in out:
            out[sig] = {"signature": list(sig), "fixture": f["fixture"], "cases": per_signature.get(sig, 0),
                        "first_seconds": f.get("seconds"), "first_after_cases": f.get("cases")}
    return list(out.values())


def _redis_url(url):
    """A redis://HOST:PORT[/N] URL the client accepts, and the client installed; else a one-line error."""
    from . import database

    try:
        database.redis_client(url)
    except ValueError as e:
        raise UsageError(f"--db {e}") from None


def _collect(procs, queue, stop, received, t0, budget, out):
    """Results of the workers; after a stop request, SIGTERM then SIGKILL to those that outlast the grace."""
    results, last, stopped_at, escalated = {}, time.monotonic(), None, 0
    while len(results) < len(procs):
        try:
            w, *result = queue.get(timeout=1.0)
            results[w] = tuple(result)  # (findings, error, op_seconds, refused)
        except Exception:  # queue.Empty (or a signal): print progress, escalate a stop, keep waiting
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
        now = time.monotonic()
        if not stop.is_set() and now - t0 - budget > OVERRUN_S:
            received.append(OVERRUN)
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
            limit = "no time limit" if math.isinf(budget) else f"{budget:.0f}s"
            progress = f"[{now - t0:6.0f}s/{limit}] {n} cases, {len(procs)} workers"
            print(progress, file=sys.stderr, flush=True)
    for w, p in enumerate(procs):
        p.join()
        if w not in results:  # died without a word (the OOM killer, our SIGKILL)
            results[w] = ([], None if stop.is_set() else f"worker {w} exited with code {p.exitcode}", {}, {})
    return results


def _findings(reported, out):
    """Findings reported by the workers (one per fixture), then every other fixture of the run directory
    (written by a killed worker, recovered from a write-ahead log, or by an earlier run): "earlier"."""
    from ..store import fixtures

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
    from ..store import fixtures

    try:
        meta = json.loads((Path(path) / "case.json").read_text())
        return meta.get("kind") or fixtures.kind_of(meta["observed"])
    except (TypeError, OSError, ValueError, KeyError, AttributeError):  # no fixture (no --out) or unreadable
        return None


def run_campaign(args, out, after=None):
    """The campaign proper, in a validated run directory: recover crashes of a killed earlier run, run the
    workers, stop cleanly on SIGINT/SIGTERM, write summary.json and print its lines, then call `after(out)` (the
    command line renders the report there) before the exit status is decided."""
    from ..model import pairs
    from ..store import host, rundir
    from ..store.atomic import atomic_write_text
    from . import campaign

    for path in campaign.recover_pending(out / "difftest-workers", out / "fixtures"):
        print(f"difftest: crash recovered from an earlier run's write-ahead log: {path}", file=sys.stderr)
    for marker in (out / "difftest-workers").glob("reported-*"):  # a resumed run prints its findings again
        marker.unlink()
    budget = campaign_budget(args)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # spawned workers inherit it: one pool per core, not one per worker
    t0 = time.monotonic()
    ctx = multiprocessing.get_context("spawn")
    queue, stop, received = ctx.Queue(), ctx.Event(), []
    procs = [ctx.Process(target=_worker, args=(w, args, out, t0, t0 + budget, queue, stop))
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
    errors = [e for _, e, _, _ in results.values() if e]
    findings = _findings([f for fs, _, _, _ in results.values() for f in fs], out)
    op_seconds = sum((Counter(secs) for _, _, secs, _ in results.values()), Counter())
    refused = {}  # "implementation op" -> what it was learned to decline, merged over the workers
    for _, _, _, learned in results.values():
        for cell, lines in learned.items():
            refused[cell] = sorted(set(refused.get(cell, [])) | set(lines))
    ran, compared, skips, with_tokens = rundir.this_run(out)
    shares = rundir.cell_shares(out)
    per_signature = failures_by_signature(out)
    biased, evidence = bias_cells(out)
    pairwise_coverage = None if errors else pairwise(args, out)  # a failed worker: exit 2, no coverage to tell
    summary = rundir.summarize(out)
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
            "pairwise": pairwise_coverage,
            "distinct_findings": distinct_findings(findings, per_signature),
            "bias_findings": biased,
            "bias_cells": evidence,
            "known_failures": [{"signature": list(sig), "cases": n} for sig, n in per_signature.most_common()
                               if sig in args.known_signatures],
            **drawn_inside(args),
            "host": host.host_info(),
            "seconds_by_op": {op: round(secs, 1) for op, secs in sorted(op_seconds.items())},
            "cells": shares,
            "refused": refused,
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
    for line in share_lines(shares, refused):
        print(line)
    if pairwise_coverage is not None:
        print(pairs.summary_line(pairwise_coverage))
    for line in finding_lines(findings):
        print(line)
    distinct = summary["distinct_findings"]
    if distinct:
        print(f"{len(distinct)} distinct finding{'s' * (len(distinct) > 1)} (op, implementation, kind, field, slice):")
        for d in distinct:
            first = "" if d["first_seconds"] is None else f", first after {d['first_seconds']:g} s"
            print(f"  [{', '.join(d['signature'])}] {d['cases']} failing cases{first}, fixture {d['fixture']}")
    for b in biased:
        print(f"FINDING [{b['op']}, {b['impl']}, bias] {b['cases']} cases: {b['message']}")
    for k in summary["known_failures"]:
        print(f"known (--known): [{', '.join(k['signature'])}] {k['cases']} failing cases, not reported again")
    if after is not None:
        after(out)
    if errors:
        raise UsageError(f"worker failed: {errors[0]}")
    from ..checking.check import TESTER_ERROR

    tester_errors = sum(n for reason, n in skips.items() if reason.startswith(TESTER_ERROR))
    if tester_errors and not findings and not biased:  # the tester broke on some cases: no clean run either
        raise UsageError(f"{tester_errors} cases hit a tester error (not a finding): "
                         f"{next(r for r in skips if r.startswith(TESTER_ERROR))}")
    if not findings and not biased and compared and not with_tokens:  # every compared case was empty (T = 0)
        raise UsageError(f"fuzz compared no case with tokens: all {compared} compared cases had num_tokens=0")
    if not findings and not biased and not compared:  # a campaign that compared nothing is no clean run
        signal_name = received[0] if received and received[0] != OVERRUN else None
        limit = (f"stopped by {signal_name}" if signal_name else f"--max-examples {args.max_examples}"
                 if math.isinf(budget) else f"--time-budget {budget:g} s")
        raise UsageError(nothing_compared(ran, skips, limit))
    return 1 if findings or biased else 0
