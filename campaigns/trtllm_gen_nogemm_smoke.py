"""First GPU run of flashinfer.trtllm_gen_nogemm (trtllm-gen routing → permute → torch GEMM1 → activation kernel →
torch GEMM2 → finalize) against the spec: 20 small moe cases through difftest.checking.check.run_case.

python campaigns/trtllm_gen_nogemm_smoke.py OUTDIR [--start N]

One line per case (status, ratio, seconds, message) and OUTDIR/nogemm_smoke.jsonl (one record per case, the case
included). Every case runs in try/except; a CUDA error that poisons the context (illegal address, launch failure)
re-executes this script from the next case in a fresh process, so one fault does not hide the rest. The routing and
dev-kernel modules are JIT-built on first use unless prebuilt (DIFFTEST_TRTLLM_GEN_PREBUILT, FLASHINFER_CUBIN_DIR as
for trtllm_gen_dev_ops_smoke.py).
"""

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from difftest.checking import check  # noqa: E402
from difftest.checking.interface import load  # noqa: E402
from difftest.model.case import Case, MoEConfig, RoutingConfig  # noqa: E402

EPS = 1e-20  # the trtllm-gen renormalizing kernels' epsilon
FATAL = ("illegal memory access", "unspecified launch failure", "CUDA error", "AcceleratorError")


def cases():
    """20 cases: bf16 swiglu and relu2 (renormalize / sigmoid_renorm), fp8_block and bf16 DeepSeek-V3-like grouped
    routing with bias and rsf; E 16..64, H and I multiples of 128 up to 512, T 1..64, two expert-parallel shards."""
    out = []

    def add(routing, H, I, seed, **kw):
        out.append(Case("moe", MoEConfig(routing=routing, hidden_size=H, intermediate_size=I, **kw), seed=seed))

    for i, (T, E, k, H, I) in enumerate([(1, 16, 2, 128, 128), (7, 32, 4, 256, 128), (33, 64, 6, 512, 256),
                                         (64, 16, 4, 384, 512), (16, 64, 8, 256, 384)]):
        add(RoutingConfig("renormalize", T, E, k), H, I, 100 + i)
    for i, (T, E, k, H, I) in enumerate([(3, 16, 2, 256, 128), (24, 32, 4, 512, 256), (64, 64, 6, 128, 384)]):
        add(RoutingConfig("sigmoid_renorm", T, E, k, eps=EPS), H, I, 200 + i, activation="relu2")
    for i, (T, E, G, tg, k, H, I) in enumerate([(1, 32, 4, 2, 4, 256, 128), (8, 64, 8, 4, 8, 512, 256),
                                                (17, 64, 4, 2, 6, 384, 512), (40, 32, 4, 2, 4, 128, 128),
                                                (64, 64, 8, 4, 8, 256, 256), (5, 16, 4, 2, 2, 512, 384)]):
        r = RoutingConfig("deepseek_v3", T, E, k, G, tg, 2.5, eps=EPS, bias_dtype="fp32")
        add(r, H, I, 300 + i, quant="fp8_block")
    dsv3 = RoutingConfig("deepseek_v3", 12, 64, 8, 8, 4, 2.5, eps=EPS, bias_dtype="fp32")
    add(dsv3, 256, 256, 400, quant="fp8_block", local_expert_offset=16, local_num_experts=32)
    add(dsv3, 256, 256, 401, quant="fp8_block", activation="relu2")
    add(dsv3, 384, 256, 402)  # bf16 swiglu on grouped routing
    add(RoutingConfig("renormalize", 48, 32, 4), 256, 128, 403, local_expert_offset=8, local_num_experts=8)
    add(RoutingConfig("renormalize", 2, 16, 2, logits_dtype="bf16"), 128, 128, 404, half_order="up_gate")
    add(RoutingConfig("renormalize", 64, 64, 8), 512, 512, 405)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("outdir")
    p.add_argument("--start", type=int, default=0)
    args = p.parse_args()
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    log = outdir / "nogemm_smoke.jsonl"
    impl = load("flashinfer.trtllm_gen_nogemm")
    why = impl.available()
    if why:
        print(f"unavailable: {why}", flush=True)
        log.open("a").write(json.dumps({"unavailable": why}) + "\n")
        return
    all_cases = cases()
    for i in range(args.start, len(all_cases)):
        case = all_cases[i]
        t0 = time.perf_counter()
        try:
            r = check.run_case(impl, case, repeat=True)
            rec = {"i": i, "status": r.status, "ratio": float(r.ratio), "message": r.message,
                   "seconds": round(r.seconds, 3), "spec_seconds": round(r.spec_seconds, 3)}
        except Exception as e:  # the harness itself failed on this case
            rec = {"i": i, "status": "harness_error", "ratio": None,
                   "message": f"{type(e).__name__}: {e}".splitlines()[0], "trace": traceback.format_exc()[-2000:]}
        rec["wall"] = round(time.perf_counter() - t0, 3)
        rec["case"] = case.to_dict()
        with log.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        c = case.config
        print(f"[{i:2d}] {rec['status']:13s} ratio={rec['ratio']} {c.quant} {c.activation} {c.routing.method} "
              f"T={c.routing.num_tokens} E={c.routing.num_experts} k={c.routing.top_k} H={c.hidden_size} "
              f"I={c.intermediate_size} | {rec['message']}", flush=True)
        if rec["status"] in ("error", "harness_error") and any(s in rec["message"] for s in FATAL):
            print(f"CUDA context lost at case {i}: restarting from {i + 1}", flush=True)
            os.execv(sys.executable, [sys.executable, __file__, str(outdir), "--start", str(i + 1)])


if __name__ == "__main__":
    main()
