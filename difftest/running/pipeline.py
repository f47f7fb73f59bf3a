"""Pipelined campaigns for device implementations: the device never waits on the spec.

In `python -m difftest fuzz` every example runs the implementation and then verifies its outputs against the spec
before Hypothesis draws the next one, so a GPU campaign is bound by the spec on the host (mono_moe: ~6 cases/s
with 12 workers while the kernel takes microseconds). Here the process that holds the device runs the
implementation on a whole batch of cases (drawn, with their inputs generated, by a thread while the previous batch
ran), records the outputs, hands the batch to the pool of verifier processes and goes on with the
next batch while they compare it with the spec. At most
`verifiers + 1` batches are in flight (memory stays bounded); when the verifiers fall that far behind the device
waits, and the summary says for how long. Once the time budget is spent the device is done and the verifiers
drain what is left (host time, no device time).

When it pays: where verifying a case costs more than running it (mono_moe: the spec's Hopper emulation of a
whole layer; on the H200 7.4× the cases per device-minute of the tree before issue 24, 2.3× `fuzz`). Where the
implementation call itself is the host's work (the routing kernels: a few ms of adapter work per case in the one
device process), `fuzz` with many workers does more (benchmarks/RESULTS.md, "GPU campaigns"); the summary says
which case a run was in.

What it trades: cases are drawn by Hypothesis' generation alone (seeded per batch), without the verdict of the
previous ones, so there is no targeting, no shrinking and no example database inside a pipelined run. A failure
is written as a fixture of the case as drawn (`python -m difftest replay` re-runs it, `fuzz --impl` with the
same model finds and shrinks it with the device); it is the throughput mode for device time, next to `fuzz`.

    python -m difftest.running.pipeline --impl REF [--op OP] [--model M] [--batch 32] [--verifiers N] --time-budget S
        --out DIR [--seed N]

writes DIR/cases-pipeline.jsonl (rows as difftest/store/rundir.md), DIR/fixtures/ and DIR/pipeline-summary.json:
cases,
device seconds (inside the implementation), held seconds (from the first draw to the last kernel call, the
time the device is held), device idle seconds waiting for a verifier slot, drain seconds, and cases per
device-minute = cases / held seconds × 60.
"""

import argparse
import itertools
import json
import multiprocessing
import os
import sys
import time
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from ..checking import check, impl_spec, interface
from ..model import generate, presets, strategies
from ..model.case import CaseError
from ..store import fixtures
from ..store.signatures import signature
from . import campaign

PROVENANCE = "difftest pipeline (drawn by Hypothesis' generation, verified in a host process, not shrunk)"


def draw_batch(op, configs, n, seed, weight_seed=None):
    """n cases of `op` as Hypothesis' generation phase draws them under `seed` (fewer if the space is smaller):
    no verdicts, so no targeting or shrinking."""
    cases = []

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seed)
    @given(strategies.cases(op, configs, weight_seed=weight_seed))
    def collect(case):
        cases.append(case)

    collect()
    return cases


def prepare_batch(op, configs, n, seed, weight_seed=None):
    """draw_batch and each case's generated inputs (or the CaseError message that refuses them): a thread of the
    device process prepares the next batch while the device runs this one (a kernel call releases the GIL)."""
    out = []
    for case in draw_batch(op, configs, n, seed, weight_seed):
        try:
            out.append((case, generate.inputs(case)))
        except CaseError as e:
            out.append((case, f"inputs: {e}"))
    return out


def run_on_device(impl, case, inputs, runner=None):
    """(status, message, outputs, seconds): the implementation's outputs on the case's generated inputs, or why
    it has none (skip: unsupported, or inputs refused — then `inputs` is the reason; error: it raised or
    crashed, and outputs is then check.Result.failures: the exception type)."""
    reason = None if case.op in impl.ops else f"{impl.name} does not implement op {case.op}"
    reason = reason or impl.unsupported(case) or (inputs if isinstance(inputs, str) else None)
    if reason:
        return "skip", reason, None, 0.0
    t0 = time.perf_counter()
    try:
        out = check._isolated(runner, case) if runner is not None else impl.run(case, check.read_only(inputs))
    except CaseError as e:
        return "skip", f"{impl.name}: {e}", None, time.perf_counter() - t0
    except Exception as e:  # an implementation that raises on a supported case is a finding
        if interface.is_harness_error(e):  # ... unless the tester's machinery raised (check.TESTER_ERROR)
            return "skip", check.tester_error(e, f"{case.op}, {impl.name}"), None, time.perf_counter() - t0
        return "error", f"{impl.name} raised {check.raised(e)} [{case.op}, {impl.name}]", \
            (interface.failure_of(e),), time.perf_counter() - t0
    return "ran", "", {k: np.asarray(v) for k, v in out.items()}, time.perf_counter() - t0


def verify(case, outputs, recipe, tag):
    """check.Result of recorded outputs against the spec (a verifier process), and the spec's expected outputs
    when they disagree (for the fixture)."""
    inputs = generate.inputs(case)
    t0 = time.perf_counter()
    try:
        v = check.compared(case, inputs, outputs, recipe, tag)
    except CaseError as e:
        return check.Result("skip", 0.0, str(e)), None
    except Exception as e:
        line = str(e).splitlines()[0] if str(e) else ""
        return check.Result("error", np.inf, f"comparison raised {type(e).__name__}: {line} (spec or difftest) "
                                             f"[{tag}]", failures=((f"comparison {type(e).__name__}", "raised"),)), None
    result = check.Result("pass" if v.ok else "fail", float(v.ratio), v.message, v.excluded, v.near_ties,
                          spec_seconds=time.perf_counter() - t0, failures=tuple(tuple(f) for f in v.failures))
    return result, None if v.ok else impl_spec.expected(case, inputs, recipe)


def _verify_batch(items):
    return [verify(*item) for item in items]


def _interleaved(cells):
    """The cells op by op in turn (routing slice 1, quant slice 1, routing slice 2, ...): a short run sees every
    op."""
    by_op = {}
    for cell in cells:
        by_op.setdefault(cell[2], []).append(cell)
    return [c for row in itertools.zip_longest(*by_op.values()) for c in row if c is not None]


class Pipeline:
    """One device process (this one) and `verifiers` spawned verifier processes; see the module docstring."""

    def __init__(self, impl_ref, cells, out, *, batch=32, verifiers=None, seed=0, weight_seed=None, runners=None):
        self.impl_ref, self.cells, self.out, self.batch = impl_ref, _interleaved(cells), Path(out), batch
        self.verifiers = verifiers or max(1, (os.cpu_count() or 2) - 1)
        self.seed, self.weight_seed, self.runners = seed, weight_seed, runners
        self.counts, self.findings, self.signatures = Counter(), [], set()
        self.stats = dict(device_seconds=0.0, idle_seconds=0.0, max_in_flight=0, batches=0, drawn=0)

    def run(self, deadline=None, max_batches=None):
        """Batches round-robin over the cells until `deadline` (time.monotonic()) or `max_batches`; returns the
        summary (also written to pipeline-summary.json)."""
        (self.out / "fixtures").mkdir(parents=True, exist_ok=True)
        record = campaign.jsonl_recorder(self.out / "cases-pipeline.jsonl")
        ctx = multiprocessing.get_context("spawn")
        t0, pending, i = time.monotonic(), deque(), 0
        try:
            with ProcessPoolExecutor(self.verifiers, mp_context=ctx) as pool, ThreadPoolExecutor(1) as drawer:
                ahead = self._prepare(drawer, 0)
                while (max_batches is None or i < max_batches) and (deadline is None or time.monotonic() < deadline):
                    impl = self.cells[i % len(self.cells)][0]
                    batch, ahead = ahead.result(), self._prepare(drawer, i + 1)  # drawn while this one runs
                    self.stats["drawn"] += len(batch)
                    items = self._device(impl, batch, record)
                    i += 1
                    last = (max_batches is not None and i >= max_batches) or (
                        deadline is not None and time.monotonic() >= deadline)
                    while len(pending) > self.verifiers and not last:  # a batch per verifier behind: wait (not
                        # after the last batch: the device is done, the drain verifies it)
                        w0 = time.monotonic()
                        self._collect(pending.popleft(), record)
                        self.stats["idle_seconds"] += time.monotonic() - w0
                    if items:
                        pending.append((impl, items, pool.submit(_verify_batch, [it[:4] for it in items])))
                    self.stats["max_in_flight"] = max(self.stats["max_in_flight"], len(pending))
                    while pending and pending[0][2].done():
                        self._collect(pending.popleft(), record)
                held = time.monotonic() - t0
                while pending:
                    self._collect(pending.popleft(), record)
        finally:
            record.close()
        self.stats["batches"] = i
        return self._summary(held, time.monotonic() - t0 - held)

    def _prepare(self, drawer, i):
        _, _, op, configs = self.cells[i % len(self.cells)]
        return drawer.submit(prepare_batch, op, configs, self.batch, self.seed * 1_000_003 + i, self.weight_seed)

    def _device(self, impl, batch, record):
        """Run a batch on the device; record what needs no verification (skips, errors) at once. -> the items
        to verify: (case, outputs, recipe, tag, device seconds)."""
        items = []
        runner = self.runners.get(impl, self.impl_ref) if self.runners is not None else None
        for case, inputs in batch:
            status, message, outputs, seconds = run_on_device(impl, case, inputs, runner)
            self.stats["device_seconds"] += seconds
            if status == "ran":
                try:
                    recipe = impl.recipe(case)
                except CaseError as e:
                    self._record(impl, case, check.Result("skip", 0.0, str(e), seconds=seconds), None, record)
                    continue
                items.append((case, outputs, recipe, f"{case.op}, {impl.name}", seconds))
            else:
                result = check.Result(status, np.inf if status == "error" else 0.0, message, seconds=seconds,
                                      failures=outputs if status == "error" else ())
                self._record(impl, case, result, None, record)
        return items

    def _collect(self, entry, record):
        impl, items, future = entry
        for (case, _, _, _, seconds), (result, expected) in zip(items, future.result(), strict=True):
            self._record(impl, case, result._replace(seconds=seconds), expected, record)

    def _record(self, impl, case, result, expected, record):
        kind = {"fail": "mismatch", "error": "error"}.get(result.status)
        self.counts[result.status] += 1
        record(campaign.case_row(impl.name, case, result, campaign.recipe_name(impl, case), kind))
        if kind is None:
            return
        sig = signature(case.op, impl.name, kind, result.failures, case.config)
        if sig in self.signatures:
            return
        self.signatures.add(sig)
        recipe = None
        try:
            recipe = impl.recipe(case)
            expected = expected if expected is not None else impl_spec.expected(case, generate.inputs(case), recipe)
        except CaseError:
            expected = {}
        path = fixtures.write(self.out / "fixtures", case, self.impl_ref, impl, recipe,
                              campaign.observed(result), expected,
                              provenance=PROVENANCE, kind=kind)
        self.findings.append({"impl": impl.name, "op": case.op, "kind": kind, "message": result.message,
                              "fixture": str(path), "signature": list(sig)})

    def _summary(self, held, drain):
        cases = sum(self.counts.values())
        summary = {
            "impl": self.impl_ref, "cases": cases, "status": dict(self.counts), "findings": self.findings,
            "batch": self.batch, "verifiers": self.verifiers, "held_seconds": round(held, 3),
            "drain_seconds": round(drain, 3), "cases_per_device_minute": round(cases / max(held, 1e-9) * 60, 1),
            **{k: round(v, 3) if isinstance(v, float) else v for k, v in self.stats.items()},
        }
        (self.out / "pipeline-summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
        return summary


def main(argv=None):
    from ..model.case import OPS
    from .run import campaign_cells

    p = argparse.ArgumentParser(prog="python -m difftest.running.pipeline", description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", required=True, help="the device implementation (name, module:NAME or file.py:NAME)")
    p.add_argument("--op", action="append", choices=OPS, help="op (repeatable; default all it implements)")
    p.add_argument("--model", help="fuzz around a model preset (difftest/model/presets.py)")
    p.add_argument("--batch", type=int, default=32, help="cases per device batch (default 32)")
    p.add_argument("--verifiers", type=int, help="verifier processes (default: cores - 1)")
    limit = p.add_argument_group("limits (at least one; with both, whichever comes first)")
    limit.add_argument("--time-budget", type=float, help="seconds the device is held")
    limit.add_argument("--max-batches", type=int, help="batches sent to the device")
    p.add_argument("--out", type=Path, required=True, help="run directory")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.time_budget is None and args.max_batches is None:
        p.error("one of --time-budget or --max-batches is required")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # spawned verifiers inherit it: one BLAS thread per process
    try:
        cells = campaign_cells([args.impl], args.op or list(OPS), args.model)
    except interface.ImplError as e:
        sys.exit(f"difftest.running.pipeline: {e}")
    if not cells:
        sys.exit(f"difftest.running.pipeline: {args.impl} implements none of the ops {args.op or list(OPS)}")
    runners = campaign.Runners(args.out / "difftest-workers")
    try:
        pipe = Pipeline(args.impl, cells, args.out, batch=args.batch, verifiers=args.verifiers, seed=args.seed,
                        weight_seed=presets.weight_seed(args.model) if args.model else None, runners=runners)
        s = pipe.run(deadline=None if args.time_budget is None else time.monotonic() + args.time_budget,
                     max_batches=args.max_batches)
    finally:
        runners.close()
    print(f"{s['cases']} cases, {s['cases_per_device_minute']:g} per device-minute (held {s['held_seconds']:g} s, "
          f"inside the implementation {s['device_seconds']:g} s, waiting for verifiers {s['idle_seconds']:g} s, "
          f"drain {s['drain_seconds']:g} s): {', '.join(f'{n} {k}' for k, n in s['status'].items())}; "
          f"{len(s['findings'])} findings; {args.out}")
    for f in s["findings"]:
        print(f"FINDING [{f['op']}, {f['impl']}, {f['kind']}] {f['message']}\nreplay: python -m difftest replay "
              f"{f['fixture']}")
    if hint := bound_by_the_device_process(s):
        print(hint)
    return 1 if s["findings"] else 0


def bound_by_the_device_process(summary):
    """A hint when pipelining cannot pay: the one device process never waited for a verifier and spent most of
    the held time inside the implementation (the H200 routing kernels: ~2 ms of host work per case in the
    adapter against microseconds of kernel), so `fuzz --workers N`, calling the kernel from N processes, is
    faster. None otherwise."""
    held, inside = summary["held_seconds"], summary["device_seconds"]
    if summary["idle_seconds"] > 0.05 * held or inside < 0.5 * held:
        return None
    return (f"note: the device process was the bottleneck ({inside:g} of {held:g} s inside the implementation, "
            "never waiting for a verifier): verification is cheap here, and `python -m difftest fuzz --workers N` "
            "calls the implementation from N processes")


if __name__ == "__main__":
    sys.exit(main())
