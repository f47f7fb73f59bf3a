"""What makes two failures the same finding (Signature): where (op, implementation, slice), how (kind) and which
output or exception (field), from a result's failing fields, a cases.jsonl row, or (for records made before results
carried their fields) the failure's message. A campaign keeps searching while its failures have signatures it has
not met (campaign.fuzz_cell); fixtures store theirs (campaign.fixture_signatures reads them)."""

import re
import signal
from typing import NamedTuple

from ..model import strategies

FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Signature(NamedTuple):
    """What makes two failures the same finding: where (op, implementation, and the slice of the op's search:
    routing method, quant scheme, moe quant path, trtllm_ops kernel), how (kind) and which output or exception
    (field). A campaign that has a finding's signature keeps searching for other ones; a known failure of one
    routing method does not hide another method's (two open trtllm-gen routing bugs share the field
    "permutation": Llama4's and DeepSeek-V3's)."""

    op: str
    impl: str
    kind: str  # mismatch | error | crash | hang
    field: str  # mismatch: the failing output first in compare.OUTPUT_ORDER; error: the exception type; crash,
    # hang: how the worker ended (crash_field)
    slice: str  # the value of the config field the op's campaign is split by (strategies.SLICES)

    def __str__(self):
        return ", ".join(self)


def field_of(kind, message, impl_name):
    """The field a failure message gave before results carried their failing fields (check.Result.failures):
    the first word after the implementation's name for a mismatch (``weights(by id)[0, 1]=...`` -> ``weights``),
    the exception type for an error, the first word of the detail for a crash or hang. Only for records made
    before then (fixtures without stored signatures, cases.jsonl rows without failures); a message edited by
    hand gives any word."""
    rest = message[len(impl_name):] if message.startswith(impl_name) else message
    if kind == "error":
        m = re.search(r"raised (\w+)", rest)
        return ("comparison " if rest.startswith("comparison") else "") + (m.group(1) if m else "error")
    if kind in ("crash", "hang"):
        rest = rest.split(":", 1)[1] if ":" in rest else rest
    m = FIELD_RE.search(rest)
    return m.group(0) if m else ""


def crash_field(outcome):
    """The field of a crash or hang, from its isolation Outcome: the signal that ended the worker
    (``SIGSEGV``), ``exit N``, or a CUDA context left unusable (the only crash with neither); a hang is
    ``timeout``."""
    if outcome.kind == "hang":
        return "timeout"
    if outcome.signal is not None:
        return signal.Signals(outcome.signal).name
    return f"exit {outcome.exit}" if outcome.exit is not None else "CUDA context"


def slice_of(op, config):
    """The value of the field `op`'s campaign is split by (strategies.SLICES), of a config or its dict."""
    field = strategies.SLICES[op][0]
    return str(config.get(field, "") if isinstance(config, dict) else getattr(config, field, ""))


def signature(op, impl_name, kind, fields, config):
    """The Signature of a failure whose result names `fields` (check.Result.failures, (field, check) pairs
    in compare.OUTPUT_ORDER, or bare field names): the first one."""
    return signatures(op, impl_name, kind, fields, config)[0]


def signatures(op, impl_name, kind, fields, config):
    """[Signature] of a failure, one per failing field, the finding's own first (what fixtures.write stores:
    one bug may fail in several outputs, a zero scale and the NaN it makes)."""
    names = list(dict.fromkeys(f if isinstance(f, str) else f[0] for f in fields)) or [""]
    return [Signature(op, impl_name, kind, name, slice_of(op, config)) for name in names]


def row_fields(row):
    """The failing fields of a cases.jsonl row (or a fixture's observed record): its ``failures``; a row
    written before rows carried them falls back to the field its message gives (field_of)."""
    if row.get("failures"):
        return [f[0] for f in row["failures"]]
    return [field_of(row["kind"], row.get("message") or "", row.get("impl", ""))]
