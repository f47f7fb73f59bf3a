"""Which arithmetic explains the trtllm-gen routing kernels' expert sets? (H200, 2026-12-01)

For DeepSeek-V3-style routing (random normal logits, fp32 correction bias ~ N(0, σ_b²)) over expert counts,
group configurations and token counts that reach each kernel path, count the tokens whose expert *set*
differs from the spec under candidate models of the kernel's arithmetic:

- ``fp32_bias``: the declared semantics (sigmoid + fp32 bias, top-2 group sums, fp32 keys);
- ``bf16_bias``: the bias rounded to bf16 before the add (what the grouped kernel's ``OutputT biasVal`` does if
  OutputT is bf16, trtllm_fused_moe_routing_deepseek.cu);
- ``bf16_keys``: the whole key s + b rounded to bf16.

Usage (device `run`): PYTHONPATH=. python spec/data/probes/trtllm_routing_probe.py OUT_DIR
Writes OUT_DIR/probe.jsonl (one row per configuration) and prints a table.
"""

import json
import sys
import time

import numpy as np
import torch

from difftest.checking import impl_spec
from difftest.model.case import RoutingConfig
from impls.flashinfer import trtllm_gen_routing as tg
from spec.numerics import round_to
from spec.recipes import Recipe

CONFIGS = [  # (E, n_group, topk_group, top_k)
    (256, 8, 4, 8), (128, 8, 4, 8), (64, 8, 4, 6), (64, 4, 2, 4), (160, 8, 3, 8),
    (256, 1, 1, 8), (384, 1, 1, 8), (512, 1, 1, 8), (72, 8, 3, 6),
]
TOKENS = (1, 64, 1025, 8192)
BIAS_SIGMA = (0.1, 0.5)


def models():
    base = Recipe(name="probe", sigmoid="tanh", routing_weights="bf16", renorm_order="scale_then_divide")
    return {"fp32_bias": base, "bf16_bias": base.but(bias="bf16")}


def sets_differ(a, b, k):
    return (np.sort(a[:, :k], 1) != np.sort(b[:, :k], 1)).any(1)


def main(out):
    rows = []
    rng = np.random.default_rng(20261201)
    for (E, G, tg_, k) in CONFIGS:
        for T in TOKENS:
            for sigma in BIAS_SIGMA:
                logits = rng.standard_normal((T, E)).astype(np.float32)
                bias = (sigma * rng.standard_normal(E)).astype(np.float32)
                c = RoutingConfig("deepseek_v3", T, E, k, G, tg_, 2.5, renormalize=True, eps=tg.EPS,
                                  bias_dtype="fp32", tile_tokens_dim=8)
                if tg.unsupported(c):
                    rows.append({"E": E, "G": G, "tg": tg_, "k": k, "T": T, "skip": tg.unsupported(c)})
                    continue
                a = tg.call_args(c)
                t0 = time.perf_counter()
                o = tg.trtllm_gen_routing(torch.from_numpy(logits).cuda(), torch.from_numpy(bias).cuda(),
                                          "deepseek_v3", a, local_expert_offset=0, local_num_experts=E)
                torch.cuda.synchronize()
                ms = 1e3 * (time.perf_counter() - t0)
                e2p = o["expanded_idx_to_permuted_idx"].cpu().numpy()
                ids = tg.slot_ids(e2p, o["cta_idx_xy_to_batch_idx"].cpu().numpy(), 8, 0)
                w = o["topk_weights"].float().cpu().numpy()
                row = {"E": E, "G": G, "tg": tg_, "k": k, "T": T, "bias_sigma": sigma, "ms": round(ms, 3)}
                inputs = {"logits": logits, "bias": bias}
                for name, recipe in models().items():
                    s = impl_spec.route(c, inputs, recipe)
                    differ = sets_differ(ids, s.ids, k)
                    same = ~differ
                    wk = np.sort(w[same, :k], 1)
                    ws = np.sort(s.weights[same, :k].astype(np.float32), 1)
                    row[f"{name}_set_differs"] = int(differ.sum())
                    row[f"{name}_w_exact"] = float(np.mean(wk == ws)) if same.any() else None
                    row[f"{name}_w_maxdiff"] = float(np.abs(wk - ws).max()) if same.any() else None
                keys_bf16 = round_to(1 / (1 + np.exp(-logits.astype(np.float64))) + bias, "bf16")
                row["bf16_keys_set_differs"] = int(sets_differ(
                    ids, np.argsort(-keys_bf16, 1, kind="stable")[:, :k], k).sum()) if G == 1 else None
                rows.append(row)
                print(json.dumps(row), flush=True)
    with open(f"{out}/probe.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
