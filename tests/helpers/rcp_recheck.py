"""Offline re-check of the SGLang quantizer campaigns against the full MUFU.RCP table (issue 26; run on the committed
cases by tests/spec/test_sglang_quantizer_device_records.py).

The H200 runs recorded each case (config, distribution, seed: the inputs regenerate bit-identically) with its
verdict against the spec of that day: hopper_rcp exact for bf16 significands only (RN(1/x) elsewhere), and v1's
x·MUFU.RCP(s) taken as x·RN(1/s) (variant "mul_rcp_scale"). The kernel's output equals that old spec except, in a
failing case, at N codes, the first of which the message names with the kernel's value. For every case with
tokens this script computes the old spec and the current one (spec.hopper.hopper_rcp reading the whole table,
v1 as "mul_mufu_rcp_scale") and classifies it:
  pass, new == old                          -> still passes (the kernel's output is the new spec's)
  pass, new != old                          -> the new spec would now FAIL a case the kernel passed
  fail, new differs from old at exactly N codes, the named one first and equal to the kernel's value
                                            -> matches; bit-exact proven when N = 1 (the kernel differs from
                                               old at that code only), consistent (count and first code) when N > 1
  fail, anything else                       -> still differs
A fixture directory (case.json, inputs.npz, expected.npz: the kernel's whole output) is compared whole with the
current spec, as the tester compares (difftest.checking.compare.compare_quant).
usage: python tests/helpers/rcp_recheck.py CASES.jsonl.gz... FIXTURE_DIR...   (one JSON line per argument)
"""

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from difftest.model import generate  # noqa: E402
from difftest.model.case import Case  # noqa: E402
from spec import hopper, quant  # noqa: E402

MESSAGE = re.compile(r"^q\[(\d+), (\d+)\]=0x([0-9a-f]+) but spec=0x([0-9a-f]+): (\d+) of (\d+) differ")
NEW_V1 = "mul_mufu_rcp_scale"


def bf16_only_rcp(x):
    """The spec's hopper_rcp before the full table: the measured deviation where x is a bf16 value, RN elsewhere
    (the table agrees with the bf16 one there: tests/spec/test_quant.py)."""
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    rn = (np.float32(1) / x).view(np.int32)
    dev = np.where(bits & 0xFFFF == 0, hopper.mufu_rcp_ulps()[bits & 0x7FFFFF], 0)
    return (rn + dev).astype(np.int32).view(np.float32)


def spec_codes(c, x, old):
    variant = c.variant
    if old and variant == NEW_V1:
        variant = "mul_rcp_scale"  # what v1 was checked against on the H200
    if not old and variant == "mul_rcp_scale":
        variant = NEW_V1  # the campaigns' v1 cases carry the old variant name
    saved = quant.hopper_rcp
    if old:
        quant.hopper_rcp = bf16_only_rcp
    try:
        return quant.per_token_group_quant_fp8(x, c.group_size, variant=variant, scale_formula=c.scale_formula,
                                               scale_fmt=c.scale_fmt)
    finally:
        quant.hopper_rcp = saved


def classify(line):
    case = Case.from_dict(line["case"])
    c = case.config
    if c.num_tokens == 0 or line["status"] not in ("pass", "fail"):
        return "no tokens or skipped"
    x = generate.inputs(case)["x"]
    q_old, s_old = spec_codes(c, x, True)
    q_new, s_new = spec_codes(c, x, False)
    if not np.array_equal(s_old.view(np.uint32), s_new.view(np.uint32)):
        return "scales changed"  # the reciprocal never enters a scale: a bug here
    differ = np.argwhere(q_new != q_old)
    if line["status"] == "pass":
        return "pass, still passes" if differ.size == 0 else "pass, would now fail"
    m = MESSAGE.match(line["message"])
    if m is None:
        return "fail, not a code message"
    t, j, got, want, n = int(m[1]), int(m[2]), int(m[3], 16), int(m[4], 16), int(m[5])
    if q_old[t, j] != want:
        return "fail, old spec not reproduced"
    if len(differ) == n and tuple(differ[0]) == (t, j) and q_new[t, j] == got:
        return "fail, now bit-exact" if n == 1 else "fail, now matches count and first code"
    return "fail, still differs"


def _npz(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def check_fixture(path):
    """A fixture written on the H200: expected.npz is the spec of that day, observed.message the kernel's first
    differing code; the same test as a failing case line, on the stored inputs and the stored old spec."""
    d = json.loads((path / "case.json").read_text())
    case = Case.from_dict(d["case"])
    x = _npz(path / "inputs.npz")["x"]
    q_day = _npz(path / "expected.npz")["q"]
    q_new, _ = spec_codes(case.config, x, False)
    m = MESSAGE.match(d["observed"]["message"])
    t, j, got, n = int(m[1]), int(m[2]), int(m[3], 16), int(m[5])
    differ = np.argwhere(q_new != q_day)
    ok = len(differ) == n and tuple(differ[0]) == (t, j) and q_new[t, j] == got
    return {"fixture": path.name, "kernel_codes_differing": n, "new_spec_matches": bool(ok),
            "bit_exact_proven": bool(ok and n == 1)}


def main(paths):
    for path in map(Path, paths):
        if path.is_dir():
            print(json.dumps(check_fixture(path)), flush=True)
            continue
        counts = Counter()
        with gzip.open(path, "rt") as f:
            for text in f:
                counts[classify(json.loads(text))] += 1
        print(json.dumps({"file": str(path), **dict(sorted(counts.items()))}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
