"""How much of what a campaign draws is compared, per implementation, and how soon it starts (issue 33): the plain
command on each CPU implementation, without --where, and the share of drawn cases compared after the first
`--after` seconds (cases rows carry "t", seconds since the start); plus the start-up cost of the CLI.

    python -m benchmarks.search_fit [--budget 60] [--after 30] [--workers 2]

Prints one markdown table row per implementation (benchmarks/RESULTS.md, "Search fit"). A measurement, not a
test: its numbers depend on the machine and its load, which it prints.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPLS = [  # the built-ins, the self-test's bug models, examples/ and the subset plug-ins of tests/plugins/
    "torch", "spec", "bug:K01", "bug:K11_gated_interleave_on_relu2", "examples/plugin_example.py:DEEPSEEK_V3",
    "examples/plugin_moe_example.py:FUSED_MOE", "examples/plugin_bf16_routing.py:GROUPED_TOPK_BF16",
    "tests/plugins/subsets.py:ONE_METHOD", "tests/plugins/subsets.py:BF16_FP8_MOE",
    "tests/plugins/frozen/2026_11_29/plugin_example.py:DEEPSEEK_V3",
]


def share(run_dir, after):
    with gzip.open(run_dir / "cases.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    late = [r for r in rows if r.get("t", 0) >= after]
    first = min((r["t"] for r in rows if "t" in r), default=None)

    def frac(rs):
        return sum(r["status"] != "skip" for r in rs) / len(rs) if rs else float("nan")

    empty = sum(r["status"] != "skip" and (r["case"]["config"].get("num_tokens", r["case"]["config"].get(
        "routing", {}).get("num_tokens", 1)) == 0) for r in rows)
    return len(rows), frac(rows), len(late), frac(late), first, empty / max(1, sum(r["status"] != "skip" for r in rows))


def startup():
    """Seconds of a usage error (nothing imported past the parser), median of 5."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--workers", "0"], cwd=ROOT, capture_output=True)
        times.append(time.perf_counter() - t0)
    return sorted(times)[2]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=float, default=60)
    p.add_argument("--after", type=float, default=30)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores; usage error answered in {startup():.2f} s")
    after = f"{args.after:g} s"
    print(f"| implementation | drawn | compared | drawn after {after} | compared after {after} | first case (s) | "
          "T = 0 among compared |")
    print("|---|---|---|---|---|---|---|")
    for ref in IMPLS:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--impl", ref, "--time-budget",
                            str(args.budget), "--workers", str(args.workers), "--out", str(out)], cwd=ROOT,
                           capture_output=True, text=True)
            n, f, n_late, f_late, first, empty = share(out, args.after)
            print(f"| `{ref}` | {n} | {100 * f:.1f} % | {n_late} | {100 * f_late:.1f} % | {first:.1f} | "
                  f"{100 * empty:.1f} % |", flush=True)


if __name__ == "__main__":
    main()
