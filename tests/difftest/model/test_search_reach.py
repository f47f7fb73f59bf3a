"""The case space reaches the kernels' limits (issue 33, item 3): planted bugs that live only there
(difftest/selftest/bug_models.py REACH) are found by the campaign's own search within a bounded number of generated
cases, counted, on three seeds each. The search is a timed campaign's, turn by turn in the bug's slice (a routing
method, a moe quant path: the campaign gives every slice its share), without example database, pair steering or
shrinking, so that only the strategies' odds decide. Seconds to find by the plain command are a benchmark
(benchmarks/search_fit.py)."""

import itertools

import pytest
from hypothesis import Phase, settings

from difftest.checking.check import run_case
from difftest.model import strategies
from difftest.model.case import Case, MoEConfig, RoutingConfig
from difftest.model.where import Constraint
from difftest.running import campaign
from difftest.running.run import campaign_cells
from difftest.selftest.bug_models import REACH

SEEDS = (0, 1, 2)
TURN = {"routing": 25, "moe": 5}  # examples per Hypothesis run, as a turn of a few seconds has at least
# (bug, op, slice, examples within which it is found on every seed). Measured on seeds 0, 1, 2 (2026-12-02): 5, 3, 5;
# 34, 7, 3; 12, 10, 15; 8, 2, 10.
HUNTS = [
    ("bug:wide_tier_int8_ids", "routing", "renormalize", 40),
    ("bug:one_expert_groups_minus_inf", "routing", "deepseek_v3", 100),
    ("bug:wide_layer_row_pairs", "moe", "fp8_block", 60),
    ("bug:ue8m0_weights_fp32_scales", "moe", "fp8_block", 40),
]
# The layers of model width on the other quant paths: the same bug, found there too (measured: bf16 12, 10, 22; mxfp8
# 9, 10, 15; nvfp4 9, 10, 22).
MORE_PATHS = [("bug:wide_layer_row_pairs", "moe", quant, 60) for quant in ("bf16", "mxfp8", "nvfp4")]


def examples_to_find(ref, op, label, seed, most):
    """The generated cases of `ref`'s `label` slice of `op` up to and including its first failure, turn after turn
    (TURN examples each, its own Hypothesis seed); None if none fails within `most`."""
    (cell,) = campaign_cells([ref], [op], None, {strategies.SLICES[op][0]: Constraint((label,))})
    impl, impl_ref, _, configs = cell
    no_shrink = settings(campaign.cli_settings(TURN[op]), database=None, phases=[Phase.generate, Phase.target])
    learned, seen = {}, 0
    for turn in itertools.count():
        rows = []
        campaign.fuzz_cell(impl, impl_ref, op, configs=configs, record=rows.append, hypothesis_settings=no_shrink,
                           run_seed=seed * 1_000_003 + turn, refusals=campaign.refusals_of(learned, impl_ref, op))
        failed = next((i for i, row in enumerate(rows) if row["status"] in ("fail", "error")), None)
        if failed is not None:
            return seen + failed + 1
        seen += len(rows)
        if seen >= most:
            return None


def _hunt(ref, op, label, most, seed):
    n = examples_to_find(ref, op, label, seed, most)
    assert n is not None, f"{ref} not found within {most} {op} {label} cases (seed {seed})"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ref, op, label, most", HUNTS, ids=[h[0] for h in HUNTS])
def test_a_bug_at_the_kernels_limits_is_found_within_its_examples(ref, op, label, most, seed):
    _hunt(ref, op, label, most, seed)


@pytest.mark.heavy
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ref, op, label, most", MORE_PATHS, ids=[h[2] for h in MORE_PATHS])
def test_the_model_width_bug_is_found_on_every_quant_path(ref, op, label, most, seed):
    _hunt(ref, op, label, most, seed)


@pytest.mark.parametrize("impl", [impl for impl, _ in REACH], ids=[impl.name for impl, _ in REACH])
def test_a_reach_bug_passes_outside_where_it_lives(impl):
    """Each planted bug is invisible to the cases of the search's bulk (so finding it shows the search's reach)."""
    small = {"routing": [Case("routing", RoutingConfig("deepseek_v3", 4, 16, 4, 4, 2, bias_dtype="fp32"), "normal", 1),
                         Case("routing", RoutingConfig("renormalize", 4, 64, 8), "normal", 2)],
             "moe": [Case("moe", MoEConfig(RoutingConfig("renormalize", 4, 8, 2), 256, 128, quant=q), "normal", 3)
                     for q in ("bf16", "fp8_block")]}
    for case in small[impl.ops[0]]:
        assert run_case(impl, case).status == "pass", (impl.name, case)


def test_a_turn_spends_few_cases_on_no_tokens_or_the_simplest():
    """The first 60 examples of four turns of a timed campaign of torch routing (a turn under load has no more;
    campaign.TURN_EXAMPLES examples at most, steered toward pairs): at most one case in 20 without tokens (43 % of a
    campaign's routing passes had none when every exact case was observed for hypothesis.target), and at most a third
    the simplest completion of a prefix, seed 0 (at 10,000 examples a turn, the first 50 are those)."""
    import threading

    from difftest.checking.impl_torch import TORCH
    from difftest.model import pairs

    rows, pw = [], pairs.Pairwise()
    for i, (_, configs) in enumerate(strategies.slices("routing")[:4]):
        stop, mine = threading.Event(), []

        def record(row, stop=stop, mine=mine):
            mine.append(row)
            if len(mine) >= 60:
                stop.set()

        try:
            campaign.fuzz_cell(TORCH, "torch", "routing", configs=configs, record=record, run_seed=i, stop=stop,
                               hypothesis_settings=campaign.cli_settings(campaign.TURN_EXAMPLES), pairwise=pw)
        except campaign.Interrupted:
            pass
        rows += mine
    assert len(rows) == 4 * 60
    assert sum(r["case"]["config"]["num_tokens"] == 0 for r in rows) <= len(rows) / 20
    assert sum(r["case"]["seed"] == 0 for r in rows) <= len(rows) / 3
