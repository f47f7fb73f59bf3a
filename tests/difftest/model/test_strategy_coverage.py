"""Coverage of the case space (issue 21, item 6): every value of every configuration field with few values that
the case model accepts is reachable by the strategies (strategies.REACHABLE = case.FIELD_DOMAINS on those fields),
and every reachable value is drawn, in a case torch runs, within the default profile's examples of the default
campaign's cells (tests/difftest/running/test_campaign.py: one Hypothesis run per op slice). The report's coverage table
lists the reachable values only."""

import math

import pytest
from hypothesis import HealthCheck, given, settings

from difftest.checking.impl_torch import TORCH
from difftest.model import strategies
from difftest.model.case import FIELD_DOMAINS, OPS, Case
from difftest.model.generate import DISTS
from difftest.readers.report import coverage


def _key(v):
    """A hashable stand-in equal for equal values (-inf included)."""
    return ("inf", v > 0) if isinstance(v, float) and math.isinf(v) else v


def field_value(config, op, field):
    return getattr(config.routing, field) if op == "moe" and not hasattr(config, field) else getattr(config, field)


@pytest.mark.parametrize("op", OPS)
def test_every_accepted_value_is_reachable(op):
    reachable, space_only = strategies.REACHABLE[op], strategies.SPACE_ONLY.get(op, {})
    for field, accepted in FIELD_DOMAINS[op].items():
        assert field in reachable, f"{op}.{field}: no strategy draws it"
        got = {_key(v) for v in (*reachable[field], *space_only.get(field, ()))}
        assert got == {_key(v) for v in accepted}, (
            f"{op}.{field}: the strategies reach {reachable[field]} (+ {space_only.get(field, ())} through a "
            f"filter), the case model accepts {accepted}")


def _drawn_values(op, configs, field):
    """{value of field} over 20 derandomized draws of configs."""
    seen = set()

    @settings(max_examples=20, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategies.cases(op, configs))
    def draw(case):
        seen.add(field_value(case.config, op, field))

    draw()
    return seen


def test_space_only_values_are_drawn_through_a_filter():
    """A value left to --where / a plug-in's space is drawn when asked for."""
    from difftest.model import where
    for op, fields in strategies.SPACE_ONLY.items():
        for field, values in fields.items():
            for v in values:
                flt = dict([where.parse(f"{field}={v}")])
                seen = set().union(*(_drawn_values(op, configs, field) for _, configs in where.slices(op, flt, None)))
                assert seen == {v}, f"{op}.{field}={v}: drew {seen}"


def drawn(op):
    """{field: {value}} of the cases torch accepts among those the default profile draws in op's campaign cells."""
    seen = {field: set() for field in (*strategies.REACHABLE[op], "dist", "model_width_dist")}
    for _, configs in strategies.slices(op):
        @settings(max_examples=settings.default.max_examples, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategies.cases(op, configs))
        def draw(case):
            assert isinstance(case, Case)
            if TORCH.unsupported(case) is None:
                for field in strategies.REACHABLE[op]:
                    seen[field].add(_key(field_value(case.config, op, field)))
                seen["model_width_dist" if strategies.model_width(op, case.config) else "dist"].add(case.dist)

        draw()
    return seen


@pytest.mark.parametrize("op", OPS)
def test_every_reachable_value_is_drawn_in_the_default_profile(op):
    """Every reachable value of every few-valued field, and every input distribution (NaN/Inf ones are drawn on
    request only); for moe also each distribution of the layers of model width."""
    seen = drawn(op)
    missing = {field: [v for v in values if _key(v) not in seen[field]]
               for field, values in strategies.REACHABLE[op].items()}
    missing["dist"] = [d for d in DISTS[op] if d not in strategies.SPECIAL_DISTS and d not in seen["dist"]]
    if op == "moe" and strategies.MODEL_REGIME:  # the layers of model width draw their own few
        missing["model_width_dist"] = [d for d in strategies.MODEL_WIDTH_DISTS if d not in seen["model_width_dist"]]
    missing = {f: v for f, v in missing.items() if v}
    assert not missing, (f"{op}: never drawn within {settings.default.max_examples} examples per slice "
                         f"(torch accepting the case): {missing}")


def _row(op, config, status="pass"):
    return {"impl": "torch", "op": op, "status": status, "case": Case(op, config).to_dict(), "ratio": 0.0}


def test_the_coverage_table_lists_reachable_values_only():
    """An axis lists exactly the reachable values (a value seen but not reachable, from an older tester, is
    appended, so nothing hit is hidden): the moe hidden dtype fp16 is there and is counted."""
    from difftest.model.case import MoEConfig, RoutingConfig

    fp16 = MoEConfig(RoutingConfig("renormalize", 2, 4, 2), 16, 16, hidden_dtype="fp16")
    rep = coverage([_row("moe", fp16)])
    table = dict((row[0], row[1:]) for row in rep["moe"]["hidden dtype"]["rows"])
    assert table == {"bf16": [0], "fp16": [1]}
    scales = dict((row[0], row[1:]) for row in rep["moe"]["scale format"]["rows"])
    assert set(scales) == set(strategies.REACHABLE["moe"]["scale_fmt"])
    methods = [row[0] for row in rep["moe"]["routing method"]["rows"]]
    assert methods == list(strategies.REACHABLE["moe"]["method"])
