"""First GPU run of the trtllm-gen dev kernels: each case once, on small random inputs, against the documented math.

python campaigns/trtllm_gen_dev_ops_smoke.py OUTDIR [--case NAME]

Needs DIFFTEST_TRTLLM_GEN_PREBUILT (a folder holding difftest_trtllm_gen_dev_kernels_sm90a.so; without it the
library is built, about a minute) and FLASHINFER_CUBIN_DIR (the trtllmGen_bmm_export headers). Every case runs in
its own process, so a launch error or a fault in one kernel does not hide the others: one line per case, then
OUTDIR/summary.json and OUTDIR/<case>.npz (inputs and outputs; e4m3 as uint8 codes, bf16/fp16 as float32).

The references are plain torch, written from docs/trtllm_gen_dev_kernels.md: "max_abs_err" compares with the
formula evaluated in float64 (float32 where the kernel's rounding is the point); "ordered_mismatch" counts outputs
that differ from the documented fp32 summation order (fused multiply-adds emulated in float64); for the DeepSeek
FP8 cases "code_mismatch" counts e4m3 codes that differ from e4m3(y / scale) with a correctly rounded division.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from impls.flashinfer import _trtllm_gen_ops as ops  # noqa: E402

BF16, FP16, FP8, F32, F64, I32 = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float32,
                                  torch.float64, torch.int32)
DEV = "cuda"
FLT_MIN = torch.finfo(F32).tiny


def routing(num_tokens, top_k, num_experts, num_local, tile, seed):
    """Distinct experts per token; experts >= num_local are not local (-1). Permuted rows grouped by expert in
    expanded order, each expert padded to a multiple of tile. Returns (idx [T, K] int32, P, tile map, experts)."""
    g = torch.Generator().manual_seed(seed)
    experts = torch.stack([torch.randperm(num_experts, generator=g)[:top_k] for _ in range(num_tokens)])
    idx = torch.full((num_tokens, top_k), -1, dtype=I32)
    tile_map, row = [], 0
    for e in range(num_local):
        t, k = torch.nonzero(experts == e, as_tuple=True)
        idx[t, k] = row + torch.arange(len(t), dtype=I32)
        tiles = -(-len(t) // tile)
        tile_map += [e] * tiles
        row += tiles * tile
    return idx.to(DEV), max(row, tile), torch.tensor(tile_map or [0], dtype=I32, device=DEV), experts


def rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype).to(DEV)


def fma32(a, b, c):
    """fl32(a * b + c) for float32 tensors: the product is exact in float64."""
    return (a.to(F64) * b.to(F64) + c.to(F64)).to(F32)


def np_of(t):
    if t is None:
        return np.zeros(0)
    t = t.detach().cpu()
    if t.dtype == FP8:
        return t.view(torch.uint8).numpy()
    return t.float().numpy() if t.dtype in (BF16, FP16) else t.numpy()


def err(a, b, mask=None):
    d = (a.to(F64) - b.to(F64)).abs()
    d = d[mask] if mask is not None else d
    return float(d.max()) if d.numel() else 0.0


def mapped_rows(idx, rows):
    m = torch.zeros(rows, dtype=torch.bool, device=DEV)
    m[idx[idx >= 0].long()] = True
    return m


# --- cases --------------------------------------------------------------------------------------------------


def case_permute(dtype, with_scale):
    T, K, H = 7, 4, 256
    idx, P, _, _ = routing(T, K, 8, 8, 8, seed=1)
    x = rand((T, H), dtype, 2)
    s = rand((H // 128, T), F32, 3).abs() + 0.1 if with_scale else None
    got = ops.permute(x, idx, P, s)
    out, out_s = got if with_scale else (got, None)
    ref = torch.zeros_like(out.view(torch.uint8))  # bytes: index_put on float8 is not everywhere
    tt = torch.arange(T, device=DEV)[:, None].expand(T, K)
    ref[idx.long().flatten()] = x.view(torch.uint8)[tt.flatten()]
    ref = ref.view(dtype)
    res = {"max_abs_err": err(out.float(), ref.float()),
           "bit_mismatch": int((out.view(torch.uint8) != ref.view(torch.uint8)).sum())}
    if with_scale:
        ref_s = torch.zeros_like(out_s)
        ref_s[:, idx.long().flatten()] = s[:, tt.flatten()]
        res["scale_max_abs_err"] = err(out_s, ref_s)
    return res, dict(x=x, s=s, idx=idx, out=out, out_scale=out_s)


def swiglu_ref(u, g, alpha=None, beta=None, limit=None):
    """silu(g) * u, or g' sigmoid(alpha g') (u' + beta) with the clamps; float64."""
    u, g = u.to(F64), g.to(F64)
    if limit is not None:
        g = torch.minimum(g, limit)
        u = torch.clamp(u, -limit, limit)
    a = 1.0 if alpha is None else alpha
    b = 0.0 if beta is None else beta
    return g * torch.sigmoid(a * g) * (u + b)


def controls(idx, P, tile_map, tile, num_local, enabled):
    if not enabled:
        return {}, (None, None, None)
    alpha = rand((num_local,), F32, 11).abs() + 0.5
    beta = rand((num_local,), F32, 12, 0.5)
    limit = rand((num_local,), F32, 13).abs() + 1.0
    e = tile_map.long()[torch.arange(P, device=DEV) // tile]
    per_row = (alpha[e][:, None].to(F64), beta[e][:, None].to(F64), limit[e][:, None].to(F64))
    kw = dict(alpha=alpha, beta=beta, clamp_limit=limit, cta_idx_xy_to_batch_idx=tile_map, tile_tokens_dim=tile)
    return kw, per_row


def case_activation(dtype, swiglu):
    T, K, I, tile, E_local = 7, 4, 256, 8, 6
    idx, P, tile_map, _ = routing(T, K, 8, E_local, tile, seed=4)
    x = rand((P, 2 * I), dtype, 5, 2.0)
    kw, (a, b, lim) = controls(idx, P, tile_map, tile, E_local, swiglu)
    out = ops.activation(x, idx, **kw)
    y = swiglu_ref(x[:, :I], x[:, I:], a, b, lim)
    m = mapped_rows(idx, P)
    res = {"max_abs_err": err(out.float(), y.to(dtype).float(), m),
           "max_abs_err_vs_exact": err(out.float(), y, m),
           "unmapped_nonzero": int((out[~m] != 0).sum())}
    return res, dict(x=x, idx=idx, out=out, tile_map=tile_map, **{k: v for k, v in kw.items() if torch.is_tensor(v)})


def case_activation_deepseek(swiglu):
    T, K, I, tile, E_local = 7, 4, 256, 8, 6
    idx, P, tile_map, _ = routing(T, K, 8, E_local, tile, seed=6)
    q = rand((P, 2 * I), F32, 7, 100.0).clamp(-448, 448).to(FP8)
    s = rand((2 * I // 128, P), F32, 8).abs() * 0.01 + 1e-3
    kw, (a, b, lim) = controls(idx, P, tile_map, tile, E_local, swiglu)
    out, out_s = ops.activation_deepseek_fp8(q, s, idx, **kw)
    deq = q.to(F32) * s.t().repeat_interleave(128, dim=1)  # [P, 2I]; fp32 multiply as the kernel
    y = swiglu_ref(deq[:, :I], deq[:, I:], a, b, lim).to(F32)
    amax = y.abs().view(P, I // 128, 128).amax(-1).t()  # [I/128, P]
    scale = torch.clamp(amax * torch.tensor(1 / 448, dtype=F32), min=FLT_MIN)
    codes = (y / scale.t().repeat_interleave(128, dim=1)).to(FP8)
    m = mapped_rows(idx, P)
    got = out.to(F32) * out_s.t().repeat_interleave(128, dim=1)
    res = {"max_abs_err": err(got, y.to(F64), m),
           "scale_max_rel_err": float(((out_s - scale).abs() / scale)[:, m].max()),
           "code_mismatch": int((out.view(torch.uint8) != codes.view(torch.uint8))[m].sum()),
           "unmapped_nonzero": int((out.view(torch.uint8)[~m] != 0).sum())}
    return res, dict(q=q, s=s, idx=idx, out=out, out_scale=out_s, ref_codes=codes, ref_scale=scale)


def case_convertsf(layout):
    T, hds = 37, 32
    lin = torch.randint(0, 256, (T, hds), generator=torch.Generator().manual_seed(9), dtype=torch.uint8).to(DEV)
    sw = ops.sf_from_linear(lin, layout)
    out = ops.convertsf(sw, T, hds, layout)
    return {"max_abs_err": err(out.float(), lin.float()), "mismatch": int((out != lin).sum())}, \
        dict(linear=lin, swizzled=sw, out=out)


def ordered_finalize(x, x2, w, idx, hidden, variant, k_split):
    """The documented summation order in fp32, fused multiply-adds emulated; [T, hidden] float32."""
    T, K = idx.shape
    rows = x[:, :hidden].float() if x2 is None else (x[:, :hidden].float() + x2[:, :hidden].float())
    w = torch.ones(T, K, device=DEV) if w is None else w.float()

    def term(k, acc):
        p = idx[:, k].long()
        mask = (p >= 0)[:, None]
        return torch.where(mask, fma32(w[:, k:k + 1], rows[p.clamp(min=0)], acc), acc)

    zero = torch.zeros(T, hidden, device=DEV)
    if variant != "small_batch":
        acc = zero
        for k in range(K):
            acc = term(k, acc)
        return acc
    total = None
    for grp in range(k_split):
        acc = zero
        for k in range(grp, K, k_split):
            acc = term(k, acc)
        total = acc if total is None else (total + acc)
    return total


def case_finalize(T, K, dtype, w_dtype, hidden_padded, hidden, second_input=False, seed=20):
    idx, P, _, _ = routing(T, K, 16, 12, 8, seed=seed)
    x = rand((P, hidden_padded), dtype, seed + 1)
    x2 = rand((P, hidden_padded), dtype, seed + 2) if second_input else None
    w = rand((T, K), w_dtype, seed + 3, 0.3) if w_dtype is not None else None
    out = ops.finalize(x, idx, w, hidden=hidden, gemm2_out2=x2)
    variant, k_split = ops.finalize_variant(T, hidden, hidden_padded, K, dtype)
    p = idx.long()
    rows = x[:, :hidden].to(F64) if x2 is None else (x[:, :hidden].float() + x2[:, :hidden].float()).to(F64)
    ww = torch.ones(T, K, device=DEV, dtype=F64) if w is None else w.to(F64)
    exact = (torch.where((p >= 0)[..., None], ww[..., None] * rows[p.clamp(min=0)], 0)).sum(1)
    ordered = ordered_finalize(x, x2, w, idx, hidden, variant, k_split).to(dtype)
    res = {"variant": f"{variant}/{k_split}", "max_abs_err": err(out.float(), exact.to(dtype).float()),
           "max_abs_err_vs_exact": err(out.float(), exact),
           "ordered_mismatch": int((out.view(torch.uint8) != ordered.view(torch.uint8)).sum())}
    return res, dict(x=x, x2=x2, w=w, idx=idx, out=out, ordered=ordered)


def case_finalize_deepseek(dtype, quantize, zero_token=False):
    T, K, H = 6, 8, 256
    idx, P, _, _ = routing(T, K, 16, 12, 8, seed=30)
    x = rand((P, H), F32, 31, 50.0).clamp(-448, 448).to(dtype)
    s = rand((H // 128, P), F32, 32).abs() * 0.01 + 1e-3 if dtype == FP8 else None
    w = rand((T, K), BF16, 33, 0.3)
    if zero_token:
        w[0] = 0
    got = ops.finalize_deepseek_fp8(x, w, idx, s, quantize_output=quantize)
    out, out_s = got if quantize else (got, None)
    p = idx.long()
    blk = torch.ones(P, H, device=DEV) if s is None else s.t().repeat_interleave(128, dim=1)
    acc = torch.zeros(T, H, device=DEV)
    xf = x.float()
    for k in range(K):
        ok = (p[:, k] >= 0)[:, None]
        r = p[:, k].clamp(min=0)
        scale = (w[:, k:k + 1].float() * blk[r])  # fl32(w * s) first
        acc = torch.where(ok, fma32(scale, xf[r], acc), acc)
    res = {}
    if quantize:
        amax = acc.abs().view(T, H // 128, 128).amax(-1).t()
        scale = amax * torch.tensor(1 / 448, dtype=F32)
        codes = (acc / scale.t().repeat_interleave(128, dim=1)).to(dtype)
        deq = out.float() * out_s.t().repeat_interleave(128, dim=1)
        live = amax.t().repeat_interleave(128, dim=1) > 0
        res.update(max_abs_err=err(deq, acc, live), scale_max_abs_err=err(out_s, scale),
                   code_mismatch=int((out.view(torch.uint8) != codes.view(torch.uint8))[live].sum()),
                   zero_block_nan=int(torch.isnan(out.float())[~live].sum()), zero_blocks=int((~live).sum()) // 128)
    else:
        res.update(max_abs_err=err(out.float(), acc.to(dtype).float()),
                   bit_mismatch=int((out.view(torch.uint8) != acc.to(dtype).view(torch.uint8)).sum()))
    return res, dict(x=x, s=s, w=w, idx=idx, out=out, out_scale=out_s, acc=acc)


CASES = {
    "permute_bf16": lambda: case_permute(BF16, False),
    "permute_fp8_scales": lambda: case_permute(FP8, True),
    "activation_bf16": lambda: case_activation(BF16, False),
    "activation_fp16_swiglu": lambda: case_activation(FP16, True),
    "activation_deepseek_fp8": lambda: case_activation_deepseek(False),
    "activation_deepseek_fp8_swiglu": lambda: case_activation_deepseek(True),
    "convertsf_R128c4": lambda: case_convertsf("R128c4"),
    "convertsf_R8c4": lambda: case_convertsf("R8c4"),
    "convertsf_R8c16": lambda: case_convertsf("R8c16"),
    "finalize_scalar_k4": lambda: case_finalize(5, 4, BF16, BF16, 256, 256),
    "finalize_small_batch_k8": lambda: case_finalize(5, 8, BF16, BF16, 256, 256),
    "finalize_small_batch_k9_fp32w": lambda: case_finalize(5, 9, BF16, F32, 256, 256),
    "finalize_vec_load_k8": lambda: case_finalize(1200, 8, BF16, BF16, 256, 256),
    "finalize_unpadding_second_input": lambda: case_finalize(5, 8, BF16, BF16, 384, 200, second_input=True),
    "finalize_fp16_no_weights": lambda: case_finalize(5, 6, FP16, None, 256, 256),
    "finalize_deepseek_fp8": lambda: case_finalize_deepseek(FP8, True),
    "finalize_deepseek_fp8_zero_token": lambda: case_finalize_deepseek(FP8, True, zero_token=True),
    "finalize_deepseek_bf16_plain": lambda: case_finalize_deepseek(BF16, False),
}


def run_one(name, outdir):
    t = time.time()
    res, arrays = CASES[name]()
    torch.cuda.synchronize()
    np.savez(outdir / f"{name}.npz", **{k: np_of(v) for k, v in arrays.items()})
    res["seconds"] = round(time.time() - t, 3)
    print("RESULT " + json.dumps(res), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--case", choices=sorted(CASES))
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.case:
        return run_one(args.case, args.outdir)
    summary = {"device": torch.cuda.get_device_name(), "prebuilt": os.environ.get("DIFFTEST_TRTLLM_GEN_PREBUILT")}
    for name in CASES:
        proc = subprocess.run([sys.executable, __file__, str(args.outdir), "--case", name], capture_output=True,
                              text=True, timeout=300)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode == 0 and lines:
            summary[name] = json.loads(lines[-1][len("RESULT "):])
            print(f"{name:36s} ok     " + " ".join(f"{k}={v}" for k, v in summary[name].items()), flush=True)
        else:
            tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            summary[name] = {"failed": proc.returncode, "error": tail, "stderr": proc.stderr[-4000:]}
            print(f"{name:36s} FAILED rc={proc.returncode}: {tail}", flush=True)
    (args.outdir / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
