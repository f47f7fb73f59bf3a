"""Pin the v1 UE8M0 scale formula (fixture sglang-per_token_group_quant_8bit_v1-ue8m0_exponent_plus_one): one
128-wide group per row, x[t, 0] = amax_t (the rest amax_t / 3), amax swept over binades 2^-40..2^15 at significands
1, 1 + 2^-23, 1.25, 1.5, 1.82, 2 - 2^-23, plus zero rows; v1 (enable_v2=False) and v2 on the same fp32 / bf16 input.
Prints one JSON line per row: amax, s = amax·fl(1/448), ceil(log2 s) (the spec's exponent), the stored exponent
byte − 127 and the code of x[t, 0] of each kernel.  usage: PYTHONPATH=<sgl_kernel>:. python3 this.py"""

import json
import math

import numpy as np
import torch

from impls.sglang import per_token_group_quant_8bit as ptg
from spec.quant import RCP448

SIGS = (1.0, 1 + 2.0**-23, 1.25, 1.5, 1.82, 2 - 2.0**-23)
amax = [0.0] + [math.ldexp(f, k) for k in range(-40, 16) for f in SIGS]
for dtype in (torch.float32, torch.bfloat16):
    a = torch.tensor(amax, dtype=torch.float32).to(dtype).float()
    x = (a[:, None] / 3).repeat(1, 128)
    x[:, 0] = a
    x = x.to(dtype).cuda().contiguous()
    rows = {}
    for kernel, v2 in (("v1", False), ("v2", True)):
        if kernel == "v2" and dtype == torch.float32:
            continue  # v2 is instantiated for bf16 / fp16 only
        q, view, base = ptg.per_token_group_quant_8bit(x, 128, "ue8m0_packed", True, enable_v2=v2)
        torch.cuda.synchronize()
        byte = ptg.logical_scales(view, 1, True)[:, 0]
        rows[kernel] = (q.view(torch.uint8)[:, 0].cpu().numpy(), byte)
    for t, v in enumerate(a.tolist()):
        s = np.float32(max(v, 1e-10)) * RCP448
        line = {"dtype": str(dtype).split(".")[-1], "amax": v, "s": float(s),
                "spec_e": int(math.ceil(math.log2(float(s))))}
        for kernel, (codes, scales) in rows.items():
            line[f"{kernel}_e"] = None if not scales[t] > 0 else int(round(math.log2(float(scales[t]))))
            line[f"{kernel}_code"] = f"{int(codes[t]):#04x}"
        print(json.dumps(line))
