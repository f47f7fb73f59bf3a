"""`python -m difftest replay`: a fixture against every implementation it applies to, and whether the outcome
is as recorded (open: the recorded implementation still fails the same way; fixed: it passes).

"The same way" is the fixture's stored identity: the failure's signatures (kind, and the failing outputs or how
the worker ended, the finding's own first; fixtures.py) are those stored when it was recorded. A recorded
implementation that fails otherwise (another output, another exception, a crash for a mismatch) "fails
differently": NOT as recorded, both failures named, never "the bug is still there". The case itself cannot drift
unnoticed either: loading verifies the inputs' and weights' digests, replay the spec's output digest.

No pass by not running: a fixture whose recorded implementation does not run is never "as recorded", whatever
the others do. It "cannot run" when its reference does not load (a plug-in file found nowhere, an import error)
or no longer implements the op; it "cannot run here" when the implementation is unavailable on this machine
(available(): no GPU, a kernel package not installed) or declines the case (unsupported). Either exits 2;
``--skip-unavailable`` skips the second kind only (one line each, counted), for a CPU machine replaying a
directory that also holds GPU fixtures. A fixture that cannot be read is one line on stderr, and the others
still replay."""

import sys
import tempfile
from collections import Counter
from pathlib import Path

from ..checking import interface
from ..model.case import CaseError
from ..store import fixtures
from ..usage import UsageError, table

REPLAY_OUTCOME = {"mismatch": "fail", "error": "error", "crash": "crash", "hang": "hang"}  # by fixture kind
CANNOT_RUN = "cannot-run"  # the recorded implementation's outcome when its reference does not load
DIFFERENT = "fails differently"  # ... when it fails, but not with the signatures the fixture stores
# a fixture's verdict (main's one line and tally)
AS_RECORDED, NOT_AS_RECORDED = "as recorded", "NOT as recorded"
BROKEN, UNAVAILABLE, SKIPPED = "cannot run", "cannot run here", "skipped (--skip-unavailable)"


def fixture_paths(paths):
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
    first, with outcome cannot-run when its reference does not load or it lacks the op (the others: n/a). A
    spec whose output changed since recording comes first, as ("spec", "spec-changed", why).
    A may_crash implementation runs in an isolated worker, so a crash fixture replays as "crash"."""
    from ..checking import impl_spec
    from ..model import generate
    from ..running import campaign

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
            for i, ref in enumerate(refs):
                rows.append(_replay_one(fx, ref, runners, recorded=i == 0))
        finally:
            runners.close()
    return rows


def _replay_one(fx, ref, runners, recorded=False):
    from ..running import campaign

    missing = recorded and fixtures.missing_file(fx)
    if missing:
        return fx.meta["impl"]["name"], CANNOT_RUN, missing
    try:
        impl = interface.load(ref)
    except interface.ImplError as e:
        return (fx.meta["impl"]["name"], CANNOT_RUN, str(e)) if recorded else (ref, "n/a", str(e))
    reason = impl.available()
    if reason:
        return impl.name, "n/a", reason
    if fx.case.op not in impl.ops:
        return impl.name, CANNOT_RUN if recorded else "n/a", f"does not implement {fx.case.op}"
    r, kind, _ = campaign.run_classified(impl, fx.case, fx.inputs, runner=runners.get(impl, ref))
    other = recorded and kind is not None and fx.status == "open" and another_failure(fx, impl.name, kind, r.failures)
    if other:
        return impl.name, DIFFERENT, f"{other}: {r.message}"
    return impl.name, "n/a" if r.status == "skip" else REPLAY_OUTCOME.get(kind, "pass"), r.message


def _failure_text(sigs):
    """'mismatch (ids, weights)', 'error (ValueError)', 'crash (SIGSEGV)': one failure's signatures, kind first."""
    kinds = list(dict.fromkeys(k for k, _ in sigs))
    return "; ".join(f"{k} ({', '.join(f for kk, f in sigs if kk == k)})" for k in kinds)


def another_failure(fx, impl_name, kind, failures):
    """None when a failure of the recorded implementation (its kind and check.Result.failures) has the signatures
    the fixture stores, the finding's own first; else "now ..., recorded ..." naming both. The op and the slice
    come from the case and the implementation's name may have changed since recording, so kind and field are
    compared. A fixture written before fixtures stored signatures is not checked (its field came from a message)."""
    from ..store.signatures import signatures

    stored = fx.meta.get("signatures")
    if not stored:
        return None
    now = [(s.kind, s.field) for s in signatures(fx.case.op, impl_name, kind, failures, fx.case.config)]
    was = [(s[2], s[3]) for s in stored]
    return None if now == was else f"now {_failure_text(now)}, recorded {_failure_text(was)}"


def recorded_outcome(fx, rows):
    """The replay row of the implementation the fixture was recorded with: replay_fixture's first row after a
    spec-changed one (by position, not by name: a plug-in renamed since recording is still the recorded one)."""
    return next((r for r in rows if r[1] != "spec-changed"), None)


def verdict(fx, rows):
    """NOT_AS_RECORDED when another implementation fails (n/a: does not apply) or the spec changed, or the
    recorded one does not fail as recorded when open (the stored signatures: DIFFERENT otherwise) or pass when fixed;
    BROKEN when the recorded implementation cannot run, UNAVAILABLE when it is unavailable here or declines the
    case; else AS_RECORDED. Others passing never make a fixture whose recorded implementation did not run
    as recorded."""
    recorded = recorded_outcome(fx, rows)
    if any(row[1] not in ("pass", "n/a") for row in rows if row is not recorded):
        return NOT_AS_RECORDED
    if recorded is None or recorded[1] == CANNOT_RUN:
        return BROKEN
    if recorded[1] == "n/a":
        return UNAVAILABLE
    expected = REPLAY_OUTCOME[fx.kind] if fx.status == "open" else "pass"
    return AS_RECORDED if recorded[1] == expected else NOT_AS_RECORDED


def expectation_met(fx, rows):
    """The fixture replayed as recorded (verdict)."""
    return verdict(fx, rows) == AS_RECORDED


def now_fixed(fx, rows):
    """An open fixture whose recorded implementation now passes, with the spec unchanged and every other
    implementation passing (or not applying): what ``replay --update`` marks fixed."""
    recorded = recorded_outcome(fx, rows)
    others_ok = all(row[1] in ("pass", "n/a") for row in rows if row is not recorded)
    return fx.status == "open" and recorded is not None and recorded[1] == "pass" and others_ok


def replay_line(rows, recorded):
    """The outcomes of one fixture on one line: the recorded implementation first, the others by name, the
    implementations that do not apply grouped by reason."""
    ran = [f"{name} {outcome}" + (f" ({detail})" if outcome in ("n/a", CANNOT_RUN) else
                                  f" ({detail.split(': ', 1)[0]})" if outcome == DIFFERENT else "")
           for name, outcome, detail in rows if outcome != "n/a" or (name, outcome, detail) == recorded]
    na = Counter(detail for name, outcome, detail in rows if outcome == "n/a" and (name, outcome, detail) != recorded)
    reasons = "; ".join(f"{reason} ({n})" for reason, n in na.most_common())
    return ", ".join(ran) + (f"; n/a {sum(na.values())}: {reasons}" if na else "")


def main(args):
    """The replay command: one line per fixture (and a summary line for several). Exit 1 when a fixture
    replayed NOT as recorded; else 2 when one could not be read or cannot run (here: unless --skip-unavailable
    skipped it), or when every fixture was skipped (replaying nothing is no pass); else 0."""
    paths = fixture_paths(args.paths)
    tally = Counter()
    for p in paths:
        try:
            fx = fixtures.load(p)
        except (fixtures.FixtureError, CaseError, OSError) as e:  # one bad fixture: the others still replay
            print(f"difftest: error: {str(e).splitlines()[0] if str(e) else type(e).__name__} (not replayed)",
                  file=sys.stderr, flush=True)
            tally["unreadable"] += 1
            continue
        tally.update(replay_one_line(fx, args))
    if len(paths) > 1:
        print(f"replayed {len(paths)} fixtures: " + ", ".join(f"{n} {what}" for what, n in tally.items() if n))
    if tally[UNAVAILABLE]:
        print(f"hint: `python -m difftest replay --skip-unavailable` skips the {tally[UNAVAILABLE]} fixture(s) "
              "whose implementation is unavailable here (and still fails on one that cannot run)")
    if tally[NOT_AS_RECORDED]:
        return 1
    if tally[BROKEN] or tally[UNAVAILABLE] or tally["unreadable"] or not tally[AS_RECORDED]:
        return 2  # not run, or nothing run (every fixture skipped)
    return 0


def replay_one_line(fx, args):
    """Replay one fixture and print its line (and the details of unexpected outcomes); a Counter of its verdict
    (and of "marked fixed")."""
    rows = replay_fixture(fx, args.impl, args.timeout, args.first_timeout)
    met = verdict(fx, rows)
    if met == UNAVAILABLE and getattr(args, "skip_unavailable", False):
        met = SKIPPED
    fixed = met == NOT_AS_RECORDED and now_fixed(fx, rows)
    if fixed and args.update:
        fixtures.set_status(fx.path, "fixed")
        met = AS_RECORDED
    status = "fixed (was open)" if fixed and args.update else fx.status
    print(f"{fx.id} ({status} {fx.kind}, recorded with {fx.meta['impl']['name']}): {met}: "
          f"{replay_line(rows, recorded_outcome(fx, rows))}")
    shown = [r for r in rows if args.verbose or (met == NOT_AS_RECORDED and r[1] not in ("pass", "n/a"))]
    for line in table(shown):
        print(f"  {line}")
    if fixed and args.update:
        print(f"  updated: {fx.path} open -> fixed ({fx.meta['impl']['name']} now passes; it must keep passing)")
    elif fixed:
        print(f"  hint: {fx.meta['impl']['name']} now passes; `python -m difftest replay --update {fx.path}` "
              "marks the fixture fixed")
    return Counter({met: 1, "marked fixed": int(fixed and args.update)})
