"""Derived error bounds: implementation vs recipe-exact (hard and probabilistic), recipe-exact vs ideal.

Error analysis: docs/semantics.md §6, docs/comparisons.md. Every stage of spec/layer.py carries an ``Err``
shadow next to its value: three element-wise bounds, propagated by the rules below in the order the data flows.

* ``hard``  |impl − spec| for any implementation that follows the recipe: same rounding points (RNE), any
  summation order, accumulation per ``gemm_acc``. A value above it is a bug.
* ``prob``  the same with the accumulation term γ_n replaced by λ·√n·u (Higham & Mary 2019, λ = 6): steers the
  search (hypothesis target), never fails a case alone.
* ``ideal`` |spec − ideal|: the recipe's own quantization and rounding errors, a-priori (u·|v| per rounding),
  so it also covers implementations that round at the same points with other formulas.

Rounding rule (the heart of the hard bound). If the spec stores r = R(v) and an implementation stores R(v')
with |v' − v| ≤ δ, monotonicity of RNE gives R(v') ∈ [R(v − δ), R(v + δ)], so |R(v') − r| ≤ max(R(v+δ) − r, r
− R(v−δ)): zero unless v lies within δ of a rounding midpoint, one ulp there, and more only when δ exceeds an
ulp. The same rule bounds FP8/FP4 re-quantization flips (one code × scale), with an interval for the scale
when the group's amax can move.

Flush-to-zero (Recipe.subnormals = "flush"). The implementation may store 0 instead of R(v') whenever its
exact value v' is below the format's min normal N (FTZ before rounding; FTZ after rounding flushes only when
|R(v')| < N, which by monotonicity of RNE (N representable) implies |v'| < N, so it is the same case). Some
v' ∈ [v − δ, v + δ] has |v'| < N iff |v| − δ < N; there the stored value may be 0, at distance |r| from the
spec's r. So hard = max(interval rule, |r|·[|v| − δ < N]) and likewise prob: no widening wherever |v| − δ ≥ N,
so the bound stays tight away from zero. A subnormal stored by the implementation and read back as 0 (DAZ) is
the same 0, already covered. Inputs of the layer are not stores: flushed_input adds |x| for 0 < |x| < N. A
reduction computed in flushing arithmetic (the combine's weighted terms and partial sums) may lose a result below N
at each operation: flushed_reduction adds N per operation. The spec's own values stay IEEE (gradual underflow);
only the bounds widen.
"""

import math
from typing import NamedTuple

import numpy as np

from . import routing
from .hopper import HOPPER_CHUNK
from .numerics import FP8_BLOCK, FP32, FP64, as_format, round_to

# tanh.approx.f32 (MUFU.TANH, what tanhf becomes under -use_fast_math): the largest relative error against the
# true tanh over every finite fp32 input is 1.11261e-5 = 2^-16.46, measured exhaustively on an H200 (sm_90a;
# spec/data/probes/tanh_exhaustive.cu, results in spec/data/tanh_exhaustive.json). The PTX ISA documents only
# 2^-11; another architecture's MUFU.TANH needs its own measurement before this bound applies to it.
TANH_APPROX_REL = 1.1127e-5

# MUFU.EX2 and MUFU.RCP (ex2.approx.ftz.f32 and rcp.approx.ftz.f32: what expf and a division become under
# -use_fast_math in the trtllm-gen dev kernels): the largest relative errors against the true 2^x and 1/x over every
# finite fp32 input whose result is an fp32 normal, measured exhaustively on an H200 (sm_90a;
# spec/data/probes/mufu_exhaustive.cu, results in spec/data/mufu_exhaustive.json): 1.45842e-7 = 2^-22.71 and
# 9.82917e-8 = 2^-23.28 (rcp: within ±1 ulp of the correctly rounded 1/x everywhere), rounded up here. The PTX ISA
# documents 2^-22 (ex2, max ulp 2) and 1 ulp (rcp); another architecture needs its own measurement.
MUFU_EX2_REL = 1.4585e-7
MUFU_RCP_REL = 9.83e-8

# torch's CPU sigmoid (Recipe.sigmoid "torch_cpu"): 1/(1 + exp(-x)) with ATen's SIMD exp (the scalar loop that
# computes a tensor's tail: std::exp), not correctly rounded. Over every fp32 in [-105, 105] (tools/measure_sigmoid.py,
# torch 2.13 CPU, AVX512; numbers and command in docs/semantics.md §1.8): |σ̃ − σ| ≤ 2.482·u·σ at every normal
# result (2.48 ulps at x = -16.636, σ = 5.96e-8), monotone, and σ̃ = 0 from x = -88.72284 down, where
# σ ≤ 2.94e-39 < 2^-127 (routing_underflow's flush allowance).
TORCH_CPU_SIGMOID_REL = 2.5  # in units of u = 2^-24, rounded up from the measured 2.4817
# torch's CUDA sigmoid (Recipe.sigmoid "torch_cuda"), the same measurement on an H200 (torch 2.11.0+cu130; every fp32
# in [-105, 105], benchmarks/sigmoid/sigmoid_2.11.0_cu130_cuda.json): ≤ 3.5312·u·σ at normal results (3.43 ulps),
# monotone, 0 from x = -88.72284 down as on the CPU.
TORCH_CUDA_SIGMOID_REL = 3.6
# torch's fp32 exp as a softmax uses it (Recipe.exp "rn": a correctly rounded exp, or torch's, on the CPU or CUDA):
# torch.exp and the exp inside torch.softmax over every fp32 in [-104, 0] (tools/measure_exp.py; benchmarks/exp/,
# docs/semantics.md §1.9): ≤ TORCH_EXP_REL·u·e^x at every normal result, and within TORCH_EXP_SUBNORMAL·2^-149 of e^x
# below the fp32 min normal (gradual underflow, 0 from x = -103.972 down as in a correctly rounded exp). CPU (torch
# 2.13, AVX512: MKL's vsExp, Sleef's expf_u10 in the softmax): 1.0604 and 1.3870·u, 0.5 and 0.7505·2^-149. CUDA (H200,
# torch 2.11.0+cu130): torch.exp 2.5578·u (1.93 ulps), the softmax's 3.9933·u (2.77 ulps; 400,455 of its values fit
# several exps and count at the farthest fit, so this is an upper estimate), 1.4010·2^-149 below the min normal. A
# correctly rounded exp is within 1·u and 0.5·2^-149; CUDA's expf is documented within 2 ulps (up to 4·u).
TORCH_EXP_REL = 4.0  # in units of u = 2^-24: the largest measured, CUDA's softmax 3.9933
TORCH_EXP_SUBNORMAL = 1.41  # in units of 2^-149: the largest measured, CUDA's 1.4010
LAMBDA = 6.0
U32, U64 = FP32.unit_roundoff, FP64.unit_roundoff
HOPPER_U = 2.0**-13  # Hopper FP8 tensor-core accumulator: ~13 fraction bits, truncating (DeepSeek-V3 §3.3.2)
HOPPER_BLOCK = FP8_BLOCK  # K elements per promotion to fp32: once per scale block
C_EVAL = 8  # transcendental evaluation in fp32 (expf, erff, tanhf, fast-math divide): within 8 ulps
# sup |f'| on the real line: silu' ≤ 1.0999 (x ≈ 2.40), gelu' ≤ 1.1290 (x ≈ 1.41), gelu_tanh' ≤ 1.1290.
LIPSCHITZ = {"silu": 1.1, "gelu": 1.13, "gelu_tanh": 1.13, "identity": 1.0}


class Err(NamedTuple):
    hard: np.ndarray
    prob: np.ndarray
    ideal: np.ndarray


def zero(shape):
    return Err(np.zeros(shape), np.zeros(shape), np.zeros(shape))


def gamma(n, u):
    """γ_n = n·u/(1 − n·u) (Higham §3.1); inf once n·u ≥ 1."""
    return n * u / (1 - n * u) if n * u < 1 else math.inf


def accumulation(n, acc, fp8_operands, block=HOPPER_BLOCK):
    """(hard, prob) coefficients c with |fl(Σ_k a_k b_k) − Σ_k a_k b_k| ≤ c·Σ_k |a_k b_k|, any summation
    order, n: the number of products that may be nonzero (nonzero_terms; at most K). Adding an exact zero is
    exact in every model below (a zero product, a partial sum of zero products, a block of them times its scale),
    so each product meets at most n − 1 inexact additions, whatever the order or blocking.
    fp32: γ_{n+2}(2^-24) (n − 1 additions, one product and two scale multiplies per term). tensor_core:
    γ_{n+2}(2^-23), an addition that rounds toward zero errs by less than one ulp; its errors keep one sign, so
    prob = hard (no √n). hopper_fp8
    (FP8 operands only, else fp32): γ_b(2^-13) inside each K block of b = `block` (128; 64 for mono_moe's 1×64
    intermediate) + γ_{n/b+2}(2^-24) across blocks. The spec's own float64 sum adds γ_{n+2}(2^-53).
    γ_b(2^-13) covers hopper.hopper_fp8_step: per step of 32 products every term loses < 2^(E-13) ≤ 2^-13·|term|
    or less than the largest term's share, and the sum < 2^-13 of itself."""
    own = gamma(n + 2, U64)
    if acc == "hopper_fp8" and fp8_operands:
        b, nb = min(n, block), -(-n // block)
        inner, outer = gamma(b, HOPPER_U), gamma(nb + 2, U32)
        hard, prob = (
            inner + outer + inner * outer,
            LAMBDA * (math.sqrt(b) * HOPPER_U + math.sqrt(nb + 2) * U32),
        )
    elif acc == "tensor_core":
        hard = prob = gamma(n + 2, 2 * U32)
    else:
        u = U64 if acc == "fp64" else U32
        hard, prob = gamma(n + 2, u), LAMBDA * math.sqrt(n + 2) * u
    return own + hard, own + min(prob, hard)  # λ√n > n for n < λ²: the hard bound is then the smaller


def gemm(a, e, w_abs, acc, fp8_operands, block=HOPPER_BLOCK, terms=None):
    """C = a·Wᵀ, W exact (codes × scales): hard/prob δ·|W|ᵀ + c·(|a| + δ)·|W|ᵀ; ideal δ·|W|ᵀ + c64·|a|·|W|ᵀ.
    a [M, K] the spec's operand, e its Err, w_abs |W| [N, K]; terms: gemm_shadow's."""
    return gemm_shadow(shadow_operand(a, e) @ w_abs.T, a.shape[1], acc, fp8_operands, block, terms=terms)


def shadow_operand(a, e):
    """[|a|; δ_hard; δ_prob; δ_ideal] [4M, K]: the four left operands of gemm's |·|·|W|ᵀ products, stacked so
    that they cost one GEMM."""
    return np.concatenate([np.abs(a), e.hard, e.prob, e.ideal])


def nonzero_terms(a_live, w_live):
    """[M, N] upper bound on the products of output (m, n) of a·Wᵀ that may be nonzero: min(#a_m, #W_n), from
    the counts a_live [M] of a row's entries that may be nonzero (|a| + δ > 0: an implementation's operand
    may be nonzero where the spec's is 0) and w_live [N] of a weight row's nonzero entries."""
    return np.minimum(np.asarray(a_live)[:, None], np.asarray(w_live)[None, :])


def _coefficients(terms, n, acc, fp8_operands, block):
    """accumulation's (hard, prob) per output for term counts `terms` [M, N] (None: n everywhere), computed once
    per distinct count."""
    if terms is None or np.min(terms) >= n:  # dense: K everywhere
        return accumulation(n, acc, fp8_operands, block)
    counts, inverse = np.unique(np.minimum(terms, n), return_inverse=True)
    table = np.array([accumulation(int(k), acc, fp8_operands, block) for k in counts])
    return tuple(table[inverse.reshape(np.shape(terms)), j] for j in (0, 1))


def gemm_shadow(products, n, acc, fp8_operands, block=HOPPER_BLOCK, moved=None, directed=None, hopper=None,
                terms=None):
    """gemm's Err from products = shadow_operand(a, e)·|W|ᵀ [4M, N], n = K.

    terms [M, N] (nonzero_terms; None: K everywhere): the products of each output that may be nonzero, the n
    of accumulation's fp32 and tensor_core coefficients. hopper_fp8 on FP8 operands keeps K (its block model
    is per K block of the codes).

    hopper [M, N] (a hopper_fp8 recipe on FP8 operands; None otherwise): the tensor core's truncation beyond the
    spec's, Σ_b scales·hopper_truncation — against emulated block sums, twice it in the blocks where a code may
    differ (each side's block sum within it of the exact one) and 0 elsewhere; against exact sums, once everywhere.
    It replaces γ_b(2^-13)·Σ|ab| (moved) and the hopper part of accumulation; the fp32 promotion across blocks
    keeps γ_{n/b+2}(2^-24).

    directed [M, N] (directed_products; None: not known): a tighter hard bound on |(a' − a)·Wᵀ| than δ·|W|ᵀ, from
    operand errors known to lie in [lo, hi] with a sign each.

    moved [M, N] bool (hopper_fp8 emulated by hopper.hopper_fp8_step, bit-exact on the device; None otherwise):
    where False, an implementation of the recipe sums each K block over the spec's very codes, exactly as the
    spec does, and only the fp32 promotion across blocks may differ: γ_{n/b+2}(2^-24). Where True (some code
    may differ), its block sums and the spec's each lie within γ_b(2^-13) of the exact ones: twice that. The
    recipe-exact value is then that far from the exact sum (ideal)."""
    hopper_acc = acc == "hopper_fp8" and fp8_operands
    hard_c, prob_c = _coefficients(None if hopper_acc else terms, n, acc, fp8_operands, block)
    own = gamma(n + 2, U64)
    mag, h, p, i = np.split(products, 4)
    hd = h if directed is None else np.minimum(directed, h)
    if hopper is not None and hopper_acc:
        outer = own + gamma(-(-n // block) + 2, U32)
        ideal = i + (hard_c if moved is not None else own) * mag
        return Err(hd + outer * (mag + h) + hopper, p + outer * (mag + p) + hopper, ideal)
    if moved is None or not hopper_acc:
        return Err(hd + hard_c * (mag + h), p + prob_c * (mag + p), i + own * mag)
    outer = own + gamma(-(-n // block) + 2, U32)
    twice_inner = np.where(moved, 2 * gamma(min(n, block), HOPPER_U), 0.0)
    return Err(hd + (outer + twice_inner) * (mag + h), p + (outer + twice_inner) * (mag + p), i + hard_c * mag)


def scale_motion(values, rho, w, group):
    """max over r_g with |r_g − 1| ≤ rho_g of |Σ_g (r_g − 1)·values_g·W_gᵀ| ≤ Σ_g rho_g·|values_g·W_gᵀ|: a group of
    `group` columns whose common scale moves by r_g moves its partial product (signed) by r_g − 1, instead of each
    element by rho·|value| against |W|. values, rho [M, K] (rho constant per group), w [N, K] -> [M, N]."""
    out = np.zeros((values.shape[0], w.shape[0]))
    for g in range(0, values.shape[1], group):
        r = rho[:, g]
        if np.any(r > 0):
            out += r[:, None] * np.abs(values[:, g:g + group] @ w[:, g:g + group].T)
    return out


HOPPER_TOP_ELEMENTS = 1 << 22  # products held at once while hopper_truncation takes each step's largest one


def hopper_truncation(a, w, flips, block=HOPPER_BLOCK):
    """[M, N, K/block] bound on |B_b(a') − Σ_{k in b} a'_k·w_k| for every a' with |a' − a| ≤ flips, B_b the
    tensor core's sum of K block b (hopper.hopper_fp8_step, a chain of steps of HOPPER_CHUNK = 32 products from 0).
    a [M, K], w [N, K] e4m3 code values (unscaled, float64), flips [M, K] >= 0 in the same units.

    One step adds 32 products p to the accumulator c. With E the largest exponent among the nonzero products
    (e4m3 exponents, -6 for subnormals: 2^E <= max|p| once |a|, |w| are raised to 2^-6) and c (2^e_c <= |c|), each
    product is truncated toward zero to a multiple of 2^(E-13), losing less than 2^(E-13) with the sign opposite to
    its own, and c likewise; so the step's products lose less than max(n+, n-)·2^(E-13) (n+ / n- the products that
    may be positive / negative) and c less than 2^(E-13); the sum is then truncated to 13 fraction bits (< 2^-13 of
    itself). Over a block, with C_s the exact partial sum of the spec's codes before step s, F_s = Σ flips·|w| over
    the steps before s and ε_s the bound so far, |c'| <= |C_s| + F_s + ε_s, so step s adds at most
    (max(n+, n-) + 1)·2^-13·m_s·(1 + 2^-13) + 2^-13·(|C_{s+1}| + F_{s+1} + ε_s), m_s = max(max|p'|, |C_s| + F_s + ε_s).
    This follows the data: with cancellation the partial sums, and so the truncations, stay far below
    γ_b(2^-13)·Σ|aw|, the bound for any summation order."""
    (m, k), n = a.shape, w.shape[0]
    kb, steps = -(-k // block), block // HOPPER_CHUNK
    pad = ((0, 0), (0, kb * block - k))
    a4 = np.pad(a, pad).reshape(m, kb, steps, HOPPER_CHUNK)
    f4 = np.pad(np.broadcast_to(flips, a.shape), pad).reshape(m, kb, steps, HOPPER_CHUNK)
    w4 = np.pad(w, pad).reshape(n, kb, steps, HOPPER_CHUNK)
    sub = 2.0**-6  # e4m3's smallest normal: the exponent a subnormal code takes in E
    with np.errstate(invalid="ignore"):
        part = np.einsum("mbsk,nbsk->mnbs", a4, w4)  # exact step sums of the spec's codes
        moved = np.einsum("mbsk,nbsk->mnbs", f4, np.abs(w4))
        up, down = (a4 + f4 > 0).astype(np.float64), (a4 - f4 < 0).astype(np.float64)
        wp, wn = (w4 > 0).astype(np.float64), (w4 < 0).astype(np.float64)
        count = np.maximum(np.einsum("mbsk,nbsk->mnbs", up, wp) + np.einsum("mbsk,nbsk->mnbs", down, wn),
                           np.einsum("mbsk,nbsk->mnbs", down, wp) + np.einsum("mbsk,nbsk->mnbs", up, wn))
        big_a, big_w = np.maximum(np.abs(a4) + f4, sub), np.maximum(np.abs(w4), sub)
        top = np.empty((m, n, kb, steps))
        cols = max(1, HOPPER_TOP_ELEMENTS // max(1, m * kb * block))
        for n0 in range(0, n, cols):
            top[:, n0:n0 + cols] = (big_a[:, None] * big_w[None, n0:n0 + cols]).max(axis=-1)
    c = f = eps = np.zeros((m, n, kb))
    u = 2.0**-13
    for j in range(steps):
        entering = np.abs(c) + f + eps
        c, f = c + part[..., j], f + moved[..., j]
        eps = eps + (count[..., j] + 1) * u * np.maximum(top[..., j], entering) * (1 + u) + u * (np.abs(c) + f + eps)
    return eps


def directed_products(lo, hi, w_pos, w_neg):
    """max over a' with a' − a ∈ [lo, hi] (lo ≤ 0 ≤ hi elementwise) of |(a' − a)·Wᵀ|, W = W⁺ − W⁻: the larger of
    hi·W⁺ᵀ − lo·W⁻ᵀ (the most it can rise) and −lo·W⁺ᵀ + hi·W⁻ᵀ (fall). Each element is charged only on the side
    it can reach, against the sign of its weight, instead of its larger side against |W|."""
    m, n = len(hi), len(w_pos)
    p = np.concatenate([hi, -lo]) @ np.concatenate([w_pos, w_neg]).T  # one GEMM: [hi; -lo]·[W⁺; W⁻]ᵀ
    return np.maximum(p[:m, :n] + p[m:, n:], p[m:, :n] + p[:m, n:])


def _own(v, exact):
    """How far the spec's float64 v may be from the exact pre-rounding value: 4 float64 ulps, 0 where v is exact
    (a stored value). With δ = 0 as well the rounding is then compared exactly, ties to even included."""
    return 0.0 if exact else 4 * U64 * np.abs(v)


def _interval_rounding(v, r, delta, fmt, exact=False):
    """max over v' in [v − δ, v + δ] of |R(v') − r| by monotonicity of R (see module docstring)."""
    d = delta + _own(v, exact)
    hi = np.abs(round_to(v + d, fmt, saturate=True).astype(np.float64) - r)
    lo = np.abs(r - round_to(v - d, fmt, saturate=True).astype(np.float64))
    return np.where(d > 0, np.maximum(hi, lo), 0.0)


def rounded_reach(v, r, e, fmt, flush=False, exact=False):
    """(lo, hi, None): R(v') − r ∈ [lo, hi] for |v' − v| ≤ e.hard, r = R(v) (the interval rule, directed:
    lo ≤ 0 ≤ hi, and for most elements one of them is 0, the other side's midpoint being out of reach); flush: FTZ
    may store 0. None: no shared scale (requant_reach's rho)."""
    f = as_format(fmt)
    v, r = np.asarray(v, np.float64), np.asarray(r, np.float64)
    d = e.hard + _own(v, exact)
    hi = np.where(d > 0, round_to(v + d, f, saturate=True).astype(np.float64) - r, 0.0)
    lo = np.where(d > 0, round_to(v - d, f, saturate=True).astype(np.float64) - r, 0.0)
    if flush:
        zero = np.abs(v) - d < f.min_normal
        lo, hi = np.where(zero, np.minimum(lo, -r), lo), np.where(zero, np.maximum(hi, -r), hi)
    return np.minimum(lo, 0.0), np.maximum(hi, 0.0), None


def _flush(v, r, delta, fmt):
    """|r| where an implementation's exact value within δ of v may be below min normal (FTZ may store 0), else 0."""
    d = delta + 4 * U64 * np.abs(v)
    return np.where(np.abs(v) - d < fmt.min_normal, np.abs(np.asarray(r, np.float64)), 0.0)


def rounded(v, r, e, fmt, flush=False, exact=False):
    """r = round_to(v, fmt). hard/prob: the rounding rule; ideal: δ + u·|v| + min_subnormal/2. flush (the
    recipe's subnormals == "flush"): at least |r| where |v| − δ < min_normal (module docstring, FTZ). exact: v
    is the exact pre-rounding value (a stored value), so where δ = 0 the rounding is compared exactly."""
    f = as_format(fmt)
    hard, prob = _interval_rounding(v, r, e.hard, f, exact), _interval_rounding(v, r, e.prob, f, exact)
    if flush:
        hard, prob = np.maximum(hard, _flush(v, r, e.hard, f)), np.maximum(prob, _flush(v, r, e.prob, f))
    return Err(hard, prob, e.ideal + f.unit_roundoff * np.abs(v) + f.min_subnormal / 2)


def flushed_input(x, e, min_normal=FP32.min_normal):
    """An input read with DAZ: a subnormal (0 < |x| < min_normal; bf16 and fp32 share 2^-126) may be read as 0,
    so hard and prob grow by |x| there; ideal is unchanged (the spec reads x)."""
    x = np.abs(np.asarray(x, np.float64))
    extra = np.where((x > 0) & (x < min_normal), x, 0.0)
    return Err(e.hard + extra, e.prob + extra, e.ideal)


def flushed_reduction(e, operations, fmt):
    """Under flush-to-zero arithmetic (Recipe.subnormals "flush") any product or partial sum of a reduction whose
    result is below the format's min normal N may become 0, whatever the inputs' sizes (products of a subnormal
    router weight and a large expert output are normal; terms of opposite sign can cancel below N): each of its
    `operations` results errs by less than N more, so hard and prob grow by operations·N. ideal is unchanged (the
    spec keeps gradual underflow). Measured on the H200: torch-CUDA's combine of three terms near 2·10^-38 differed
    from the IEEE sum by 5.5·10^-39 (spec/data/underflow_probe.txt)."""
    extra = operations * as_format(fmt).min_normal
    return Err(e.hard + extra, e.prob + extra, e.ideal)


def _times(x, y):
    """x·y with 0·∞ = 0: a factor that is exactly 0 (no error, or a zero value) contributes nothing, however large
    the other's bound (a router weight whose ideal error is unbounded, times an exact operand). Call it under
    np.errstate(invalid="ignore"): the 0·∞ it computes before discarding would warn."""
    return np.where((x == 0) | (y == 0), 0.0, x * y)


def product(a, b, ea, eb, u=0.0):
    """a·b of two inexact operands (b may be a broadcast router weight): |a'b' − ab| ≤ δa·(|b| + δb) + |a|·δb,
    plus the float64 rounding of the spec's product; an implementation that rounds the product in a working
    format (unit roundoff u) before the next stored rounding adds u·|ab|·(1 + ...) to hard and prob. Each term
    is 0 where one of its factors is (_times), so an unbounded δb on b meets an exact a = 0 without a NaN."""
    absa, absb = np.abs(a), np.abs(b)
    rule = lambda da, db, w: (_times(da, absb + db) + _times(absa, db) + U64 * absa * absb
                              + (_times(absa + da, absb + db) * w if w else 0.0))
    with np.errstate(invalid="ignore"):
        return Err(rule(ea.hard, eb.hard, u), rule(ea.prob, eb.prob, u), rule(ea.ideal, eb.ideal, 0.0))


def nonlinear(name, x, fx, e):
    """f(x) before its act_compute rounding. |f(x') − f(x)| ≤ L·δ (LIPSCHITZ; relu2: (2|x| + δ)·δ); an
    implementation evaluates f within C_EVAL fp32 ulps of |f(x)| + |x| (the |x| covers the cancellation in
    1 + tanh / 1 + erf for x ≪ 0)."""
    lip = (lambda d: (2 * np.abs(x) + d) * d) if name == "relu2" else (lambda d: LIPSCHITZ[name] * d)
    evaluation = C_EVAL * U32 * (np.abs(fx) + np.abs(x))
    own = 4 * U64 * (np.abs(fx) + np.abs(x))
    return Err(lip(e.hard) + evaluation, lip(e.prob) + evaluation, lip(e.ideal) + own)


def summed(terms_abs, e, m, fmt):
    """Σ of m terms, computed exactly by the spec and in fmt (any order) by an implementation:
    + γ_m(u)·(Σ|terms| + δ); prob λ·√m·u; ideal: the spec's float64 sum."""
    u, own = as_format(fmt).unit_roundoff, gamma(m, U64) * terms_abs
    return Err(
        e.hard + own + gamma(m, u) * (terms_abs + e.hard),
        e.prob + own + min(LAMBDA * math.sqrt(m) * u, gamma(m, u)) * (terms_abs + e.prob),
        e.ideal + own,
    )


class Quantized(NamedTuple):
    """A block-quantized operand: values = code value × scale, exactly (float64)."""

    values: np.ndarray  # [M, K] float64
    scale: np.ndarray  # [M, K] float64: the dequant multiplier of each element
    fmt: str  # element format ("e4m3fn", "e2m1")
    groups: tuple  # group sizes along K whose amax sets an element's scale (nvfp4: (16, K))
    u: float  # a-priori relative error of one element (2·u_fmt where the scale rule saturates)
    linear_scale: bool  # scale = amax·constant (fp8 1×128), so it moves with amax proportionally
    fp8: tuple | None  # (codes, DeepSeek 1×128 scales) for block_scaled_gemm, else None
    scale_of: object = None  # power-of-two scales (mxfp8, one group level): fp32 amax [M, G] -> scale [M, G]


def _group_max(x, g):
    m, k = x.shape
    return np.repeat(x.reshape(m, k // g, g).max(axis=-1), g, axis=-1)


def _fp32_toward(x, direction):
    """x rounded to fp32 toward -inf (direction -1) or +inf (+1): the fp32 values an fp32 quantity in
    [x_lo, x_hi] can take lie in [_fp32_toward(x_lo, -1), _fp32_toward(x_hi, +1)]."""
    r = np.asarray(x, np.float64).astype(np.float32)
    wrong = r < x if direction < 0 else r > x
    return np.where(wrong, np.nextafter(r, np.float32(direction * np.inf)), r)


MAX_SCALE_STEPS = 8  # power-of-two scales an amax interval may span before the coarse rule takes over


def _requant_reach(v, delta, q):
    """The values an implementation's Q'(v') can take for |v' − v| ≤ δ: (low, high [M, K] float64, code may
    differ [M, K] bool). The scale-setting amax of each group lies in [max(|v| − δ), max(|v| + δ)]. If that
    pins it, the scale is the spec's; a scale linear in amax (fp8 1×128: amax/448) moves within the same ratio
    (± 8 fp32 ulps for the formula); a power-of-two scale (mxfp8) takes the values of its rule (q.scale_of) between
    the two ends, at most a few. Then v'/s' lies in an interval whose end codes, by monotone rounding (widened by 8
    fp32 ulps for the quantizer's arithmetic where s' is not a power of two), give the reachable decoded values.
    Otherwise (an e4m3 NVFP4 scale that may move): δ + |v − Q(v)| + 2·u_fmt·(|v| + δ) + 4·s_hi·min_subnormal
    either way, s_hi = max(s, amax_hi/max_fmt). A scale that only moves keeps the codes, and so a tensor-core block
    sum over them."""
    f = as_format(q.fmt)
    absv = np.abs(v)
    fixed = np.ones(v.shape, bool)
    s_hi, ratio_lo, ratio_hi = q.scale, np.ones(v.shape), np.ones(v.shape)
    for g in q.groups:
        amax = _group_max(absv, g)
        amax_hi, amax_lo = _group_max(absv + delta, g), _group_max(np.maximum(absv - delta, 0), g)
        fixed &= (amax_hi <= amax) & (amax_lo >= amax)
        s_hi = np.maximum(s_hi, amax_hi / f.max)
        safe = np.where(amax > 0, amax, 1.0)
        ratio_lo = np.minimum(ratio_lo, np.where(amax > 0, amax_lo / safe, 0.0) * (1 - 8 * U32))
        ratio_hi = np.maximum(ratio_hi, np.where(amax > 0, amax_hi / safe, np.inf) * (1 + 8 * U32))
    linear = fixed | q.linear_scale
    ratio_lo, ratio_hi = np.where(fixed, 1.0, ratio_lo), np.where(fixed, 1.0, ratio_hi)
    s = np.where(q.scale > 0, q.scale, 1.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ends = [(v + sign * delta) / (s * r) for sign in (-1, 1) for r in (ratio_lo, ratio_hi)]
        slack = 8 * U32 * (absv + delta) / (s * ratio_lo)
        t_lo = round_to(np.minimum.reduce(ends) - slack, f, saturate=True).astype(np.float64)
        t_hi = round_to(np.maximum.reduce(ends) + slack, f, saturate=True).astype(np.float64)
        low = np.minimum(t_lo * s * ratio_lo, t_lo * s * ratio_hi)
        high = np.maximum(t_hi * s * ratio_hi, t_hi * s * ratio_lo)
        code = q.values / s
        one_code = linear & np.isfinite(low) & np.isfinite(high) & (t_lo == code) & (t_hi == code)
    use = linear & np.isfinite(low) & np.isfinite(high)
    if q.scale_of is not None and not use.all():
        p_lo, p_hi = _pow2_reach(v, delta, q, f)
        low, high = np.where(use, low, p_lo), np.where(use, high, p_hi)
        use |= np.isfinite(p_lo) & np.isfinite(p_hi)
        one_code |= ~linear & (p_lo == q.values) & (p_hi == q.values)
    moved = delta + np.abs(v - q.values) + 2 * f.unit_roundoff * (absv + delta) + 4 * s_hi * f.min_subnormal
    low, high = np.where(use, low, q.values - moved), np.where(use, high, q.values + moved)
    unmoved = fixed & (delta == 0)
    low, high = np.where(unmoved, q.values, low), np.where(unmoved, q.values, high)
    low, high = np.minimum(low, q.values), np.maximum(high, q.values)
    # the same split into code flips at the largest scale and the group's common scale motion (requant_reach); not
    # where the ratio is unbounded (a group of zeros that may move: the coarse rule's finite reach stands)
    shared = q.linear_scale & ~fixed & np.isfinite(t_lo) & np.isfinite(t_hi) & np.isfinite(ratio_hi) & ~unmoved
    rho = np.where(shared, np.maximum(1 - ratio_lo, ratio_hi - 1), 0.0)
    changed = ~unmoved & ~one_code
    with np.errstate(invalid="ignore"):
        flip_lo = np.where(shared, np.minimum(t_lo - code, 0) * s * ratio_hi, low - q.values)
        flip_hi = np.where(shared, np.maximum(t_hi - code, 0) * s * ratio_hi, high - q.values)
        codes = np.where(changed, np.where(linear & use, np.maximum(code - t_lo, t_hi - code), np.inf), 0.0)
    return low, high, codes, (flip_lo, flip_hi, rho)


def _pow2_reach(v, delta, q, f):
    """(low, high) of _requant_reach for a power-of-two scale of one group level, by every scale of the rule
    between the amax interval's ends (exact division: no slack); ±inf in groups whose interval spans more than
    MAX_SCALE_STEPS doublings (the coarse rule then applies)."""
    (g,) = q.groups
    m, k = v.shape
    absv = np.abs(v).reshape(m, k // g, g)
    d = np.broadcast_to(delta, v.shape).reshape(m, k // g, g)
    lo = q.scale_of(_fp32_toward(np.maximum(absv - d, 0).max(axis=-1), -1))
    hi = q.scale_of(_fp32_toward((absv + d).max(axis=-1), +1))
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.where(hi > lo, np.log2(hi / lo), 0.0)
    wide = ~(steps <= MAX_SCALE_STEPS)
    low, high = np.full(v.shape, np.inf), np.full(v.shape, -np.inf)
    for i in range(int(np.where(wide, 0, steps).max(initial=0)) + 1):
        x = np.repeat(np.where(wide, 1.0, np.minimum(lo * 2.0**i, hi)), g, axis=-1)
        low = np.minimum(low, round_to((v - delta) / x, f, saturate=True).astype(np.float64) * x)
        high = np.maximum(high, round_to((v + delta) / x, f, saturate=True).astype(np.float64) * x)
    wide = np.repeat(wide, g, axis=-1)
    return np.where(wide, -np.inf, low), np.where(wide, np.inf, high)


def _requant_rule(v, delta, q):
    """Bound on |Q'(v') − Q(v)| for |v' − v| ≤ δ (_requant_reach) and where the code may differ."""
    low, high, codes, _ = _requant_reach(v, delta, q)
    return np.maximum(high - q.values, q.values - low), codes > 0


def requantized(v, e, q):
    """v (the spec's pre-quantization value, Err e) -> q.values. hard/prob: _requant_rule; ideal: δ + u·|v| +
    s·min_subnormal/2 (u = q.u: RNE within a fixed scale, or the saturating OCP MX rule)."""
    f = as_format(q.fmt)
    return Err(
        _requant_rule(v, e.hard, q)[0],
        _requant_rule(v, e.prob, q)[0],
        e.ideal + q.u * np.abs(v) + q.scale * f.min_subnormal / 2,
    )


def requant_reach(v, e, q):
    """(lo, hi, rho) for |v' − v| ≤ e.hard: Q'(v') − Q(v) = f + Q(v)·(r − 1) with f ∈ [lo, hi] elementwise
    (lo ≤ 0 ≤ hi: the code flips, at the largest scale; directed, as most elements that can flip can do so only
    toward one neighbour) and |r − 1| ≤ rho, r = s'/s the one ratio by which the scale of the element's group
    moves (a scale linear in amax; rho = 0 where the scale is pinned or the whole move is in [lo, hi]). The
    group's elements move together with r: scale_motion charges them as one."""
    return _requant_reach(v, e.hard, q)[3]


def code_changes(v, e, q):
    """How far an implementation's code can be from the spec's (hard δ), in code values (unscaled): 0 where it
    is the spec's, inf where only the coarse rule bounds it. [M, K] float64."""
    return _requant_reach(v, e.hard, q)[2]


def quantized_input(x, q):
    """The activation quantization of the given hidden states: identical in spec and implementation (same
    declared quantizer, same input; the device quantizer's MUFU.RCP is reproduced bit for bit, spec.hopper),
    hence hard = prob = 0 and exactly the spec's codes, also for NaN/Inf inputs; ideal: u·|x| +
    s·min_subnormal/2."""
    z = np.zeros(x.shape)
    return requantized(x, Err(z, z, z), q)


def arithmetic_gamma(recipe, num_experts, top_k, softmax=False):
    """Relative error of a routing weight vs exact before its write: γ_{E+k+8}(2^-24) for the fp32 arithmetic (of
    `softmax` scores at least γ_{K+1}, softmax_coefficient then the write: with torch's CUDA exp K + 1 = E + 10 exceeds
    E + k + 8 at top_k 1), composed with one rounding to recipe.routing_scores and four to recipe.routing_renorm (Σ,
    + eps, divide, rsf multiply) where those are narrower than fp32: (1 + γ)(1 + u_s)(1 + u_r)^4 − 1."""
    n = num_experts + top_k + 8
    g = gamma(max(n, softmax_coefficient(num_experts, recipe) + 1) if softmax else n, U32)
    for fmt, n in ((recipe.routing_scores, 1), (recipe.routing_renorm, 4)):
        if fmt != "fp32":
            g = (1 + g) * (1 + as_format(fmt).unit_roundoff) ** n - 1
    return g


def routing_weights(w, recipe, num_experts, top_k, score_sum=None, rsf=1.0, unrounded=None,
                    softmax_exponents=None):
    """Router weights written in recipe.routing_weights after fp32 arithmetic (softmax over E, or sigmoid,
    then a sum of k, a divide and a scale): relative γ_{E+k+8}(2^-24) vs exact (arithmetic_gamma: more where the
    recipe computes scores or the renormalization in bf16 / fp16). hard: two implementations ≤ 2γ
    apart before the write, ≤ one ulp (2u) after it; ideal: γ + u. unrounded (the fp32 values before a bf16
    write, [T, k]): the write's rounding rule instead of the ulp for those columns (a flip only near a midpoint).
    softmax_exponents ([T, k], spec.routing.softmax_exponents): an fp32 softmax rounds x − max before exp, which
    moves a weight by u·that relatively (vs ideal; twice between two implementations), beyond γ.

    recipe.sigmoid "tanh" (s = 0.5·tanhf(0.5x) + 0.5, fused_topk_deepseek built with -use_fast_math: tanhf is
    tanh.approx.f32, relative error ≤ R = TANH_APPROX_REL, measured on every fp32 input on an H200) adds an
    absolute error per sigmoid η = 0.5·R·|t| ≤ η̄ = 0.5·R (|t| = |tanh| ≤ 1), which no relative bound covers
    (s → 0 at x = -16 where σ = 1.1e-7). Unrenormalized, w = s·rsf: rsf·η̄. Renormalized over k ids,
    w_i = rsf·s_i/Σ (score_sum = Σ the exact selected scores, [T, 1]): perturbing s_j by e_j, |e_j| ≤ η̄, moves
    w_i by rsf·|e_i·Σ − s_i·Σe_j|/(Σ·(Σ + Σe_j)) ≤ (rsf + k·|w_i|)·η̄/(Σ(1 − γ) − k·η̄) (the fp32 sum's relative
    γ in the denominator; ∞ where that is ≤ 0). vs ideal: that term; hard (two implementations, each within
    it of the ideal): twice it."""
    u = as_format(recipe.routing_weights).unit_roundoff
    g = arithmetic_gamma(recipe, num_experts, top_k, softmax=softmax_exponents is not None)
    absw = np.abs(np.asarray(w, np.float64))
    apart, ideal = 2 * g * absw, (g + u) * absw  # apart: two implementations' values before the write
    if softmax_exponents is not None:
        cols = np.asarray(softmax_exponents, np.float64).shape[-1]
        shift = np.zeros_like(absw)
        shift[..., :cols] = U32 * np.asarray(softmax_exponents, np.float64) * absw[..., :cols]
        apart, ideal = apart + 2 * shift, ideal + shift
    if recipe.sigmoid == "tanh":
        eta = 0.5 * TANH_APPROX_REL
        if score_sum is None:
            approx = np.full_like(absw, rsf * eta)
        else:
            den = np.asarray(score_sum, np.float64) * (1 - g) - top_k * eta
            with np.errstate(divide="ignore", invalid="ignore"):
                approx = np.where(den > 0, (rsf + top_k * absw) * eta / np.where(den > 0, den, 1.0), np.inf)
        apart, ideal = apart + 2 * approx, ideal + approx
    hard = apart * (1 + u) + 2 * u * absw
    if unrounded is not None and u != U32:
        k = unrounded.shape[1]
        e = Err(*(apart[:, :k],) * 3)
        hard[:, :k] = rounded(np.asarray(unrounded, np.float64), np.asarray(w, np.float64)[:, :k], e,
                              recipe.routing_weights).hard
    return Err(hard, hard, ideal)


# ---- routing vs the float64 ideal (spec.routing's ideal_keys / ideal_scores / route(ideal=True));
# difftest/checking/compare/ applies these to an implementation's keys and weights


def _u_routing(fmt):
    """Unit roundoff of a routing arithmetic format; 0 for fp32, whose rounding the fp32 terms already count."""
    return 0.0 if fmt == "fp32" else as_format(fmt).unit_roundoff


def _half_subnormal(fmt):
    """Half the min subnormal of a routing arithmetic format narrower than fp32: the absolute error of one store
    there near 0 (fp16: 2^-25 ≈ 3e-8, below which a σ stored in fp16 is 0); 0 for fp32, whose min normal δ adds."""
    return 0.0 if fmt == "fp32" else as_format(fmt).min_subnormal / 2


def routing_key_delta(logits, scores, key_class, recipe, biased_keys=None):
    """δ [T], the uncertainty of one routing key per token: every key an implementation of `recipe` computes
    in fp32 from the exactly given logits [T, E] is within δ of the float64 ideal key (spec.routing.ideal_keys).
    `scores` the ideal softmax / σ [T, E] of key class `key_class` (spec.routing.KEY_CLASSES), `biased_keys`
    σ + b where a bias is added (the bias as recipe.bias reads it). Per key: raw logits exact (0); a sigmoid
    c·u·|s| + fp32 min normal, c = 1 correctly rounded, C_EVAL for expf, plus 2|x|(1 − σ)·u·σ for fast-math
    __expf (exp="ex2"; spec.routing.exp_exponents), or (u + u_s)·σ + 0.5·TANH_APPROX_REL·|tanh(x/2)| + min normal
    for tanh.approx; a softmax (softmax_coefficient(E, recipe)·u·(1 + u_s) + u_s)·p + a·(|z| + Σ_j p_j·|z_j|)·u·p,
    z = x − max, a = 1 (fl(x − max) before exp) or 3 for exp="ex2" (and fl(z·fl(log2 e))); u_s·|key| + half the
    format's min subnormal more where the scores are stored in
    recipe.routing_scores (fp16 stores σ < 2^-25 as 0); a bias add max(u, u_b)·|s + b| (+ half the min subnormal of
    recipe.routing_bias_add). c = TORCH_CPU_SIGMOID_REL for "torch_cpu", TORCH_CUDA_SIGMOID_REL for "torch_cuda".
    δ is the largest over the token's experts (a NaN key ranks last, exactly: 0)."""
    x = np.asarray(logits, np.float64)
    E = x.shape[1]
    c_sigmoid = {"exact": 1, "torch_cpu": TORCH_CPU_SIGMOID_REL, "torch_cuda": TORCH_CUDA_SIGMOID_REL}.get(
        recipe.sigmoid, C_EVAL)
    u_s = _u_routing(recipe.routing_scores)
    tiny = _half_subnormal(recipe.routing_scores)
    if key_class == "raw":
        dkey = np.zeros_like(x)
    elif key_class == "softmax":
        dkey = (gamma(softmax_coefficient(E, recipe), U32) * (1 + u_s) + u_s) * scores + FP32.min_normal + tiny
        with np.errstate(invalid="ignore"):  # fl(x − max) (and 2^fl(z·fl(log2 e))): e^z off by |z|·u (3|z|·u)
            z = np.abs(x - x.max(axis=-1, keepdims=True))
            z = np.where(np.isfinite(z) & (scores > 0), z, 0.0)
        dkey = dkey + (3 if recipe.exp == "ex2" else 1) * U32 * (z + (scores * z).sum(axis=-1, keepdims=True)) * scores
    elif key_class == "sigmoid":
        dkey = (c_sigmoid * U32 * (1 + u_s) + u_s) * scores + FP32.min_normal + tiny
        if recipe.exp == "ex2" and recipe.sigmoid == "expf":  # spec.routing.exp_exponents: σ off by 2|x|(1 − σ)·u
            dkey = dkey + 2 * U32 * np.where(np.isfinite(x), np.abs(x), 0.0) * (1 - scores) * scores
        if recipe.sigmoid == "tanh":  # tanh.approx.f32: η = 0.5·2^-11·|tanh(x/2)|
            dkey = (U32 + u_s) * scores + 0.5 * TANH_APPROX_REL * np.abs(np.tanh(0.5 * x)) + FP32.min_normal + tiny
        if biased_keys is not None:
            dkey = (dkey + max(U32, _u_routing(recipe.routing_bias_add)) * np.abs(biased_keys)
                    + _half_subnormal(recipe.routing_bias_add))
    else:
        raise ValueError(f"key_class={key_class!r} is not one of {routing.KEY_CLASSES}")
    return np.where(np.isnan(dkey), 0.0, dkey).max(axis=-1, initial=0.0)


def softmax_coefficient(num_experts, recipe):
    """K with |p̃ − p| ≤ γ_K·p for an fp32 softmax p̃_i = ẽ_i·fl(1/Σ̃) (or ẽ_i/Σ̃) of exact arguments, first order:
    p̃_i/p_i − 1 = α_i − Σ_j p_j·(α_j + θ_j) + ρ + μ with ẽ_j = e_j(1 + α_j), |α_j| ≤ c·u, the sum's |θ_j| ≤ (E − 1)·u,
    the reciprocal's |ρ| ≤ r·u and the multiply's |μ| ≤ u (a true divide: one rounding, within r + 1): K = 2c + E − 1
    + r + 1. Exp "rn": c = TORCH_EXP_REL (torch's exps, measured; a correctly rounded one has c = 1), r = 1; "ex2"
    (fast math): c = MUFU_EX2_REL/u of MUFU.EX2, r = MUFU_RCP_REL/u of MUFU.RCP."""
    c, r = (MUFU_EX2_REL / U32, MUFU_RCP_REL / U32) if recipe.exp == "ex2" else (TORCH_EXP_REL, 1.0)
    return 2 * c + num_experts + r


def routing_group_delta(group_keys, delta, summed, recipe):
    """gδ [T], the uncertainty of one group score: a group's max key δ; a top-2 sum (`summed`) 2δ + one
    rounding of the sum, max(u, u_g)·|g| (recipe.routing_group_scores) at the token's largest |g| (+ half the min
    subnormal of a narrower format)."""
    if not summed:
        return delta
    gabs = np.where(np.isnan(group_keys), 0.0, np.abs(group_keys)).max(axis=-1)
    return (2 * delta + max(U32, _u_routing(recipe.routing_group_scores)) * gabs
            + _half_subnormal(recipe.routing_group_scores))


def routing_underflow(scores, score_kind, renormalized, recipe, num_experts, rsf=1.0, eps=0.0):
    """(absolute allowance [T, k], degenerate [T]) of fp32 routing weights vs the float64 ideal, for results
    that land below the fp32 min normal, where the relative bound of routing_weights says nothing. `scores`
    [T, k] the ideal selected scores (spec.routing.ideal_scores) of kind `score_kind` (spec.routing.SCORES),
    `renormalized` whether they are divided by their sum (+ eps).

    Model: a correctly rounded fp32 operation gives fl(v) = v(1 + δ) + η, |δ| ≤ u, |η| ≤ η₀ = 2^-150 (half the
    subnormal spacing 2^-149), η ≠ 0 only when the result is subnormal; additions are exact there (η = 0). So:
    * a score s̃ = s(1 + δ) + e carries |e| ≤ η_s: sigmoid "exact" one rounding, η_s = η₀; softmax exp then a
      divide by Σ ≥ 1 (the row maximum's term is 1; or a multiply by fl(1/Σ), a normal number), η_s = η_e + η₀,
      η_e = TORCH_EXP_SUBNORMAL·2^-149 = 2.82η₀ (torch's exp below the min normal, measured; a correctly rounded
      one is within η₀); sigmoid "expf" (and "torch_cpu" / "torch_cuda",
      measured: 0 below x = −88.7228) flushes σ(x) to 0 wherever expf(−x) overflows (x < −88.72, σ < 2.9e-39),
      so η_s = 2^-127 (> σ(−88.72) + η₀); raw logits η_s = 0.
    * w = s·rsf: |e|·rsf + η₀ (the multiply).
    * w = s_i/(Σ_j s_j + eps)·rsf over k ids, D = Σ s + eps (ideal): the perturbed quotient
      rsf·(s_i + e_i)/(D' + Σ e_j), D' ≥ D(1 − γ) the relatively perturbed sum (γ of routing_weights),
      differs from rsf·s_i/D' by rsf·|e_i·D' − s_i·Σ e_j|/(D'·(D' + Σ e_j)) ≤ (rsf·η_s + w_i·k·η_s)/(D(1 − γ)
      − k·η_s), the relative parts covered by γ (times 1 + γ for their cross terms); then the divide and
      the rsf multiply add η₀ each, rsf·η₀ and η₀ (scale_then_divide: its multiply's η₀ is divided by the
      denominator, added to the numerator term instead).
    * the write in recipe.routing_weights: half its subnormal spacing.
    * recipe.subnormals "flush" (CUDA FTZ): any result below the fp32 min normal may be written as 0, so η₀
      is 2^-126 at every step instead of half the subnormal spacing.
    * scores or renormalization in a narrower format (recipe.routing_scores, routing_renorm): that format's half
      subnormal spacing added to η_s, and replacing η₀ for the renormalization steps.
    Where D(1 − γ) ≤ k·η_s the fp32 denominator may be 0 (eps = 0: 0/0 = NaN) or any tiny value: the weights
    are not bounded by the ideal at all (anything in [0, rsf], or NaN); those tokens are `degenerate` and are
    held to the recipe at their own ids instead."""
    eta = FP32.min_subnormal / 2 if recipe.subnormals == "keep" else FP32.min_normal  # flush: below 2^-126 → 0
    k = scores.shape[1]
    if score_kind == "raw":
        eta_s = 0.0
    elif score_kind in ("softmax", "softmax_of_selected"):
        eta_s = max(eta, TORCH_EXP_SUBNORMAL * FP32.min_subnormal) + eta
    else:
        eta_s = eta if recipe.sigmoid == "exact" else max(eta, 2.0**-127)
    eta_s += as_format(recipe.routing_scores).min_subnormal / 2 if recipe.routing_scores != "fp32" else 0.0
    eta = max(eta, as_format(recipe.routing_renorm).min_subnormal / 2)  # each renorm step's absolute error
    write = as_format(recipe.routing_weights).min_subnormal / 2
    T = scores.shape[0]
    if not renormalized:
        return np.full(scores.shape, rsf * eta_s + eta + write), np.zeros(T, bool)
    g = arithmetic_gamma(recipe, num_experts, k, softmax=score_kind == "softmax")
    D = scores.sum(axis=-1, keepdims=True) + eps
    den = D * (1 - g) - k * eta_s
    degenerate = ~(den[:, 0] > 0)
    w = rsf * scores / np.where(D > 0, D, 1.0)
    numerator = rsf * eta_s + (eta if recipe.renorm_order == "scale_then_divide" else 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        term = (1 + g) * (numerator + w * k * eta_s) / den + (rsf + 1) * eta + write
    return np.where(degenerate[:, None], np.inf, term), degenerate


def routing_weight_bound(w, recipe, num_experts, top_k, rsf=1.0, vs_ideal=False, logits=None, method=None,
                         ids=None, renormalize=True, eps=0.0):
    """routing_weights' bound on weights w of `recipe`: hard (between two implementations), plus the recipe's own
    error vs the float64 ideal when `vs_ideal`. With the routed `ids` [T, k] (and `logits`, `method`,
    `renormalize`, `eps`): the softmax's and fast-math exponentials' rounded arguments
    (spec.routing.softmax_exponents, exp_exponents) and, for a "tanh" sigmoid, the exact score sum at the ids."""
    score_sum = exps = None
    if ids is not None:
        if recipe.sigmoid == "tanh" and routing.renormalizes(method, renormalize):
            score_sum = routing.ideal_scores(logits, method=method, ids=ids).sum(axis=-1, keepdims=True) + eps
        exps = routing.softmax_exponents(logits, method, ids)
        if recipe.exp == "ex2":  # fast-math __expf: rounded arguments (spec.routing.exp_exponents)
            extra = routing.exp_exponents(logits, method, ids, renormalize, recipe.sigmoid)
            exps = exps if extra is None else extra + (0.0 if exps is None else exps)
    e = routing_weights(w, recipe, num_experts, top_k, score_sum, rsf, softmax_exponents=exps)
    return e.hard + e.ideal if vs_ideal else e.hard


def bound_vs_recipe(result, recipe):
    """(hard [T, H], probabilistic [T, H]) bounds on |implementation out − result.out| for an implementation
    that declares `recipe`; `result` is moe_layer(..., recipe=recipe) (with the implementation's ids, if
    exposed). The probabilistic bound never exceeds the hard one (the hard one may be the tighter where it charges
    directed flips, gemm_shadow)."""
    _check(result, recipe)
    return result.errors.hard, np.minimum(result.errors.prob, result.errors.hard)


def bound_vs_ideal(result, recipe):
    """Hard bound [T, H] on |result.out − ideal out| (the ideal recomputed with result.ids)."""
    _check(result, recipe)
    return result.errors.ideal


def _check(result, recipe):
    if result.recipe is None or result.errors is None:
        raise ValueError("bounds need a recipe-exact LayerResult (moe_layer(..., recipe=...)), not the ideal")
    if result.recipe != recipe:
        raise ValueError(f"result was computed with recipe {result.recipe.name!r}, not {recipe.name!r}")


def gated_activation(gate, up, y, alpha=1.0, beta=0.0):
    """|y' − y| for y' an fp32 evaluation of spec.trtllm_ops.gated_activation y with MUFU ex2 and rcp:
    (4·u·(|α·g| + 4) + MUFU_EX2_REL + MUFU_RCP_REL)·|y| (three roundings in ex2's argument move it by u·|α·g|
    each, four fp32 operations after) + (|g|·(|u| + |β|) + 1)·2^-125 (FTZ, ex2 overflow to rcp(inf) = 0).
    The unclamped |g|, |u| bound the clamped ones (clamp_limit >= 0)."""
    g, u = np.abs(gate), np.abs(up)
    rel = 4 * U32 * (np.abs(alpha) * g + 4) + MUFU_EX2_REL + MUFU_RCP_REL + 8 * U64
    return rel * np.abs(y) + (g * (u + np.abs(beta)) + 1) * 2.0**-125


def fp32_accumulation(terms_abs, m):
    """|acc' − Σ| for m exact terms accumulated in fp32 by FMAs in any order: γ_m(u)·Σ|terms| + m·2^-126
    (FTZ)."""
    return gamma(m, U32) * terms_abs + m * FP32.min_normal
