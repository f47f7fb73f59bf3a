"""GPU probe for mono_moe's residual (H200, 2026-11-29): what the kernel wrote, and how Hopper FP8 WGMMA accumulates.

python spec/data/probes/probe_acc.py OUTDIR [N_MONO]. Writes
- mono_scratch.npz: for mono cases 0..N_MONO-1 (tests/helpers/h200_cases.py mono_case, weights seed 0), the
  kernel's scratchpad head after the call: temp_fp8 [72, 512] (e4m3 codes of the re-quantized intermediate,
  expert-sorted rows), both scale buffers [72, 8] (one is this launch's), and the bf16 output bits. Offsets from
  MoEGemmSpec (moe_internal.h, BS=8, N=512, K=2048): temp_fp8 16384, temp_act_scale 53248, temp_act_scale_alt
  121088.
- tc_blocks.npz: torch._scaled_mm (cuBLASLt FP8, unit scales, fp32 out) on one 128-wide K block at a time, A = the
  cases' quantized hidden codes, B = w13 codes of two experts, use_fast_accum True and False; plus K = 32, 64, 96.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "helpers"))
import h200_cases as cases  # noqa: E402

from impls.flashinfer import adapter  # noqa: E402
from spec.quant import quant_448_div_amax  # noqa: E402

TEMP_FP8, SCALE, SCALE_ALT, ROWS, N = 16384, 53248, 121088, 72, 512


def main(out, n_mono=300):
    out, t0 = Path(out), time.time()
    w13, s13, w2, s2 = cases.mono_weights(0)
    print("weights", round(time.time() - t0, 1), "s", flush=True)
    mm = adapter("mono_moe")
    weights = mm.prepare_weights(w13, s13, w2, s2, device="cuda")
    fp8, sc, sc_alt, outs, acts = [], [], [], [], []
    for seed in range(n_mono):
        cfg, h, z = cases.mono_case(seed)
        o = mm.mono_moe(torch.from_numpy(h).to("cuda", torch.bfloat16), torch.from_numpy(z).to("cuda", torch.bfloat16),
                        weights, top_k=cfg["top_k"], scoring_func=cfg["scoring"], renormalize=cfg["renormalize"])
        torch.cuda.synchronize()
        pad = mm.scratchpad(torch.device("cuda", torch.cuda.current_device())).cpu().numpy()
        fp8.append(pad[TEMP_FP8:TEMP_FP8 + ROWS * N].reshape(ROWS, N))
        sc.append(pad[SCALE:SCALE + ROWS * 8 * 4].view(np.float32).reshape(ROWS, 8))
        sc_alt.append(pad[SCALE_ALT:SCALE_ALT + ROWS * 8 * 4].view(np.float32).reshape(ROWS, 8))
        acts.append(pad[:TEMP_FP8].reshape(8, 2048))
        outs.append(np.pad(o.view(torch.int16).cpu().numpy().view(np.uint16), ((0, 8 - cfg["T"]), (0, 0))))
    np.savez_compressed(out / "mono_scratch.npz", temp_fp8=np.stack(fp8), scale=np.stack(sc),
                        scale_alt=np.stack(sc_alt), activations=np.stack(acts), out=np.stack(outs))
    print("mono", n_mono, "cases", round(time.time() - t0, 1), "s; scale rows published in case 0:",
          int(np.any(sc[0] != 0, axis=1).sum() + np.any(sc_alt[0] != 0, axis=1).sum()), flush=True)

    # A: quantized hidden codes of the first cases' tokens (64 rows); B: w13 rows of experts 0 and 1.
    rows = np.concatenate([cases.mono_case(s)[1] for s in range(40)])[:64]
    a_codes, a_scales = quant_448_div_amax(rows.astype(np.float32), 128)
    b_codes = w13[:2].reshape(-1, 2048)
    A = torch.from_numpy(a_codes).cuda().view(torch.float8_e4m3fn)
    B = torch.from_numpy(np.ascontiguousarray(b_codes)).cuda().view(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    res = dict(a_codes=a_codes, a_scales=a_scales)
    for fast in (True, False):
        blocks = [torch._scaled_mm(A[:, k:k + 128].contiguous(), B[:, k:k + 128].contiguous().t(), one, one,
                                   out_dtype=torch.float32, use_fast_accum=fast) for k in range(0, 2048, 128)]
        res[f"blocks_fast{int(fast)}"] = torch.stack(blocks).cpu().numpy()
        for kk in (32, 64, 96):
            res[f"k{kk}_fast{int(fast)}"] = torch._scaled_mm(A[:, :kk].contiguous(), B[:, :kk].contiguous().t(), one,
                                                             one, out_dtype=torch.float32,
                                                             use_fast_accum=fast).cpu().numpy()
        res[f"full_fast{int(fast)}"] = torch._scaled_mm(A, B.t(), one, one, out_dtype=torch.float32,
                                                        use_fast_accum=fast).cpu().numpy()
    # sparse codes: half zeros, a fifth subnormal, the rest over the whole exponent range (zero's exponent)
    rng = np.random.Generator(np.random.PCG64(7))
    raw = rng.bit_generator.random_raw((64 + 256) * 128).astype(np.uint64)
    kind = raw % np.uint64(10)
    code = np.where(kind < 5, 0, np.where(kind < 7, 1 + (raw >> np.uint64(8)) % np.uint64(7),
                                          8 + (raw >> np.uint64(8)) % np.uint64(118)))
    code = (code | (((raw >> np.uint64(20)) & np.uint64(1)) << np.uint64(7))).astype(np.uint8).reshape(-1, 128)
    sa, sb = torch.from_numpy(code[:64]).cuda(), torch.from_numpy(code[64:]).cuda()
    res["sparse_a"], res["sparse_b"] = code[:64], code[64:]
    res["sparse_fast1"] = torch._scaled_mm(sa.view(torch.float8_e4m3fn), sb.view(torch.float8_e4m3fn).t(), one, one,
                                           out_dtype=torch.float32, use_fast_accum=True).cpu().numpy()
    np.savez_compressed(out / "tc_blocks.npz", **res)
    print("tc probe", round(time.time() - t0, 1), "s", flush=True)
    (out / "probe_versions.json").write_text(json.dumps(dict(torch=torch.__version__, cuda=torch.version.cuda,
                                                             gpu=torch.cuda.get_device_name()), indent=1))


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
