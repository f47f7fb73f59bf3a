"""GPU side of the record-then-verify campaign: run FlashInfer kernels on generated cases, save exact bits.

python campaigns/h200/record.py OUTDIR [n_topk] [n_mono]. Writes versions.json, availability.json,
topk.npz (ids, weight bits), mono_*.npz (output bits) and repeat.json (bitwise repeatability).
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402

from impls.flashinfer import ADAPTERS, adapter  # noqa: E402


def bits(t):
    return t.view(torch.int16).cpu().numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.cpu().numpy()


def main(out, n_topk=1200, n_mono=1000):
    out = Path(out)
    import flashinfer

    p = torch.cuda.get_device_properties(0)
    smi = os.popen("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader").read().strip()
    versions = dict(gpu=p.name, capability=f"{p.major}.{p.minor}", nvidia_smi=smi, torch=torch.__version__,
                    cuda=torch.version.cuda, flashinfer=flashinfer.__version__, python=sys.version.split()[0])
    print(versions, flush=True)
    avail = {}
    for name in ADAPTERS:
        t0 = time.time()
        avail[name] = dict(reason=adapter(name).available(), seconds=round(time.time() - t0, 3))
    print(avail, flush=True)
    (out / "versions.json").write_text(json.dumps(versions, indent=1))
    (out / "availability.json").write_text(json.dumps(avail, indent=1))

    ft = adapter("fused_topk_deepseek")
    timing = {}
    t0 = time.time()
    ids_all, w_all, offs = [], [], [0]
    for seed in range(n_topk):
        cfg, logits, bias = cases.topk_case(seed)
        dt = torch.float32 if cfg["logits_dtype"] == "fp32" else torch.bfloat16
        w, ids = ft.fused_topk_deepseek(torch.from_numpy(logits).to("cuda", dt), torch.from_numpy(bias).cuda(),
                                        n_group=cfg["n_group"], topk_group=cfg["topk_group"],
                                        top_k=cfg["top_k"], routed_scaling_factor=cfg["rsf"])
        if seed == 0:
            torch.cuda.synchronize()
            timing["fused_topk_deepseek_first_call_s"] = round(time.time() - t0, 1)
        wk = w.float().cpu().numpy()
        ids_all.append(np.pad(ids.cpu().numpy(), ((0, 0), (0, 8 - cfg["top_k"])), constant_values=-1))
        w_all.append(np.pad(wk, ((0, 0), (0, 8 - cfg["top_k"]))))
        offs.append(offs[-1] + cfg["T"])
    np.savez_compressed(out / "topk.npz", ids=np.concatenate(ids_all), weights=np.concatenate(w_all),
                        offsets=np.array(offs))
    timing["fused_topk_deepseek_total_s"] = round(time.time() - t0, 1)
    print(timing, flush=True)

    mm = adapter("mono_moe")
    t0 = time.time()
    weights = mm.prepare_weights(*cases.mono_weights(0), device="cuda")
    timing["mono_weights_s"] = round(time.time() - t0, 1)
    outs, offs, repeat_bad = [], [0], []
    t0 = time.time()
    for seed in range(n_mono):
        cfg, h, z = cases.mono_case(seed)
        args = (torch.from_numpy(h).to("cuda", torch.bfloat16), torch.from_numpy(z).to("cuda", torch.bfloat16), weights)
        kw = dict(top_k=cfg["top_k"], scoring_func=cfg["scoring"], renormalize=cfg["renormalize"])
        o = bits(mm.mono_moe(*args, **kw))
        if seed == 0:
            timing["mono_moe_first_call_s"] = round(time.time() - t0, 1)
        if seed < 200:
            again = bits(mm.mono_moe(*args, **kw))
            if not np.array_equal(o, again):
                repeat_bad.append(dict(seed=seed, elements=int((o != again).sum())))
        outs.append(o)
        offs.append(offs[-1] + cfg["T"])
    timing["mono_moe_total_s"] = round(time.time() - t0, 1)
    allout = np.concatenate(outs)
    half = len(allout) // 2
    np.savez_compressed(out / "mono_a.npz", out=allout[:half], offsets=np.array(offs))
    np.savez_compressed(out / "mono_b.npz", out=allout[half:])
    (out / "repeat.json").write_text(json.dumps(dict(repeated=min(200, n_mono), differing=repeat_bad,
                                                     timing=timing), indent=1))
    print(timing, "repeat differing:", len(repeat_bad), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
