"""Case-space filters: ``fuzz --where FIELD=VALUE|LO..HI|A,B,C`` and a plug-in's ``space`` attribute.

A filter narrows what the strategies draw; it is not a skip. The field that names a slice (routing
``method``, quant ``scheme``, moe ``quant``, trtllm_ops ``kernel``) picks the slices of strategies.slices;
``method`` and ``activation`` of a moe layer are passed to its strategy. Any other field of the op's configuration (moe:
of the layer, then of its routing) is drawn from the filter in place of the strategy's own value when that
value is outside it, and a configuration that then breaks a constraint of difftest/model/case.py is rejected by
Hypothesis before it becomes a case. An op whose configuration lacks a filtered field is out of the space;
a slice no configuration of which meets the filters (``bias_dtype=fp32`` for an unbiased routing method) is
dropped once Hypothesis gives up on it (about a second), and a campaign none of whose slices can be drawn is a
usage error.

A plug-in declares the configurations it covers as ``space = {"method": "deepseek_v3", "top_k": "1..8",
"logits_dtype": ["fp32", "bf16"]}`` (a value, a "LO..HI" string, or a list); ``fuzz --impl`` then draws
only from it, intersected with ``--where``; a field's value may be a dict by slice (``"num_experts": {"llama4":
"1..128", "topk": "1..256"}``: what it takes in each slice it names), and a dict key "FIELD=VALUE" (or
"FIELD=A,B,C") makes it what the field takes where another field has that value, a joint limit (``"layout":
{"scale_fmt=ue8m0": "ue8m0_packed"}``; ``"top_k": {"method=topk,sigmoid": "1..8"}`` in any slice: a moe cell's
method too); conditions on several fields are joined by "&" (``"bias_dtype": {"method=deepseek_v3&n_group=1":
["fp32", "bf16"]}``). A DERIVED quantity (``experts_per_group``,
``one_expert_groups``, ``group_slack``) is filtered like a field, but a configuration outside it is rejected rather
than redrawn.
"""

import math
from dataclasses import fields, replace
from typing import NamedTuple

from hypothesis import assume
from hypothesis import strategies as st

from .case import (
    ACTIVATIONS,
    BIAS_DTYPES,
    CHECKS,
    CONFIGS,
    DEV_KERNELS,
    EXPERT_WEIGHTS,
    LOGIT_DTYPES,
    QUANT_INPUT_DTYPES,
    QUANT_PATHS,
    QUANT_SCHEMES,
    ROUTING_METHODS,
    SCALE_LAYOUTS,
    CaseError,
    RoutingConfig,
    neutral_fields,
    neutral_ranges,
)

ALIASES = {"E": "num_experts", "T": "num_tokens", "k": "top_k"}
MOE_STRATEGY_FIELDS = ("method", "activation")  # arguments of strategies.moe_configs
CHOICES = {"kernel": DEV_KERNELS, "method": ROUTING_METHODS, "activation": ACTIVATIONS, "quant": QUANT_PATHS,
           "scheme": QUANT_SCHEMES,
           "logits_dtype": LOGIT_DTYPES, "bias_dtype": (None, *BIAS_DTYPES), "input_dtype": QUANT_INPUT_DTYPES,
           "layout": SCALE_LAYOUTS, "half_order": ("gate_up", "up_gate"), "hidden_dtype": ("bf16", "fp16"),
           "rsf_placement": ("routing", "combine"), "scale_fmt": ("fp32", "ue8m0"), "mx_rule": ("ocp", "ceil448"),
           "expert_weights": EXPERT_WEIGHTS}


class WhereError(CaseError):
    """A filter that names no field, or a value the field cannot take; one line."""


class Constraint(NamedTuple):
    values: tuple | None  # the allowed values, or None for a range
    lo: float = -math.inf
    hi: float = math.inf
    redraw: bool = True  # a value outside is redrawn from it (a value set, a closed range); False: rejected

    def allows(self, v):
        if self.values is not None:
            return v in self.values
        return isinstance(v, (int, float)) and not isinstance(v, bool) and self.lo <= v <= self.hi

    def strategy(self, integral):
        if self.values is not None:
            return st.sampled_from(self.values)
        if integral:
            return st.integers(None if self.lo == -math.inf else math.ceil(self.lo),
                               None if self.hi == math.inf else math.floor(self.hi))
        return st.floats(self.lo, self.hi, allow_nan=False)

    def __and__(self, other):
        redraw = self.redraw and other.redraw
        if self.values is not None:
            return Constraint(tuple(v for v in self.values if other.allows(v)), redraw=redraw)
        if other.values is not None:
            return other & self
        return Constraint(None, max(self.lo, other.lo), min(self.hi, other.hi), redraw)

    def empty(self):
        return self.values == () or (self.values is None and self.lo > self.hi)

    def __str__(self):
        if self.values is None:
            return f"{self.lo:g}..{self.hi:g}"
        return ",".join("none" if v is None else str(v) for v in self.values)


def _type_name(t):
    return getattr(t, "__name__", str(t))  # int -> "int"; float | None -> "float | None"


# Quantities that kernels constrain and no one field holds, named in a filter or a space like a field: a configuration
# outside the filter is rejected, never redrawn. experts_per_group = num_experts / n_group: one warp holds a group (at
# most 32); one_expert_groups: n_group > 1 groups of one expert each, whose top-2 group sum is the key (the spec) or
# -inf (FlashInfer, SGLang); group_slack = topk_group · n_group − top_k: FlashInfer's fused_topk_deepseek takes
# top_k <= topk_group · n_group only (slack >= 0), a limit on three fields that no one of them can state.
DERIVED = {"experts_per_group": "int", "one_expert_groups": "bool", "group_slack": "int"}  # of routing and moe


def field_types(op):
    """{field: type name} of op's configuration; moe adds its routing's fields (the layer's win), and DERIVED ones."""
    out = {f.name: _type_name(f.type) for f in fields(CONFIGS[op]) if f.name != "routing"}
    if op == "moe":
        out = {**{f.name: _type_name(f.type) for f in fields(RoutingConfig)}, **out}
    return {**out, **DERIVED} if op in ("routing", "moe") else out


def all_fields():
    return sorted({name for op in CONFIGS for name in field_types(op)})


def _scalar(text, kind, field):
    if text.lower() in ("none", "null"):
        if "None" not in kind:
            raise WhereError(f"--where {field}: the field cannot be none")
        return None
    if kind.startswith("bool"):
        if text.lower() not in ("true", "false", "1", "0"):
            raise WhereError(f"--where {field}={text}: a bool is true or false")
        return text.lower() in ("true", "1")
    if kind.startswith(("int", "float")):
        try:
            v = float(text)
        except ValueError:
            raise WhereError(f"--where {field}={text}: the field is a number") from None
        if kind.startswith("int"):
            if v != int(v):
                raise WhereError(f"--where {field}={text}: the field is an integer")
            return int(v)
        return v
    return text


def _kind(field):
    kinds = {field_types(op)[field] for op in CONFIGS if field in field_types(op)}
    if not kinds:
        raise WhereError(f"--where {field}: not a configuration field; fields: {', '.join(all_fields())}")
    return max(kinds, key=lambda k: "None" in k)  # a field optional in one op (routing's tile_tokens_dim) may be none


def parse(text):
    """'FIELD=VALUE', 'FIELD=LO..HI' or 'FIELD=A,B,C' -> (field, Constraint)."""
    field, sep, value = text.partition("=")
    field = ALIASES.get(field.strip(), field.strip())
    if not sep or not field or not value:
        raise WhereError(f"--where {text!r}: must be FIELD=VALUE, FIELD=LO..HI or FIELD=A,B,C")
    kind = _kind(field)
    if ".." in value:
        if not kind.startswith(("int", "float")):
            raise WhereError(f"--where {field}={value}: a range LO..HI needs a numeric field")
        lo, _, hi = value.partition("..")
        c = Constraint(None, _scalar(lo, kind, field) if lo else -math.inf,
                       _scalar(hi, kind, field) if hi else math.inf)
    else:
        c = Constraint(tuple(_scalar(v.strip(), kind, field) for v in value.split(",")))
        bad = [v for v in c.values if field in CHOICES and v not in CHOICES[field]]
        if bad:
            raise WhereError(f"--where {field}: {bad[0]!r} is not one of {', '.join(map(str, CHOICES[field]))}")
    if c.empty():
        raise WhereError(f"--where {field}={value}: allows no value")
    return field, c


def from_space(space, owner="the plug-in", label=None):
    """{field: Constraint} from a plug-in's ``space`` dict (value, "LO..HI" string, or list of values); a field's
    dict of values per slice ({"llama4": "1..128", ...}: what it takes in the slices it names) counts only for the
    slice `label` (a campaign cell's routing method, quant scheme, moe quant path or dev kernel)."""
    if not isinstance(space, dict):
        raise WhereError(f"{owner}'s space must be a dict of field -> value, 'LO..HI', list or a dict of them by slice")
    out = {}
    for field, value in space.items():
        if isinstance(value, dict):
            if label not in value:
                continue
            value = value[label]
        out = merge(out, dict([parse(_clause(field, value))]))
    return out


def _clause(field, value):
    """A space's value for `field` (a value, a "LO..HI" string, or a list; None is "none") as parse() reads it."""
    if isinstance(value, (list, tuple)):
        value = ",".join("none" if v is None else str(v) for v in value)
    return f"{field}={'none' if value is None else value}"


class Joint(NamedTuple):
    """A joint limit of a space: `field` takes `limit` where every (field, Constraint) of `when` holds."""

    when: tuple
    field: str
    limit: Constraint

    def holds(self, config, op):
        """Whether the condition holds for a configuration of `op` (then `field` must be inside `limit`)."""
        return all(c.allows(_get(config, op, f)) for f, c in self.when)


def conditions(space):
    """[Joint] of a space's "FIELD=VALUE" keys (from_space skips them), a condition of several fields joined by "&"
    ("method=deepseek_v3&n_group=1": the ungrouped DeepSeek-V3 cases): the field takes the key's value where every
    condition field's value is inside its part."""
    out = []
    for field, value in (space or {}).items() if isinstance(space, dict) else ():
        for key, limit in value.items() if isinstance(value, dict) else ():
            if "=" in str(key):
                when = tuple(parse(part) for part in str(key).split("&"))
                out.append(Joint(when, *parse(_clause(field, limit))))
    return out


def unknown_fields(op, contract=1, capabilities=(), ranges=True):
    """{field: Constraint} holding the fields of `op` that an implementation of `contract` with `capabilities` does
    not know at their neutral values (case.neutral_fields), and (`ranges`) the widened ones within what the default
    strategies drew before them (case.neutral_ranges): they are never drawn otherwise for it."""
    out = {field: Constraint((value,)) for field, value in neutral_fields(op, contract, capabilities).items()}
    for field, spec in neutral_ranges(op, contract, capabilities).items() if ranges else ():
        out[field] = parse(f"{field}={spec}")[1]._replace(redraw=False)  # rejected outside: drawn as before
    return out


def for_impl(filters, impl, op=None, model=None):
    """The filters an implementation's cells draw inside: `filters` (--where) and its declared ``space``; with `op`,
    also the fields of op added after its contract, at their neutral values, and without a `model` preset (which
    draws its model's sizes for every contract) the widened ones within their earlier ranges (unknown_fields), unless
    those name them."""
    space = getattr(impl, "space", None)
    inside = merge(filters or {}, {} if space is None else from_space(space, impl.name))
    if op is None:
        return inside
    unknown = unknown_fields(op, getattr(impl, "contract", 1), tuple(getattr(impl, "capabilities", ()) or ()),
                             ranges=not model)
    return merge(inside, {f: c for f, c in unknown.items() if f not in inside})


def merge(*wheres):
    """The intersection of several {field: Constraint}."""
    out = {}
    for w in wheres:
        for field, c in w.items():
            both = out[field] & c if field in out else c
            if both.empty():
                raise WhereError(f"the filters {field}={out[field]} and {field}={c} allow no value together "
                                 "(--where and the plug-in's space intersect)")
            out[field] = both
    return out


def applies(op, where):
    return all(f in field_types(op) for f in where)


def _set(config, op, field, value):
    if op == "moe" and field not in {f.name for f in fields(CONFIGS["moe"])}:
        return replace(config, routing=replace(config.routing, **{field: value}))
    return replace(config, **{field: value})


def _get(config, op, field):
    if field in DERIVED:
        r = config.routing if op == "moe" else config
        if field == "group_slack":
            return r.topk_group * r.n_group - r.top_k
        return r.num_experts // r.n_group if field == "experts_per_group" else r.n_group == r.num_experts > 1
    if op == "moe" and not hasattr(config, field):
        return getattr(config.routing, field)
    return getattr(config, field)


def restrict(configs, op, where, when=()):
    """The configurations of `configs` inside `where` and the joint limits `when` (conditions()): a field outside its
    filter is redrawn from the filter (a value set, or a range closed at both ends), and a configuration outside an
    open range ("1..": nothing says how far to draw) or that then breaks a case constraint is rejected (assume), never
    run."""
    when = [w for w in when if applies(op, {**dict(w.when), w.field: 0})]
    if not where and not when:
        return configs
    types = field_types(op)

    def inside(draw, config, field, c):
        if field in DERIVED or c.allows(_get(config, op, field)):
            return config
        assume(c.redraw and (c.values is not None or math.isfinite(c.lo) and math.isfinite(c.hi)))
        return _set(config, op, field, draw(c.strategy(types[field].startswith("int")), label=field))

    @st.composite
    def restricted(draw):
        config = draw(configs)
        for field, c in where.items():
            config = inside(draw, config, field, c)
        for w in when:  # after the fields they depend on are inside
            if w.holds(config, op):
                config = inside(draw, config, w.field, w.limit)
        try:
            CHECKS[op](config)
        except CaseError:
            assume(False)
        assume(all(c.allows(_get(config, op, field)) for field, c in where.items() if field in DERIVED))
        assume(all(w.limit.allows(_get(config, op, w.field)) for w in when if w.holds(config, op)))
        return config

    return restricted()


def slices(op, where, base, space=None):
    """[(label, configs)] of strategies.slices(op) (or [(model, base)] around a preset) inside `where` and, per slice,
    what an implementation's `space` says of that slice (from_space); [] when op's configuration lacks a filtered
    field."""
    from . import strategies

    if not applies(op, where):
        return []
    when = conditions(space)
    if base is not None:
        return [("model", restrict(base, op, where, when))]
    key = strategies.SLICES[op][0]
    out = []
    for label, configs in strategies.slices(op):
        if key in where and not where[key].allows(label):
            continue
        try:
            own = merge(where, from_space(space, label=label)) if isinstance(space, dict) else where
        except WhereError:  # --where and what the implementation takes in this slice allow nothing together
            continue
        if op == "moe" and any(f in own for f in MOE_STRATEGY_FIELDS):
            configs = _moe_configs(label, own, strategies)
        out.append((label, restrict(configs, op, own, when)))
    return out


def _moe_configs(quant, where, strategies):
    """moe_configs with method and activation drawn from their filters (any value the filter allows)."""
    methods = [m for m in ROUTING_METHODS if "method" not in where or where["method"].allows(m)]
    acts = [a for a in ACTIVATIONS if "activation" not in where or where["activation"].allows(a)]
    if not methods or not acts:
        raise WhereError("--where: no routing method or activation of a moe layer passes the filter")
    return st.tuples(st.sampled_from(methods), st.sampled_from(acts)).flatmap(
        lambda ma: strategies.moe_configs(method=ma[0], activation=ma[1], quant=quant))


def describe(where):
    return " ".join(f"{f}={c}" for f, c in sorted(where.items()))


def to_json(where):
    """{field: {"values": [...]} or {"lo": x, "hi": y}} (None for an open end): summary.json's record of the
    filters a campaign drew inside, read back by from_json (the report greys what they exclude)."""
    def one(c):
        if c.values is not None:
            return {"values": list(c.values)}
        return {"lo": None if c.lo == -math.inf else c.lo, "hi": None if c.hi == math.inf else c.hi}

    return {field: one(c) for field, c in sorted(where.items())}


def declared_json(space):
    """A plug-in's ``space`` as JSON, as declared: each field's value, list or "LO..HI", or its dict by slice label
    and joint condition ("method=deepseek_v3&n_group=1"), values as where.parse reads them (None is "none")."""
    def one(value):
        return _clause("", value).partition("=")[2]

    return {field: {str(k): one(v) for k, v in value.items()} if isinstance(value, dict) else one(value)
            for field, value in sorted(space.items())}


def from_json(record):
    """The {field: Constraint} of a to_json record; a record that is not one is ignored ({})."""
    out = {}
    for field, c in (record or {}).items() if isinstance(record, dict) else ():
        if isinstance(c, dict) and isinstance(c.get("values"), list):
            out[field] = Constraint(tuple(c["values"]))
        elif isinstance(c, dict):
            lo, hi = c.get("lo"), c.get("hi")
            out[field] = Constraint(None, -math.inf if lo is None else lo, math.inf if hi is None else hi)
    return out
