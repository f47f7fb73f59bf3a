"""GPU probes for the second H200 call: the fused_topk_deepseek sigmoid on a dense grid, the F1 group limits,
mono_moe repeat runs.

python campaigns/h200/probe.py OUTDIR. Writes sigmoid_probe.npz, groups_probe.npz, mono_repeat.npz.

Sigmoid probe: E=4, n_group=2, topk_group=2, top_k=2, rsf 1, fp32; token t has logits [x_t, -100, 100, -100]
and bias [10, 0, 0, 0], so experts 0 and 2 are selected, s(100) = 1 and Σ = fl(s(x_t) + 1):
w0 = fl(s/Σ), w2 = fl(1/Σ), hence s(x_t) = w0/w2 within about 2^-23 relative (exactly w0 where Σ = 1).
Group probe: the F1 configuration and topk_group > 4 configurations, each run twice.
"""

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402

from impls.flashinfer import adapter  # noqa: E402

GROUP_CONFIGS = ((256, 16, 4, 1), (256, 16, 4, 8), (256, 32, 4, 4), (64, 8, 8, 8), (128, 8, 6, 8), (256, 8, 4, 8))


def sigmoid_probe(ft):
    x = np.concatenate([np.linspace(-24, 24, 1 << 19, dtype=np.float32),
                        np.float32(2.0) ** np.arange(-30, 5, 1 / 64, dtype=np.float32)]).astype(np.float32)
    logits = np.tile(np.array([0, -100, 100, -100], np.float32), (len(x), 1))
    logits[:, 0] = x
    bias = np.array([10, 0, 0, 0], np.float32)
    w, ids = ft.fused_topk_deepseek(torch.from_numpy(logits).cuda(), torch.from_numpy(bias).cuda(),
                                    n_group=2, topk_group=2, top_k=2, routed_scaling_factor=1.0)
    t = torch.tanh(torch.from_numpy(0.5 * x).cuda()).cpu().numpy()  # torch's CUDA tanhf, for comparison
    return dict(x=x, weights=w.cpu().numpy(), ids=ids.cpu().numpy(), torch_tanh=t)


def groups_probe(ft):
    out = {}
    for c, (E, G, tg, k) in enumerate(GROUP_CONFIGS):
        rng = np.random.Generator(np.random.PCG64(7 + c))
        logits = cases.normalish(rng, 64 * E).reshape(64, E).astype(np.float32)
        bias = (0.05 * cases.normalish(rng, E)).astype(np.float32)
        for rep in range(2):
            try:
                w, ids = ft.fused_topk_deepseek(torch.from_numpy(logits).cuda(), torch.from_numpy(bias).cuda(),
                                                n_group=G, topk_group=tg, top_k=k, routed_scaling_factor=1.0)
                out[f"c{c}_ids{rep}"], out[f"c{c}_w{rep}"] = ids.cpu().numpy(), w.cpu().numpy()
            except Exception as e:  # a refusal is a result too
                out[f"c{c}_error"] = np.array(str(e)[:500])
        out[f"c{c}_logits"], out[f"c{c}_bias"], out[f"c{c}_cfg"] = logits, bias, np.array([E, G, tg, k])
    return out


def mono_repeat(mm, seeds=range(24), reps=6):
    weights = mm.prepare_weights(*cases.mono_weights(0), device="cuda")
    outs = []
    for seed in seeds:
        cfg, h, z = cases.mono_case(seed)
        args = (torch.from_numpy(h).to("cuda", torch.bfloat16), torch.from_numpy(z).to("cuda", torch.bfloat16),
                weights)
        kw = dict(top_k=cfg["top_k"], scoring_func=cfg["scoring"], renormalize=cfg["renormalize"])
        outs.append(np.stack([mm.mono_moe(*args, **kw).float().cpu().numpy() for _ in range(reps)]))
    return {f"s{s}": o for s, o in zip(seeds, outs, strict=True)}


def main(out):
    out = Path(out)
    ft = adapter("fused_topk_deepseek")
    np.savez_compressed(out / "sigmoid_probe.npz", **sigmoid_probe(ft))
    np.savez_compressed(out / "groups_probe.npz", **groups_probe(ft))
    print("topk probes done", flush=True)
    np.savez_compressed(out / "mono_repeat.npz", **mono_repeat(adapter("mono_moe")))
    print("mono repeat done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
