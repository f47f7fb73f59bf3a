"""Smoke and probes of SGLang's kernels on a GPU host, from the repository root with sgl-kernel on the path (as
tools/device_verify.sh unpacks it from .carry/sglang): PYTHONPATH=SGL_DIR:. python3 campaigns/sglang_smoke.py OUT_DIR.
One JSON line per check in OUT_DIR/smoke.jsonl, one line on stdout.

* cases: hand-picked configurations of every adapter (the DeepSeek-V3 / Mixtral / Qwen3 shapes, the kernels'
  templated and dynamic paths, 0 and many tokens, every scale layout, the adversarial distributions), each through
  difftest.checking.check.run_case in an isolated worker, as fuzz runs them;
* probes: what the adapters refuse, run once on the kernel itself so docs/sglang.md can say what happens there
  (one-expert groups, more than 32 groups, scale_ue8m0 with a row-major output, NaN inputs, the v1 kernel's UE8M0
  edges of known_bugs K14 / K15, the bf16 instantiation judged by the fp32-bias semantics).
"""

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np


def main(out):
    import torch

    from difftest.checking import check, compare, interface
    from difftest.model import generate
    from difftest.model.case import Case, QuantConfig, RoutingConfig
    from difftest.running.isolation import IsolatedRunner

    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "smoke.jsonl", "w")

    def emit(kind, name, what, **fields):
        row = {"kind": kind, "impl": name, "what": what, **fields}
        log.write(json.dumps(row, default=str) + "\n")
        log.flush()
        print(f"{kind:6s} {name:38s} {what:60s} {fields.get('status', '')} {fields.get('message', '')}"[:400])

    import sgl_kernel

    so = Path(sgl_kernel.common_ops.__file__)
    emit("env", "sgl_kernel", "build", version=sgl_kernel.__version__, library=str(so),
         sha256=hashlib.sha256(so.read_bytes()).hexdigest(), torch=torch.__version__,
         device=torch.cuda.get_device_name(), capability=torch.cuda.get_device_capability())

    def r(**kw):
        base = dict(method="deepseek_v3", num_tokens=7, num_experts=256, top_k=8, n_group=8, topk_group=4,
                    routed_scaling_factor=2.5, bias_dtype="fp32")
        if kw.get("method", "deepseek_v3") != "deepseek_v3":
            base.update(num_experts=8, top_k=2, n_group=1, topk_group=1, routed_scaling_factor=None, bias_dtype=None)
        return RoutingConfig(**{**base, **kw})

    def q(**kw):
        return QuantConfig(**{**dict(scheme="fp8_group", num_tokens=5, hidden_size=7168, group_size=128,
                                     input_dtype="bf16", variant="mul_448_div_amax", scale_formula="mul_rcp448"),
                              **kw})

    v1q = dict(variant="mul_rcp_scale")
    ue = dict(scale_fmt="ue8m0", layout="ue8m0_packed")
    cases = {
        "sglang.moe_fused_gate": [
            (r(), d, s) for d, s in (("normal", 0), ("near_ties", 1), ("exact_ties", 2), ("all_negative", 3),
                                     ("underflow", 4), ("zero_group", 5), ("negative_bias", 6), ("large", 7))
        ] + [
            (r(num_tokens=1), "normal", 8), (r(num_tokens=0), "normal", 9), (r(num_tokens=1000), "normal", 10),
            (r(logits_dtype="bf16"), "normal", 11), (r(bias_dtype=None), "normal", 12),
            (r(routed_scaling_factor=None), "normal", 13), (r(num_fused_shared_experts=1), "normal", 14),
            (r(num_fused_shared_experts=2, routed_scaling_factor=None), "normal", 15),
            (r(n_group=16, topk_group=8), "normal", 16), (r(num_experts=128, n_group=4, topk_group=2), "normal", 17),
            (r(num_experts=128, n_group=8, topk_group=4), "normal", 18),
            (r(num_experts=64, n_group=4, topk_group=2, top_k=6), "normal", 19),
            (r(num_experts=32, n_group=1, topk_group=1, top_k=4), "glm_bias", 20),
            (r(num_experts=16, n_group=2, topk_group=1, top_k=16 // 2), "near_ties", 21),
        ],
        "sglang.moe_fused_gate_bf16": [
            (r(logits_dtype="bf16"), d, s) for d, s in (("normal", 0), ("near_ties", 1), ("exact_ties", 2),
                                                        ("all_negative", 3), ("zero_group", 4))
        ] + [(r(logits_dtype="bf16", num_fused_shared_experts=1, num_tokens=64), "normal", 5)],
        "sglang.topk_softmax": [
            (r(method=m, **kw), d, s)
            for m in ("default", "renormalize_naive")
            for kw, d, s in (({}, "normal", 0), ({"num_experts": 128, "top_k": 8}, "normal", 1),
                             ({"num_experts": 60, "top_k": 4}, "normal", 2), ({"num_experts": 60, "top_k": 1},
                                                                            "normal", 3),
                             ({"num_experts": 512, "top_k": 8}, "normal", 4), ({"num_experts": 1, "top_k": 1},
                                                                             "normal", 5),
                             ({"logits_dtype": "bf16"}, "exact_ties", 6), ({"logits_dtype": "fp16"}, "large", 7),
                             ({"num_experts": 60, "top_k": 6}, "exact_ties", 8), ({"num_tokens": 0}, "normal", 9),
                             ({"num_tokens": 1000, "num_experts": 64, "top_k": 8}, "near_ties", 10))
        ],
        "sglang.per_token_group_quant_8bit": [
            (q(**kw), d, s)
            for kw in ({}, {"layout": "col"}, {"layout": "col_tma"}, {"layout": "col_tma", "num_tokens": 1},
                       {"layout": "col", "input_dtype": "fp16", "group_size": 64, "hidden_size": 512},
                       {"group_size": 16, "hidden_size": 256, "layout": "col_tma"}, {**ue},
                       {**ue, "hidden_size": 384}, {**ue, "num_tokens": 129}, {"num_tokens": 0, **ue})
            for d, s in (("normal", 0), ("pow2_edge", 1), ("zero_group", 2), ("tiny_groups", 3), ("large", 4))
        ],
        "sglang.per_token_group_quant_8bit_v1": [
            (q(**v1q, **kw), d, s)
            for kw in ({}, {"layout": "col_tma", "input_dtype": "fp32"}, {"group_size": 256, "layout": "col"},
                       {"layout": "row", "input_dtype": "fp16"}, {**ue}, {**ue, "hidden_size": 384})
            for d, s in (("normal", 0), ("pow2_edge", 1), ("zero_group", 2), ("tiny_groups", 3), ("large", 4))
        ],
    }
    for name, todo in cases.items():
        impl = interface.load(name)
        runner = IsolatedRunner(name, 120.0, out / "workers")
        t0 = time.time()
        for config, dist, seed in todo:
            case = Case("routing" if "quant" not in name else "quant", config, dist, seed)
            res = check.run_case(impl, case, runner=runner)
            emit("case", name, f"{_short(config)} {dist} s{seed}", status=res.status, ratio=res.ratio,
                 message=res.message[:300], near_ties=res.near_ties, excluded=res.excluded, case=case.to_json())
        runner.close()
        emit("timing", name, f"{len(todo)} cases", seconds=round(time.time() - t0, 1))

    # ---- probes: the kernels themselves, outside the adapters' declared limits (in-process; last, as they may
    # leave the CUDA context unusable)
    from impls.sglang import per_token_group_quant_8bit as ptg
    from spec.recipes import NAMED

    def routing_probe(what, config, dist, seed, kernel_dtype="fp32", recipe=NAMED["sglang_moe_fused_gate"],
                      bias_via_bf16=False):
        case = Case("routing", config, dist, seed)
        inputs = generate.inputs(case)
        try:
            logits = torch.from_numpy(inputs["logits"]).cuda()
            bias = torch.from_numpy(inputs.get("bias", np.zeros(config.num_experts, np.float32))).cuda()
            if kernel_dtype == "bf16":
                logits, bias = logits.bfloat16(), bias.bfloat16()
            if bias_via_bf16:  # the fp32 kernel handed a bias that went through bf16 (a caller's cast and back)
                bias = bias.bfloat16().float()
            w, ids = sgl_kernel.moe_fused_gate(logits, bias, config.n_group, config.topk_group,
                                               config.top_k + config.num_fused_shared_experts,
                                               config.num_fused_shared_experts, config.routed_scaling_factor or 1.0,
                                               config.routed_scaling_factor is not None)
            out_ = {"ids": ids.cpu().numpy(), "weights": w.cpu().float().numpy()}
            v = compare.compare_routing(case, inputs, out_, recipe, what)
            emit("probe", "sglang.moe_fused_gate", what, status="pass" if v.ok else "fail", ratio=v.ratio,
                 message=v.message[:300], case=case.to_json())
        except Exception as e:
            emit("probe", "sglang.moe_fused_gate", what, status="error", message=f"{type(e).__name__}: {e}"[:300])

    routing_probe("one-expert groups E=8 G=8/4 k=2", r(num_experts=8, n_group=8, topk_group=4, top_k=2), "normal", 0)
    routing_probe("32 groups E=64 G=32/4 k=4", r(num_experts=64, n_group=32, topk_group=4, top_k=4), "normal", 0)
    routing_probe("64 groups E=128 G=64/8 k=8", r(num_experts=128, n_group=64, topk_group=8, top_k=8), "normal", 0)
    fixed = NAMED["sglang_moe_fused_gate_bf16"].but(name="bf16 arithmetic, fp32 bias", bias="fp32")
    for seed in range(4):  # the pre-fix path (bias rounded to bf16) judged by the fix's semantics (fp32 bias)
        routing_probe(f"bf16 kernel vs fp32-bias recipe, seed {seed}", r(logits_dtype="bf16", num_tokens=256),
                      "normal", seed, "bf16", fixed)
        routing_probe(f"fp32 kernel, bias through bf16, vs fp32 recipe, seed {seed}", r(num_tokens=256), "normal",
                      seed, bias_via_bf16=True)

    def quant_probe(what, config, dist, seed, enable_v2=None, row_ue8m0=False):
        case = Case("quant", config, dist, seed)
        inputs = generate.inputs(case)
        try:
            x = torch.from_numpy(inputs["x"]).cuda().to({"bf16": torch.bfloat16, "fp16": torch.float16,
                                                         "fp32": torch.float32}[config.input_dtype])
            ue8m0 = row_ue8m0 or config.scale_fmt == "ue8m0"
            qq, view, base = ptg.per_token_group_quant_8bit(x, config.group_size, config.layout, ue8m0, enable_v2)
            if row_ue8m0:  # scale_ue8m0 with a row-major fp32 output: are the scales powers of two?
                got = view.float().cpu().numpy()
                pow2 = bool(np.all(np.frexp(got)[0] == 0.5))
                emit("probe", ptg.NAME, what, status="pow2" if pow2 else "not pow2",
                     message=f"first scales {got.ravel()[:4].tolist()}")
                return
            out_ = {"q": qq.view(torch.uint8).cpu().numpy(),
                    "scales": ptg.logical_scales(view, config.hidden_size // config.group_size, ue8m0),
                    "scale_buffer": base.view(torch.uint8).flatten().cpu().numpy()}
            v = compare.compare_quant(case, inputs, out_, None, what)
            emit("probe", ptg.NAME, what, status="pass" if v.ok else "fail", message=v.message[:300],
                 case=case.to_json())
        except Exception as e:
            emit("probe", ptg.NAME, what, status="error", message=f"{type(e).__name__}: {e}"[:300])

    for v2, tag in ((None, "v2"), (False, "v1")):
        variant = ptg.VARIANT[tag]
        quant_probe(f"{tag} NaN inputs", q(variant=variant, layout="col_tma"), "nonfinite", 0, v2)
        quant_probe(f"{tag} scale_ue8m0 with a row-major fp32 output", q(variant=variant), "normal", 0, v2, True)
        quant_probe(f"{tag} K14 edge (fp32 amax/448 one ulp above 2^k)",
                    q(variant=variant, input_dtype="fp32" if tag == "v1" else "bf16", num_tokens=4, hidden_size=512,
                      **ue), "pow2_edge", 0, v2)
        quant_probe(f"{tag} K15 edge (all-zero groups, ue8m0)", q(variant=variant, num_tokens=2, hidden_size=256, **ue),
                    "zero_group", 0, v2)
        quant_probe(f"{tag} tiny groups (ue8m0, amax < 4.5e-8)", q(variant=variant, num_tokens=4, hidden_size=512,
                                                                  **ue), "tiny", 0, v2)
    log.close()


def _short(c):
    if hasattr(c, "method"):
        s = f"{c.method} T={c.num_tokens} E={c.num_experts} k={c.top_k}"
        s += f" G={c.n_group}/{c.topk_group}" if c.n_group > 1 else ""
        s += f" rsf={c.routed_scaling_factor}" if c.routed_scaling_factor else ""
        s += f" S={c.num_fused_shared_experts}" if c.num_fused_shared_experts else ""
        return s + f" {c.logits_dtype}" + (f" bias {c.bias_dtype}" if c.bias_dtype else "")
    return f"T={c.num_tokens} H={c.hidden_size} g={c.group_size} {c.input_dtype} {c.scale_fmt} {c.layout}"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
