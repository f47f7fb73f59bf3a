"""One case against one implementation: skip with a reason, run, compare with the spec, time it."""

import time
import warnings
from typing import NamedTuple

import numpy as np

from ..model import generate
from ..model.case import CaseError
from . import compare
from .interface import HarnessError, failure_of, is_harness_error

STATUSES = ("pass", "fail", "skip", "error")
# A skip reason starting with this: the tester's machinery raised around the kernel call (interface.HarnessError),
# so the case was not tested; never a finding or fixture, and no implementation is blamed.
TESTER_ERROR = "tester error"


class Result(NamedTuple):
    status: str  # pass | fail (bound or ids violated) | skip (with reason; TESTER_ERROR too) | error (the impl raised)
    ratio: float  # max error/bound (0 for skip)
    message: str  # failure message, skip reason or the exception line
    excluded: int = 0
    near_ties: int = 0
    seconds: float = 0.0  # implementation run time
    spec_seconds: float = 0.0
    bias: tuple = ()  # ((token, d_t), ...): compare.Verdict.bias
    # (field, check) pairs of a fail (compare.Failure: every failing output, in compare.OUTPUT_ORDER), or of an
    # error ((exception type, "raised")): what a finding's signature is named by, never parsed from the message
    failures: tuple = ()


def read_only(inputs):
    """Copies marked read-only, so writing into the inputs raises instead of hiding."""
    out = {}
    for k, v in inputs.items():
        a = np.array(v, copy=True)
        a.flags.writeable = False
        out[k] = a
    return out


def _same_bits(a, b):
    return set(a) == set(b) and all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)


def _isolated(runner, case):
    """Outputs through difftest/running/isolation.py's worker; an error, crash or hang raises with its detail, a
    failure of the worker's own machinery as a HarnessError."""
    o = runner.run(case)
    if o.kind == "harness":  # the worker's own machinery raised, not the implementation
        raise HarnessError(o.detail)
    if o.kind == "error":  # the implementation's exception, as the worker relayed it: its type and stated failure
        raise IsolatedError(o.detail, o.failure)
    if o.kind != "ok":
        raise RuntimeError(f"{o.kind}: {o.detail}")
    return o.outputs


class IsolatedError(RuntimeError):
    """An implementation's exception raised in an isolation worker (`detail`: "Type: its first line"), carrying the
    (field, check) pair it named there (interface.failure_of): the signature and message of an error are the same
    in a worker as in process."""

    def __init__(self, detail, failure):
        super().__init__(detail)
        self.detail = detail
        self.difftest_failure = tuple(failure) if failure else ("RuntimeError", "raised")


def raised(e):
    """"Type: first line" of an implementation's exception; a worker's relayed one as it was raised there."""
    if isinstance(e, IsolatedError):
        return e.detail
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def tester_error(e, tag):
    """The skip reason for harness error `e` (interface.is_harness_error): a HarnessError's message as it is (a
    worker's relayed one names the original type), any other marked exception as "Type: message"."""
    line = str(e).splitlines()[0] if str(e) else ""
    what = line if isinstance(e, HarnessError) else f"{type(e).__name__}: {line}"
    return f"{TESTER_ERROR}, not a finding: {what} [{tag}]"


def is_tester_error(result):
    return result.status == "skip" and result.message.startswith(TESTER_ERROR)


def poisoned(outputs):
    """Buffers shaped like `outputs`: NaN for floats, all bits set for integers and codes."""
    return {k: np.full_like(v, np.nan) if v.dtype.kind == "f" else np.full_like(v, -1 if v.dtype.kind == "i"
                                                                                  else np.iinfo(v.dtype).max)
            for k, v in ((k, np.asarray(v)) for k, v in outputs.items())}


def poison_problem(impl, case, inputs, out):
    """None, or (output, text) of the first element that an implementation with ``run_into(case, inputs,
    buffers)`` left unwritten (or wrote differently from run()) in poisoned output buffers."""
    buffers = poisoned(out)
    impl.run_into(case, read_only(inputs), buffers)
    for k, v in out.items():
        got, want = np.asarray(buffers[k]), np.asarray(v)
        same = (got == want) | (np.isnan(got) & np.isnan(want)) if want.dtype.kind == "f" else got == want
        differ = np.argwhere(~same)
        if differ.size:
            at = tuple(int(i) for i in differ[0])
            return k, f"{k}{list(at)}={got[at]} in the NaN-poisoned buffer but {want[at]} from run()"
    return None


def compared(case, inputs, outputs, recipe, tag, impl_name="the implementation"):
    """compare.COMPARE's verdict on `outputs`, with numpy's RuntimeWarnings raised: an inf·0 or 0/0 the spec did not
    expect would leave a NaN in a bound, and the case is then a finding against the spec or difftest. Signaling NaNs
    in the outputs are made quiet first (widening one raises "invalid value"): a NaN output is the implementation's
    finding, not the comparison's. Outputs that break the plug-in contract (a missing output, a wrong dtype or shape)
    fail first, blamed on `impl_name` (compare.contract_violation)."""
    broken = compare.contract_violation(case, outputs, impl_name, tag)
    if broken is not None:
        return broken
    outputs = {k: _quiet_nans(v) for k, v in outputs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return compare.COMPARE[case.op](case, inputs, outputs, recipe, tag)


_NAN_BITS = {np.dtype(np.float32): (np.uint32, 0x7F800000, 0x007FFFFF, 0x00400000),
             np.dtype(np.float16): (np.uint16, 0x7C00, 0x03FF, 0x0200)}  # (bits, exponent, fraction, quiet bit)


def _quiet_nans(a):
    """a with its signaling NaNs (all-ones exponent, nonzero fraction, quiet bit clear) given the quiet bit."""
    a = np.asarray(a)
    if a.dtype not in _NAN_BITS:
        return a
    bits, exponent, fraction, quiet = _NAN_BITS[a.dtype]
    b = a.view(bits)
    signaling = ((b & exponent) == exponent) & ((b & fraction) != 0) & ((b & quiet) == 0)
    return np.where(signaling, b | quiet, b).astype(bits).view(a.dtype) if signaling.any() else a


def run_case(impl, case, inputs=None, *, repeat=False, tag=None, runner=None):
    """Result of `impl` on `case`; `repeat` runs a deterministic implementation twice and demands equal bits.
    `runner` (an IsolatedRunner of the same implementation) runs it in a worker process that may crash or
    hang; the worker regenerates the inputs from the case, so `inputs` must then be the generated ones."""
    tag = tag or f"{case.op}, {impl.name}"
    reason = None if case.op in impl.ops else f"{impl.name} does not implement op {case.op}"
    reason = reason or impl.unsupported(case)
    if reason:
        return Result("skip", 0.0, reason)
    try:
        inputs = generate.inputs(case) if inputs is None else inputs
    except CaseError as e:
        return Result("skip", 0.0, f"inputs: {e}")
    t0 = time.perf_counter()
    try:
        run = (
            (lambda: _isolated(runner, case))
            if runner is not None
            else (lambda: impl.run(case, read_only(inputs)))
        )
        out = run()
        again = run() if repeat and impl.deterministic else None
    except CaseError as e:
        return Result("skip", 0.0, f"{impl.name}: {e}")
    except Exception as e:  # an implementation that raises on a supported case is a finding
        if is_harness_error(e):  # ... unless the tester's machinery raised: the case was not tested
            return Result("skip", 0.0, tester_error(e, tag), seconds=time.perf_counter() - t0)
        return Result(
            "error",
            np.inf,
            f"{impl.name} raised {raised(e)} [{tag}]",
            seconds=time.perf_counter() - t0,
            failures=(failure_of(e),),
        )
    t1 = time.perf_counter()
    if again is not None and not _same_bits(out, again):
        differ = tuple((k, "nondeterministic") for k in out if not _same_bits({k: out[k]}, {k: again.get(k)}))
        return Result(
            "fail", np.inf, f"{impl.name} declares deterministic but two runs differ [{tag}]", seconds=t1 - t0,
            failures=differ or (("outputs", "nondeterministic"),),
        )
    writes_into = hasattr(impl, "run_into") and runner is None
    problem = poison_problem(impl, case, inputs, out) if writes_into else None
    if problem:
        return Result("fail", np.inf, f"{problem[1]} [{tag}]", seconds=t1 - t0, failures=((problem[0], "unwritten"),))
    try:
        v = compared(case, inputs, out, impl.recipe(case), tag, impl.name)
    except CaseError as e:  # the spec refuses the case: outside the spec's domain
        return Result("skip", 0.0, str(e), seconds=t1 - t0)
    except Exception as e:  # the spec or difftest itself broke on this case: a finding too, named as such
        return Result(
            "error",
            np.inf,
            f"comparison raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            f" (spec or difftest, not {impl.name}) [{tag}]",
            seconds=t1 - t0,
            failures=((f"comparison {type(e).__name__}", "raised"),),
        )
    status = "pass" if v.ok else "fail"
    return Result(
        status, float(v.ratio), v.message, v.excluded, v.near_ties, t1 - t0, time.perf_counter() - t1, v.bias,
        tuple(tuple(f) for f in v.failures),
    )
