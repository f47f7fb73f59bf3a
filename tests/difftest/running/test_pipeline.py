"""difftest/running/pipeline.py: batches run on the (fake) device while verifier processes compare them with the spec;
every case gets its verdict, a wrong implementation becomes a replayable fixture, and the device accounting adds
up. Throughput is a benchmark (campaigns/pipeline_bench.sh, benchmarks/run.py), not a test."""

import json
import subprocess
import sys
from pathlib import Path

from difftest.checking import interface
from difftest.running import campaign, pipeline
from difftest.running.run import campaign_cells
from difftest.store import fixtures
from tests.plugins import pipeline_impls

ROOT = Path(__file__).resolve().parents[3]
IMPLS = ROOT / "tests" / "plugins" / "pipeline_impls.py"


def run(tmp_path, ref, ops, batches, batch=8, verifiers=2):
    cells = campaign_cells([ref], ops, None)
    pipe = pipeline.Pipeline(ref, cells, tmp_path, batch=batch, verifiers=verifiers, seed=3)
    summary = pipe.run(max_batches=batches)
    rows = [json.loads(line) for line in (tmp_path / "cases-pipeline.jsonl").read_text().splitlines()]
    return summary, rows


def test_every_drawn_case_gets_a_verdict(tmp_path):
    summary, rows = run(tmp_path, "torch", ["routing", "quant"], batches=6)
    assert summary["batches"] == 6 and summary["cases"] == summary["drawn"] == len(rows) > 0
    assert sum(summary["status"].values()) == len(rows)
    assert summary["status"].get("pass", 0) > 0 and not summary["findings"], summary
    assert {r["op"] for r in rows} == {"routing", "quant"}
    assert all(r["status"] in ("pass", "skip") for r in rows)
    assert len({json.dumps(r["case"], sort_keys=True) for r in rows}) > len(rows) // 2, "batches repeat cases"
    assert summary["max_in_flight"] >= 1 and summary["held_seconds"] > 0


def test_a_wrong_implementation_becomes_a_fixture_that_replays(tmp_path):
    ref = f"{IMPLS}:DOUBLED"
    summary, rows = run(tmp_path, ref, ["routing"], batches=3)
    assert summary["status"].get("fail", 0) > 0
    signatures = [campaign.fixture_signature(fixtures.load(f["fixture"]).meta) for f in summary["findings"]]
    assert len(signatures) == len(set(signatures)) >= 1, "one finding per signature (one per routing method)"
    assert len({s[:4] for s in signatures}) == 1, signatures
    fx = fixtures.load(summary["findings"][0]["fixture"])
    result, kind, _ = campaign.run_classified(interface.load(ref), fx.case, fx.inputs)
    assert kind == "mismatch" and result.status == "fail"
    assert fx.meta["provenance"] == pipeline.PROVENANCE


def test_the_device_time_adds_up_on_a_slow_device(tmp_path):
    summary, rows = run(tmp_path, f"{IMPLS}:SLOW_DEVICE", ["routing"], batches=4, batch=6)
    ran = sum(1 for r in rows if r["status"] != "skip")
    assert ran > 0 and summary["device_seconds"] >= ran * pipeline_impls.DEVICE_SECONDS
    assert summary["held_seconds"] >= summary["device_seconds"] and summary["cases_per_device_minute"] > 0


def test_the_device_does_not_wait_for_a_verifier_after_its_last_batch(tmp_path):
    """Three batches, one verifier: the third would wait for the first one's verdicts, but it is the last, so the
    device is released at once and the drain verifies the rest (held time ends with the last kernel call)."""
    summary, rows = run(tmp_path, "torch", ["routing"], batches=3, verifiers=1)
    assert summary["idle_seconds"] == 0 and summary["cases"] == summary["drawn"] == len(rows) > 0
    assert summary["drain_seconds"] > 0


def test_the_hint_names_the_device_process_as_the_bottleneck():
    """The H200 numbers: fused_topk_deepseek never waited and spent 40 of 55 s inside the implementation (hint);
    mono_moe waited 46 of 82 s for verifiers (no hint)."""
    fused = dict(held_seconds=55.0, device_seconds=39.9, idle_seconds=0.0)
    mono = dict(held_seconds=82.2, device_seconds=35.1, idle_seconds=45.9)
    assert "fuzz --workers" in pipeline.bound_by_the_device_process(fused)
    assert pipeline.bound_by_the_device_process(mono) is None


def test_command_line(tmp_path):
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "difftest.running.pipeline", "--impl", f"{IMPLS}:DOUBLED",
                        "--max-batches", "8", "--batch", "4", "--verifiers", "1", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1, p.stderr
    assert "per device-minute" in p.stdout and "FINDING [routing, planted:doubled_first_weight" in p.stdout
    assert json.loads((out / "pipeline-summary.json").read_text())["findings"]
