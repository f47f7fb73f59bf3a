"""What a comparison returns (a Verdict naming its Failures) and the element-wise checks every op's comparison is made
of: |got - want| within a derived bound (elementwise, bounded_rows), bit for bit (_bit_exact), and worst, which
merges the verdicts of a case's outputs into one. Every verdict carries the largest error/bound ratio (fed to
hypothesis.target) and, on failure, one message naming the element, both values, the bound and the ratio."""

from typing import NamedTuple

import numpy as np


class Failure(NamedTuple):
    """One failing output of a comparison, as the comparison found it (never parsed from a message): the
    output (``field``) and the check it failed. A finding's signature takes its field from here
    (difftest/store/signatures.py)."""

    field: str  # an output (OUTPUT_ORDER), or SPEC_FIELD for the spec's own recipe-vs-ideal check
    check: str  # CHECKS


# The checks a Failure names: a contract violation (missing output, wrong dtype or shape), a selection beyond 2δ
# or a bit pattern that differs (mismatch), a value outside its bound (bound), NaN where the spec has a number
# (nan), a derived bound that bounds nothing (unbounded), a broken declared tie rule (tie), ids that are not
# distinct experts in range (range), a group kept beyond 2δ (groups), fused shared-expert ids (shared), rows that
# must stay untouched (unwritten), errors that push one way (bias).
CHECKS = ("missing", "dtype", "shape", "mismatch", "bound", "nan", "unbounded", "tie", "range", "groups", "shared",
          "unwritten", "bias")
# The fixed order of the outputs a finding is named by (its signature's field: the first failing one). A cause
# comes before what it corrupts: ids before the weights and layouts made from them, scales before the codes
# made with them. Outputs not listed follow in the order found, the spec's own check (SPEC_FIELD) last.
OUTPUT_ORDER = ("ids", "weights", "permutation", "scales", "scale_buffer", "q", "out_scale", "out")
SPEC_FIELD = "spec"


class Verdict(NamedTuple):
    ok: bool
    ratio: float  # max |error| / bound over the compared elements (0: exact)
    message: str  # "" when ok
    excluded: int = 0  # tokens not compared: routing not robust and ids not exposed, or weights unbounded
    near_ties: int = 0  # tokens decided by the tie-aware validity check
    # moe: ((token, d_t), ...) of difftest/checking/bias.py, tokens with d_t != 0; () where it does not apply
    bias: tuple = ()
    failures: tuple = ()  # (Failure, ...) of every output that failed, in OUTPUT_ORDER; () when ok


PASS = Verdict(True, 0.0, "")


def failed(field, check, message, ratio=np.inf):
    """A failing Verdict of one output and check."""
    return Verdict(False, ratio, message, failures=(Failure(field, check),))


def in_output_order(failures):
    """Failures without repeats, sorted by OUTPUT_ORDER (outputs not in it after, as found)."""
    n = len(OUTPUT_ORDER)
    unique = list(dict.fromkeys(failures))
    rank = {f: OUTPUT_ORDER.index(f.field) if f.field in OUTPUT_ORDER else n + (f.field == SPEC_FIELD)
            for f in unique}
    return tuple(sorted(unique, key=lambda f: rank[f]))


def fmt_index(idx):
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def elementwise(name, got, want, bound, tag, field=None):
    """|got - want| <= bound everywhere (NaN only where both are NaN, equal infinities equal). Where the values
    differ, a bound that is not a finite number >= 0 fails: an infinite bound would pass anything, so it
    compares nothing. Callers exclude (and count) the elements a derivation cannot bound before calling.
    ``field``: the output a failure names (default: name)."""
    field = field or name
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return failed(field, "shape", f"{name} has shape {got.shape} but spec has {want.shape} [{tag}]")
    bound = np.broadcast_to(np.asarray(bound, np.float64), want.shape)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    unbounded = np.argwhere(~same & ~(np.isfinite(bound) & (bound >= 0)))
    if unbounded.size:
        at = tuple(unbounded[0])
        return failed(
            field,
            "unbounded",
            f"{name}{fmt_index(at)}={got[at]:.6g} but spec={want[at]:.6g}: the derived bound is {bound[at]}, "
            f"not a finite number >= 0, so it compares nothing ({len(unbounded)} such elements) [{tag}]",
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(same, 0.0, np.abs(got - want))
        ratio = np.where(same, 0.0, np.where(bound > 0, err / bound, np.inf))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    if ratio.size == 0:
        return PASS
    worst = np.unravel_index(np.argmax(ratio), ratio.shape)
    r = float(ratio[worst])
    if r <= 1.0:
        return Verdict(True, r, "")
    check = "nan" if np.isnan(got[worst]) and not np.isnan(want[worst]) else "bound"
    return failed(
        field,
        check,
        f"{name}{fmt_index(worst)}={got[worst]:.6g} but spec={want[worst]:.6g}: "
        f"|diff| {err[worst]:.2g} > bound {bound[worst]:.2g} ({r:.3g}x) [{tag}]",
        r,
    )


def bounded_rows(name, got, want, bound, tag, field=None):
    """elementwise over the rows [T, k] whose bound is finite. A row where the derivation bounds nothing (+inf:
    bounds.routing_weights' tanh.approx term over a score sum that may vanish) is excluded and counted in
    Verdict.excluded; a NaN bound is no such signal and still fails in elementwise."""
    rows = ~np.isposinf(bound).any(axis=-1, keepdims=True)
    v = elementwise(name, np.where(rows, got, 0), np.where(rows, want, 0), np.where(rows, bound, 0), tag, field)
    return v._replace(excluded=v.excluded + int((~rows).sum()))


def worst(*verdicts):
    """Every failure of the failing verdicts (in OUTPUT_ORDER) with the message of the one whose output comes
    first in that order (of those, the largest ratio), so that the message names the output the finding is
    named by; the largest ratio of all. All passing: the passing one with the largest ratio."""
    failing = [v for v in verdicts if not v.ok]
    ratio = max((v.ratio for v in verdicts), default=0.0)
    if failing:
        failures = in_output_order(f for v in failing for f in v.failures)
        first = failures[0] if failures else None
        v = max((x for x in failing if first is None or first in x.failures), key=lambda x: x.ratio)
        v = v._replace(ratio=ratio, failures=failures)
    else:
        v = max(verdicts, key=lambda v: v.ratio)
    return v._replace(
        excluded=sum(x.excluded for x in verdicts), near_ties=sum(x.near_ties for x in verdicts)
    )


def _bits(a):
    """The bit patterns to compare: uint8 codes as they are, integer words (packed UE8M0 scales) as unsigned
    integers of their width (never through float32, which cannot hold a 32-bit word), values as fp32 bits."""
    a = np.asarray(a)
    if a.dtype == np.uint8:
        return a
    if a.dtype.kind in "iu":
        return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _bit_exact(name, got, want, tag, field=None, value=None):
    """got and want bit for bit (_bits). ``field``: the output a failure names (default: name); ``value``:
    bits -> the number they stand for, shown beside the hex bits of the first difference."""
    field = field or name
    got, want = _bits(got), _bits(want)
    if got.shape != want.shape:
        return failed(field, "shape", f"{name} has shape {got.shape} but spec has {want.shape} [{tag}]")
    diff = np.argwhere(got != want)
    if diff.size:
        at = tuple(diff[0])
        shown = (lambda b: f"{b:#x}") if value is None else (lambda b: f"{b:#x} ({value(b)})")
        return failed(
            field,
            "mismatch",
            f"{name}{fmt_index(at)}={shown(got[at])} but spec={shown(want[at])}: {len(diff)} of "
            f"{got.size} differ (bit-exact required) [{tag}]",
        )
    return PASS
