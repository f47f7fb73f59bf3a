"""Do the H200's GEMMs round symmetrically? The bias test (difftest/checking/bias.py) assumes a correct
implementation's errors against the recipe-exact reference are symmetric; a tensor-core accumulator that truncates
(as the FP8 one does, spec.hopper) would push every output of a wide non-negative GEMM toward zero.

For K in KS, non-negative bf16 operands A [M, K], B [K, N] (|normal| rounded to bf16), and as a control signed ones:
  - bf16 out: torch.matmul in bf16 (cuBLAS, tensor cores, fp32 accumulate, one rounding to bf16) against the exact
    product (float64: each bf16 product exact, the sums within 2^-53 relative, far below an fp32 ulp) rounded to bf16
    (RNE);
  - fp32 out: the same bf16 operands multiplied as fp32 (torch default: no TF32, a SIMT/FFMA GEMM), and with TF32
    allowed, against the float64 product rounded to fp32.
Per configuration: elements that differ, how many moved toward zero / away, and the bias test's evidence ln M over
rows (rows as tokens). Usage: python3 spec/data/probes/gemm_bias.py > spec/data/gemm_bias.jsonl
"""

import json
import math

import torch

M, N = 64, 1024
KS = (128, 512, 2048, 7168)
RHO = 100.0
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke run of the script


def evidence(d):
    d = d[d != 0]
    s, v = float(d.sum()), float((d * d).sum())
    return s * s / (2 * (RHO + v)) - 0.5 * math.log1p(v / RHO)


def compare(got, exact, fmt):
    want = exact.to(fmt).double()
    got = got.double()
    differs = got != want
    toward = (differs & (got.abs() < want.abs())).sum().item()
    away = (differs & (got.abs() > want.abs())).sum().item()
    d = (torch.sign(got - want) * torch.sign(want) * differs).sum(dim=1).cpu().numpy()
    return {"elements": got.numel(), "differ": int(differs.sum().item()), "toward_zero": int(toward),
            "away_from_zero": int(away), "rows_toward": int((d < 0).sum()), "rows_away": int((d > 0).sum()),
            "ln_evidence_rows": round(evidence(d), 2)}


def main():
    g = torch.Generator(device=DEV).manual_seed(0)
    rows = []
    for K in KS:
        for sign in ("nonneg", "signed"):
            a = torch.randn(M, K, device=DEV, generator=g).to(torch.bfloat16)
            b = torch.randn(K, N, device=DEV, generator=g).to(torch.bfloat16)
            if sign == "nonneg":
                a, b = a.abs(), b.abs()
            exact = a.double() @ b.double()
            torch.backends.cuda.matmul.allow_tf32 = False
            out = {"bf16 matmul (cuBLAS, bf16 out)": compare(a @ b, exact, torch.bfloat16),
                   "fp32 matmul, no TF32 (fp32 out)": compare(a.float() @ b.float(), exact, torch.float32)}
            torch.backends.cuda.matmul.allow_tf32 = True
            out["fp32 matmul, TF32 allowed (fp32 out)"] = compare(a.float() @ b.float(), exact, torch.float32)
            torch.backends.cuda.matmul.allow_tf32 = False
            for name, r in out.items():
                rows.append({"K": K, "inputs": sign, "gemm": name, **r})
                print(json.dumps(rows[-1]), flush=True)
    device = torch.cuda.get_device_name() if DEV == "cuda" else "cpu"
    print(json.dumps({"device": device, "torch": torch.__version__, "M": M, "N": N}))


if __name__ == "__main__":
    main()
