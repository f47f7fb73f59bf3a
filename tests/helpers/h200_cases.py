"""The cases of the H200 record-then-verify campaign (2026-11-29) and of spec/data/probes/probe_acc.py, regenerated
bit-identically from (kind, seed) on any machine: numpy PCG64 raw output and integer / IEEE-basic-operation
transforms only (no numpy distribution methods, no libm). tests/spec/test_quant.py regenerates the probe's operands."""

import numpy as np

TOPK_CONFIGS = ((256, 8, 4, 8), (128, 8, 4, 8), (64, 4, 2, 6), (96, 8, 3, 5), (256, 1, 1, 1),
                (384, 1, 1, 1), (72, 1, 1, 1), (160, 8, 2, 8), (32, 4, 4, 3), (256, 16, 4, 1))
TOPK_DISTS = ("normal", "exact_ties", "negative", "large_bias", "underflow", "near_tie_groups")
MONO = dict(E=256, I=512, H=2048)


def uniform(rng, n):
    return (rng.bit_generator.random_raw(n) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def normalish(rng, n):
    """Irwin-Hall(4), centred and scaled to unit variance: deterministic, tails at ±3.46."""
    u = uniform(rng, 4 * n).reshape(4, n)
    return (u[0] + u[1] + u[2] + u[3] - 2.0) * np.sqrt(3.0)


def bf16(x):
    """float64 -> float32 (RNE) -> bf16 (RNE on the bit pattern), as float32 values."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16) << np.uint64(16)
    return b.astype(np.uint32).view(np.float32)


def topk_case(seed):
    """-> (config dict, logits float32 [T, E] (values of its dtype), bias float32 [E])."""
    rng = np.random.Generator(np.random.PCG64(seed))
    pick = rng.bit_generator.random_raw(4)
    E, n_group, topk_group, top_k = TOPK_CONFIGS[int(pick[0] % len(TOPK_CONFIGS))]
    dist = TOPK_DISTS[int(pick[1] % len(TOPK_DISTS))]
    dtype = ("fp32", "bf16")[int(pick[2] % 2)]
    T = 1 + int(pick[3] % 48)
    x = normalish(rng, T * E).reshape(T, E)
    b = 0.05 * normalish(rng, E)
    if dist == "exact_ties":
        x = np.floor(x * 2) / 2  # eight distinct values: many exact ties in keys and group scores
        b = np.zeros(E)
    elif dist == "negative":
        x = x - 6.0
    elif dist == "large_bias":
        b = 4.0 * normalish(rng, E)
    elif dist == "underflow":
        x = np.where(uniform(rng, T * E).reshape(T, E) < 0.7, x * 10 - 95.0, x - 15.0)
    elif dist == "near_tie_groups":
        g = E // n_group
        x = np.repeat(normalish(rng, T * n_group).reshape(T, n_group), g, axis=1) + 1e-3 * x
    logits = bf16(x) if dtype == "bf16" else x.astype(np.float32)
    cfg = dict(seed=seed, E=E, n_group=n_group, topk_group=topk_group, top_k=top_k, dist=dist,
               logits_dtype=dtype, T=T, rsf=(1.0, 2.5)[int(pick[0] // 16 % 2)])
    return cfg, logits, b.astype(np.float32)


def e4m3_codes(rng, shape):
    """Random e4m3fn codes with exponent field 4..11 (|v| in [2^-3, 30]), either sign; never NaN."""
    n = int(np.prod(shape))
    raw = np.frombuffer(rng.bit_generator.random_raw((n + 7) // 8).tobytes(), np.uint8)[:n]
    return ((raw & 0x80) | (0x20 + (raw & 0x3F))).reshape(shape).astype(np.uint8)


def block_scales(rng, shape):
    """fp32 scales 2^-9·(1 + k/8), k in 0..7: exact in fp32."""
    k = rng.bit_generator.random_raw(int(np.prod(shape))) % np.uint64(8)
    return (2.0 ** -9 * (1 + k.astype(np.float64) / 8)).reshape(shape).astype(np.float32)


def mono_weights(seed=0):
    """[gate; up] w13 codes [256, 1024, 2048], scales [256, 8, 16]; w2 codes [256, 2048, 512], scales [256, 16, 4]."""
    rng = np.random.Generator(np.random.PCG64(seed))
    E, I, H = MONO["E"], MONO["I"], MONO["H"]
    return (e4m3_codes(rng, (E, 2 * I, H)), block_scales(rng, (E, 2 * I // 128, H // 128)),
            e4m3_codes(rng, (E, H, I)), block_scales(rng, (E, H // 128, I // 128)))


MONO_METHODS = (("softmax", True), ("softmax", False), ("sigmoid", True), ("sigmoid", False))


def mono_case(seed):
    """-> (config dict, hidden float32 [T, 2048] bf16 values, logits float32 [T, 256] bf16 values)."""
    rng = np.random.Generator(np.random.PCG64(10**6 + seed))
    pick = rng.bit_generator.random_raw(4)
    T = 1 + int(pick[0] % 8)
    top_k = 1 + int(pick[1] % 8)
    scoring, renorm = MONO_METHODS[int(pick[2] % 4)]
    dist = ("normal", "wide", "ties", "outlier")[int(pick[3] % 4)]
    h = normalish(rng, T * MONO["H"]).reshape(T, -1)
    z = normalish(rng, T * MONO["E"]).reshape(T, -1)
    if dist == "wide":  # mixed magnitudes inside each 128-block: small values land in e4m3 subnormals
        h = h * 2.0 ** np.floor(uniform(rng, h.size).reshape(h.shape) * 16 - 8)
    elif dist == "ties":
        z = np.floor(z * 2) / 2
    elif dist == "outlier":
        h[:, ::97] *= 64.0
    cfg = dict(seed=seed, T=T, top_k=top_k, scoring=scoring, renormalize=renorm, dist=dist)
    return cfg, bf16(h), bf16(z)
