"""The traced mechanism of fixture sglang-per_token_group_quant_8bit_v1-ue8m0_exponent_plus_one, checked offline
against every v1 UE8M0 case the H200 ran (issue 26; docs/sglang.md §8).

sgl-kernel 0.4.4's v1 kernel (per_token_group_quant_8bit.cu, built with -use_fast_math; SASS in docs/sglang.md):
    y_s = local_absmax / max_8bit;                                    // FMUL amax, MUFU.RCP(448)
    y_s = exp2f(ceilf(log2f(fmaxf(y_s, 1e-10f))));                    // FMNMX, MUFU.LG2, FRND.CEIL, MUFU.EX2
    y_s_quant = (uint8_t)(((int)log2f(y_s)) + 127);                   // MUFU.LG2, F2I.TRUNC, +127
    q = x / y_s                                                       // x·MUFU.RCP(y_s) = x·2^-e
Model of MUFU.LG2 used here (fitted to the recorded cases; mufu_lg2_probe.cu measures it): a positive log2
rounded to the nearest fp32, a negative one rounded toward +inf (toward zero), and an exact power of two 2^k < 1 the
fp32 value next above k. Then the stored byte trunc(log2f(2^e)) = e + 1 for every scale 2^e < 1 (e for 2^e >= 1);
ceil(log2f(s)) = k + 1 where s is itself a power of two 2^k < 1 (the codes use twice the scale); and where s > 1
lies within half an ulp of log2 above 2^k, ceil(log2f(s)) = k (K14's class: codes twice the spec's).
For every case line of the given v1 UE8M0 runs this builds the modelled kernel output (the tail bytes of the last
packed word left at the adapter's 0xA5 poison, fixture ..._ue8m0_tail_unwritten) and asks difftest.checking.compare
what it would have said: the verdict and message must equal the recorded ones.
usage: python tests/helpers/v1_ue8m0_model.py CASES.jsonl.gz...   (one JSON line per file)
"""

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from difftest.checking import impl_spec  # noqa: E402
from difftest.checking.compare import compare_quant  # noqa: E402
from difftest.model import generate  # noqa: E402
from difftest.model.case import Case  # noqa: E402
from spec import layouts  # noqa: E402
from spec.numerics import E4M3FN, encode  # noqa: E402
from spec.quant import FP8_MAX, RCP448  # noqa: E402

POISON = 0xA5
TAG = re.compile(r" \[[^\]]*\]$")
# The comparison of session 4 checked q, scales, scale_buffer in this order, named the first that differed and showed
# bits only; today's names every failing output (scales first) and shows each scale's value beside its bits.
SESSION_4_ORDER = ("q", "scales", "scale_buffer")
DECODED = re.compile(r" \([^()]*\)(?= but spec=|: \d+ of)")


def mufu_lg2(s):
    """The model of MUFU.LG2 (see the module docstring): log2(s) rounded to nearest where positive, up where
    negative, an exact power of two 2^k < 1 moved to the next fp32 value above k. float32 -> float32."""
    s = np.asarray(s, np.float32)
    exact = np.log2(s.astype(np.float64))
    log2 = exact.astype(np.float32)
    up = (exact < 0) & ((log2 < exact) | ((s.view(np.uint32) & 0x7FFFFF) == 0))
    return np.where(up, np.nextafter(log2, np.float32(np.inf)), log2)


def v1_ue8m0(x, group):
    """(q codes, stored e8m0 bytes) of the modelled v1 kernel."""
    g = x.reshape(x.shape[0], -1, group)
    amax = np.max(np.abs(g), axis=-1, initial=np.float32(1e-10))
    s = np.maximum(amax * RCP448, np.float32(1e-10))
    e = np.ceil(mufu_lg2(s))
    y_s = np.ldexp(np.float32(1), e.astype(np.int32)).astype(np.float32)
    byte = np.trunc(mufu_lg2(y_s)).astype(np.int32) + 127
    q = encode(np.clip(g * (np.float32(1) / y_s)[..., None], -FP8_MAX, FP8_MAX), E4M3FN)
    return q.reshape(x.shape), byte.astype(np.uint8)


def kernel_output(x, group):
    q, byte = v1_ue8m0(x, group)
    scales = np.ldexp(np.float32(1), byte.astype(np.int32) - 127).astype(np.float32)
    buf = layouts.ue8m0_packed(scales)
    words = layouts.view(buf).copy()  # [T, ceil(G/4)] int32 through the layout's strides
    padded = np.full((q.shape[0], words.shape[1] * 4), POISON, np.uint8)
    padded[:, :byte.shape[1]] = byte
    data = buf.data.copy()
    np.lib.stride_tricks.as_strided(data, words.shape, tuple(st * 4 for st in buf.strides))[:] = padded.view(np.int32)
    return {"q": q, "scales": scales, "scale_buffer": data.view(np.uint8)}


def predict(line):
    case = Case.from_dict(line["case"])
    if line["status"] not in ("pass", "fail"):
        return "not compared"
    if case.config.num_tokens == 0:
        return "no tokens, " + line["status"]
    inputs = generate.inputs(case)
    out = kernel_output(inputs["x"], case.config.group_size)
    v = compare_quant(case, inputs, out, None, "model")
    recorded = TAG.sub("", line["message"].split("\n")[0])
    if ("pass" if v.ok else "fail") != line["status"]:
        return "status differs"
    if not v.ok and TAG.sub("", as_session_4(case, inputs, out, v)) != recorded:
        return "message differs"
    return "reproduced, " + line["status"]


def as_session_4(case, inputs, out, v):
    """The failing verdict v's message as session 4's comparison wrote it: that of the first failing output in
    SESSION_4_ORDER (compared alone, the others the spec's), its decoded values left out."""
    failing = {f.field for f in v.failures}
    name = next(n for n in SESSION_4_ORDER if n in failing)
    spec = {k: a for k, a in impl_spec.quantize(case.config, inputs).items() if k != "layout"}
    return DECODED.sub("", compare_quant(case, inputs, {**spec, name: out[name]}, None, "model").message)


def main(paths):
    for path in paths:
        counts, first = Counter(), {}
        with gzip.open(path, "rt") as f:
            for text in f:
                line = json.loads(text)
                verdict = predict(line)
                counts[verdict] += 1
                if "differs" in verdict and verdict not in first:
                    first[verdict] = line
        print(json.dumps({"file": str(path), **dict(sorted(counts.items()))}), flush=True)
        for verdict, line in first.items():
            print(json.dumps({"first": verdict, "case": line["case"], "message": line["message"][:300]}))


if __name__ == "__main__":
    main(sys.argv[1:])
