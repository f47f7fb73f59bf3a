"""Fuzzing one (implementation, op) cell with Hypothesis: run, compare, target the error/bound ratio, shrink a
failure and write it as a fixture. Used by tests/difftest/running/test_campaign.py (pytest-xdist spreads the cells) and
by `python -m difftest fuzz` (worker processes, a time budget, a run directory).

An implementation that declares ``may_crash`` runs in an IsolatedRunner (difftest/running/isolation.py): a crash
is a finding of kind "crash", shrunk for at most CRASH_SHRINK_S seconds (the setting crash_shrink_s) after its first
crash (each crash costs a fresh worker: seconds once torch and a kernel library are imported), a hang one of kind
"hang", recorded at once and not shrunk (each attempt would cost the whole timeout).
"""

import itertools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Flaky, Unsatisfiable

from ..checking import interface
from ..checking.check import is_tester_error, run_case
from ..model import learn, pairs, strategies
from ..model.case import CaseError
from ..model.settings import get as setting
from ..store import fixtures
from ..store.signatures import Signature, crash_field, row_fields, signature, signatures
from .database import CellDatabase, database, database_key
from .isolation import IsolatedRunner, pending, settle_pending

REPLAY = "replay: python -m difftest replay {path}"
# a may_crash implementation's hang limit per case, and for the first case of each fresh worker, which may
# JIT-build its kernel (minutes for a FlashInfer module on a cold cache): settings (docs/settings.md), which
# --timeout / --first-timeout override for one command
CASE_TIMEOUT_S = float(setting("case_timeout"))
FIRST_CASE_TIMEOUT_S = float(setting("first_case_timeout"))
CRASH_SHRINK_S = float(setting("crash_shrink_s"))
HEALTH = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.differing_executors,
]


MAX_FINDINGS_PER_CELL = 8  # distinct findings sought in one --max-examples cell before moving on


def fixture_signatures(meta):
    """The Signatures of a fixture's case.json: those stored when it was recorded (fixtures.write), the
    finding's own first. A fixture written before signatures were stored falls back to the old derivation
    from its observed message (signatures.field_of), which gives any word where that message was edited by hand."""
    kind = meta.get("kind") or fixtures.kind_of(meta["observed"])
    if meta.get("signatures"):
        return [Signature(*s) for s in meta["signatures"]]
    case = meta["case"]
    observed = {**meta["observed"], "kind": kind, "impl": meta["impl"]["name"]}
    return signatures(case["op"], meta["impl"]["name"], kind, row_fields(observed), case["config"])


def fixture_signature(meta):
    """The Signature of the finding a fixture records (the first of fixture_signatures)."""
    return fixture_signatures(meta)[0]


def known_signatures(root):
    """Signatures of the open fixtures under root (``fuzz --known DIR``), every field each one stores: failures
    already recorded, not reported again. Fixed fixtures are left out: their failure coming back is a
    regression, a finding."""
    out = set()
    for path in fixtures.discover(root):
        meta = json.loads((path / "case.json").read_text())
        if meta.get("status") == "open":
            out.update(fixture_signatures(meta))
    return out


def shared_known(known, impls):
    """`known` plus, for each implementation that states ``known_as`` (an adapter's variant under another recipe,
    such as trtllm_gen_routing.AS_BUILT), the signatures known for that implementation under the variant's own
    name: the variant runs the same kernel, so the same open bugs are known for it."""
    out = set(known)
    for impl in impls:
        base = getattr(impl, "known_as", None)
        if base:
            out |= {s._replace(impl=impl.name) for s in known if s.impl == base}
    return out


class Finding(AssertionError):
    """A failing case; the message names the element, the bound and the replay command."""


class Interrupted(BaseException):
    """The campaign was asked to stop (SIGINT, SIGTERM). A BaseException, like KeyboardInterrupt, so that
    Hypothesis passes it through instead of shrinking it as a failure."""


class _Deadline(BaseException):
    """The time budget ran out with no failure in hand: leave Hypothesis, keep the counts."""


class _Enough(BaseException):
    """Leave Hypothesis at once with the smallest failure so far (a hang, or a crash shrunk long enough)."""


class Watched:
    """An IsolatedRunner remembering the crash or hang behind the RuntimeError that run_case makes of it."""

    def __init__(self, runner):
        self.runner, self.failed = runner, None

    def run(self, case, timeout_s=None):
        o = self.runner.run(case, timeout_s)
        if o.kind in ("crash", "hang"):
            self.failed = o
        return o


def run_classified(impl, case, inputs=None, *, repeat=False, runner=None):
    """(check.Result, kind or None, isolation Outcome of a crash or hang or None). kind: mismatch | error |
    crash | hang for a failure (fixtures.KINDS), None otherwise."""
    watched = Watched(runner) if runner is not None else None
    result = run_case(impl, case, inputs, repeat=repeat, runner=watched)
    crash = watched.failed if watched is not None else None
    if crash is not None:
        message = f"{impl.name} {crash.kind}: {crash.detail} [{case.op}, {impl.name}]"
        return result._replace(message=message, failures=((crash_field(crash), crash.kind),)), crash.kind, crash
    return result, {"fail": "mismatch", "error": "error"}.get(result.status), None


_TOLD = set()  # the tester errors this process has printed


def tell_tester_error(message):
    """A tester error (check.TESTER_ERROR: the case was not tested) on stderr, once per distinct message and
    process: it is no finding, but the user must see that the tester failed, not only count it among the skips."""
    if message not in _TOLD:
        _TOLD.add(message)
        print(f"difftest: {message}", file=sys.stderr, flush=True)


def observed(result, crash=None):
    """A fixture's observed record: status, ratio, message and the failing (field, check) pairs the result
    names; a crash or hang adds the signal or exit status and the last output."""
    obs = {"status": result.status, "ratio": result.ratio, "message": result.message,
           "failures": [list(f) for f in result.failures]}
    if crash is not None:
        tail = crash.output_tail[-fixtures.OUTPUT_TAIL_CHARS :]
        obs.update(signal=crash.signal, exit=crash.exit, output_tail=tail, seconds=round(crash.seconds, 3))
    return obs


class Runners:
    """One IsolatedRunner per may_crash implementation, kept across cells and chunks (a worker start imports
    torch and the kernel library); None for an implementation that runs in-process."""

    def __init__(self, workdir, timeout_s=None, first_timeout_s=None):
        self.workdir = Path(workdir)
        self.timeout_s = timeout_s or CASE_TIMEOUT_S
        self.first_timeout_s = first_timeout_s or FIRST_CASE_TIMEOUT_S
        self._runners = {}

    def get(self, impl, impl_ref):
        if not impl.may_crash:
            return None
        if impl_ref not in self._runners:
            self._runners[impl_ref] = IsolatedRunner(impl_ref, self.timeout_s, self.workdir,
                                                     first_timeout_s=self.first_timeout_s)
        return self._runners[impl_ref]

    def close(self):
        for r in self._runners.values():
            r.close()
        self._runners.clear()


class CellResult(NamedTuple):
    examples: int
    finding: str | None  # the shrunk failure's message (with the replay line), or None
    fixture: str | None  # path of the fixture written for it
    compared: int = 0  # examples that ran and were compared (every status but skip)
    skips: Counter | None = None  # skip reason -> examples
    signature: Signature | None = None  # of the finding
    known: Counter | None = None  # Signature -> failing examples matching an already known finding
    unsatisfiable: bool = False  # no configuration of the cell's strategy meets the case constraints (--where)
    refused: bool = False  # the implementation refuses the cell's slice (learn.Refusals): nothing more to draw there
    learned: bool = False  # ended early to draw around a refusal learned in it (in_examples restarts it)

    def skipped_all(self):
        """Why the cell compared nothing (the skip reasons with their counts); "" if it compared an example."""
        if self.compared:
            return ""
        if not self.skips:
            return f"no example ran ({self.examples} examples)"
        reasons = "; ".join(f"{reason} ({n})" for reason, n in self.skips.most_common(3))
        more = len(self.skips) - 3
        return f"all {self.examples} examples skipped: {reasons}" + (f"; {more} more reasons" if more > 0 else "")


def recipe_name(impl, case):
    """The name of the recipe the case is compared under, or None (ideal only, or refused). recipe(case) is asked
    only of a case the implementation runs: unsupported(case) first, as run_case does (an adapter's recipe_for may
    have no recipe for a configuration it declines)."""
    try:
        if case.op not in impl.ops or impl.unsupported(case):
            return None
        recipe = impl.recipe(case)
    except CaseError:
        return None
    return None if recipe is None else recipe.name


def case_row(impl_name, case, result, recipe=None, kind=None):
    """One cases.jsonl line (difftest/store/rundir.md)."""
    c = case.config
    r = c.routing if case.op == "moe" else c
    return {
        "impl": impl_name,
        "recipe": recipe,
        "kind": kind,
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
        "bias": [list(p) for p in result.bias],
        "failures": [list(f) for f in result.failures],
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
    runners=None,
    stop=None,
    weight_seed=None,
    known=None,
    deadline=None,
    pause=None,
    refusals=None,
    pairwise=None,
):
    """Run Hypothesis over cases of `op` for `impl`. A failure is shrunk, written under fixtures_root (if
    given) and returned in CellResult.finding; record(row) sees every example (shrink steps included).
    ``runners`` (a Runners) supplies the isolated worker of a may_crash implementation (default: one for this
    cell); ``stop`` (an Event) set raises Interrupted at the next example; ``weight_seed`` fixes the expert
    weights of every moe case (presets.weight_seed); ``known`` (a set of Signature) holds the findings
    already made: a failure with one of these signatures is counted in CellResult.known and the search goes
    on (neither targeted nor shrunk), and the signature of a new finding is added to it. Past ``deadline``
    (time.monotonic()) the next example ends the cell: with the smallest failure so far if there is one (a
    finding, shrunk as far as the time allowed), else with what was counted so far. Past ``pause`` (the end of a
    turn of a timed campaign) the next example ends the cell unless a failure is in hand, which is shrunk on.
    ``refusals`` (a learn.Refusals of this implementation and op) is what it was seen to decline: not drawn, and
    taught by every decline of this cell; once the cell's own slice value is refused the cell ends (``refused``).
    ``pairwise`` (a pairs.Pairwise) steers one draw in pairs.STEER_ODDS toward a pair of field values that no
    compared case of this implementation and op has had yet, and is told of every compared case."""
    state = {"examples": 0, "compared": 0, "skips": Counter(), "last_failure": None, "first_crash": None,
             "known": Counter(), "refused": False, "learned": False}
    known = set() if known is None else known
    own = runners is None
    runners = Runners(_worker_dir(fixtures_root)) if own else runners
    provenance = provenance or f"difftest fuzz, op {op}"

    def save(case, result, kind, crash):
        if fixtures_root is None:
            return None
        return fixtures.write(fixtures_root, case, impl_ref, impl, impl.recipe(case), observed(result, crash),
                              _expected(impl, case), provenance=provenance, kind=kind)

    def check(case):
        if stop is not None and stop.is_set():
            raise Interrupted()
        now = time.monotonic()
        if deadline is not None and now > deadline:
            raise _Enough() if state["last_failure"] is not None else _Deadline()
        if pause is not None and now > pause and state["last_failure"] is None:
            raise _Deadline()
        result, kind, crash = run_classified(
            impl, case, repeat=state["examples"] % 16 == 0, runner=runners.get(impl, impl_ref))
        state["examples"] += 1
        if record is not None:
            record(case_row(impl.name, case, result, recipe_name(impl, case), kind))
        if result.status == "skip":
            if is_tester_error(result):
                tell_tester_error(result.message)
            state["skips"][result.message] += 1
            event(f"skip: {result.message.split(':')[0]}")
            if refusals is not None and state["last_failure"] is None and refusals.declined(impl, case, result.message):
                # learned something: end this Hypothesis run, the next one draws around it (or the slice is over)
                state["refused"] = refusals.refuses(case.config, (strategies.SLICES[op][0],))
                state["learned"] = True
                raise _Deadline()
            return
        state["compared"] += 1
        if refusals is not None:
            refusals.accepted(case.config)
        if cell_pairs is not None:  # pairwise coverage (difftest/model/pairs.py): the steering's state
            cell_pairs.saw(case)
        sig = None if kind is None else signature(case.op, impl.name, kind, result.failures, case.config)
        if sig in known:
            state["known"][sig] += 1
            event(f"known: {sig}")
            return
        # Only an error is observed: Hypothesis' Pareto optimiser shrinks observed examples toward simpler ones that
        # score as high, and every exact case (all of quant, cases without tokens) scores 0, so observing it filled
        # turns with the simplest cases (43 % of a campaign's routing passes had no tokens, 43 % of quant's one).
        if 0 < result.ratio < float("inf"):
            target(result.ratio, label="error/bound")
        if kind is None:
            return
        state["last_failure"] = (case, result, kind, crash)
        if kind == "crash" and state["first_crash"] is None:
            state["first_crash"] = time.monotonic()
        if kind == "hang" or (kind == "crash" and time.monotonic() - state["first_crash"] > CRASH_SHRINK_S):
            raise _Enough()
        raise Finding(result.message)

    # Every cell has its own part of the database (else the cells of an implementation would replay and then
    # discard each other's examples). With findings known, replaying the cell's saved failures would count them
    # as passing, and Hypothesis would delete them from the (shared) database: a search for other failures uses
    # a part of its own.
    cell_key = database_key(impl, op, impl_ref, configs, weight_seed) + (
        ("|known " + ";".join(sorted(map(str, known)))).encode() if known else b"")
    learned_db = None
    if refusals is not None and hypothesis_settings is not None and hypothesis_settings.database is not None:
        learned_db, learned_key = hypothesis_settings.database, learn.database_key(impl.name, impl_ref, op)
        if not refusals.stored:
            refusals.load(learned_db, learned_key)
    drawn = configs if refusals is None or configs is None else refusals.avoiding(configs)
    cell_pairs = None if pairwise is None else pairwise.cell(impl, op, configs)  # after cell_key: the key stays
    drawn = pairs.steered(drawn, op, cell_pairs)  # drawn itself without pairwise
    test = given(strategies.cases(op, drawn, special=special, weight_seed=weight_seed))(check)
    if run_seed is not None:  # before the settings: @seed alone sets database=None (Hypothesis 6.1xx)
        test = hypothesis_seed(run_seed)(test)
    if hypothesis_settings is not None or run_seed is None:
        chosen = hypothesis_settings if hypothesis_settings is not None else settings()
        db = None if chosen.database is None else CellDatabase(chosen.database, cell_key)
        test = settings(chosen, database=db)(test)
    try:
        test()
    except (Finding, Flaky, _Enough):  # Flaky: a crash that did not repeat while shrinking
        if state["last_failure"] is None:  # flaky for another reason (a strategy): not a finding of ours
            raise
        case, result, kind, crash = state["last_failure"]  # Hypothesis replays the shrunk example last
        path = save(case, result, kind, crash)
        message = result.message + ("\n" + REPLAY.format(path=path) if path else f"\ncase: {case.to_json()}")
        sig = signature(case.op, impl.name, kind, result.failures, case.config)
        known.add(sig)
        return CellResult(state["examples"], message, None if path is None else str(path), state["compared"],
                          state["skips"], sig, state["known"])
    except _Deadline:
        pass
    except Unsatisfiable:  # a --where or space filter that this slice cannot meet: nothing to fuzz here
        return CellResult(0, None, None, 0, Counter(), None, Counter(), True)
    finally:
        if own:
            runners.close()
        if learned_db is not None:
            refusals.save(learned_db, learned_key)
    return CellResult(state["examples"], None, None, state["compared"], state["skips"], None, state["known"],
                      refused=state["refused"], learned=state["learned"])


def in_examples(run, max_examples):
    """run(k, n) -> CellResult of at most n examples, run again (k = 1, 2, ...) while it ends early to draw around a
    refusal learned in it, until max_examples examples in all; returns one CellResult summing the runs."""
    total = None
    for k in itertools.count():
        res = run(k, max_examples - (total.examples if total else 0))
        total = res if total is None else res._replace(
            examples=total.examples + res.examples, compared=total.compared + res.compared,
            skips=(total.skips or Counter()) + (res.skips or Counter()), known=(total.known or Counter()) + (
                res.known or Counter()))
        if not res.learned or res.refused or res.finding or total.examples >= max_examples:
            return total


def until_no_new_finding(run, limit=MAX_FINDINGS_PER_CELL):
    """run(i) -> CellResult, repeated (i = 0, 1, ...) while it makes a new finding, at most ``limit`` times:
    with the known signatures growing, each repeat searches for a different failure. Yields each result."""
    for i in range(limit):
        res = run(i)
        yield res
        if not res.finding:
            return


def recover_pending(workdir, fixtures_root):
    """Record each case that was running in an isolated worker when an earlier campaign died (its
    write-ahead log has no end for it) as a crash fixture, then settle it. Returns the fixture paths.
    A case whose implementation no longer loads stays pending."""
    workdir = Path(workdir)
    if not workdir.is_dir():
        return []
    by_ref = {}
    for ref, case, pid in pending(workdir):
        by_ref.setdefault(ref, []).append((case, pid))
    paths = []
    for ref, cases in by_ref.items():
        try:
            impl = interface.load(ref)
        except interface.ImplError:
            continue
        for case, pid in cases:
            message = (f"{impl.name} crash: the campaign died while worker pid {pid} ran this case "
                       f"(recovered from the write-ahead log) [{case.op}, {impl.name}]")
            paths.append(fixtures.write(
                fixtures_root, case, ref, impl, impl.recipe(case),
                {"status": "error", "ratio": None, "message": message, "failures": [["died", "crash"]]},
                _expected(impl, case),
                provenance="difftest fuzz: recovered from the write-ahead log of a campaign that died",
                kind="crash"))
        settle_pending(workdir, [c for c, _ in cases], ref)
    return paths


def _worker_dir(fixtures_root):
    """Worker and write-ahead logs of isolated runs: beside the fixtures (the run directory), else tmp."""
    return (Path(fixtures_root).parent if fixtures_root else Path(tempfile.gettempdir())) / "difftest-workers"


def _expected(impl, case):
    """The spec's output for the fixture; {} when the spec refuses the case."""
    from ..checking import impl_spec
    from ..model import generate

    try:
        return impl_spec.expected(case, generate.inputs(case), impl.recipe(case))
    except (CaseError, ValueError):  # ValueError: the spec broke on the case (the finding is that error)
        return {}


def cli_settings(max_examples, db=None, namespace="pytest", local_db=None):
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=False,
        database=database(db, namespace, local_db),
        suppress_health_check=HEALTH,
        print_blob=True,
        report_multiple_bugs=False,
    )


def jsonl_recorder(path, start=None):
    """record(row) appending JSON lines to path (line-buffered: a killed worker loses at most one line); with
    `start` (time.monotonic() of the campaign's start) each row gets "t", the seconds since then."""
    with open(path, "ab+") as b:
        torn = b.tell() > 0 and (b.seek(-1, os.SEEK_END), b.read(1))[1] != b"\n"
    f = open(path, "a", buffering=1)
    if torn:  # a worker killed mid-line: end its torn line so that ours stays whole
        f.write("\n")

    def record(row):
        if start is not None:
            row = {**row, "t": round(time.monotonic() - start, 3)}
        f.write(json.dumps(row, allow_nan=False) + "\n")

    record.close = f.close
    return record


TURNS_PER_OP = 6  # a timed campaign's turns per op at least: the last turn's overrun stays a small share
MIN_TURN_S = 0.5
# A turn ends by time (fuzz_cell's pause) or after this many examples. Hypothesis completes every novel prefix with
# the simplest choices for its first max_examples / 10 examples (at most 50): at 10,000 a turn of a fast op spent
# nearly half of its cases on them (one token, one expert, seed 0; before that no token); at 200, a tenth.
TURN_EXAMPLES = 200


def timed_cells(cells, deadline, slice_s, run_seed, **kwargs):
    """Fuzz cells until `deadline` (time.monotonic()) with the wall time split evenly across the ops of the run,
    within an op evenly across its implementations, within an (implementation, op) round-robin over its slices:
    each turn goes to the op that has had the least time so far, then to its implementation that has had the
    least, so an op whose cases take milliseconds does not crowd out the layer whose cases take a second (with
    three ops each gets a third of the time, less at most one turn). An (implementation, op)'s turns last its
    share of the budget over max(TURNS_PER_OP, its slices), at most slice_s and at least MIN_TURN_S seconds, so a
    short campaign still visits every slice: a turn ends at the first example past that mark (or after TURN_EXAMPLES),
    or later while a failure found in it is shrunk. Each turn is its own Hypothesis run with its own seed, drawing
    around what the implementation was seen to refuse so far (``refusals``: a dict, refusals_of); a cell whose slice
    it refuses is not visited again. Yields (cell, CellResult)."""
    stop = kwargs.get("stop")
    ops = list(dict.fromkeys(cell[2] for cell in cells))
    groups = Counter(cell[1:3] for cell in cells)  # (impl ref, op) -> slices
    refs_of = Counter(op for _, op in groups)
    budget = deadline - time.monotonic()
    turn_s = {g: max(MIN_TURN_S, min(slice_s, budget / len(ops) / refs_of[g[1]] / max(TURNS_PER_OP, n)))
              for g, n in groups.items()}
    spent_op, spent_impl = dict.fromkeys(ops, 0.0), {}
    turns = {}  # (impl ref, op) -> turns taken: the next slice in its round-robin
    dead = set()  # cell indices whose filters no configuration meets
    i = 0
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        live = [j for j in range(len(cells)) if j not in dead]
        if not live:
            return
        op = min(dict.fromkeys(cells[j][2] for j in live), key=lambda o: spent_op[o])
        refs = list(dict.fromkeys(cells[j][1] for j in live if cells[j][2] == op))
        ref = min(refs, key=lambda r: spent_impl.get((r, op), 0.0))
        mine = [j for j in live if cells[j][1:3] == (ref, op)]
        j = mine[turns.get((ref, op), 0) % len(mine)]
        turns[ref, op] = turns.get((ref, op), 0) + 1
        impl, impl_ref, _, configs = cells[j]
        t0 = time.monotonic()
        res = fuzz_cell(
            impl,
            impl_ref,
            op,
            hypothesis_settings=cli_settings(TURN_EXAMPLES, kwargs.get("db"), impl.name, kwargs.get("local_db")),
            configs=configs,
            record=kwargs.get("record"),
            fixtures_root=kwargs.get("fixtures_root"),
            run_seed=run_seed * 1_000_003 + i,
            special=kwargs.get("special", False),
            runners=kwargs.get("runners"),
            stop=stop,
            weight_seed=kwargs.get("weight_seed"),
            known=kwargs.get("known"),
            deadline=deadline,
            pause=min(deadline, t0 + turn_s[impl_ref, op]),
            refusals=refusals_of(kwargs.get("refusals"), impl_ref, op),
            pairwise=kwargs.get("pairwise"),
        )
        seconds = time.monotonic() - t0
        spent_op[op] += seconds
        spent_impl[ref, op] = spent_impl.get((ref, op), 0.0) + seconds
        if res.unsatisfiable or res.refused:
            dead.add(j)
        yield cells[j], res
        i += 1


def refusals_of(learned, impl_ref, op):
    """The learn.Refusals of (implementation, op) in `learned` (a dict kept across cells and turns), made on first
    use; None when `learned` is None (nothing is learned)."""
    if learned is None:
        return None
    return learned.setdefault((impl_ref, op), learn.Refusals(op))
