"""CPU side for mono_moe: recompute recorded cases with the recipe-exact spec (spec.recipes.MONO_MOE) and compare.

python campaigns/h200/verify_mono.py RUNDIR [N_CASES [PROCS]]. Reads mono_a.npz / mono_b.npz (bf16 output bits,
record.py); cases regenerate from seeds (cases.py). Two recipe-exact references: the recipe's own (the tensor
core's block sums emulated bit-exactly, spec.hopper.hopper_fp8_step; tight hard bound) and exact block sums (the
bound then covers any Hopper accumulation). For each: relative L2 error, the fraction of elements within the
hard bound, max / p99 of |gpu − spec| / hard bound; and the relative L2 error vs the float64 ideal.
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
    """(seed, config, rel-L2 pieces, {reference: (ratios, within)}) of one recorded case."""
    seed, gpu = args
    cfg, h, z = cases.mono_case(seed)
    routing = dict(method=METHOD[(cfg["scoring"], cfg["renormalize"])], top_k=cfg["top_k"])
    if cfg["scoring"] == "sigmoid" and cfg["renormalize"]:
        routing["eps"] = 0.0
    kw = dict(routing=routing, activation="swiglu", quant="fp8_block")
    pieces, checks = [], {}
    for reference in REFERENCES:
        r = moe_layer(h, z, None, WEIGHTS, recipe=MONO_MOE, accumulate=reference, **kw)
        d = np.abs(gpu - r.out)
        pieces += [(d ** 2).sum(), (r.out.astype(np.float64) ** 2).sum()]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(d == 0, 0.0, d / r.errors.hard)
        checks[reference] = (ratio.ravel(), (d <= r.errors.hard).ravel())
    ideal = moe_layer(h, z, None, WEIGHTS, ids=r.ids[:, :cfg["top_k"]], **kw).out
    pieces.append(((gpu - ideal) ** 2).sum())
    return seed, cfg, pieces, checks


REFERENCES = ("hopper_fp8", "exact")  # the recipe's block sums, bit-exact; exact block sums
WEIGHTS = None


def main(run, n=1000, procs=1):
    global WEIGHTS
    out, offs = recorded(run)
    w13, s13, w2, s2 = cases.mono_weights(0)
    WEIGHTS = StackedWeights(dict(w13=w13, w13_scale=s13, w2=w2, w2_scale=s2))
    jobs = [(seed, out[offs[seed]:offs[seed + 1]].astype(np.float64)) for seed in range(n)]
    t0 = time.time()
    if procs > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(procs) as pool:
            results = sorted(pool.imap_unordered(one, jobs), key=lambda r: r[0])
    else:
        results = [one(j) for j in jobs]
    sums = np.sum([p for _, _, p, _ in results], axis=0)
    print(f"mono_moe: {n} cases, {sum(r[3]['exact'][1].size for r in results)} elements, {time.time() - t0:.0f} s; "
          f"rel L2 vs the float64 ideal (spec ids) {np.sqrt(sums[-1] / sums[1]):.3g}")
    for i, reference in enumerate(REFERENCES):
        for seed, cfg, _, checks in results:
            ratio = checks[reference][0]
            if ratio.max() > 1:
                print(f"  {reference}: seed {seed} {cfg}: {int((ratio > 1).sum())} elements beyond the hard bound, "
                      f"max ratio {ratio.max():.3g}", flush=True)
        ratios = np.concatenate([r[3][reference][0] for r in results])
        within = np.concatenate([r[3][reference][1] for r in results])
        print(f"  vs recipe-exact, block sums {reference}: rel L2 {np.sqrt(sums[2 * i] / sums[2 * i + 1]):.3g}; "
              f"within hard bound {within.mean():.6f}; error/bound max {ratios.max():.3g}, "
              f"p99 {np.quantile(ratios, 0.99):.3g}, median {np.median(ratios):.3g}")


if __name__ == "__main__":
    # python verify_mono.py RUNDIR [N_CASES [PROCS]]
    main(sys.argv[1], *(int(x) for x in sys.argv[2:4]))
