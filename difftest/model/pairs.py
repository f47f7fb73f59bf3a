"""Pairwise coverage of the case space: which pairs of values of two configuration fields a campaign compared, out of
those the implementation accepts, and a strategy wrapper that draws the uncovered ones on purpose (issue 33, item 4).

A bug that lives in one combination of two rare values (UE8M0 scales with unquantized weights, a bf16 bias on a
one-expert-per-group layer) is found on one seed and missed on the next when the strategies reach it by chance.

**Fields.** Per op, the configuration fields with few values (case.FIELD_DOMAINS) and ``num_tokens`` in the buckets
TOKEN_BUCKETS (no tokens, one token, several tokens: the cases that exercise nothing, one row, and reductions
across rows). Values the default strategies leave to a filter (strategies.SPACE_ONLY) count only where a filter
names their field, and every field keeps only the values the cell's filters allow (``--where``, the
implementation's ``space``, a ``--model`` preset: ``inside``). A pair is ``((field, value), (field, value))``, the
fields in that order.

**Reachable.** A pair is reachable in a campaign cell (a configuration strategy of campaign_cells) when forcing its
two values onto one of POOL configurations drawn from that strategy (derandomized: the same pool in every process)
gives a configuration that the case model (case.CHECKS, which refuses what the spec refuses:
tests/difftest/model/test_pairs.py compares every witness), the filters and the implementation's ``unsupported`` (asked
about the case of that configuration, distribution "normal") all accept; that configuration is the pair's witness. The
field the op's campaign is split by (strategies.SLICES) keeps its cell's value: a cell of routing method llama4 reaches
no pair of another method. A pair no pool configuration admits is not counted (pools of 16 and of 128 find the same
pairs in torch's default cells). An (implementation, op)'s reachable pairs are the union over its cells. A cell whose
strategy rejects most of its draws (Hypothesis' filter_too_much health check while drawing the pool: a --where
filter that few configurations meet, or none) is left out, neither measured nor steered, and counted as such.

**Covered.** A pair is covered by a compared case (every status but skip) whose configuration has both values; a
case without tokens computes nothing and covers only its pairs with num_tokens 0 (one draw in 50, strategies.py).
Coverage = covered ∩ reachable / reachable, per (implementation, op) and overall: summary.json's ``pairwise``
(percentages rounded down, so that 95 % printed is 95 % reached).

**Steering.** steered() wraps a cell's configuration strategy: one draw in STEER_ODDS (environment
the setting pair_steer_odds; 0 turns steering off) picks a reachable pair not yet covered in this process and forces
its two values onto the drawn configuration (where that breaks a constraint, the pair's witness is drawn instead:
a steered draw is never rejected), then packs more uncovered pairs onto it while it stays accepted (packed(), the
greedy of covering arrays: a moe case has some 90 pairs, so one draw can cover several uncovered ones). Worker w of a
campaign's n steers toward its share of the pairs first (Cell.uncovered), since workers do not see each other's
cases. The uncovered pairs are a snapshot taken when the wrapper is built, so that Hypothesis' replay and shrinking
of one choice sequence see the same pairs throughout one fuzz_cell call; the campaign builds it again at every call
(a timed campaign's turn). Shrinking moves toward not steering. One draw in three: the README's 120 s run on a
2-core machine under load (some 4,500 cases, of them 200-300 moe layers, half without tokens) covered 89.6 % of the
pairs unsteered, and 93.7, 96.2 and 95.0 % steering one draw in four, three and two (one run each); with fewer than
16 pairs left a draw in ceil(STEER_SPREAD / left) is steered (steered()). Steered draws
stay inside the filters and what the implementation's ``unsupported`` accepts: a plug-in gets rarer combinations,
never a case outside its space.
"""

import itertools
import math
import zlib
from collections import Counter, defaultdict
from typing import NamedTuple

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import FailedHealthCheck, Unsatisfiable

from . import strategies
from .case import FIELD_DOMAINS, Case, CaseError
from .settings import get as setting
from .where import Constraint, WhereError, _get, _set, field_types, for_impl, merge

STEER_ODDS = setting("pair_steer_odds")
STEER_SPREAD = setting("pair_steer_spread")  # see steered()
POOL = setting("pair_pool")  # configurations drawn per cell to search for witnesses
PACK_ATTEMPTS = 32  # further uncovered pairs a steered draw tries to force onto its configuration
TOKENS = "num_tokens"
TOKEN_BUCKETS = ("0", "1", "2+")
MISSING_LISTED = 20  # uncovered pairs listed per (implementation, op) in summary.json


def token_bucket(n):
    return TOKEN_BUCKETS[min(n, 2)]


def _token_value(bucket, c=None):
    """The smallest num_tokens in a bucket that constraint c (None: no filter) allows; None if it allows none."""
    if c is None:
        return TOKEN_BUCKETS.index(bucket)
    if c.values is not None:
        return min((v for v in c.values if token_bucket(v) == bucket), default=None)
    first = math.ceil(max(TOKEN_BUCKETS.index(bucket), c.lo))
    return first if first <= c.hi and token_bucket(first) == bucket else None


def fields_of(op, inside=None):
    """{field: values} of op's pairwise fields inside the filters `inside` ({field: where.Constraint})."""
    inside = inside or {}
    out = {}
    for field, values in FIELD_DOMAINS[op].items():
        hidden = strategies.SPACE_ONLY.get(op, {}).get(field, ())
        allows = inside[field].allows if field in inside else (lambda v, hidden=hidden: v not in hidden)
        if any(map(allows, values)):
            out[field] = [v for v in values if allows(v)]
    out[TOKENS] = [b for b in TOKEN_BUCKETS if _token_value(b, inside.get(TOKENS)) is not None]
    return out


def value_of(config, op, field):
    """The value of a pairwise field (num_tokens: its bucket)."""
    v = _get(config, op, field)
    return token_bucket(v) if field == TOKENS else v


def pairs_of(op, config):
    """The pairs of (field, value) that a case of this configuration covers, over op's pairwise fields (whatever the
    filters): every pair, but a case without tokens computes nothing and covers only its pairs with num_tokens 0."""
    values = [(f, value_of(config, op, f)) for f in (*FIELD_DOMAINS[op], TOKENS)]
    empty = value_of(config, op, TOKENS) == "0"
    return {p for p in itertools.combinations(values, 2) if not empty or (TOKENS, "0") in p}


def force(config, op, field, value, inside=None):
    """The configuration with `field` at `value` (num_tokens: a count in the bucket, the drawn one if it is)."""
    if field == TOKENS:
        n = _token_value(value, (inside or {}).get(TOKENS))
        return config if value_of(config, op, field) == value or n is None else _set(config, op, field, n)
    return _set(config, op, field, value)


def accepts(op, config, inside, unsupported):
    """Whether the case model (Case checks its configuration), the filters and the implementation accept a
    configuration."""
    try:
        case = Case(op, config)
        if unsupported is not None and unsupported(case):
            return False
    except CaseError:
        return False
    return all(c.allows(_get(config, op, f)) for f, c in inside.items() if f in field_types(op))


_POOLS = {}
# Pools are drawn under Hypothesis' health check for a strategy that rejects most draws (50 before 10 are accepted):
# a cell whose filters no configuration meets costs those draws, not the ~460 of Unsatisfiable, and a cell whose
# filters few configurations meet costs no more than that either (measured: --where n_group=3 would take a minute).
HEALTH = [h for h in HealthCheck if h is not HealthCheck.filter_too_much]


def pool(configs):
    """POOL configurations of a strategy, derandomized (the same in every process); [] when it can draw none, None
    when it rejects most draws (the health check above)."""
    if configs not in _POOLS:
        drawn = []

        @settings(max_examples=POOL, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=HEALTH)
        @given(configs)
        def collect(config):
            drawn.append(config)

        try:
            collect()
        except Unsatisfiable:
            drawn = []
        except FailedHealthCheck:
            drawn = None
        _POOLS[configs] = drawn
    return _POOLS[configs]


def held(op, configs, inside):
    """`inside` plus the value the cell holds its slice field at (strategies.SLICES), if every pool draw has it."""
    field = strategies.SLICES[op][0]
    seen = {_get(c, op, field) for c in pool(configs) or ()}
    return merge(inside, {field: Constraint(tuple(seen))}) if len(seen) == 1 else dict(inside)


_REACHABLE = {}


def reachable(op, configs, inside=None, unsupported=None):
    """{pair: witness configuration} of the pairs reachable in a cell (module docstring), cached per cell; None for
    a cell whose strategy rejects most draws (pool): it is neither measured nor steered."""
    if pool(configs) is None:
        return None
    key = (op, configs, tuple(sorted((inside or {}).items())), unsupported)
    if key not in _REACHABLE:
        _REACHABLE[key] = _search(op, configs, held(op, configs, inside or {}), unsupported)
    return _REACHABLE[key]


def _search(op, configs, inside, unsupported):
    """Witnesses for every pair that has one: an accepted configuration witnesses all of its pairs at once, so
    only the pairs that no earlier witness has are forced onto the pool."""
    bases = pool(configs)
    domains = fields_of(op, inside)
    candidates = {pair for (f1, vs1), (f2, vs2) in itertools.combinations(domains.items(), 2)
                  for pair in itertools.product(((f1, v) for v in vs1), ((f2, v) for v in vs2))}
    out = {}

    def witness(assignments):
        for base in bases:
            config = _forced(base, op, assignments, inside)
            if accepts(op, config, inside, unsupported):
                for pair in pairs_of(op, config) & candidates:
                    out.setdefault(pair, config)
                return True
        return False

    singles = {(f, v) for f, values in domains.items() for v in values if witness([(f, v)])}
    for pair in sorted(candidates, key=show):  # a fixed order: the same witnesses in every process
        if pair not in out and pair[0] in singles and pair[1] in singles:
            witness(pair)
    return {pair: out[pair] for pair in sorted(out, key=show)}


def inside_of(impl, op, filters=None, model=None):
    """The filters a cell of impl and op draws inside: --where, the implementation's space, the --model preset's."""
    inside = for_impl(filters, impl, op, model)
    if model:
        from . import presets

        try:
            inside = merge(inside, {f: c for f, c in presets.space(model, op).items() if f in field_types(op)})
        except WhereError:  # --where and the preset disagree: the cell's strategy shows what it draws
            pass
    return inside


class Cell(NamedTuple):
    """A campaign cell's reachable pairs (with witnesses) and the pairs its (implementation, op) has compared in
    this process (shared by the cells of one implementation and op)."""

    op: str
    reachable: dict
    covered: set
    inside: dict
    unsupported: object
    share: tuple = (0, 1)  # (worker, workers) of the campaign: see uncovered

    def saw(self, case):
        """Record a compared case's pairs (the campaign calls it with each case it compared)."""
        self.covered.update(pairs_of(self.op, case.config))

    def uncovered(self):
        """The reachable pairs not covered yet: those of this worker's share (worker w of n steers toward the pairs
        whose digest is w mod n, so that the workers do not all chase the same pairs), or when none is left, all."""
        left = [p for p in self.reachable if p not in self.covered]
        w, n = self.share
        return [p for p in left if zlib.crc32(show(p).encode()) % n == w] or left


class Pairwise:
    """One process's pairwise coverage over a campaign: per (implementation name, op) the pairs compared so far,
    and each cell's reachable pairs (computed on the cell's first turn)."""

    def __init__(self, filters=None, model=None, share=(0, 1)):
        self.filters, self.model, self.share = filters or {}, model, share
        self.covered = defaultdict(set)
        self._cells = {}

    def cell(self, impl, op, configs=None):
        """The Cell of impl's op and configuration strategy (None: the op's default strategy)."""
        configs = configs if configs is not None else strategies.CONFIG_STRATEGIES[op]()
        key = (impl.name, op, configs)
        if key not in self._cells:
            inside = inside_of(impl, op, self.filters, self.model)
            self._cells[key] = Cell(op, reachable(op, configs, inside, impl.unsupported) or {},
                                    self.covered[impl.name, op], held(op, configs, inside), impl.unsupported,
                                    self.share)
        return self._cells[key]


def steered(configs, op, cell, odds=None):
    """`configs` with one draw in `odds` forced onto pairs the cell has not covered (module docstring); `configs`
    itself without a cell, with steering off, or with every reachable pair covered. The default odds are STEER_ODDS,
    or one in ceil(STEER_SPREAD / pairs left) when that is rarer (fewer than 16 left): a turn's snapshot of a few
    uncovered pairs made a third of a fast op's turn the same few cases (with cases without tokens rare, the pairs
    with num_tokens 0 are the last left: 119 of 493 quant cases in one five-second window)."""
    left = [] if cell is None or (STEER_ODDS if odds is None else odds) < 1 else cell.uncovered()
    if not left:
        return configs
    odds = max(STEER_ODDS, -(-STEER_SPREAD // len(left))) if odds is None else odds
    configs = configs if configs is not None else strategies.CONFIG_STRATEGIES[op]()

    @st.composite
    def steer(draw):
        config = draw(configs)
        if draw(st.integers(0, odds - 1), label="steer") < odds - 1:
            return config
        return packed(config, op, cell, left, draw(st.integers(0, len(left) - 1), label="uncovered pair"))

    return steer()


def packed(config, op, cell, left, i, attempts=None):
    """`config` with the uncovered pair left[i] forced onto it (its witness where that breaks a constraint), then
    greedily each later pair of `left` whose fields are not forced yet or forced to its values, while the result
    stays accepted (at most `attempts`, default PACK_ATTEMPTS, tries): the covering-array greedy, so that one
    steered case covers several pairs."""
    config = _forced(config, op, left[i], cell.inside)
    if not accepts(op, config, cell.inside, cell.unsupported):
        config = cell.reachable[left[i]]
    fixed = {TOKENS: value_of(config, op, TOKENS), **dict(left[i])}  # its token bucket decides what it covers
    tries = PACK_ATTEMPTS if attempts is None else attempts
    for pair in itertools.chain(left[i + 1:], left[:i]):
        if tries <= 0:
            break
        if (any(fixed.get(f, v) != v for f, v in pair) or all(value_of(config, op, f) == v for f, v in pair)
                or (fixed[TOKENS] == "0" and (TOKENS, "0") not in pair)):
            continue
        tries -= 1
        candidate = _forced(config, op, pair, cell.inside)
        if accepts(op, candidate, cell.inside, cell.unsupported):
            config = candidate
            fixed.update(pair)
    return config


def _forced(config, op, pair, inside):
    """`config` with the pair's values; with tokens (2+, else 1) if it had none and the pair does not name
    num_tokens, since a case without tokens covers no other pair."""
    for field, value in pair:
        config = force(config, op, field, value, inside)
    if value_of(config, op, TOKENS) == "0" and TOKENS not in dict(pair):
        for bucket in ("2+", "1"):
            if _token_value(bucket, inside.get(TOKENS)) is not None:
                return force(config, op, TOKENS, bucket, inside)
    return config


def show(pair):
    """'field=value × field=value'."""
    return " × ".join(f"{f}={v}" for f, v in pair)


def coverage(rows, cells, filters=None, model=None):
    """summary.json's ``pairwise``: the compared rows' pairs among the reachable ones of the campaign's cells
    ((impl, ref, op, configs), run.campaign_cells), per (implementation, op) and overall; ``unmeasured``: cells whose
    strategy rejects most draws (pool), left out."""
    reach, unmeasured = defaultdict(set), Counter()
    for impl, _, op, configs in cells:
        found = reachable(op, configs, inside_of(impl, op, filters, model), impl.unsupported)
        reach[impl.name, op] |= set() if found is None else found.keys()
        unmeasured[impl.name, op] += found is None
    covered = defaultdict(set)
    for row in rows:
        key = (row.get("impl"), row["op"])
        if row["status"] == "skip" or key not in reach:
            continue
        try:
            case = Case.from_dict(row["case"])
        except CaseError:
            continue
        covered[key] |= pairs_of(case.op, case.config)
    per = []
    for (name, op), pairs in reach.items():
        hit = pairs & covered[name, op]
        missing = sorted(show(p) for p in pairs - hit)
        per.append({"impl": name, "op": op, "covered": len(hit), "reachable": len(pairs),
                    "percent": _percent(len(hit), len(pairs)), "missing": missing[:MISSING_LISTED],
                    "missing_count": len(missing), "unmeasured": unmeasured[name, op]})
    total, hit = sum(c["reachable"] for c in per), sum(c["covered"] for c in per)
    return {"covered": hit, "reachable": total, "percent": _percent(hit, total), "unmeasured": sum(unmeasured.values()),
            "cells": per}


def _percent(n, total):
    """n / total in percent, rounded down to a tenth."""
    return math.floor(1000 * n / total) / 10 if total else 100.0


def summary_line(entry):
    """The closing summary's line: overall, then per op (summed over implementations)."""
    ops = defaultdict(lambda: [0, 0])
    for c in entry["cells"]:
        ops[c["op"]][0] += c["covered"]
        ops[c["op"]][1] += c["reachable"]
    per_op = ", ".join(f"{op} {_percent(n, total):g} % of {total}" for op, (n, total) in ops.items())
    left_out = entry.get("unmeasured", 0)
    cells = f"; {left_out} cell{'s' * (left_out > 1)} whose filters reject most draws left out" if left_out else ""
    return (f"pairwise coverage: {entry['percent']:g} % of {entry['reachable']} reachable pairs "
            f"(per op: {per_op}{cells})")
