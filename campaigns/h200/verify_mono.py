"""CPU side for mono_moe: recompute recorded cases with the recipe-exact spec (spec.recipes.MONO_MOE) and compare.

python campaigns/h200/verify_mono.py RUNDIR [N_CASES]. Reads mono_a.npz / mono_b.npz (bf16 output bits, record.py);
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


def main(run, n=1000):
    out, offs = recorded(run)
    w13, s13, w2, s2 = cases.mono_weights(0)
    weights = StackedWeights(dict(w13=w13, w13_scale=s13, w2=w2, w2_scale=s2))
    num = den = num_ideal = 0.0
    ratios, within, t0 = [], [], time.time()
    for seed in range(n):
        cfg, h, z = cases.mono_case(seed)
        gpu = out[offs[seed]:offs[seed + 1]].astype(np.float64)
        routing = dict(method=METHOD[(cfg["scoring"], cfg["renormalize"])], top_k=cfg["top_k"])
        if cfg["scoring"] == "sigmoid" and cfg["renormalize"]:
            routing["eps"] = 0.0
        kw = dict(routing=routing, activation="swiglu", quant="fp8_block")
        r = moe_layer(h, z, None, weights, recipe=MONO_MOE, **kw)
        ideal = moe_layer(h, z, None, weights, ids=r.ids[:, :cfg["top_k"]], **kw).out
        d = np.abs(gpu - r.out)
        num, den = num + (d ** 2).sum(), den + (r.out.astype(np.float64) ** 2).sum()
        num_ideal += ((gpu - ideal) ** 2).sum()
        hard = r.errors.hard
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(d == 0, 0.0, d / hard)
        ratios.append(ratio.ravel())
        within.append((d <= hard).ravel())
        if ratio.max() > 1:
            print(f"seed {seed} {cfg}: {int((d > hard).sum())} elements beyond the hard bound, max ratio {ratio.max():.3g}",
                  flush=True)
    ratios, within = np.concatenate(ratios), np.concatenate(within)
    print(f"mono_moe: {n} cases, {within.size} elements, {time.time() - t0:.0f} s; rel L2 vs recipe-exact "
          f"{np.sqrt(num / den):.3g}, vs ideal (spec ids) {np.sqrt(num_ideal / den):.3g}; within hard bound "
          f"{within.mean():.6f}; error/bound max {ratios.max():.3g}, p99 {np.quantile(ratios, 0.99):.3g}")


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
