"""`python -m difftest replay`: a fixture against every implementation it applies to, and whether the outcome
is as recorded (open: the recorded implementation still fails the same way; fixed: it passes)."""

import tempfile
from collections import Counter
from pathlib import Path

from ..checking import interface
from ..model.case import CaseError
from ..usage import UsageError, table
from . import fixtures

REPLAY_OUTCOME = {"mismatch": "fail", "error": "error", "crash": "crash", "hang": "hang"}  # by fixture kind


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
    first. A spec whose output changed since recording comes first, as ("spec", "spec-changed", why).
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
            for ref in refs:
                rows.append(_replay_one(fx, ref, runners))
        finally:
            runners.close()
    return rows


def _replay_one(fx, ref, runners):
    from ..running import campaign

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


def main(args):
    """The replay command: one line per fixture; 0 when every fixture replays as recorded, else 1."""
    paths = fixture_paths(args.paths)
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
