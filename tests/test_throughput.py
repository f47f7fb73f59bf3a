"""What makes small campaign cases cheap changes nothing they find: the memoized Pareto keys
(difftest/running/pareto_keys.py) leave a seeded cell's examples as they were. (The cached strategies of
difftest/model/strategies.py draw the same cases: test_difftest_generate.py, test_database.py.)"""

from hypothesis.internal.conjecture import pareto

from difftest.checking import interface
from difftest.model import strategies
from difftest.running import campaign, pareto_keys


def seeded_cell(tmp_path, name, method="deepseek_v3", examples=250):
    """Every example of a seeded routing cell of the torch implementation with a database (so Hypothesis keeps
    its Pareto front, fed by the error/bound target): (case, status, ratio) in order."""
    rows = []
    db = tmp_path / name
    campaign.fuzz_cell(interface.load("torch"), "torch", "routing", configs=strategies.routing_configs(method=method),
                       hypothesis_settings=campaign.cli_settings(examples, str(db), "torch", db),
                       record=rows.append, run_seed=11)
    return [(r["case"], r["status"], r["ratio"]) for r in rows]


def test_memoized_pareto_keys_search_the_same_examples(tmp_path):
    assert getattr(pareto.sort_key, "memoizes", None) is not None, "the campaign module installs the memoized keys"
    fast = seeded_cell(tmp_path, "memoized")
    pareto_keys.uninstall()
    try:
        plain = seeded_cell(tmp_path, "plain")
    finally:
        assert pareto_keys.install()
    assert len(fast) >= 250
    assert fast == plain
