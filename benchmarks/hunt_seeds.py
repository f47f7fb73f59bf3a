"""Examples to kill a mutant over many seeds: `difftest.selftest.mutants.hunt(NAME, seed=S)` for S = 0..N-1, per seed
and as median / mean / max, with the chunks' sizes fixed so that the counts are exact per seed.

A hunt sizes each chunk from the seconds per example it measured in the op's previous chunk (mutants.TURN_S): the
routing and quant chunks stay at mutants.CHUNK examples while their cases take under TURN_S / CHUNK = 0.04 s, but
a moe chunk holds about TURN_S seconds of layer cases, so a count past the first routing chunk moves with the load
(group_mask_minus_one seed 4 on b50dccf: 77 and 87 examples in two runs of the CLI's hunt, 67 here). Here the hunt
reads a clock that advances mutants.SECONDS_PER_EXAMPLE[op] per example instead of the wall clock: every moe chunk
is max(2, TURN_S / 0.2) = 5 examples, as on an idle machine whose layer cases take 0.2 s, and the time budget is
counted in those seconds. `--timed`: the wall clock, as `python -m difftest mutants` runs.

    python benchmarks/hunt_seeds.py NAME [NAME ...] [--seeds 32] [--timed] [--jsonl FILE]

Run as a file, it measures the difftest on PYTHONPATH, so the same script measures an older tree:
`PYTHONPATH=/path/to/old/tree python benchmarks/hunt_seeds.py NAME`. A measurement, not a test.
"""

import argparse
import json
import statistics
import time

from difftest.running import campaign
from difftest.selftest import mutants


class ExampleClock:
    """A stand-in for the time module inside mutants: perf_counter() advances only by the examples fuzzed."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def hunts(name, seeds, timed=False):
    """[(seed, Kill, [(op, examples of each chunk)])] of `name` on seeds 0..seeds-1."""
    clock = None if timed else ExampleClock()
    chunks, fuzz_cell = [], campaign.fuzz_cell

    def counted(impl, ref, op, **kwargs):
        res = fuzz_cell(impl, ref, op, **kwargs)
        chunks.append((op, res.examples))
        if clock is not None:
            clock.now += mutants.SECONDS_PER_EXAMPLE[op] * max(1, res.examples)
        return res

    out, real_time = [], mutants.time
    campaign.fuzz_cell = counted
    try:
        for seed in range(seeds):
            chunks.clear()
            if clock is not None:
                mutants.time = clock
            out.append((seed, mutants.hunt(name, seed=seed), list(chunks)))
    finally:
        campaign.fuzz_cell, mutants.time = fuzz_cell, real_time
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="+", help="mutant names (python -m difftest mutants --list)")
    p.add_argument("--seeds", type=int, default=32)
    p.add_argument("--timed", action="store_true", help="size the moe chunks by the wall clock, as the CLI does")
    p.add_argument("--jsonl", help="append one line per hunt (seed, killed, examples, op, chunks) to this file")
    args = p.parse_args()
    for name in args.names:
        t0 = time.perf_counter()
        rows = hunts(name, args.seeds, args.timed)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                for seed, k, chunks in rows:
                    f.write(json.dumps({"name": name, "seed": seed, "killed": k.killed, "examples": k.examples,
                                        "op": k.op, "chunks": chunks}) + "\n")
        examples = [k.examples for _, k, _ in rows]
        survived = sum(not k.killed for _, k, _ in rows)
        print(f"{name}: seeds 0..{args.seeds - 1}, median {statistics.median(examples):g}, mean "
              f"{statistics.mean(examples):.1f}, max {max(examples)}, survived {survived}, killed in a moe chunk "
              f"{sum(k.op == 'moe' for _, k, _ in rows)} ({time.perf_counter() - t0:.0f} s)\n  {examples}", flush=True)


if __name__ == "__main__":
    main()
