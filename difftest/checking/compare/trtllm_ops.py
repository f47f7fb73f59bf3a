"""The trtllm_ops op, trtllm-gen's dev kernels: permute and convertsf bit-exact, the activations and finalize by the
rounding rule around the exact value, the DeepSeek FP8 requantizations by the interval rule."""

import numpy as np

from spec import bounds, trtllm_ops
from spec.numerics import E4M3FN, FP32, as_format, round_to

from .. import impl_spec
from .contract import contract_violation
from .verdict import PASS, Failure, _bit_exact, elementwise, failed, fmt_index, worst

U32 = FP32.unit_roundoff

def stored_bound(v, delta, dtype):
    """(the spec's stored value, its hard bound) for an output stored once (RNE; e4m3 saturating) from a value
    within delta of the exact v: the rounding rule."""
    fmt = {"e4m3": E4M3FN}.get(dtype, dtype)
    want = round_to(v, fmt, saturate=True).astype(np.float64)
    return want, bounds.rounded(v, want, bounds.Err(delta, delta, delta), fmt).hard


def _stored(name, got, v, delta, dtype, tag):
    """An output stored once from a value within delta of the exact v, by the rounding rule (stored_bound)."""
    want, hard = stored_bound(v, delta, dtype)
    return elementwise(name, impl_spec.dev_values(got, dtype), want, hard, tag, "out")


def _zero_rows(name, got, rows, tag):
    """Rows no (t, k) maps to are not written: they stay the zeros the adapters allocate."""
    got = np.asarray(got)
    v = _bit_exact(f"{name} (unmapped rows)", got[~rows], np.zeros_like(got[~rows]), tag, name)
    return v if v.ok else v._replace(failures=(Failure(name, "unwritten"),))


def _interval(name, got, lo, hi, tag, field=None):
    """lo <= got <= hi everywhere (one message naming the first element outside). A NaN is outside."""
    bad = np.argwhere(~((lo <= got) & (got <= hi)))
    if not bad.size:
        return PASS
    at = tuple(bad[0])
    return failed(field or name, "nan" if np.isnan(got[at]) else "bound",
                  f"{name}{fmt_index(at)}={got[at]:.9g} outside [{lo[at]:.9g}, {hi[at]:.9g}], what the allowance "
                  f"reaches ({len(bad)} of {got.size}) [{tag}]")


def deepseek_fp8_scales(y, delta, floor=FP32.min_normal):
    """(lo, hi) float64 [I/128, P]: amax within [max(|y| - δ), max(|y| + δ)] per 128-column block gives the scales
    deepseek_scale can reach (lo 0: a scale below the min normal, which FTZ may flush to 0)."""
    P, I = y.shape
    a, d = np.abs(y).reshape(P, I // 128, 128), delta.reshape(P, I // 128, 128)
    s_lo = trtllm_ops.deepseek_scale(np.max(np.maximum(a - d, 0), axis=-1), floor).T.astype(np.float64)
    s_hi = trtllm_ops.deepseek_scale(np.max(a + d, axis=-1), floor).T.astype(np.float64)
    return np.where(s_lo < FP32.min_normal, 0.0, s_lo), s_hi


def deepseek_fp8_values(y, delta, s, dtype="e4m3"):
    """(lo, hi) float64 [P, I]: with scales s [I/128, P] (> 0), y'·rcp(s) within (y ± δ)·(1/s)·(1 ± ε) (ε: MUFU.RCP
    and the fp32 product) gives, by monotone rounding, the values a requantization can store."""
    fmt = as_format(impl_spec.DEV_FORMATS[dtype])
    s_el = np.repeat(np.asarray(s, np.float64).T, 128, axis=1)
    eps = bounds.MUFU_RCP_REL + 2 * U32
    ends = [(y + sign * delta) / np.where(s_el > 0, s_el, 1.0) * (1 + e) for sign in (-1, 1) for e in (-eps, eps)]
    lo = round_to(np.minimum.reduce(ends), fmt, saturate=True).astype(np.float64)
    return lo, round_to(np.maximum.reduce(ends), fmt, saturate=True).astype(np.float64)


def _requant_deepseek_fp8(out, y, delta, rows, tag, floor=FP32.min_normal, dtype="e4m3"):
    """Scales and stored values by the interval rule (deepseek_fp8_scales, then deepseek_fp8_values at the
    implementation's own scale s). A block with s = 0 (floor 0) stores y'·inf: NaN, ±inf or ±max; where the interval
    does not reach 0 (the floor), every scale it allows stores a number, so a NaN stored with a zero scale fails too
    (both outputs are named: the scale and the NaN it made)."""
    fmt = as_format(impl_spec.DEV_FORMATS[dtype])
    s_lo, s_hi = deepseek_fp8_scales(y, delta, floor)
    s = np.asarray(out["out_scale"], np.float64)
    if s.shape != s_lo.shape:
        return failed("out_scale", "shape", f"out_scale has shape {s.shape} but spec has {s_lo.shape} [{tag}]")
    v_scale = _interval("out_scale", np.where(rows.T, s, 0), np.where(rows.T, s_lo, 0), np.where(rows.T, s_hi, 0),
                        tag)
    got = impl_spec.dev_values(out["out"], dtype)
    if got.shape != y.shape:
        return worst(v_scale, failed("out", "shape", f"out has shape {got.shape} but spec has {y.shape} [{tag}]"))
    lo, hi = deepseek_fp8_values(y, delta, s, dtype)
    r, zero = rows[:, None], np.repeat(s.T, 128, axis=1) == 0
    with np.errstate(invalid="ignore"):
        special = np.isnan(got) | (np.abs(got) >= fmt.max)
    verdicts = [v_scale]
    bad = np.argwhere(r & zero & ~special)
    if bad.size:
        at = tuple(bad[0])
        verdicts.append(failed("out", "bound", f"out{fmt_index(at)}={got[at]:.9g} in a block whose scale is 0: "
                                               f"y·rcp(0) is NaN, ±inf or ±max [{tag}]"))
    floored = np.repeat((s_lo > 0).T, 128, axis=1)  # blocks whose allowed scales exclude 0
    bad = np.argwhere(r & zero & floored & np.isnan(got))
    if bad.size:
        at = tuple(bad[0])
        least = s_lo.T[at[0], at[1] // 128]
        verdicts.append(failed("out", "nan", f"out{fmt_index(at)}=nan for y={y[at]:.9g} in a block stored with scale "
                                             f"0, where every allowed scale (>= {least:.9g}) stores a number "
                                             f"({len(bad)} NaN of {got.size}) [{tag}]"))
    keep = r & ~zero
    return worst(*verdicts, _interval(f"out ({dtype} value)", np.where(keep, got, 0), np.where(keep, lo, 0),
                                      np.where(keep, hi, 0), tag, "out"),
                 _zero_rows("out", out["out"], rows, tag), _zero_rows("out_scale", np.asarray(s).T, rows, tag))


def dev_allowance(c, inputs):
    """(v, δ, rows) of a rounding trtllm_ops kernel: the exact value it stores or requantizes, the allowance δ
    around it, and the rows it writes (finalize: every token; the activations: the mapped permuted rows)."""
    if c.kernel in ("finalize", "finalize_deepseek_fp8"):
        e2p, w = inputs["expanded_idx_to_permuted_idx"], inputs.get("expert_weights")
        x = impl_spec.dev_values(inputs["gemm2_out"], c.dtype)
        if c.kernel == "finalize_deepseek_fp8":
            scale = inputs["gemm2_out_scale"]
            v = trtllm_ops.finalize_deepseek_fp8(x, scale, e2p, w)
            terms = trtllm_ops.finalize_deepseek_fp8(np.abs(x), scale, e2p, np.abs(w))
        else:
            v = trtllm_ops.finalize(x, e2p, w, c.hidden_size)
            terms = trtllm_ops.finalize(np.abs(x), e2p, None if w is None else np.abs(w), c.hidden_size)
        return v, bounds.fp32_accumulation(terms, c.top_k), np.ones(v.shape[0], bool)
    x, controls = impl_spec.activation_args(c, inputs)
    y, half = trtllm_ops.gated_activation(x, **controls), x.shape[1] // 2
    delta = bounds.gated_activation(x[:, half:], x[:, :half], y, controls.get("alpha", 1.0), controls.get("beta", 0.0))
    return y, delta, impl_spec.mapped_rows(inputs, x.shape[0])


def compare_trtllm_ops(case, inputs, out, recipe, tag):
    """permute, convertsf: bit-exact. activation: the rounding rule around the exact y with
    bounds.gated_activation's fp32 MUFU allowance, unmapped rows 0; DeepSeek FP8: scales and codes by the
    interval rule (_requant_deepseek_fp8). finalize: the rounding rule around the exact Σ_k w·x with
    bounds.fp32_accumulation (any fp32 order: the small-batch k-split and the in-order kernels alike);
    finalize_deepseek_fp8: that sum's δ through the interval rule of its unfloored requantization."""
    c = case.config
    want = impl_spec.dev_kernel(c, inputs)
    broken = contract_violation(case, out, tag=tag, expected=want)  # before a wrong shape can break the arithmetic
    if broken is not None:
        return broken
    if c.kernel in ("permute", "convertsf"):
        return worst(*(_bit_exact(name, out[name], want[name], tag) for name in want))
    v, delta, rows = dev_allowance(c, inputs)
    if c.kernel == "finalize_deepseek_fp8":
        return _requant_deepseek_fp8(out, v, delta, rows, tag, dtype=c.dtype)
    if c.kernel == "finalize":
        return _stored("out", out["out"], v, delta, c.dtype, tag)
    if c.kernel == "activation_deepseek_fp8":
        return _requant_deepseek_fp8(out, v, delta, rows, tag)
    r = rows[:, None]
    got = np.asarray(out["out"])
    return worst(_stored("out", np.where(r, got, 0), np.where(r, v, 0), np.where(r, delta, 0), c.dtype, tag),
                 _zero_rows("out", got, rows, tag))
