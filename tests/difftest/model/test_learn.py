"""Declines teach the search (issue 33, item 1): what an implementation refuses, said with a Decline or learned from
a plain-string decline by probing one field at a time, is not drawn again for it, and the next campaign starts
with it. Every count here is of examples, never of seconds."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

from difftest import plugin
from difftest.checking import impl_torch
from difftest.model import learn
from difftest.model.case import Case, Decline, RoutingConfig

ROOT = Path(__file__).resolve().parents[3]
SUBSETS = ROOT / "tests" / "plugins" / "subsets.py"


def routing(method="renormalize", **kw):
    return Case("routing", RoutingConfig(method=method, num_tokens=kw.pop("num_tokens", 3), num_experts=8, top_k=2,
                                         **kw), "normal", 1)


def declining(rule):
    return impl_torch.TORCH._replace(name="declining", unsupported=rule)


def test_a_plain_decline_with_one_cause_is_refused_at_once():
    impl = declining(lambda case: None if case.config.method == "renormalize" else "renormalize only")
    r = learn.Refusals("routing")
    assert r.declined(impl, routing("topk"), "renormalize only") == [("method", "topk")]
    assert r.refuses(routing("topk").config) and not r.refuses(routing().config)


def test_a_skip_the_implementation_did_not_ask_for_teaches_nothing():
    """The spec's refusal or a tester error is a skip of a case the implementation accepts: probing it would find
    every field 'a cause'."""
    r = learn.Refusals("routing")
    assert r.declined(declining(lambda case: None), routing("topk"), "spec refuses: something") == [] and not r


def test_a_decline_two_fields_fix_is_refused_after_two():
    """topk with bf16 logits declined: changing the method or the dtype each fixes it (one constraint between
    them), so neither is refused on one decline."""
    impl = declining(lambda c: "no bf16 topk" if (c.config.method, c.config.logits_dtype) == ("topk", "bf16")
                     else None)
    r = learn.Refusals("routing")
    assert r.declined(impl, routing("topk", logits_dtype="bf16"), "no bf16 topk") == []
    r.accepted(routing("topk").config)  # topk with fp32 logits was compared: topk is never refused by inference
    learned = r.declined(impl, routing("topk", logits_dtype="bf16"), "no bf16 topk")
    assert learned == [("logits_dtype", "bf16")], learned


def test_a_decline_names_what_it_refuses_ranges_included():
    r = learn.Refusals("routing")
    assert r.declined(None, routing(), Decline("at most 4 experts", num_experts="5..")) == [("num_experts", "5..inf")]
    assert r.refuses(routing().config)  # 8 experts
    assert r.declined(None, routing(num_tokens=0), Decline("no tokens", num_tokens=0)) == [("num_tokens", 0)]


def test_the_refused_values_are_not_drawn():
    from hypothesis import given, settings

    from difftest.model import strategies

    r = learn.Refusals("routing")
    r.declined(None, routing(), Decline("fp32 logits only", logits_dtype=["bf16", "fp16"]))
    r.declined(None, routing(num_tokens=0), Decline("no tokens", num_tokens=0))
    seen = []

    @settings(max_examples=60, database=None, deadline=None)
    @given(r.avoiding(strategies.routing_configs("renormalize")))
    def draw(config):
        seen.append(config)

    draw()
    assert len(seen) == 60 and {c.logits_dtype for c in seen} == {"fp32"} and min(c.num_tokens for c in seen) >= 1


def test_a_plugin_of_one_routing_method_compares_all_but_one_case_per_other_method():
    """tests/plugins/subsets.py:ONE_METHOD declines ten of the eleven routing methods in plain words: each of
    those slices costs one declined example, then is not visited again; the one it implements runs its 100."""
    found = plugin.fuzz(f"{SUBSETS}:ONE_METHOD", "routing", max_examples=100)
    assert found.compared == 100 and found.drawn - found.compared <= 11, found


def test_a_bf16_and_fp8_block_moe_plugin_declines_each_refused_value_once():
    """BF16_FP8_MOE refuses 2 quant paths and 9 routing methods, in plain words: at most one declined case each
    (the mxfp8 and nvfp4 slices end at their first); the rest of its 2 × 15 examples are compared."""
    found = plugin.fuzz(f"{SUBSETS}:BF16_FP8_MOE", "moe", max_examples=15)
    assert found.drawn - found.compared <= 2 + 9 and found.compared >= 2 * 15 - 9, found


def fuzz(*args):
    return subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--workers", "1", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # a hang, not a slow machine, fails it


def test_the_next_campaign_starts_with_what_was_learned(tmp_path):
    """Refusals are kept in the example database: a second campaign with the same --db declines nothing."""
    args = ("--impl", f"{SUBSETS}:ONE_METHOD", "--op", "routing", "--max-examples", "8", "--db", str(tmp_path / "db"))
    first = fuzz(*args, "--out", str(tmp_path / "first"))
    assert first.returncode == 0 and "learned: one-method-routing declines method=topk" in first.stdout, first.stdout
    second = fuzz(*args, "--out", str(tmp_path / "second"))
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    cell = summary["cells"]["one-method-routing routing"]
    assert cell["compared"] == cell["drawn"] == 8 and not cell["declined"], cell
    with gzip.open(tmp_path / "second" / "cases.jsonl.gz", "rt") as f:
        assert all("t" in json.loads(line) for line in f)  # each case row carries its time since the start


def test_a_routing_method_is_the_one_cause_whatever_mask_value_its_case_drew():
    """group_mask_value 0.0 belongs to deepseek_v2 alone: the probe that changes the method sets it back to -inf,
    so a deepseek_v2 decline teaches its method at once (learn.TIED)."""
    impl = declining(lambda case: "no deepseek_v2" if case.config.method == "deepseek_v2" else None)
    r = learn.Refusals("routing")
    case = Case("routing", RoutingConfig("deepseek_v2", 3, 8, 2, group_mask_value=0.0), "normal", 1)
    assert r.declined(impl, case, "no deepseek_v2") == [("method", "deepseek_v2")]
