"""Every trtllm-gen routing kernel path, on both sides of each token-count threshold (first run: H200, 2026-12-01).

Hypothesis campaigns draw T <= 8192; the cooperative -> histogram switch lies near 10^5 tokens. This sweep runs
fixed configurations at T = threshold and threshold + 1 for each switch of impls/flashinfer/trtllm_gen_routing.
kernel_path (132 SMs), through difftest.checking.check.run_case (the same comparison as a campaign: ids, weights and the
permutation), with the declared recipe or, with --as-built, the as-built one (the adapter's AS_BUILT variant).

Usage: PYTHONPATH=. python campaigns/trtllm_gen_routing_paths.py OUT_DIR [--as-built]  ->  OUT_DIR/paths.jsonl, a line
per case.
"""

import json
import sys
import time

from difftest.checking import check, interface
from difftest.model.case import Case, RoutingConfig
from impls.flashinfer import trtllm_gen_routing as tg

SMS = 132


def configs():
    grouped = dict(method="deepseek_v3", num_experts=32, top_k=8, n_group=4, topk_group=4, routed_scaling_factor=2.5,
                   eps=tg.EPS, bias_dtype="fp32", num_fused_shared_experts=2, tile_tokens_dim=64)
    custom = dict(method="renormalize", num_experts=16, top_k=8, tile_tokens_dim=32)
    biased = dict(method="minimax2", num_experts=256, top_k=8, eps=tg.EPS, bias_dtype="fp32", tile_tokens_dim=128,
                  local_expert_offset=64, local_num_experts=64)
    llama = dict(method="llama4", num_experts=128, top_k=1, tile_tokens_dim=8)
    # fused shared experts on expert-parallel shards (docs/trtllm_gen_routing.md §6): first, middle, last shard
    shards = [dict(grouped, tile_tokens_dim=8, local_expert_offset=o, local_num_experts=8) for o in (0, 8, 24)]
    coop_g = (SMS - tg.RESERVED_SMS) * 128 * 64 // 10
    coop_c = (SMS - tg.RESERVED_SMS) * 128 * 64 // 8
    for base, tokens in ((grouped, (1, 102, 103, 1024, 1025, coop_g, coop_g + 1)),
                         (custom, (4, 5, 16, 17, 256, 257, coop_c, coop_c + 1)),
                         (biased, (4, 5, 16, 17, 256, 257, 4096)),
                         (llama, (3, 4, 256, 257, 8192)),
                         *((shard, (3, 300)) for shard in shards)):
        for T in tokens:
            yield RoutingConfig(num_tokens=T, **base)


def main(out, as_built=False):
    impl = interface.load("impls.flashinfer.trtllm_gen_routing:AS_BUILT" if as_built
                          else "flashinfer.trtllm_gen_routing")
    with open(f"{out}/paths.jsonl", "w") as f:
        for i, c in enumerate(configs()):
            for dist in ("normal", "near_ties"):
                case = Case("routing", c, dist, 1000 + i)
                t0 = time.perf_counter()
                r = check.run_case(impl, case)
                row = {"path": tg.kernel_path(c, SMS), "method": c.method, "T": c.num_tokens, "dist": dist,
                       "status": r.status, "ratio": None if r.ratio == float("inf") else r.ratio,
                       "near_ties": r.near_ties, "message": r.message[:300], "s": round(time.perf_counter() - t0, 2)}
                f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], "--as-built" in sys.argv[2:])
