"""Measure torch's sigmoid against the true σ(x) = 1/(1 + e^-x): the error model of Recipe.sigmoid "torch_cpu".

    python tools/measure_sigmoid.py --out DIR [--devices cpu,cuda] [--window 105] [--outside-stride 4096]
                                    [--scalar-stride 1] [--window-stride 1]

fp32: every float32 in [-window, window] (both signs, ±0 included) plus every outside-stride-th bit pattern beyond,
±inf; the true σ in float64 (torch float64 exp, relative error ~2^-52, far below an fp32 ulp). Outside ±105 the
correctly rounded fp32 σ is 0 (x < -150·ln 2 ≈ -103.97) or 1 (x > 17.33). Paths: "cpu_vector" (a contiguous CPU
tensor: ATen's vectorized kernel, which computes 1/(1 + exp(-x)) with its SIMD exp), "cpu_scalar" (a strided view:
ATen's scalar loop, std::exp, which also computes the tail of a contiguous tensor whose length is not a multiple of
the vector width), "cuda" (a contiguous CUDA tensor). fp16 and bf16: every value, against the float64 σ rounded once
to that format. Per path: the largest error in fp32 ulps of the true value and relative to it in units of u = 2^-24
(results ≥ the fp32 min normal), where the output is 0 (the underflow threshold and the largest true σ flushed),
the largest |error| below the min normal, the places where the output decreases as x increases (non-monotone), and
the widest run of consecutive x mapped to one output (in ulps of the true values: what merges distinct inputs into
one key, the issue-36 tie). Prints one JSON summary and writes it to DIR/sigmoid_<torch version>_<host>.json.
"""

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

U = 2.0**-24
MIN_NORMAL = 2.0**-126
CHUNK = 1 << 22


def _bits(v):
    return int(np.float32(v).view(np.uint32))


def ascending_chunks(window, outside_stride, stride, nonpositive=False):
    """uint32 bit patterns of float32 values in ascending order: (-inf, -window) every outside_stride-th pattern,
    [-window, window] every stride-th, (window, inf] every outside_stride-th (±inf always). nonpositive: [-window, 0]
    and below only (-inf included), the x − max a softmax exponentiates (tools/measure_exp.py)."""
    neg_inf, neg_w, pos_w, pos_inf = 0xFF800000, _bits(-window), _bits(0 if nonpositive else window), 0x7F800000
    segments = [
        (neg_inf, neg_w, -outside_stride),  # negative patterns: larger bits are more negative
        (neg_w, 0x80000000 - 1, -stride),
        (0x00000000, pos_w + 1, stride),
    ]
    if not nonpositive:
        segments.append((pos_w + outside_stride, pos_inf, outside_stride))
    for start, stop, step in segments:
        for a in range(start, stop, step * CHUNK):
            b = a + step * CHUNK
            b = max(b, stop) if step < 0 else min(b, stop)
            yield np.arange(a, b, step, dtype=np.int64).astype(np.uint32)
    if not nonpositive:
        yield np.array([pos_inf], np.uint32)


def ulp(v):
    """fp32 ulp at |v| (float64 tensor): 2^(e - 24) for v in [2^(e-1), 2^e), at least 2^-149."""
    _, e = torch.frexp(v.abs())
    return torch.ldexp(torch.ones_like(v), torch.clamp(e - 24, min=-149))


class Stats:
    """Running statistics of one path over chunks in ascending x; `what` names the function in the summary."""

    def __init__(self, what="sigma"):
        self.what = what
        self.n = self.correctly_rounded = self.nonmonotone = 0
        self.max_ulp = self.max_rel_u = self.max_abs_subnormal = self.max_true_flushed = 0.0
        self.at_max_ulp = self.at_max_rel = None
        self.largest_zero_x = self.smallest_positive_x = None
        self.widest_run = (0.0, None)
        self.nonmonotone_examples = []
        self.carry = None  # (x, s, ref) of the first element of the run that ends the previous chunk

    def add(self, x, s, ref):
        self.n += len(x)
        self.correctly_rounded += int((s == ref.to(torch.float32).double()).sum())
        err = (s - ref).abs()
        flushed = (s == 0) & (ref > 0)  # the underflow, reported on its own
        ulps = torch.where(flushed, torch.zeros_like(err), err / ulp(ref))
        i = int(ulps.argmax())
        if ulps[i] > self.max_ulp:
            self.max_ulp, self.at_max_ulp = float(ulps[i]), (float(x[i]), float(s[i]), float(ref[i]))
        normal = ref >= MIN_NORMAL
        rel = torch.where(normal, err / (U * ref), torch.zeros_like(ref))
        i = int(rel.argmax())
        if rel[i] > self.max_rel_u:
            self.max_rel_u, self.at_max_rel = float(rel[i]), (float(x[i]), float(s[i]), float(ref[i]))
        sub = torch.where(normal, torch.zeros_like(err), err)
        self.max_abs_subnormal = max(self.max_abs_subnormal, float(sub.max()))
        zero = flushed
        if zero.any():
            self.max_true_flushed = max(self.max_true_flushed, float(ref[zero].max()))
            z = float(x[zero].max())
            self.largest_zero_x = z if self.largest_zero_x is None else max(self.largest_zero_x, z)
        positive = s > 0
        if positive.any() and self.smallest_positive_x is None:
            self.smallest_positive_x = float(x[positive].min())
        if self.carry is not None:
            x, s, ref = (torch.cat([torch.tensor([c], dtype=a.dtype, device=a.device), a])
                         for c, a in zip(self.carry, (x, s, ref), strict=True))
        down = torch.nonzero(s[1:] < s[:-1]).flatten()
        self.nonmonotone += len(down)
        for j in down[: 8 - len(self.nonmonotone_examples)].tolist():
            self.nonmonotone_examples.append([float(x[j]), float(x[j + 1]), float(s[j]), float(s[j + 1])])
        starts = torch.nonzero(torch.cat([torch.tensor([True], device=s.device), s[1:] != s[:-1]])).flatten()
        ends = torch.cat([starts[1:] - 1, torch.tensor([len(s) - 1], device=s.device)])
        span = (ref[ends] - ref[starts]) / ulp(s[starts])
        keep = s[starts] > 0  # runs at 0 and 1 (saturation) are flat in every correctly rounded σ too
        keep &= s[starts] < 1
        span = torch.where(keep, span, torch.zeros_like(span))
        j = int(span.argmax())
        if span[j] > self.widest_run[0]:
            self.widest_run = (float(span[j]), [float(x[starts[j]]), float(x[ends[j]]), int(ends[j] - starts[j] + 1),
                                                float(s[starts[j]])])
        last = int(starts[-1])
        self.carry = (float(x[last]), float(s[last]), float(ref[last]))

    def add_exact(self, count):
        """count more results inside a chunk whose two ends went through add: each equal to both ends and correctly
        rounded, their true values between the ends' in one binade (a constant run of a monotone function: the ends
        bear its largest errors, its run and its monotonicity are theirs), so only the counts change."""
        self.n += count
        self.correctly_rounded += count

    def summary(self):
        return {
            "values": self.n,
            "correctly_rounded_fraction": self.correctly_rounded / max(self.n, 1),
            "max_ulp_error_where_not_flushed": self.max_ulp,
            "at_max_ulp_error": dict(zip(("x", "torch", "true"), self.at_max_ulp or (), strict=False)),
            "max_relative_error_in_u_at_normal_results": self.max_rel_u,
            "at_max_relative_error": dict(zip(("x", "torch", "true"), self.at_max_rel or (), strict=False)),
            "max_abs_error_below_min_normal": self.max_abs_subnormal,
            "largest_x_flushed_to_zero": self.largest_zero_x,
            "smallest_x_with_positive_result": self.smallest_positive_x,
            f"largest_true_{self.what}_flushed_to_zero": self.max_true_flushed,
            "nonmonotone_steps": self.nonmonotone,
            "nonmonotone_examples_x0_x1_s0_s1": self.nonmonotone_examples,
            "widest_run_in_ulps_of_true_values": self.widest_run[0],
            "widest_run_x0_x1_count_value": self.widest_run[1],
        }


def evaluate(path, t):
    """torch's fp32 σ of the float32 tensor t (on the path's device) on one path, as float64."""
    if path == "cpu_scalar":
        return torch.sigmoid(torch.stack([t, t], dim=1)[:, 0]).double()  # stride 2: ATen's scalar loop
    return torch.sigmoid(t).double()


def measure_fp32(path, window, outside_stride, stride):
    """The statistics of one path; the cuda path computes the float64 reference and the statistics on the GPU."""
    stats = Stats()
    device = "cuda" if path == "cuda" else "cpu"
    for bits in ascending_chunks(window, outside_stride, stride):
        x = bits.view(np.float32)
        t = torch.from_numpy(x[~np.isnan(x)]).to(device)
        xd = t.double()
        stats.add(xd, evaluate(path, t), torch.sigmoid(xd))
    return stats.summary()


def measure_narrow(path, fmt):
    """Every value of fp16 / bf16 (ascending): torch's σ in that dtype against the float64 σ rounded once to it."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[fmt]
    bits = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(dtype)
    x = bits[~torch.isnan(bits)].double().unique()  # ascending, ±0 merged
    t = x.to(dtype)
    t = t.cuda() if path == "cuda" else t
    if path == "cpu_scalar":
        t = torch.stack([t, t], dim=1)[:, 0]
    s = torch.sigmoid(t).cpu().double()
    want = torch.sigmoid(x).to(dtype).double()
    ref = torch.sigmoid(x)
    wrong = s != want
    zero = (s == 0) & (want > 0)
    spacing = torch.where(want > 0, (want.to(dtype).view(torch.int16) + 1).view(dtype).double() - want,
                          torch.ones_like(want))
    return {
        "values": len(x),
        "differs_from_correctly_rounded": int(wrong.sum()),
        "max_error_in_ulps_of_correctly_rounded_where_not_flushed": float(
            torch.where(zero, 0.0, (s - want).abs() / spacing).max()),
        "largest_x_flushed_to_zero": float(x[zero].max()) if zero.any() else None,
        "largest_true_sigma_flushed_to_zero": float(ref[zero].max()) if zero.any() else None,
        "nonmonotone_steps": int((s[1:] < s[:-1]).sum()),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the JSON summary")
    p.add_argument("--devices", default="cpu,cuda", help="cpu and/or cuda (cuda skipped when unavailable)")
    p.add_argument("--window", type=float, default=105.0)
    p.add_argument("--outside-stride", type=int, default=4096)
    p.add_argument("--window-stride", type=int, default=1, help="every n-th fp32 in the window (1: all)")
    p.add_argument("--scalar-stride", type=int, default=1, help="the window stride of the cpu_scalar path")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    devices = a.devices.split(",")
    paths = [("cpu_vector", a.window_stride), ("cpu_scalar", a.scalar_stride)] if "cpu" in devices else []
    if "cuda" in devices and torch.cuda.is_available():
        paths.append(("cuda", a.window_stride))
    result = {"torch": torch.__version__, "numpy": np.__version__, "host": platform.node(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "window": a.window, "outside_stride": a.outside_stride, "paths": {}}
    for path, stride in paths:
        t0 = time.time()
        result["paths"][path] = {"fp32": {"window_stride": stride, **measure_fp32(path, a.window, a.outside_stride,
                                                                                   stride)},
                                 **{f: measure_narrow(path, f) for f in ("fp16", "bf16")},
                                 "seconds": round(time.time() - t0, 1)}
    text = json.dumps(result, indent=1)
    print(text)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sigmoid_{torch.__version__.replace('+', '_')}_{'_'.join(d for d, _ in paths)}.json").write_text(text)


if __name__ == "__main__":
    main()
