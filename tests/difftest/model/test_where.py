"""Case-space filters (issue 22, item 1): ``--where FIELD=VALUE|LO..HI|A,B,C`` and a plug-in's ``space``
narrow what the strategies draw (no skips), alone and around a model preset."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from difftest.model import presets, where
from difftest.model.where import Constraint, WhereError
from difftest.store import rundir

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "plugin_example.py"


def test_parse_values_ranges_sets_and_aliases():
    assert where.parse("method=deepseek_v3") == ("method", Constraint(("deepseek_v3",)))
    assert where.parse("E=8..64") == ("num_experts", Constraint(None, 8, 64))
    assert where.parse("logits_dtype=bf16,fp16") == ("logits_dtype", Constraint(("bf16", "fp16")))
    assert where.parse("bias_dtype=none,fp32") == ("bias_dtype", Constraint((None, "fp32")))
    assert where.parse("renormalize=false") == ("renormalize", Constraint((False,)))
    assert where.parse("T=..4") == ("num_tokens", Constraint(None, float("-inf"), 4))


@pytest.mark.parametrize("text, words", [
    ("colour=red", "not a configuration field"),
    ("method=foo", "is not one of"),
    ("E=a..3", "is a number"),
    ("method=a..b", "needs a numeric field"),
    ("top_k=1.5", "is an integer"),
    ("E=9..3", "allows no value"),
    ("method", "must be FIELD=VALUE"),
])
def test_bad_filters_are_one_line_errors(text, words):
    with pytest.raises(WhereError, match=words) as e:
        where.parse(text)
    assert "\n" not in str(e.value)


def test_filters_intersect_and_an_empty_intersection_is_an_error():
    a = dict([where.parse("top_k=1..4")])
    assert where.merge(a, dict([where.parse("top_k=2,6")])) == {"top_k": Constraint((2,))}
    with pytest.raises(WhereError, match="allow no value together"):
        where.merge(a, dict([where.parse("top_k=5..8")]))


FILTERS = {
    "routing": ["method=deepseek_v3,renormalize", "E=256", "top_k=1..3", "logits_dtype=bf16"],
    "moe": ["method=renormalize", "activation=relu2", "quant=fp8_block", "hidden_size=128..256", "T=1..3"],
    "quant": ["scheme=fp8_group", "group_size=128", "input_dtype=fp32"],
}


@pytest.mark.parametrize("op", list(FILTERS))
def test_every_drawn_configuration_is_inside_the_filters(op):
    inside = where.merge(*(dict([where.parse(w)]) for w in FILTERS[op]))
    strategies = [c for _, c in where.slices(op, inside, None)]
    assert strategies

    @settings(max_examples=40, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        config = data.draw(st.sampled_from(strategies).flatmap(lambda s: s))
        for field, c in inside.items():
            assert c.allows(where._get(config, op, field)), (field, config)

    check()


def test_a_model_preset_is_filtered_too():
    inside = dict([where.parse("T=1..3")])
    ((label, configs),) = where.slices("routing", inside, presets.configs("deepseek-v3", "routing"))

    @settings(max_examples=30, database=None, deadline=None)
    @given(configs)
    def check(config):
        assert 1 <= config.num_tokens <= 3 and config.num_experts == 256

    check()


def test_an_op_without_the_field_is_out_of_the_space():
    assert where.slices("quant", dict([where.parse("method=deepseek_v3")]), None) == []


def fuzz(*args):
    return subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--workers", "1", "--seed", "0", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_plugin_space_leaves_no_skips(tmp_path):
    r = fuzz("--impl", f"{EXAMPLE}:DEEPSEEK_V3", "--op", "routing", "--max-examples", "60",
             "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"].get("skip", 0) == 0 and summary["status"]["pass"] >= 60, summary["status"]
    rows = [json.loads(line) for line in rundir.read_lines(tmp_path / "run")]
    assert {r["method"] for r in rows} == {"deepseek_v3"}


def test_where_with_model_draws_only_inside(tmp_path):
    r = fuzz("--impl", "torch", "--op", "routing", "--model", "deepseek-v3", "--where", "T=1..3",
             "--where", "logits_dtype=bf16", "--max-examples", "30", "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in rundir.read_lines(tmp_path / "run")]
    configs = [r["case"]["config"] for r in rows]
    assert configs and all(1 <= c["num_tokens"] <= 3 and c["logits_dtype"] == "bf16" for c in configs)


def test_slices_that_cannot_meet_the_filter_are_dropped_not_fatal(tmp_path):
    r = fuzz("--impl", "torch", "--op", "routing", "--where", "bias_dtype=fp32", "--max-examples", "10",
             "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in rundir.read_lines(tmp_path / "run")]
    assert {r["method"] for r in rows} == {"deepseek_v3", "minimax2"}
    assert {r["case"]["config"]["bias_dtype"] for r in rows} == {"fp32"}


PROGRESS = re.compile(r"^\[ *\d+s/(\d+s|no time limit)\] \d+ cases, \d+ workers$")


@pytest.mark.parametrize("args, words", [
    (["--impl", "torch", "--where", "colour=red"], "not a configuration field"),
    (["--impl", f"{EXAMPLE}:DEEPSEEK_V3", "--where", "method=sigmoid"], "allow no value together"),
    (["--impl", "torch", "--op", "quant", "--where", "method=sigmoid"], "inside --where method=sigmoid"),
    (["--impl", "torch", "--op", "routing", "--model", "deepseek-v3", "--where", "n_group=3"],
     "meets the case constraints"),
])
def test_where_usage_errors_are_one_line(tmp_path, args, words):
    r = fuzz(*args, "--max-examples", "5", "--out", str(tmp_path / "run"))
    # a usage error found by a worker comes after the campaign started: under load, progress lines may precede it
    lines = [line for line in r.stderr.strip().splitlines() if not PROGRESS.match(line)]
    assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr


def _drawn(op, configs, n=60):
    seen = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(configs)
    def draw(config):
        seen.append(config)

    draw()
    return seen


def test_a_space_by_slice_narrows_only_the_slices_it_names():
    """The trtllm-gen routing adapter's expert tiers: llama4 at most 128 experts, renormalize as drawn."""
    space = {"num_experts": {"llama4": "1..128"}}
    cells = dict(where.slices("routing", {}, None, space))
    assert max(c.num_experts for c in _drawn("routing", cells["llama4"], 150)) <= 128
    assert max(c.num_experts for c in _drawn("routing", cells["renormalize"], 150)) > 128
    assert where.from_space(space) == {}  # nothing for the campaign as a whole, nor for a preset's one cell


def test_derived_quantities_are_filtered_like_fields_and_rejected_outside():
    inside = where.merge(dict([where.parse("experts_per_group=2..32")]), dict([where.parse("one_expert_groups=false")]))
    inside = where.merge(inside, dict([where.parse("group_slack=0..")]))
    (_, configs), = where.slices("routing", {**inside, "method": Constraint(("deepseek_v3",))}, None)
    drawn = _drawn("routing", configs, 100)
    for c in drawn:
        assert 2 <= c.num_experts // c.n_group <= 32 and not c.n_group == c.num_experts > 1, c
        assert c.top_k <= c.topk_group * c.n_group, c  # group_slack: fused_topk_deepseek's joint limit
    assert any(c.n_group > 1 for c in drawn)  # grouped cases stay: the filter rejects, it does not pin n_group to 1


def test_a_joint_limit_holds_where_its_condition_does_and_nowhere_else():
    """A space key "FIELD=A,B" limits a field where another field is A or B (SGLang's v1 quantizer: UE8M0 only packed
    at 128; a moe cell's method, which no slice names): redrawn inside, the other draws as before; a bad key is the
    one-line error of a bad filter."""
    space = {"layout": {"scale_fmt=ue8m0": "ue8m0_packed"}, "group_size": {"scale_fmt=ue8m0": 128}}
    assert [(w.when[0][0], w.field) for w in where.conditions(space)] == [("scale_fmt", "layout"),
                                                                          ("scale_fmt", "group_size")]
    (_, configs), = where.slices("quant", {"scheme": Constraint(("fp8_group",))}, None, space)
    drawn = _drawn("quant", configs, 150)
    ue8m0 = [c for c in drawn if c.scale_fmt == "ue8m0"]
    assert ue8m0 and all(c.layout == "ue8m0_packed" and c.group_size == 128 for c in ue8m0)
    assert {c.layout for c in drawn} > {"ue8m0_packed"} and {c.group_size for c in drawn} > {128}
    moe = where.slices("moe", {}, None, {"top_k": {"method=topk,sigmoid": "1..2"}})
    routed = [c.routing for _, cells in moe for c in _drawn("moe", cells, 40)]
    assert all(r.top_k <= 2 for r in routed if r.method in ("topk", "sigmoid"))
    assert any(r.top_k > 2 for r in routed) and any(r.method in ("topk", "sigmoid") for r in routed)
    with pytest.raises(WhereError, match="is not one of"):
        where.conditions({"top_k": {"method=foo": "1..2"}})


def test_a_joint_limit_on_two_fields_holds_where_both_do():
    """"A=x&B=y" is one condition on two fields (trtllm-gen routing: the ungrouped DeepSeek-V3 kernel needs a bias
    and fuses no shared experts; the grouped one may do both): redrawn where both hold, untouched where one does."""
    space = {"bias_dtype": {"method=deepseek_v3&n_group=1": ["fp32", "bf16"]},
             "num_fused_shared_experts": {"method=deepseek_v3&n_group=1": 0}}
    joint, _ = where.conditions(space)
    assert [f for f, _ in joint.when] == ["method", "n_group"] and joint.field == "bias_dtype"
    (_, configs), = where.slices("routing", {"method": Constraint(("deepseek_v3",))}, None, space)
    drawn = _drawn("routing", configs, 150)
    ungrouped = [c for c in drawn if c.n_group == 1]
    grouped = [c for c in drawn if c.n_group > 1]
    assert ungrouped and all(c.bias_dtype is not None and c.num_fused_shared_experts == 0 for c in ungrouped)
    assert any(c.bias_dtype is None for c in grouped) and any(c.num_fused_shared_experts for c in grouped)
    with pytest.raises(WhereError, match="must be FIELD=VALUE"):
        where.conditions({"top_k": {"method=topk&": "1..2"}})


def test_summary_records_each_space_as_declared_and_it_reads_back_to_the_same_limits():
    """summary.json's declared_spaces keeps what `spaces` cannot (limits per slice, joint limits): read back, it gives
    the adapter's own joint limits and per-slice constraints."""
    import json
    from types import SimpleNamespace

    from difftest.running import run
    from impls.flashinfer import trtllm_gen_routing as routing

    record = json.loads(json.dumps(run.drawn_inside(SimpleNamespace(impl=["flashinfer.trtllm_gen_routing"], where={},
                                                                    special=False))))
    declared = record["declared_spaces"]["flashinfer.trtllm_gen_routing"]
    assert declared["bias_dtype"][routing.UNGROUPED_DEEPSEEK] == "fp32,bf16"
    assert set(where.conditions(declared)) == set(where.conditions(routing.SPACE))
    assert where.from_space(declared, label="llama4") == where.from_space(routing.SPACE, label="llama4")
