"""CPU side for mono_moe: recompute recorded cases with the recipe-exact spec (spec.recipes.MONO_MOE) and compare.

python campaigns/h200/verify_mono.py RUNDIR [N_CASES [PROCS [ACCUMULATE]]] (ACCUMULATE e.g.
hopper_fp8). Reads mono_a.npz / mono_b.npz (bf16 output bits, record.py);
cases regenerate from seeds (cases.py). Prints relative L2 error vs the recipe-exact spec and vs the float64 ideal,
the fraction of elements within the derived hard bound, and max / p99 of |gpu − spec| / hard bound.
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402

from spec.layer import StackedWeights, moe_layer  # noqa: E402
from spec.recipes import MONO_MOE  # noqa: E402

METHOD = {("softmax", True): "renormalize", ("softmax", False): "default",
          ("sigmoid", True): "sigmoid_renorm", ("sigmoid", False): "sigmoid"}


def recorded(run):
    a, b = np.load(Path(run) / "mono_a.npz"), np.load(Path(run) / "mono_b.npz")
    bits = np.concatenate([a["out"], b["out"]]).astype(np.uint32) << 16
    return bits.view(np.float32), a["offsets"]


def one(args):
    """(seed, rel-L2 pieces, ratios, within) of one recorded case; ACCUMULATE names moe_layer's GEMM emulation
    for a second recipe-exact comparison ("hopper_fp8": Hopper's FP8 WGMMA accumulation, spec/layer.py)."""
    seed, gpu, accumulate = args
    cfg, h, z = cases.mono_case(seed)
    routing = dict(method=METHOD[(cfg["scoring"], cfg["renormalize"])], top_k=cfg["top_k"])
    if cfg["scoring"] == "sigmoid" and cfg["renormalize"]:
        routing["eps"] = 0.0
    kw = dict(routing=routing, activation="swiglu", quant="fp8_block")
    r = moe_layer(h, z, None, WEIGHTS, recipe=MONO_MOE, **kw)
    ideal = moe_layer(h, z, None, WEIGHTS, ids=r.ids[:, :cfg["top_k"]], **kw).out
    d = np.abs(gpu - r.out)
    pieces = [(d ** 2).sum(), (r.out.astype(np.float64) ** 2).sum(), ((gpu - ideal) ** 2).sum(), 0.0]
    if accumulate:
        emu = moe_layer(h, z, None, WEIGHTS, recipe=MONO_MOE, accumulate=accumulate, **kw).out
        pieces[3] = ((gpu - emu) ** 2).sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d == 0, 0.0, d / r.errors.hard)
    return seed, cfg, pieces, ratio.ravel(), (d <= r.errors.hard).ravel()


WEIGHTS = None


def main(run, n=1000, procs=1, accumulate=""):
    global WEIGHTS
    out, offs = recorded(run)
    w13, s13, w2, s2 = cases.mono_weights(0)
    WEIGHTS = StackedWeights(dict(w13=w13, w13_scale=s13, w2=w2, w2_scale=s2))
    jobs = [(seed, out[offs[seed]:offs[seed + 1]].astype(np.float64), accumulate) for seed in range(n)]
    t0 = time.time()
    if procs > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(procs) as pool:
            results = list(pool.imap_unordered(one, jobs))
    else:
        results = [one(j) for j in jobs]
    sums = np.sum([p for _, _, p, _, _ in results], axis=0)
    for seed, cfg, _, ratio, _ in sorted(results, key=lambda r: r[0]):
        if ratio.max() > 1:
            print(f"seed {seed} {cfg}: {int((ratio > 1).sum())} elements beyond the hard bound, max ratio "
                  f"{ratio.max():.3g}", flush=True)
    ratios = np.concatenate([r[3] for r in results])
    within = np.concatenate([r[4] for r in results])
    num, den, num_ideal, num_emu = sums
    print(f"mono_moe: {n} cases, {within.size} elements, {time.time() - t0:.0f} s; rel L2 vs recipe-exact "
          f"{np.sqrt(num / den):.3g}, vs ideal (spec ids) {np.sqrt(num_ideal / den):.3g}; within hard bound "
          f"{within.mean():.6f}; error/bound max {ratios.max():.3g}, p99 {np.quantile(ratios, 0.99):.3g}")
    if accumulate:
        print(f"  rel L2 vs recipe-exact with accumulate={accumulate!r}: {np.sqrt(num_emu / den):.3g}")


if __name__ == "__main__":
    # python verify_mono.py RUNDIR [N_CASES [PROCS [ACCUMULATE]]]
    a = sys.argv[1:]
    main(a[0], *(int(x) for x in a[1:3]), *a[3:4])
