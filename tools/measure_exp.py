"""Measure torch's fp32 exp as a softmax uses it against the true e^x: the error model of bounds.TORCH_EXP_REL.

    python tools/measure_exp.py --out DIR [--devices cpu,cuda] [--window 104] [--outside-stride 4096]
                                [--window-stride 1] [--strided-stride 1] [--softmax-stride 1]

Inputs: every float32 x in [-window, 0] (a softmax exponentiates x − max ≤ 0; a correctly rounded exp is 0 from
x = -150·ln 2 ≈ -103.97 down, so -104 takes in the whole underflow edge) plus every outside-stride-th bit pattern
below -window and -inf; the true e^x in float64 (torch float64 exp, relative error ~2^-52). Paths:
* "cpu_exp": torch.exp of a contiguous CPU tensor (ATen's vml exp: MKL's vsExp in the x86 wheels);
  "cpu_exp_strided": of a strided view;
* "cpu_softmax": torch.softmax(dim=-1) of the rows [0, x] (ATen's vectorized lastdim softmax: Vectorized<float>::exp,
  Sleef's expf_u10 on AVX2 / AVX512, a row shorter than the vector a partial vector; then out = e·fl(1/Σ));
* "cuda_exp", "cuda_softmax": the same on a CUDA device.
The softmax's own exp e = exp(x) is recovered from the row's two outputs: out[0] = fl(1/S) and out[1] = fl(e·out[0])
("mul_rcp") or fl(e/S) ("div"), S = fl(1 + e) (exp(0) = 1); the formula is the one of the two that fits a probe of
2^16 x in [-17, 0]. Where out[0] is 1 or 1/2, S = 1/out[0] exactly and e = out[1]·S (x ≤ -16.64, and x near 0).
Elsewhere every fp32 e within 3 ulps of out[1]/out[0] is checked against both outputs in float64 (exact for + and
×; ÷ rounded twice is innocuous, 53 ≥ 2·24 + 2 bits). Where several fit (`ambiguous`), rows [0, x, y] with y near
ln(1 − e^x) are tried until one gives out[0] = 1/2, Σ = 2 exactly and out[1] = e/2 (`ambiguous_resolved`); an
unresolved one counts as the fit farthest from e^x. Where none fits (`inconsistent`) the value is left out. Rows of 32
(x ≤ -21, where Σ rounds to 1: full vectors and a tail) must give every x the exp of its 2-element row.
Per path, as tools/measure_sigmoid.py: the largest error in fp32 ulps of e^x and relative to it in units of u = 2^-24
(results ≥ the fp32 min normal), where the result is 0 (the underflow threshold), the largest |error| below the min
normal (also in min subnormals, 2^-149), non-monotone steps, the widest run of one result. Chunks of x near 0 whose
results and correctly rounded values are all exactly 1 (most fp32 in the window) pass their two ends through the
statistics and count the rest (Stats.add_exact). Prints one JSON summary and writes it to
DIR/exp_<torch version>_<paths>.json.
"""

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
from measure_sigmoid import Stats, ascending_chunks

MIN_SUBNORMAL = 2.0**-149
FORMULAS = ("mul_rcp", "div")
WIDE = 32  # row length of the wide-row check: two AVX512 vectors
WIDE_BELOW = -21.0  # 31·e^-21 < 2^-24: Σ of such a row rounds to 1


def _rows(t, *more):
    """[N, 2 + len(more)] rows [0, x, *more]: the max is 0, so the softmax exponentiates x − 0 = x exactly."""
    return torch.stack([torch.zeros_like(t), t, *more], dim=1)


def _fits(e, r, o, formula):
    """Whether a row [0, x] whose exp(x) is e (float64 holding an fp32; exp(0) = 1) gives the outputs r, o."""
    s = (1 + e).float().double()
    rr = (1 / s).float().double()
    return (rr == r) & ((e * rr if formula == "mul_rcp" else e / s).float().double() == o)


def recover(r, o, formula, ref):
    """(e [N] float64, fits [N] int): the fp32 e consistent with the row outputs r = out[0], o = out[1] (float64) under
    `formula`, the one farthest from ref where several fit (NaN where none does), and how many fit. Where r is 1 or
    1/2, S = 1/r exactly and e = o/r, the only fit."""
    base = (o / r).float().view(torch.int32)
    chosen = torch.full_like(r, float("nan"))
    dist = torch.full_like(r, -1.0)
    fits = torch.zeros_like(base)
    for k in range(-3, 4):
        bits = base + k
        e = bits.view(torch.float32).double()
        ok = (bits >= 0) & (bits < 0x7F800000) & _fits(e, r, o, formula)
        fits += ok
        d = torch.where(ok, (e - ref).abs(), torch.full_like(e, -1.0))
        chosen, dist = torch.where(d > dist, e, chosen), torch.maximum(d, dist)
    return chosen, fits


def resolve(t, ref, r, o, formula):
    """exp(x) [M] (float64; NaN where unresolved) of x = t where several e fit the row [0, x]: rows [0, x, y] for
    fp32 y near ln(1 − e^x) until one gives out[0] = 1/2, i.e. Σ = 2 exactly, so that out[1] = e/2 exactly; the e it
    gives must fit the row [0, x] too (else NaN)."""
    y0 = torch.log1p(-ref).float().view(torch.int32)
    e = torch.full_like(ref, float("nan"))
    for j in range(-8, 9):
        y = -(y0 + j).view(torch.float32).abs()  # ≤ 0, so the row's max stays 0
        out = torch.softmax(_rows(t, y), dim=-1).double()
        e = torch.where((out[:, 0] == 0.5) & torch.isnan(e), 2 * out[:, 1], e)
    return torch.where(_fits(e, r, o, formula), e, torch.full_like(e, float("nan")))


def probe_formula(device):
    """The formula whose recovery fits every x of a probe in [-17, 0] (fewest misfits), and the misfit counts."""
    x = torch.linspace(-17.0, 0.0, 1 << 16, dtype=torch.float32, device=device)
    out = torch.softmax(_rows(x), dim=-1).double()
    misfits = {f: int((recover(out[:, 0], out[:, 1], f, torch.exp(x.double()))[1] == 0).sum()) for f in FORMULAS}
    return min(FORMULAS, key=misfits.get), misfits


class Measured:
    """One measured path: evaluate(t float32 [N], its true exp) -> float64 [N] results, plus the path's counters."""

    def __init__(self, name, device, formula=None):
        self.name, self.device, self.formula = name, device, formula
        self.stats = Stats(what="exp")
        self.ones = self.ambiguous = self.resolved = self.inconsistent = self.wide_rows = self.wide_differ = 0

    def evaluate(self, t, ref):
        if self.name.endswith("_exp"):
            return torch.exp(t).double()
        if self.name.endswith("_strided"):
            return torch.exp(torch.stack([t, t], dim=1)[:, 0]).double()  # stride 2
        out = torch.softmax(_rows(t), dim=-1).double()
        r, o = out[:, 0], out[:, 1]
        e = o / r  # exact where r is 1 or 1/2 (recover)
        rest = torch.nonzero((r != 1) & (r != 0.5)).flatten()
        if len(rest):
            got, fits = recover(r[rest], o[rest], self.formula, ref[rest])
            several = torch.nonzero(fits > 1).flatten()
            self.ambiguous += len(several)
            if len(several):
                i = rest[several]
                sure = resolve(t[i], ref[i], r[i], o[i], self.formula)
                self.resolved += int((~torch.isnan(sure)).sum())
                got[several] = torch.where(torch.isnan(sure), got[several], sure)
            self.inconsistent += int((fits == 0).sum())
            e[rest] = got
        self.wide_check(t, e)
        return e

    def wide_check(self, t, e):
        """Rows [0, 31 x ≤ WIDE_BELOW]: Σ rounds to 1, so each output is that x's exp: the 2-element row's e."""
        low = t <= WIDE_BELOW
        xs, es = t[low], e[low]
        n = len(xs) // (WIDE - 1) * (WIDE - 1)
        if n == 0:
            return
        rows = torch.cat([torch.zeros(n // (WIDE - 1), 1, device=t.device), xs[:n].view(-1, WIDE - 1)], dim=1)
        got = torch.softmax(rows, dim=-1)[:, 1:].reshape(-1).double()
        self.wide_rows += n // (WIDE - 1)
        self.wide_differ += int((got != es[:n]).sum())

    def summary(self):
        s = self.stats.summary()
        s["max_error_in_min_subnormals_below_min_normal"] = s["max_abs_error_below_min_normal"] / MIN_SUBNORMAL
        s["values_near_0_all_exactly_1"] = self.ones
        if self.formula is not None:
            s.update(softmax_formula=self.formula, ambiguous=self.ambiguous, ambiguous_resolved=self.resolved,
                     inconsistent=self.inconsistent, wide_rows_of_32_checked=self.wide_rows,
                     wide_row_outputs_differing=self.wide_differ)
        return s


def measure(path, window, outside_stride, stride):
    for bits in ascending_chunks(window, outside_stride, stride, nonpositive=True):
        t = torch.from_numpy(bits.view(np.float32)).to(path.device)
        ref = torch.exp(t.double())
        e = path.evaluate(t, ref)
        if len(t) > 2 and bool((e == 1).all()) and bool((ref.float() == 1).all()):  # x near 0: the bulk of fp32
            ends = torch.tensor([0, len(t) - 1], device=t.device)
            path.stats.add(t.double()[ends], e[ends], ref[ends])
            path.stats.add_exact(len(t) - 2)
            path.ones += len(t)
            continue
        keep = ~torch.isnan(e)  # a softmax output no e fits (counted as inconsistent)
        path.stats.add(t.double()[keep], e[keep], ref[keep])
    return path.summary()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the JSON summary")
    p.add_argument("--devices", default="cpu,cuda", help="cpu and/or cuda (cuda skipped when unavailable)")
    p.add_argument("--window", type=float, default=104.0)
    p.add_argument("--outside-stride", type=int, default=4096)
    p.add_argument("--window-stride", type=int, default=1, help="every n-th fp32 in the window (1: all)")
    p.add_argument("--strided-stride", type=int, default=1, help="the window stride of cpu_exp_strided")
    p.add_argument("--softmax-stride", type=int, default=1, help="the window stride of the softmax paths")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    devices = a.devices.split(",")
    plan = []
    if "cpu" in devices:
        plan += [("cpu_exp", "cpu", a.window_stride), ("cpu_exp_strided", "cpu", a.strided_stride),
                 ("cpu_softmax", "cpu", a.softmax_stride)]
    if "cuda" in devices and torch.cuda.is_available():
        plan += [("cuda_exp", "cuda", a.window_stride), ("cuda_softmax", "cuda", a.softmax_stride)]
    result = {"torch": torch.__version__, "numpy": np.__version__, "host": platform.node(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "window": a.window, "outside_stride": a.outside_stride, "paths": {}}
    for name, device, stride in plan:
        t0 = time.time()
        formula, misfits = probe_formula(device) if name.endswith("softmax") else (None, None)
        path = Measured(name, device, formula)
        entry = {"window_stride": stride, **measure(path, a.window, a.outside_stride, stride)}
        if misfits is not None:
            entry["probe_misfits_per_formula"] = misfits
        result["paths"][name] = {"fp32": entry, "seconds": round(time.time() - t0, 1)}
        print(name, json.dumps(result["paths"][name]), flush=True)
    text = json.dumps(result, indent=1)
    print(text)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"exp_{torch.__version__.replace('+', '_')}_{'_'.join(n for n, _, _ in plan)}.json").write_text(text)


if __name__ == "__main__":
    main()
