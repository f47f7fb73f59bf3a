"""Inputs of a case, bit-identical on every machine.

Every array comes from ``np.random.PCG64([seed, crc32(name), *extra]).random_raw`` (NEP 19 guarantees the
bit stream) through transforms written here with IEEE-exact arithmetic only (+, -, *, casts): numpy's
distribution methods may change between versions, and libm/SIMD ``log``/``cos`` (Box–Muller) differ in
the last bit between CPUs, so normals are Irwin–Hall sums of four uniforms (mean 0, variance 1, |z| ≤ 2√3).
Narrow formats travel as float32 arrays of representable values (bf16 by our own RNE on the bit pattern),
fp8/fp4/e8m0 as uint8 codes. Expert weights are generated per expert on demand from (weight seed, expert id),
where the weight seed is the case's ``weight_seed`` if set (a campaign keeping its weights fixed), else its seed;
under the moe distribution ``nonneg`` they are those weights' magnitudes (and the hidden states |z|), under
``sparse`` every row of w13 and w2 keeps SPARSE_ROW_TERMS of its entries and the rest are exact zeros.
"""

import collections
import functools
import hashlib
import zlib
from typing import NamedTuple

import numpy as np

from spec.quant import FP8_BLOCK, MX_BLOCK, NVFP4_BLOCK

from .case import CaseError, quant_block
from .settings import get as setting

SQRT3 = float(np.sqrt(3.0))  # correctly rounded by IEEE 754

ROUTING_DISTS = (
    "normal",
    "large",
    "tiny",
    "exact_ties",
    "near_ties",
    "all_negative",
    "underflow",
    "zero_group",
    "glm_bias",
    "negative_bias",
)
QUANT_DISTS = ("normal", "large", "tiny", "zero_group", "tiny_groups", "pow2_edge", "nonfinite")
DEV_DISTS = ("normal", "large", "tiny", "zero_block", "non_local")
# nonneg (moe only): hidden states, every expert weight and the logits non-negative (so are the router weights of
# every method, "topk" taking the logits themselves), so no sum of the layer cancels and every activation sees
# arguments where it increases: an accumulator or store that errs one way moves every output it changes toward
# zero (the bias test's best case). With a negative router weight on the input, silu(h) for h < -1.28 grows as h
# moves toward zero, and such tokens moved away from zero, cancelling the others in the cell's sum.
# sparse (moe only): each row of w13 and w2 has at most SPARSE_ROW_TERMS nonzero weights at random positions, the
# rest exact zeros; hidden states and logits as "normal". Every GEMM output then sums at most that many nonzero
# products at any width, so the hard bound (which counts only products that may be nonzero) stays as tight as a
# small layer's while the kernel runs the full-width tiles: a per-element bug (a narrower store, a wrong rounding)
# shows in the outputs at H = 7168 as it does at H = 64.
MOE_DISTS = (*ROUTING_DISTS, "nonneg", "sparse")
# The moe distributions that change the expert weights: GeneratedWeights.form is the distribution's name ("signed"
# under every other distribution).
WEIGHT_DISTS = ("nonneg", "sparse")
SPARSE_ROW_TERMS = 16
DISTS = {"routing": ROUTING_DISTS, "moe": MOE_DISTS, "quant": QUANT_DISTS, "trtllm_ops": DEV_DISTS}
# The names a fixture records for the generator of its inputs and of its expert weights (case.json "inputs" /
# "weights" "generator"): names of what inputs() and expert_weights() compute, not import paths, so moving this module
# touches no fixture. A change to what they compute changes the digests pinned in tests/difftest/model/test_generate.py
# and gets a new name. LEGACY_GENERATORS: earlier labels whose fixtures this generator still reproduces: the module
# paths fixtures were written with before they had names, and inputs/1, which differs from inputs/2 only under the moe
# distribution nonneg (its logits were signed); a fixture of that distribution fails the regeneration check.
GENERATORS = {"inputs": "difftest:inputs/2", "weights": "difftest:expert_weights/1"}
LEGACY_GENERATORS = {"difftest.generate.inputs": GENERATORS["inputs"], "difftest:inputs/1": GENERATORS["inputs"],
                     "difftest.generate.expert_weights": GENERATORS["weights"]}


# ---- bit transforms


def raw(seed, name, n, *extra):
    """n raw 64-bit outputs of the stream (seed, name, *extra)."""
    return np.random.PCG64([seed, zlib.crc32(name.encode()), *extra]).random_raw(n).astype(np.uint64)


def uniform(seed, name, shape, *extra):
    """float64 in [0, 1) from the top 53 bits."""
    n = int(np.prod(shape, dtype=np.int64))
    return ((raw(seed, name, n, *extra) >> np.uint64(11)).astype(np.float64) * 2.0**-53).reshape(shape)


def normal(seed, name, shape, *extra):
    """Irwin–Hall(4) standardized: sum of four 32-bit uniforms, centred, times √3."""
    n = int(np.prod(shape, dtype=np.int64))
    r = raw(seed, name, 2 * n, *extra)
    u = np.concatenate([r & np.uint64(0xFFFFFFFF), r >> np.uint64(32)]).astype(np.float64)
    u = (u + 0.5) * 2.0**-32
    a, b, c, d = u[:n], u[n : 2 * n], u[2 * n : 3 * n], u[3 * n :]
    return (((a + b) + (c + d) - 2.0) * SQRT3).reshape(shape)


def integers(seed, name, shape, high, *extra):
    """int64 in [0, high) as floor(uniform · high)."""
    return np.floor(uniform(seed, name, shape, *extra) * high).astype(np.int64)


def round_bf16(x):
    """Round to the bf16 grid (RNE on the float32 bit pattern); float32 result. NaN/Inf kept."""
    x32 = np.asarray(x, dtype=np.float32)
    bits = x32.view(np.uint32).astype(np.uint64)
    bits = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    out = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x32), out, x32).astype(np.float32)


def round_to_dtype(x, dtype):
    if dtype == "fp32":
        return np.asarray(x, dtype=np.float32)
    if dtype == "bf16":
        return round_bf16(x)
    if dtype == "fp16":
        return np.asarray(x, dtype=np.float16).astype(np.float32)
    raise CaseError(f"cannot generate values of dtype {dtype!r}")


def digest(arrays):
    """SHA-256 over (name, dtype, shape, bytes) of a dict of arrays, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# ---- routing logits and bias


def logits(seed, dist, T, E, n_group=1):
    """float64 [T, E] logits of a named distribution (rounded by the caller)."""
    z = normal(seed, "logits", (T, E))
    if dist in ("normal", "negative_bias", "sparse"):
        return z
    if dist == "nonneg":  # the "topk" method's weights are the logits: non-negative, like every factor of the layer
        return np.abs(z)
    if dist == "large":  # sigmoid/softmax saturate: fp32 keys tie at 1.0 and 0.0
        return z * 2.0**12
    if dist == "tiny":
        return z * 2.0**-12
    if dist == "exact_ties":
        return np.array([-1.0, 0.0, 0.5, 1.0])[integers(seed, "ties", (T, E), 4)]
    if dist == "near_ties":  # a few values per row, 0..3 steps of 2^-22 relative apart (fp32 ulps)
        base = round_bf16(normal(seed, "base", (T, 1))).astype(np.float64)
        return base * (1.0 + integers(seed, "steps", (T, E), 4) * 2.0**-22)
    if dist == "all_negative":
        return -(np.abs(z) * 2.0 + 4.0)
    if dist == "underflow":  # rows below -88: every expf-sigmoid underflows to 0 (renorm: 0/0 or 0/eps)
        rows = integers(seed, "rows", (T, 1), 3)  # 0: normal; 1: fp32-exact sigmoids subnormal or 0; 2: all 0
        deep = uniform(seed, "deep", (T, E))
        return np.where(rows == 1, -100.0 - 20.0 * deep, np.where(rows == 2, -104.0 - 16.0 * deep, z))
    if dist == "zero_group":  # one whole group (or block of E/2) of equal zero logits per row
        G = max(n_group, 2) if E % max(n_group, 2) == 0 else 1
        g = integers(seed, "group", (T, 1), G)
        return np.where(np.arange(E)[None, :] // (E // G) == g, 0.0, z)
    if dist == "glm_bias":  # GLM-4.5/5: sigmoid ~1e-13 vanishes below the fp32 ulp of a ~11.3 bias
        return -30.0 + 2.0 * z
    raise CaseError(f"unknown routing distribution {dist!r}; known: {ROUTING_DISTS}")


def bias(seed, dist, E):
    """float64 [E] correction bias: N(0, 0.5); GLM-like (~11.3, 3/4·E distinct values); N(-3, 1)."""
    if dist == "glm_bias":
        distinct = 11.2 + 0.1 * uniform(seed, "bias_values", (max(1, (3 * E) // 4),))
        return distinct[integers(seed, "bias_pick", (E,), distinct.size)]
    if dist == "negative_bias":  # many keys below -1: the trtllm -1 sentinel (K2)
        return -3.0 + normal(seed, "bias", (E,))
    return 0.5 * normal(seed, "bias", (E,))


# ---- quantizer input


def quant_input(seed, dist, T, H, group):
    """float64 [T, H] quantizer input of a named distribution."""
    z = 3.0 * normal(seed, "x", (T, H))
    G = H // group
    if dist == "normal":
        return z
    if dist == "large":
        return z * 2.0**10
    if dist == "tiny":
        return z * 2.0**-30
    if dist == "nonfinite":  # NaN propagates through amax (the op's stated rule)
        return np.where(integers(seed, "nan", (T, H), 64) == 0, np.nan, z)
    g = integers(seed, "group", (T, G), 4).repeat(group, axis=1)
    if dist == "zero_group":  # all-zero groups: amax 0, the eps floor decides the scale (K15)
        return np.where(g == 0, 0.0, z)
    if dist == "tiny_groups":
        return np.where(g == 0, z * 1e-9 / 8, z)
    if dist == "pow2_edge":  # ue8m0 ceil edge (K14): group amax at 448·2^k, one fp32 or one bf16 ulp above
        k = (integers(seed, "k", (T, G), 25) - 20).repeat(group, axis=1)
        amax = np.ldexp(np.where(g < 2, 448.0, 450.0), k)
        # half the 448·2^k groups one fp32 ulp above (the ulp is 2^(k-15)), so fp32 amax/448 and
        # amax·fl(1/448) are 2^k + 1 ulp, where a float log2 rounds to k (k >= 4 or k <= -5). bf16 and fp16
        # inputs round this back to 448·2^k: no bf16 or fp16 amax puts either scale formula one ulp above a
        # power of two (checked over every finite value), so they keep the 448 / 450 edges only.
        up = (integers(seed, "ulp", (T, G), 2) == 1).repeat(group, axis=1)
        amax = np.where((g < 2) & up, amax + np.ldexp(1.0, k - 15), amax)
        x = np.clip(z / 8.0, -0.9, 0.9) * amax
        first = (np.arange(H) % group == 0)[None, :]
        return np.where(first, amax, x)
    raise CaseError(f"unknown quant distribution {dist!r}; known: {QUANT_DISTS}")


# ---- expert weights


def _fp8_codes(seed, name, shape, e):
    """e4m3fn codes of magnitude 2^-3 .. 7.5 (exponent field 4..9), random sign and mantissa: no NaN."""
    r = raw(seed, name, int(np.prod(shape)), e)
    sign = (r & np.uint64(1)) << np.uint64(7)
    exp = (np.uint64(4) + ((r >> np.uint64(8)) % np.uint64(6))) << np.uint64(3)
    mant = (r >> np.uint64(16)) & np.uint64(7)
    return (sign | exp | mant).astype(np.uint8).reshape(shape)


# The spec (recipe and ideal) and the implementation read the same experts: the last ones generated are kept, up to
# WEIGHT_CACHE_ENTRIES experts and WEIGHT_CACHE_BYTES (an expert of a 7,168-wide layer is some 22 MB, and a campaign
# worker draws thousands of layers).
WEIGHT_CACHE_ENTRIES = 512
WEIGHT_CACHE_BYTES = setting("weight_cache_mb") << 20  # the setting is in MiB
_WEIGHT_CACHE = collections.OrderedDict()


def expert_weights(seed, quant, e, N1, H, I, scale_fmt="fp32", given="prepared", form="signed"):
    """The per-expert dict of spec/layer.py's table for expert e (w13 [N1, H], w2 [H, I]), read-only; `given`
    bf16 / fp32 (MoEConfig.expert_weights): the unquantized values instead, {w13, w2} float32; `form` (from the
    moe distribution, WEIGHT_DISTS): "nonneg" every weight's magnitude, its sign dropped; "sparse" at most
    SPARSE_ROW_TERMS nonzero weights per row; "signed" neither."""
    key = (seed, quant, e, N1, H, I, scale_fmt, given, form)
    if key in _WEIGHT_CACHE:
        _WEIGHT_CACHE.move_to_end(key)
        return _WEIGHT_CACHE[key]
    out = _expert_weights(seed, quant, e, N1, H, I, scale_fmt, given, form)
    for a in out.values():
        a.flags.writeable = False
    _WEIGHT_CACHE[key] = out
    held = sum(a.nbytes for w in _WEIGHT_CACHE.values() for a in w.values())
    while len(_WEIGHT_CACHE) > 1 and (len(_WEIGHT_CACHE) > WEIGHT_CACHE_ENTRIES or held > WEIGHT_CACHE_BYTES):
        held -= sum(a.nbytes for a in _WEIGHT_CACHE.popitem(last=False)[1].values())
    return out


def _unquantized_weight(seed, name, shape, e, fan_in, dtype, sparse=False):
    """Expert weights before any quantization: N(0, 1/fan_in) on the grid of `dtype` (bf16 or fp32); sparse:
    N(0, 1/SPARSE_ROW_TERMS) at the positions of _sparse_rows, zero elsewhere."""
    if sparse:
        fan_in = min(fan_in, SPARSE_ROW_TERMS)
    w = round_to_dtype(normal(seed, name, shape, e) / np.sqrt(float(fan_in)), dtype)
    return np.where(_sparse_rows(seed, name, shape, e), w, np.float32(0.0)) if sparse else w


def _sparse_rows(seed, name, shape, e):
    """bool [n, k]: SPARSE_ROW_TERMS positions drawn per row, uniformly with repeats (so at most that many)."""
    n, k = shape
    mask = np.zeros(shape, bool)
    np.put_along_axis(mask, integers(seed, name + "_nonzero", (n, SPARSE_ROW_TERMS), k, e), True, axis=1)
    return mask


def _expert_weights(seed, quant, e, N1, H, I, scale_fmt="fp32", given="prepared", form="signed"):
    if form not in ("signed", *WEIGHT_DISTS):
        raise CaseError(f"unknown expert weight form {form!r}; known: signed, {', '.join(WEIGHT_DISTS)}")
    out = _signed_expert_weights(seed, quant, e, N1, H, I, scale_fmt, given, form == "sparse")
    return {k: _magnitude(k, v, quant, given) for k, v in out.items()} if form == "nonneg" else out


def _magnitude(name, a, quant, given):
    """|a| of weight array `name`: float values and fp8 codes drop their sign bit, packed e2m1 both nibbles';
    scales are positive already."""
    if name not in ("w13", "w2"):
        return a
    if given != "prepared" or quant == "bf16":
        return np.abs(a)
    return a & np.uint8(0x77 if quant == "nvfp4" else 0x7F)


def _signed_expert_weights(seed, quant, e, N1, H, I, scale_fmt="fp32", given="prepared", sparse=False):
    if given != "prepared" or quant == "bf16":  # the bf16 path's prepared weights are its bf16 values
        dtype = given if given != "prepared" else "bf16"
        return {"w13": _unquantized_weight(seed, "w13", (N1, H), e, H, dtype, sparse),
                "w2": _unquantized_weight(seed, "w2", (H, I), e, I, dtype, sparse)}
    out = {}
    for name, (n, k) in (("w13", (N1, H)), ("w2", (H, I))):
        if quant == "fp8_block":  # gated w13: each half has its own ceil(I/128) scale rows (docs/semantics.md §3)
            rows = 2 * -(-I // FP8_BLOCK) if name == "w13" and N1 == 2 * I else -(-n // FP8_BLOCK)
            sh = (rows, -(-k // FP8_BLOCK))
            if scale_fmt == "ue8m0":  # powers of two, 2^-(6 + bits(k)/2) or half of it
                scale = 2.0 ** -(6 + k.bit_length() // 2 + integers(seed, name + "_scale", sh, 2, e))
            else:
                scale = (1.0 + uniform(seed, name + "_scale", sh, e)) * 2.0 ** -(6 + k.bit_length() // 2)
            out[name], out[name + "_scale"] = _fp8_codes(seed, name, (n, k), e), scale.astype(np.float32)
        elif quant == "mxfp8":
            out[name] = _fp8_codes(seed, name, (n, k), e)
            shift = 6 + k.bit_length() // 2
            out[name + "_scale"] = (127 - shift - integers(seed, name + "_scale", (n, k // MX_BLOCK), 3, e)).astype(
                np.uint8
            )
        elif quant == "nvfp4":
            out[name] = (raw(seed, name, n * k // 2, e) & np.uint64(0xFF)).astype(np.uint8).reshape(n, k // 2)
            sf = np.uint64(6 << 3) + (raw(seed, name + "_scale", n * k // NVFP4_BLOCK, e) % np.uint64(16))
            out[name + "_scale"] = sf.astype(np.uint8).reshape(n, k // NVFP4_BLOCK)  # e4m3 codes of 0.5 .. 1.875
            out[name + "_global"] = np.array(2.0**-4 / np.sqrt(float(k)), np.float32)
        else:
            raise CaseError(f"unknown quant path {quant!r}")
        if sparse:  # code 0 is +0 in e4m3fn and in e2m1
            keep = _sparse_rows(seed, name, (n, k), e)
            if quant == "nvfp4":  # two codes per byte, the low nibble first
                keep = np.where(keep[:, 0::2], 0x0F, 0) | np.where(keep[:, 1::2], 0xF0, 0)
            else:
                keep = np.where(keep, 0xFF, 0)
            out[name] = out[name] & keep.astype(np.uint8)
    return out


class GeneratedWeights(NamedTuple):
    """ExpertWeights generated on demand: ``expert(e)`` is a pure function of (seed, quant, e, shapes, scale
    format, given form)."""

    seed: int
    quant: str
    num_experts: int
    N1: int
    H: int
    I: int
    scale_fmt: str = "fp32"  # MoEConfig.scale_fmt
    given: str = "prepared"  # MoEConfig.expert_weights
    form: str = "signed"  # "nonneg" or "sparse" under those moe distributions (WEIGHT_DISTS)

    def expert(self, e):
        if not 0 <= e < self.num_experts:
            raise IndexError(f"expert {e} not in [0, {self.num_experts})")
        return expert_weights(self.seed, self.quant, e, self.N1, self.H, self.I, self.scale_fmt, self.given,
                              self.form)

    def stacked(self):
        """dict of read-only [E, ...] arrays (for implementations that take all experts at once): the same
        objects while the weights stay the same, see stacked_weights."""
        return stacked_weights(self.seed, self.quant, self.num_experts, self.N1, self.H, self.I, self.scale_fmt,
                               self.given, self.form)


# One entry: the mono_moe adapter uploads its weights again unless it gets the very same arrays (checked with
# `is`), and one set of all 256 mono-moe experts is 768 MiB and 15 s or more of generation on one core.
@functools.lru_cache(maxsize=1)
def stacked_weights(seed, quant, E, N1, H, I, scale_fmt="fp32", given="prepared", form="signed"):
    """Every expert's arrays stacked [E, ...], read-only. Written in place from _expert_weights rather than
    np.stack over expert_weights: that would keep a second full copy in expert_weights' cache."""
    out = {}
    for e in range(E):
        for k, a in _expert_weights(seed, quant, e, N1, H, I, scale_fmt, given, form).items():
            if k not in out:
                out[k] = np.empty((E, *a.shape), a.dtype)
            out[k][e] = a
    for a in out.values():
        a.flags.writeable = False
    return out


def weights(case):
    c = case.config
    N1 = 2 * c.intermediate_size if c.gated else c.intermediate_size
    seed = case.seed if case.weight_seed is None else case.weight_seed
    return GeneratedWeights(seed, c.quant, c.routing.num_experts, N1, c.hidden_size, c.intermediate_size,
                            c.scale_fmt, c.expert_weights, case.dist if case.dist in WEIGHT_DISTS else "signed")


# ---- the case's inputs


def _routing_inputs(seed, dist, r):
    out = {
        "logits": round_to_dtype(logits(seed, dist, r.num_tokens, r.num_experts, r.n_group), r.logits_dtype)
    }
    if r.bias_dtype is not None:
        out["bias"] = round_to_dtype(bias(seed, dist, r.num_experts), r.bias_dtype)
    return out


# ---- trtllm-gen dev kernels


def _e4m3_codes(seed, name, shape):
    """Random e4m3fn codes without NaN (0x7f, 0xff become 0x7e, 0xfe: ±448)."""
    codes = (raw(seed, name, int(np.prod(shape))) & np.uint64(0xFF)).astype(np.uint8).reshape(shape)
    return np.where(codes & 0x7F == 0x7F, codes - 1, codes).astype(np.uint8)


def _dev_values(seed, dist, name, shape, dtype):
    """Values of a named distribution on the dtype's grid (float32), e4m3 as uint8 codes; zero_block: whole
    128-column blocks of zeros (a third of them), the FLT_MIN floor of the DeepSeek FP8 scale."""
    if dtype == "e4m3":
        z = _e4m3_codes(seed, name, shape)
    else:
        z = round_to_dtype(normal(seed, name, shape) * {"large": 2.0**6, "tiny": 2.0**-14}.get(dist, 1.0), dtype)
    if dist == "zero_block":
        cols = np.arange(shape[1]) // 128
        z = np.where(integers(seed, name + "_zero", (shape[0], cols[-1] + 1), 3)[:, cols] == 0, 0, z)
    return z


def _block_scales(seed, name, shape):
    """DeepSeek FP8 block scales: 2^-(4..11)·[1, 2), so that e4m3 codes × scale stay well inside fp32."""
    return (2.0 ** -(integers(seed, name + "_exp", shape, 8) + 4) * (1.0 + uniform(seed, name, shape))).astype(
        np.float32)


def dev_kernel_inputs(seed, dist, c):
    """The inputs of one trtllm-gen dev kernel: a routing permutation (spec/permutation.py) of random local
    experts (dist non_local: a quarter of the slots on another shard, -1; never for permute, which writes every
    slot's row), then the kernel's tensors."""
    from spec import permutation

    if c.kernel == "convertsf":
        rows, cols = {"R128c4": 128, "R8c4": 8, "R8c16": 8}[c.sf_layout], c.hidden_size
        padded = -(-c.num_tokens // rows) * rows
        return {"sf": (raw(seed, "sf", padded * cols) & np.uint64(0xFF)).astype(np.uint8)}
    T, K, E = c.num_tokens, c.top_k, c.num_experts
    ids = integers(seed, "ids", (T, K), E)
    if dist == "non_local" and c.kernel != "permute":
        ids = np.where(integers(seed, "remote", (T, K), 4) == 0, -1, ids)
    e2p = permutation.expanded_idx_to_permuted_idx(ids, E, c.tile_tokens_dim).astype(np.int32)
    lay = permutation.layout(ids, E, c.tile_tokens_dim)
    P = max(int(lay.total_num_padded_tokens), 1)
    out = {"expanded_idx_to_permuted_idx": e2p}
    H, values = c.hidden_size, functools.partial(_dev_values, seed, dist)
    if c.kernel == "permute":
        out["hidden_states"] = values("hidden_states", (T, H), c.dtype)
        if c.dtype == "e4m3":
            out["hidden_states_scale"] = (1.0 + uniform(seed, "scale", (H // FP8_BLOCK, T))).astype(np.float32)
        out["num_padded_tokens"] = np.array(P, np.int32)
        return out
    if c.kernel.startswith("finalize"):
        out["gemm2_out"] = values("gemm2_out", (P, H + c.hidden_padding), c.dtype)
        if c.weighted or c.kernel == "finalize_deepseek_fp8":
            out["expert_weights"] = round_bf16(uniform(seed, "weights", (T, K)))
        if c.kernel == "finalize_deepseek_fp8":
            out["gemm2_out_scale"] = _block_scales(seed, "gemm2_out_scale", (H // FP8_BLOCK, P))
        return out
    out["gemm1_out"] = values("gemm1_out", (P, 2 * H), c.dtype)
    if c.kernel == "activation_deepseek_fp8":
        out["gemm1_out_scale"] = _block_scales(seed, "gemm1_out_scale", (2 * H // FP8_BLOCK, P))
    if c.swiglu_controls:
        tiles = -(-P // c.tile_tokens_dim)
        map_ = np.zeros(tiles, np.int32)
        map_[: lay.cta_idx_xy_to_batch_idx.size] = lay.cta_idx_xy_to_batch_idx
        out["cta_idx_xy_to_batch_idx"] = map_
        out["alpha"] = (0.5 + 1.5 * uniform(seed, "alpha", (E,))).astype(np.float32)
        out["beta"] = (uniform(seed, "beta", (E,)) - 0.5).astype(np.float32)
        out["clamp_limit"] = (1.0 + 8.0 * uniform(seed, "clamp", (E,))).astype(np.float32)
    return out


def inputs(case):
    """dict of numpy arrays: routing {logits, bias?}; quant {x}; moe {hidden, logits, bias?}; trtllm_ops
    dev_kernel_inputs."""
    if case.dist not in DISTS[case.op]:
        raise CaseError(f"distribution {case.dist!r} is not one of {DISTS[case.op]} for op {case.op}")
    c = case.config
    if case.op == "trtllm_ops":
        return dev_kernel_inputs(case.seed, case.dist, c)
    if case.op == "routing":
        return _routing_inputs(case.seed, case.dist, c)
    if case.op == "quant":
        group = quant_block(c)
        x = round_to_dtype(
            quant_input(case.seed, case.dist, c.num_tokens, c.hidden_size, group), c.input_dtype
        )
        if c.scheme != "nvfp4":
            return {"x": x}
        amax = np.float32(np.max(np.abs(x), initial=0.0))  # gs = fl(448·6 / amax), 1 for an all-zero x
        return {"x": x, "global_scale": np.float32(448.0 * 6.0) / amax if amax > 0 else np.float32(1.0)}
    out = _routing_inputs(case.seed, case.dist, c.routing)
    hidden = normal(case.seed, "hidden", (c.routing.num_tokens, c.hidden_size))
    if case.dist == "nonneg":
        hidden = np.abs(hidden)
    out["hidden"] = round_to_dtype(hidden, c.hidden_dtype)
    return out
