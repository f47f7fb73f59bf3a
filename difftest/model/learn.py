"""What an implementation declines, learned while a campaign runs, so that the search stops drawing it.

``unsupported(case)`` answers with a reason. A ``case.Decline`` also names the values it refuses; a plain string
names none, and the refused values are found by probing: each finite field of the declined configuration (the
values the strategies draw, strategies.REACHABLE, and num_tokens 0 against 1) is set in turn to each other value the
case model accepts, and a value whose change alone makes the implementation accept the case is a cause of the
decline. A value is refused once a Decline names it, or once no compared case had it and it was the only cause of
a decline, or one of several causes of REFUSED_AFTER declines (two fields that each fix a decline may be one
constraint between them); a value that some compared case had is refused only where the implementation says so.

Refused values are not drawn again in that (implementation, op) cell: a finite field is redrawn from its other
values, a numeric range is rejected (hypothesis.assume), and a slice whose own value is refused (a routing method,
a quant path) is over. The refusals are kept in the example database under the cell's key (a directory, or Redis
shared by many hosts), so the next campaign starts with them.
"""

import hashlib
import json
from collections import Counter

from hypothesis import assume
from hypothesis import strategies as st

from .case import CHECKS, Case, CaseError, MoEConfig, QuantConfig, RoutingConfig
from .strategies import REACHABLE, SLICES
from .where import MOE_STRATEGY_FIELDS, parse
from .where import _get as get_field
from .where import _set as set_field

REFUSED_AFTER = 2  # declines a probed value must cause, with no compared case having it, before it is refused
REPAIR_DEPTH = 6  # single changes tried in a row to repair a decline that no one change repairs
PROBES_PER_CELL = 64  # declined cases probed per cell: a cell whose declines taught nothing stops paying for probes


def probe_domains(op):
    """{field: values} probed in a declined configuration of `op`: the finite fields the strategies draw."""
    return {**REACHABLE.get(op, {}), "num_tokens": (0, 1)}


class Refusals:
    """The values one implementation refuses in one op, learned from its declines (module docstring)."""

    def __init__(self, op):
        self.op = op
        self.values = {}  # field -> refused values
        self.ranges = {}  # field -> refused (lo, hi) ranges, both ends included
        self.reasons = {}  # (field, value or range) -> the reason that taught it
        self.causes = Counter()  # (field, value) -> declines it alone caused
        self.seen = set()  # (field, value) of compared configurations
        self.probed = 0
        self.stored = set()  # records already in the database

    def __bool__(self):
        return bool(self.values or self.ranges)

    # -- learning

    def accepted(self, config):
        """A compared configuration: its values are accepted somewhere, never refused by inference."""
        for field in probe_domains(self.op):
            self.seen.add((field, _key(get_field(config, self.op, field))))

    def declined(self, impl, case, reason):
        """Learn from one declined case; returns the (field, value) refusals learned now."""
        new = []
        for field, spec in getattr(reason, "refused", {}).items():
            new += self._refuse_declared(field, spec, reason)
        if new or self.probed >= PROBES_PER_CELL or impl is None or not _declines(impl, case):
            return new  # a skip the implementation did not ask for (the spec's refusal, a tester error) teaches nothing
        self.probed += 1
        causes = self._causes(impl, case)
        for field, value in causes:
            self.causes[field, _key(value)] += 1
            enough = len(causes) == 1 or self.causes[field, _key(value)] >= REFUSED_AFTER
            if enough and (field, _key(value)) not in self.seen:
                new += self._refuse(field, value, reason)
        return new

    def _refuse_declared(self, field, spec, reason):
        text = ",".join("none" if v is None else str(v) for v in spec) if isinstance(spec, (list, tuple)) else (
            "none" if spec is None else str(spec))
        field, constraint = parse(f"{field}={text}")
        if constraint.values is None:
            rng = (constraint.lo, constraint.hi)
            if rng in self.ranges.get(field, []):
                return []
            self.ranges.setdefault(field, []).append(rng)
            self.reasons[field, rng] = str(reason)
            return [(field, f"{constraint}")]
        return [r for v in constraint.values for r in self._refuse(field, v, reason)]

    def _refuse(self, field, value, reason):
        if value in self.values.get(field, ()):
            return []
        self.values.setdefault(field, set()).add(value)
        self.reasons[field, _key(value)] = str(reason)
        return [(field, value)]

    def _causes(self, impl, case):
        """(field, value) of `case` whose change alone makes `impl` accept it; when none does (a case that breaks
        several of its constraints at once), the fields of the repair path (_repair), each one of several causes."""
        out = list(dict.fromkeys((field, value) for field, value, _, reason in self._changes(impl, case) if not reason))
        return out or [(field, value) for field, value in self._repair(impl, case)[1:]]

    def _changes(self, impl, case):
        """(field, value, other, the decline of the case with other in its place, "" if accepted) for each single
        change of a finite field that the case model accepts."""
        config, out = case.config, []
        for field, domain in probe_domains(self.op).items():
            try:
                value = get_field(config, self.op, field)
            except AttributeError:
                continue
            if field in self.values and value in self.values[field]:
                continue
            for other in domain:
                if other == value or (field == "num_tokens" and value != 0):
                    continue
                try:
                    probe = _valid(set_field(config, self.op, field, other), self.op)
                    reason = impl.unsupported(Case(case.op, probe, case.dist, case.seed, case.weight_seed)) or ""
                except (CaseError, TypeError, ValueError):
                    continue
                out.append((field, value, other, str(reason)))
        return out

    def _repair(self, impl, case, depth=REPAIR_DEPTH):
        """A path of single changes that makes `impl` accept `case`: at each step a change after which the
        decline's reason is gone (a fixed constraint, not merely an earlier one failing instead: the fields the
        reason names are tried first, and no field changes twice). [True, (field, old value), ...] when one is
        found within `depth` steps, else [False]. The reason's words only order the tries; acceptance decides."""
        from dataclasses import replace

        path, reason = [], str(impl.unsupported(case) or "")
        while reason and len(path) < depth:
            changed = {f for f, _ in path}
            steps = [c for c in self._changes(impl, case) if c[0] not in changed and c[3] != reason]
            if not steps:
                return [False]
            field, value, other, reason = min(steps, key=lambda c: _likely_fix(c, reason, self.op))
            path.append((field, value))
            case = replace(case, config=set_field(case.config, self.op, field, other))
        return [True, *path] if not reason else [False]

    # -- using it

    def refuses(self, config, fields=None):
        """Whether `config` has a refused value (of `fields`, default all)."""
        for field, refused in self.values.items():
            if (fields is None or field in fields) and _has(config, self.op, field) and \
                    get_field(config, self.op, field) in refused:
                return True
        for field, ranges in self.ranges.items():
            if (fields is None or field in fields) and _has(config, self.op, field):
                v = get_field(config, self.op, field)
                if isinstance(v, (int, float)) and any(lo <= v <= hi for lo, hi in ranges):
                    return True
        return False

    def avoiding(self, configs):
        """`configs` without the values refused so far (a snapshot: what is learned later applies to the next
        strategy built, so that one Hypothesis run replays its choices consistently)."""
        if not self:
            return configs
        values = {f: frozenset(v) for f, v in self.values.items()}
        ranges = {f: tuple(r) for f, r in self.ranges.items()}
        domains, op = probe_domains(self.op), self.op
        # Not redrawn but rejected: the slice's own field (a refused slice is over, not turned into another slice)
        # and the fields that decide what others mean (a moe layer's routing method and activation: its routing's
        # groups, bias and mask were drawn for them).
        fixed = {SLICES[op][0], *MOE_STRATEGY_FIELDS}

        @st.composite
        def avoided(draw):
            config = draw(configs)
            for field, refused in values.items():
                if _has(config, op, field) and get_field(config, op, field) in refused:
                    allowed = [v for v in domains.get(field, ()) if v not in refused and field not in fixed]
                    assume(allowed)
                    config = set_field(config, op, field, draw(st.sampled_from(allowed), label=f"not refused {field}"))
            for field, rs in ranges.items():
                if _has(config, op, field):
                    v = get_field(config, op, field)
                    assume(not any(lo <= v <= hi for lo, hi in rs))
            try:
                CHECKS[op](config)
            except CaseError:
                assume(False)
            return config

        return avoided()

    def describe(self):
        """["field=value: reason", ...] of every refusal, for the summary."""
        out = [f"{f}={v}: {self.reasons.get((f, _key(v)), '')}" for f, vs in sorted(self.values.items())
               for v in sorted(vs, key=repr)]
        out += [f"{f} in {lo:g}..{hi:g}: {self.reasons.get((f, (lo, hi)), '')}" for f, rs in sorted(self.ranges.items())
                for lo, hi in rs]
        return out

    # -- the database

    def records(self):
        return {json.dumps(["value", f, v]).encode() for f, vs in self.values.items() for v in vs} | {
            json.dumps(["range", f, [lo, hi]]).encode() for f, rs in self.ranges.items() for lo, hi in rs}

    def load(self, db, key):
        """Add the refusals a database holds under `key` (earlier campaigns')."""
        for raw in db.fetch(key):
            try:
                kind, field, v = json.loads(raw)
            except (ValueError, TypeError):
                continue
            if kind == "value":
                self._refuse(field, v, "declined in an earlier campaign")
            elif kind == "range" and isinstance(v, list) and len(v) == 2:
                self.ranges.setdefault(field, []).append((v[0], v[1]))
                self.reasons[field, (v[0], v[1])] = "declined in an earlier campaign"
            self.stored.add(raw)

    def save(self, db, key):
        for raw in self.records() - self.stored:
            db.save(key, raw)
            self.stored.add(raw)


def database_key(impl_name, impl_ref, op):
    """The key under which a cell's refusals are kept (one per implementation and op, whatever the slice)."""
    return b"difftest-refusals:" + hashlib.sha256(f"{impl_name}|{impl_ref}|{op}".encode()).hexdigest().encode()


def _likely_fix(change, reason, op):
    """Sort key of a single change as the repair of a decline: a field the reason names first (a word of its name of
    three letters or more), the slice's own field last (changing it fails an earlier check, not the one at hand),
    then a change to the field's default value first."""
    field, _, other, _ = change
    text = reason.lower()
    named = any(len(word) >= 3 and word in text for word in field.split("_") if word != "num")
    default = getattr(_DEFAULTS.get(op), field, object()) == other or getattr(_DEFAULTS["routing"], field,
                                                                              object()) == other
    return (not named, field == SLICES[op][0], not default)


_DEFAULTS = {"routing": RoutingConfig("renormalize", 1, 1, 1),
             "moe": MoEConfig(RoutingConfig("renormalize", 1, 1, 1), 1, 1),
             "quant": QuantConfig("fp8_group", 1, 128)}


# Fields whose other values the case model allows only beside one value of another field (group_mask_value 0.0:
# deepseek_v2 only): a probe that changes that field and breaks this is tried with them at their defaults, so that a
# routing method is seen as the one cause of a decline whatever mask value its case drew.
TIED = {"group_mask_value": float("-inf")}


def _valid(config, op):
    """`config` if the case model accepts it, else with its TIED fields at their defaults; CaseError if neither."""
    try:
        CHECKS[op](config)
        return config
    except CaseError:
        for field, default in TIED.items():
            config = set_field(config, op, field, default)
        CHECKS[op](config)
        return config


def _declines(impl, case):
    try:
        return bool(impl.unsupported(case))
    except Exception:  # an unsupported() that raises on this case: nothing to learn from probing it
        return False


def _has(config, op, field):
    try:
        get_field(config, op, field)
        return True
    except AttributeError:
        return False


def _key(value):
    return value if value is None or isinstance(value, (str, bool, int, float)) else repr(value)
