"""Pairwise coverage (difftest/model/pairs.py, issue 33 item 4): the measure counts the pairs that compared cases
have among the reachable ones, and nothing else; reachable pairs are those the case model, the filters and the
implementation accept (and that the spec then compares); steering covers more pairs in the same number of examples
and keeps one strategy's draws fixed while the coverage it was built from grows; `fuzz` prints the coverage and
records it in summary.json, equal to a recount from the run directory's rows. Every count here is of examples,
never of seconds."""

import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, seed, settings

from difftest.checking.check import run_case
from difftest.checking.impl_spec import SPEC
from difftest.model import pairs, strategies, where
from difftest.model.case import CONTRACT, Case, QuantConfig
from difftest.store import rundir

ROOT = Path(__file__).resolve().parents[3]
# Quant cells pinned to one value on every pairwise field but scale_fmt, layout and num_tokens: 81 candidate pairs
# (sum over field pairs of |A|·|B|, fields of 1, 1, 1, 1, 1, 2, 4 and 3 values), of which the case model refuses
# three (ue8m0 scales are row or ue8m0_packed, fp32 scales not packed) and the stub implementation one more.
PINNED = ("scheme=fp8_group", "input_dtype=bf16", "variant=div", "scale_formula=div448", "mx_rule=ocp")
UNREACHABLE = {"scale_fmt=fp32 × layout=ue8m0_packed", "scale_fmt=ue8m0 × layout=col",
               "scale_fmt=ue8m0 × layout=col_tma", "layout=col_tma × num_tokens=0"}


def _declines_empty_col_tma(case):
    c = case.config
    return "no empty col_tma buffers" if case.op == "quant" and c.layout == "col_tma" and c.num_tokens == 0 else None


# Of the current contract: every field of the case model reaches them (a contract-1 stub would have the fields added
# since held at their neutral values, difftest.plugin)
STUB = SimpleNamespace(name="stub", unsupported=_declines_empty_col_tma, contract=CONTRACT)
ANY = SimpleNamespace(name="any", unsupported=lambda case: None, contract=CONTRACT)


def pinned_cells(impl=STUB):
    filters = where.merge(*(dict([where.parse(p)]) for p in PINNED))
    return [(impl, "stub", "quant", configs) for _, configs in where.slices("quant", filters, None)], filters


def row(config, impl="stub", status="pass"):
    return {"impl": impl, "op": "quant", "status": status, "case": Case("quant", config).to_dict()}


def quant(fmt, layout, tokens):
    return QuantConfig("fp8_group", tokens, 128, scale_fmt=fmt, layout=layout)


VALID = [(f, lay) for f in ("fp32", "ue8m0") for lay in ("row", "col", "col_tma", "ue8m0_packed")
         if (lay in ("row", "ue8m0_packed")) == (f == "ue8m0") or lay == "row"]


def test_reachable_pairs_leave_out_what_the_case_model_or_the_implementation_refuses():
    cells, filters = pinned_cells()
    got = set()
    for impl, _, op, configs in cells:
        got |= set(map(pairs.show, pairs.reachable(op, configs, pairs.inside_of(impl, op, filters), impl.unsupported)))
    assert len(got) == 81 - len(UNREACHABLE) and not got & UNREACHABLE
    assert "scale_fmt=ue8m0 × layout=ue8m0_packed" in got and "layout=col_tma × num_tokens=1" in got
    values = {v for p in got for v in p.split(" × ")}
    assert not {"scheme=mxfp8", "variant=mul_rcp_scale", "mx_rule=ceil448"} & values  # outside the filters


def test_a_missing_pair_is_reported_and_skips_and_other_implementations_do_not_cover():
    cells, filters = pinned_cells()
    configs = [quant(f, lay, t) for (f, lay), t in itertools.product(VALID, (0, 1, 5))
               if not (lay == "col_tma" and t == 0) and not (lay == "col" and t == 0)]
    rows = [row(c) for c in configs]
    rows += [row(quant("fp32", "col", 0), status="skip"), row(quant("fp32", "col", 0), impl="other")]
    entry = pairs.coverage(rows, cells, filters)
    (cell,) = entry["cells"]
    assert cell["missing"] == ["layout=col × num_tokens=0"] and cell["missing_count"] == 1
    assert (entry["reachable"], entry["covered"]) == (81 - len(UNREACHABLE), 80 - len(UNREACHABLE))
    assert pairs.summary_line(entry) == f"pairwise coverage: {entry['percent']:g} % of 77 reachable pairs (per op: " \
                                        f"quant {entry['percent']:g} % of 77)"
    full = pairs.coverage(rows + [row(quant("fp32", "col", 0))], cells, filters)
    assert (full["covered"], full["percent"], full["cells"][0]["missing"]) == (77, 100.0, [])


def test_a_case_without_tokens_covers_only_its_pairs_with_no_tokens():
    assert len(pairs.pairs_of("quant", quant("fp32", "col", 5))) == 28  # 8 fields: every pair
    empty = pairs.pairs_of("quant", quant("fp32", "col", 0))
    assert len(empty) == 7 and all(("num_tokens", "0") in p for p in empty)


@pytest.mark.parametrize("op", ["routing", "quant", "trtllm_ops"])
def test_every_witness_of_a_reachable_pair_is_compared(op):
    """Reachable means compared: the witness of each pair runs through the spec without a skip (the case model
    refusing what the spec refuses, like group_mask_value 0.0 on a method other than deepseek_v2)."""
    witnesses = {}
    for _, configs in strategies.slices(op):
        for pair, config in pairs.reachable(op, configs, {}, SPEC.unsupported).items():
            witnesses.setdefault(Case(op, config).to_json(), pair)
    skipped = [(pairs.show(p), r.message) for text, p in witnesses.items()
               if (r := run_case(SPEC, Case.from_json(text))).status == "skip"]
    assert witnesses and not skipped, skipped[:5]


def run(strategy, on_draw, run_seed, examples):
    """`examples` draws of a strategy under a fixed seed, each handed to on_draw."""
    @seed(run_seed)
    @settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(drawn):
        on_draw(drawn)

    each()


def covered_after(op, odds, run_seed, turns, examples):
    """Pairs covered in `turns` Hypothesis runs of `examples` each over op's slices, steered at `odds` (0: not)."""
    pw = pairs.Pairwise()
    for turn, (_, configs) in itertools.product(range(turns), strategies.slices(op)):
        cell = pw.cell(ANY, op, configs)
        run(pairs.steered(configs, op, cell, odds), lambda c, cell=cell: cell.saw(Case(op, c)),
            run_seed * 1000 + turn, examples)
    reach = set().union(*(pairs.reachable(op, c, {}, ANY.unsupported) for _, c in strategies.slices(op)))
    return len(reach & pw.covered[ANY.name, op]), len(reach)


def test_steering_covers_more_pairs_in_the_same_examples():
    """Three seeds of 120 moe draws each (3 turns of 10 per slice): steered, at most two thirds of the reachable
    pairs that the plain draws miss stay uncovered (measured: 180 of 335)."""
    missed = {odds: 0 for odds in (0, pairs.STEER_ODDS)}
    for odds, run_seed in itertools.product(missed, (1, 2, 3)):
        covered, total = covered_after("moe", odds, run_seed, turns=3, examples=10)
        missed[odds] += total - covered
    assert 3 * missed[pairs.STEER_ODDS] <= 2 * missed[0], missed


def test_a_steered_strategy_draws_the_same_while_coverage_grows():
    """Hypothesis replays and shrinks a choice sequence within one fuzz_cell call: the uncovered pairs are fixed
    when the strategy is built, so marking pairs covered meanwhile changes nothing it draws."""
    _, configs = strategies.slices("moe")[0]
    cell = pairs.Pairwise().cell(ANY, "moe", configs)
    strategy = pairs.steered(configs, "moe", cell, 1)

    def draws():
        out = []
        run(strategy, out.append, 7, 30)
        return out

    first = draws()
    cell.covered.update(list(cell.reachable)[::2])  # half of the pairs compared meanwhile
    assert draws() == first
    cell.covered.update(cell.reachable)
    assert pairs.steered(configs, "moe", cell, 1) is configs  # every pair covered: the next turn draws plainly


def test_steered_draws_stay_inside_the_filters_and_the_case_model():
    cells, filters = pinned_cells()
    pw = pairs.Pairwise(filters)
    for impl, _, op, configs in cells:
        cell = pw.cell(impl, op, configs)
        seen = set()

        def check(config, op=op, impl=impl, seen=seen):
            case = Case(op, config)  # the case model's constraints: CaseError if broken
            assert impl.unsupported(case) is None, config
            assert all(c.allows(getattr(config, f)) for f, c in filters.items()), config
            seen.update(pairs.pairs_of(op, config))

        run(pairs.steered(configs, op, cell, 1), check, 3, 40)  # every draw steered
        assert seen <= cell.reachable.keys()  # what steering draws, the measure counts as reachable


def test_fuzz_prints_the_pairwise_coverage_it_records(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--impl", "spec", "--op", "quant", "--max-examples",
                        "10", "--workers", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)  # a hang guard only; the run is 30 examples
    assert r.returncode == 0, r.stdout + r.stderr
    recorded = json.loads((out / "summary.json").read_text())["pairwise"]
    line = next(x for x in r.stdout.splitlines() if x.startswith("pairwise coverage:"))
    assert line == pairs.summary_line(recorded)
    assert 0 < recorded["covered"] < recorded["reachable"]
    recount = pairs.coverage(map(json.loads, rundir.read_lines(out)),
                             [(SPEC, "spec", "quant", c) for _, c in strategies.slices("quant")])
    assert recount == recorded


def test_a_cell_no_configuration_of_which_meets_its_filters_is_left_out_and_counted():
    from difftest.model import strategies

    filters = dict([where.parse("n_group=3")])
    dead = where.restrict(strategies.routing_configs(method="llama4"), "routing", filters)
    live = strategies.routing_configs(method="deepseek_v3")
    cells = [(ANY, "any", "routing", dead), (ANY, "any", "routing", live)]
    entry = pairs.coverage([], cells)
    assert entry["unmeasured"] == 1 and entry["reachable"] == len(pairs.reachable("routing", live, {}, None))
    assert pairs.reachable("routing", dead, filters, None) is None
    assert pairs.summary_line(entry).endswith("; 1 cell whose filters reject most draws left out)")
    assert pairs.steered(dead, "routing", pairs.Pairwise(filters).cell(ANY, "routing", dead), 1) is dead
