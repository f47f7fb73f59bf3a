"""How much of what a campaign draws is compared, per implementation, and how soon it starts (issue 33): the plain
command on each CPU implementation, without --where, and the share of drawn cases compared after the first
`--after` seconds (cases rows carry "t", seconds since the start); plus the start-up cost of the CLI. Then how far
the search reaches: the seconds and cases the plain command takes to find each planted bug that lives only at the
kernels' limits (difftest/selftest/bug_models.py REACH) on `--seeds` seeds (stopped at its first finding), and the
README's main job (`python -m difftest fuzz`, 120 s) with its pairwise coverage and the share of its compared cases
per op that have no tokens.

    python -m benchmarks.search_fit [--budget 60] [--after 30] [--workers 2] [--seeds 3] [--only shares,bugs,main]

Prints markdown table rows (benchmarks/RESULTS.md, "Search fit", "Search reach"). A measurement, not a test: its
numbers depend on the machine and its load, which it prints.
"""

import argparse
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
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


def load():
    return f"{os.getloadavg()[0]:.1f}"


FINDING = re.compile(r"FINDING after ([0-9.]+) s and ([0-9]+) cases")


def time_to_find(ref, seed, budget, workers):
    """(seconds, cases) of the plain command's first finding on `ref` (None, None: none within the budget); the
    campaign is stopped there (SIGINT, as Ctrl-C)."""
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.Popen([sys.executable, "-m", "difftest", "fuzz", "--impl", ref, "--time-budget", str(budget),
                              "--workers", str(workers), "--seed", str(seed), "--out", str(Path(tmp) / "run")],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        found = (None, None)
        for line in p.stderr:
            m = FINDING.search(line)
            if m:
                found = (float(m.group(1)), int(m.group(2)))
                p.send_signal(signal.SIGINT)
                break
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        return found


def bugs(seeds, budget, workers):
    from difftest.selftest.bug_models import REACH

    print(f"\n| planted bug | where it lives | {' | '.join(f'seed {s}: s (cases)' for s in range(seeds))} | load |")
    print("|---|---|" + "---|" * seeds + "---|")
    for impl, where in REACH:
        before, cells = load(), []
        for seed in range(seeds):
            s, n = time_to_find(impl.name, seed, budget, workers)
            cells.append("not found" if s is None else f"{s:g} ({n})")
        print(f"| `{impl.name}` | {where} | {' | '.join(cells)} | {before}-{load()} |", flush=True)


def main_job(workers):
    """The README's main job: its pairwise coverage and, per op, the compared cases without tokens."""
    from difftest.model import pairs

    before = load()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "difftest", "fuzz", "--workers", str(workers), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True)
        summary = json.loads((out / "summary.json").read_text())
        with gzip.open(out / "cases.jsonl.gz", "rt") as f:
            rows = [json.loads(line) for line in f]
    compared, empty = Counter(), Counter()
    for r in rows:
        if r["status"] != "skip":
            config = r["case"]["config"]
            compared[r["op"]] += 1
            empty[r["op"]] += config.get("num_tokens", config.get("routing", {}).get("num_tokens", 1)) == 0
    shares = ", ".join(f"{op} {empty[op]} of {n} ({100 * empty[op] / n:.1f} %)" for op, n in sorted(compared.items()))
    total = sum(compared.values())
    print(f"\nREADME main job (`python -m difftest fuzz --workers {workers}`, load {before}-{load()}): {len(rows)} "
          f"cases, {total} compared; {pairs.summary_line(summary['pairwise'])}; compared without tokens: "
          f"{sum(empty.values())} of {total} ({100 * sum(empty.values()) / max(1, total):.1f} %): {shares}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=float, default=60)
    p.add_argument("--after", type=float, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--only", default="shares,bugs,main", help="comma-separated: shares, bugs, main")
    args = p.parse_args(argv)
    parts = set(args.only.split(","))
    print(f"load {load()}, {os.cpu_count()} cores; usage error answered in {startup():.2f} s")
    if "shares" in parts:
        shares(args)
    if "bugs" in parts:
        bugs(args.seeds, args.budget, args.workers)
    if "main" in parts:
        main_job(args.workers)


def shares(args):
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
