"""Side-by-side performance of the spec, torch eager and the machine's floor at DeepSeek-V3 scale, and
campaign throughput. `python -m benchmarks.run` prints the markdown of benchmarks/RESULTS.md.

Layer: one MoE layer at DeepSeek-V3 shapes (E=256, H=7168, I=2048, top-8 of 8 groups keeping 4, swiglu) on
the bf16 and fp8_block paths, spec recipe-exact (the torch eager recipe, bounds included) vs torch eager on
CPU. Each (impl, path, T) runs in a fresh subprocess (`python -m benchmarks.run layer ...`), so its VmHWM is
its own peak RSS. Expert weights are generated on demand from (seed, expert id) by a cheap generator; the
seconds spent in it are measured and subtracted from the layer time (reported as `gen s`).

Floor: max(FLOPs of the routed experts / measured fp32 numpy GEMM rate, stored bytes of the touched experts /
measured memory-copy rate), both rates measured in the same run.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

E, H, I, TOP_K, N_GROUP, TOPK_GROUP, RSF = 256, 7168, 2048, 8, 8, 4, 2.5
ROUTING = dict(
    method="deepseek_v3",
    top_k=TOP_K,
    n_group=N_GROUP,
    topk_group=TOPK_GROUP,
    routed_scaling_factor=RSF,
    renormalize=True,
)
BLOCK = 128
SEED = 0
TOKENS = (1, 16, 64)
PATHS = ("bf16", "fp8_block")
MIN_SECONDS = 5.0  # repeat a layer call until this much time is spent (at most REPEATS calls), keep the best
REPEATS = 3


# ---- on-demand expert weights


def _expert_rng(e):
    return np.random.Generator(np.random.PCG64([SEED, e]))


def expert_codes(e, quant):
    """Stored arrays of expert e: bf16 as uint16 bit patterns, fp8_block as e4m3 codes + fp32 block scales.

    Magnitudes keep swiglu's inputs near 1: bf16 exponents 120-121 (|w| in [2^-7, 2^-5)); e4m3 codes & 0xBF
    clear the top exponent bit (|q| < 2, never the NaN code) and block scales lie in [2^-5, 2^-4)."""
    rng = _expert_rng(e)
    shapes = {"w13": (2 * I, H), "w2": (H, I)}
    out = {}
    for name, shape in shapes.items():
        n = shape[0] * shape[1]
        if quant == "bf16":
            raw = np.frombuffer(rng.bytes(2 * n), np.uint16).reshape(shape)
            out[name] = (raw & 0x80FF) | 0x3C00
        else:
            out[name] = np.frombuffer(rng.bytes(n), np.uint8).reshape(shape) & 0xBF
            blocks = (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
            eighths = np.frombuffer(rng.bytes(blocks[0] * blocks[1]), np.uint8).reshape(blocks) & 7
            out[name + "_scale"] = np.float32(2.0**-5) * (1 + eighths.astype(np.float32) / 8)
    return out


def stored_bytes(quant):
    """Bytes of one expert as stored: bf16 2 per weight; fp8_block 1 per code + 4 per block scale."""
    return sum(v.nbytes if v.dtype != np.uint16 else v.size * 2 for v in expert_codes(0, quant).values())


class Timed:
    """Wraps a per-expert generator, adding the seconds spent in it to `seconds`."""

    def __init__(self, make):
        self.make, self.seconds, self.calls = make, 0.0, 0

    def __call__(self, e):
        t0 = time.perf_counter()
        out = self.make(e)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def spec_expert(quant):
    def make(e):
        w = expert_codes(e, quant)
        if quant == "bf16":  # bf16 values travel as float32 (docs/interfaces.md)
            return {k: (v.astype(np.uint32) << 16).view(np.float32) for k, v in w.items()}
        return w

    return make


def torch_expert(quant):
    import torch

    def make(e):
        w = expert_codes(e, quant)
        if quant == "bf16":
            return {k: torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for k, v in w.items()}
        return {
            k: torch.from_numpy(v).view(torch.float8_e4m3fn) if v.dtype == np.uint8 else torch.from_numpy(v)
            for k, v in w.items()
        }

    return make


class SpecWeights:
    """spec ExpertWeights over a Timed generator."""

    def __init__(self, timed):
        self.timed, self.num_experts = timed, E

    def expert(self, e):
        return self.timed(e)


def layer_inputs(T):
    """hidden (bf16 values as float32) [T, H], logits fp32 [T, E], bias fp32 [E]."""
    rng = np.random.Generator(np.random.PCG64([SEED, 1_000_000 + T]))
    hidden = rng.standard_normal((T, H), np.float32)
    hidden = ((hidden.view(np.uint32) + 0x8000) & 0xFFFF0000).view(
        np.float32
    )  # to bf16, ties away (inputs only)
    return hidden, rng.standard_normal((T, E), np.float32), (rng.standard_normal(E, np.float32) * 0.1)


def bench_recipe(quant):
    """The recipe of impls/torch_eager (impls/torch_eager/recipe.py), built without importing torch."""
    from spec.recipes import Recipe

    return Recipe(name=f"torch_eager_{quant}", requant_intermediate=quant != "bf16")


def run_layer(impl, quant, T):
    hidden, logits, bias = layer_inputs(T)
    if impl == "spec":
        from spec.layer import moe_layer

        timed = Timed(spec_expert(quant))
        recipe = bench_recipe(quant)

        def call():
            r = moe_layer(
                hidden,
                logits,
                bias,
                SpecWeights(timed),
                routing=ROUTING,
                activation="swiglu",
                quant=quant,
                recipe=recipe,
            )
            return r.ids
    else:
        import torch

        import impls.torch_eager as te

        timed = Timed(torch_expert(quant))
        r = te.RECIPE[quant]
        routing = {
            **ROUTING,
            "bias_dtype": r["bias"],
            "weights_dtype": r["routing_weights"],
            "renorm_order": r["renorm_order"],
        }
        th, tl, tb = (
            torch.from_numpy(hidden).to(torch.bfloat16),
            torch.from_numpy(logits),
            torch.from_numpy(bias),
        )

        def call():
            return te.moe_layer(
                th, tl, tb, timed, routing=routing, activation="swiglu", quant=quant
            ).ids.numpy()

    times, gens, spent = [], [], 0.0
    while len(times) < REPEATS and (not times or spent < MIN_SECONDS):
        g0 = timed.seconds
        t0 = time.perf_counter()
        ids = call()
        total = time.perf_counter() - t0
        spent += total
        gens.append(timed.seconds - g0)
        times.append(total - gens[-1])
    best = int(np.argmin(times))
    return {
        "impl": impl,
        "quant": quant,
        "T": T,
        "seconds": times[best],
        "gen_seconds": gens[best],
        "runs": len(times),
        "experts": int(len(np.unique(ids[ids >= 0]))),
        "vmhwm_bytes": _vmhwm(),
    }


def _vmhwm():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# ---- the machine's floor


def gemm_rate(m=512, k=H, n=2 * I):
    """fp32 numpy GEMM FLOP/s, best of 3, at the shape of T=64's GEMM1 (512 routed rows, K=H, N=2I)."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    best = min(_seconds(lambda: a @ b) for _ in range(3))
    return 2 * m * k * n / best


def copy_rate(nbytes=512 * 2**20):
    """Bytes/s read by np.copyto of a buffer far larger than the caches, best of 5."""
    src, dst = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    return nbytes / min(_seconds(lambda: np.copyto(dst, src)) for _ in range(5))


def _seconds(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def routed_flops(T):
    return 2 * T * TOP_K * (H * 2 * I + I * H)


# ---- campaign throughput


def campaign(workers, seconds):
    """Cases/s of `python -m difftest fuzz --impl torch` (spec vs torch on CPU, the default small shapes)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "difftest",
            "fuzz",
            "--impl",
            "torch",
            "--workers",
            str(workers),
            "--time-budget",
            str(seconds),
            "--out",
            out,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        summary = json.loads((Path(out) / "summary.json").read_text())
    errors = summary["worker_errors"] or (
        [proc.stderr.strip().splitlines()[-1]] if proc.returncode == 2 else []
    )
    return {
        "workers": workers,
        "cases": summary["cases"],
        "seconds": summary["seconds"],
        "rate": summary["cases"] / summary["seconds"],
        "errors": errors,
    }


# ---- report


def machine():
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    import torch

    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, numpy {np.__version__}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )


def loadavg():
    return Path("/proc/loadavg").read_text().split()[0]


def _child(impl, quant, T):
    cmd = [sys.executable, "-m", "benchmarks.run", "layer", impl, quant, str(T)]
    load = loadavg()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {**json.loads(out), "load": load}


def report(args):
    gib = 2**30
    print(f"Machine: {machine()}\n")
    gemm, copy = gemm_rate(), copy_rate()
    print(
        f"Floor rates (load {loadavg()}): fp32 GEMM 512x{H}x{2 * I} {gemm / 1e9:.0f} GFLOP/s, "
        f"memory copy {copy / gib:.1f} GiB/s\n"
    )
    weights_fp8 = E * stored_bytes("fp8_block")
    print(
        "| path | T | experts | spec s | torch s | spec/torch | floor s | spec/floor | gen s (spec, torch) "
        "| peak RSS spec, torch GiB | load (spec, torch) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for quant in args.paths:
        per_expert = stored_bytes(quant)
        for T in args.tokens:
            s, t = _child("spec", quant, T), _child("torch", quant, T)
            floor = max(routed_flops(T) / gemm, s["experts"] * per_expert / copy)
            print(
                f"| {quant} | {T} | {s['experts']} | {s['seconds']:.3g} | {t['seconds']:.3g} | "
                f"{s['seconds'] / t['seconds']:.2f} | {floor:.3g} | {s['seconds'] / floor:.1f} | "
                f"{s['gen_seconds']:.2g}, {t['gen_seconds']:.2g} | {s['vmhwm_bytes'] / gib:.2f}, "
                f"{t['vmhwm_bytes'] / gib:.2f} | {s['load']}, {t['load']} |",
                flush=True,
            )
    print(
        f"\nFP8 layer weights as stored: {weights_fp8 / gib:.2f} GiB (E={E}); in bf16 "
        f"{E * stored_bytes('bf16') / gib:.2f} GiB.\n"
    )
    if args.campaign_seconds:
        print("| workers | cases | seconds | cases/s | load | worker errors |\n|---|---|---|---|---|---|")
        rates = {}
        for w in (1, 2):
            load = loadavg()
            c = campaign(w, args.campaign_seconds)
            rates[w] = c["rate"]
            print(
                f"| {w} | {c['cases']} | {c['seconds']} | {c['rate']:.1f} | {load} "
                f"| {'; '.join(c['errors'])} |",
                flush=True,
            )
        print(f"\n2-worker speed-up: {rates[2] / rates[1]:.2f}x")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    one = sub.add_parser("layer", help="one (impl, path, T) in this process; prints JSON")
    one.add_argument("impl", choices=("spec", "torch"))
    one.add_argument("quant", choices=PATHS)
    one.add_argument("T", type=int)
    p.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    p.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    p.add_argument(
        "--campaign-seconds", type=float, default=60.0, help="fuzz budget per worker count (0: skip)"
    )
    args = p.parse_args(argv)
    if args.cmd == "layer":
        print(json.dumps(run_layer(args.impl, args.quant, args.T)))
    else:
        report(args)


if __name__ == "__main__":
    main()
