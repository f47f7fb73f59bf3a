"""The padded per-expert layout a MoE routing stage hands to its grouped GEMMs (trtllm-gen's permutation).

Input: ``local_ids`` int [T, K], the local expert (0 <= id < L) of each (token t, slot k), -1 where the
expert is on another shard. Expanded index x = t·K + k. Expert e receives ``count[e]`` rows, padded to
``padded[e] = ceil(count[e]/tile)·tile``; expert segments follow each other in expert order from
``offset[e] = Σ_{e'<e} padded[e']``. CTA tile c (``tile`` rows) belongs to the expert whose segment holds
rows [c·tile, (c+1)·tile); its GEMM rows end at ``mn_limit[c] = min((c+1)·tile, offset[e] + count[e])``.

Fixed exactly by the kernel: counts, offsets, total padded count, num_non_exiting_ctas, the first
num_non_exiting_ctas entries of cta_idx_xy_to_batch_idx / cta_idx_xy_to_mn_limit, -1 for non-local slots in
expanded_idx_to_permuted_idx, -1 in the padding rows [offset[e] + count[e], offset[e] + padded[e]). Free:
the order of an expert's rows inside [offset[e], offset[e] + count[e]) (atomicAdd order in the cluster,
cooperative and histogram kernels; token order only in the single-block kernels), so the checker accepts
every order. Entries past total_num_padded_tokens / num_non_exiting_ctas are unspecified (docs/
trtllm_gen_routing.md §4).
"""

from typing import NamedTuple

import numpy as np


class Layout(NamedTuple):
    counts: np.ndarray            # int64 [L]: rows routed to each local expert
    padded_counts: np.ndarray     # int64 [L]: counts rounded up to tile_tokens_dim
    offsets: np.ndarray           # int64 [L]: first permuted row of each expert
    total_num_padded_tokens: int
    cta_idx_xy_to_batch_idx: np.ndarray  # int64 [C]: local expert of each CTA tile
    cta_idx_xy_to_mn_limit: np.ndarray   # int64 [C]: end of the tile's valid rows
    num_non_exiting_ctas: int


def _require(ok, message):
    if not ok:
        raise ValueError(message)


def _check_ids(local_ids, num_local_experts, tile_tokens_dim):
    ids = np.asarray(local_ids)
    _require(ids.ndim == 2 and ids.dtype.kind in "iu", f"local_ids must be int [T, K], got {ids.dtype} {ids.shape}")
    _require(ids.size == 0 or (ids.min() >= -1 and ids.max() < num_local_experts),
             f"local_ids must lie in [-1, {num_local_experts})")
    _require(tile_tokens_dim >= 1 and tile_tokens_dim & (tile_tokens_dim - 1) == 0,
             f"tile_tokens_dim must be a positive power of two, got {tile_tokens_dim}")
    return ids.astype(np.int64)


def local_expert_ids(ids, num_experts, local_expert_offset, local_num_experts, num_fused_shared_experts=0):
    """Global ids [T, k + S] -> local ids on the shard [offset, offset + L): e - offset for a routed expert
    inside it, -1 outside; the S fused shared experts (ids E + i) are local expert L + i on every shard (each
    shard holds the shared experts' weights after its own routed ones)."""
    ids = np.asarray(ids, np.int64)
    shared = ids >= num_experts
    inside = (ids >= local_expert_offset) & (ids < local_expert_offset + local_num_experts)
    return np.where(shared, ids - num_experts + local_num_experts,
                    np.where(inside, ids - local_expert_offset, -1))


def counts(local_ids, num_local_experts):
    """count[e] = #{(t, k) : local_ids[t, k] = e}; -1 (remote) is not counted."""
    ids = np.asarray(local_ids).ravel()
    return np.bincount(ids[ids >= 0], minlength=num_local_experts).astype(np.int64)


def padded_counts(count, tile_tokens_dim):
    """padded[e] = ceil(count[e] / tile)·tile (an expert without rows takes no tile)."""
    return -(-np.asarray(count, np.int64) // tile_tokens_dim) * tile_tokens_dim


def offsets(padded):
    """offset[e] = Σ_{e' < e} padded[e'] (exclusive prefix sum, expert order)."""
    return np.concatenate([[0], np.cumsum(padded)[:-1]]).astype(np.int64)


def cta_idx_xy_to_batch_idx(count, tile_tokens_dim):
    """Tile c → its expert: expert e repeated ceil(count[e]/tile) times, experts in order."""
    return np.repeat(np.arange(len(count)), padded_counts(count, tile_tokens_dim) // tile_tokens_dim)


def cta_idx_xy_to_mn_limit(count, tile_tokens_dim):
    """mn_limit[c] = min((c + 1)·tile, offset[e] + count[e]) for tile c of expert e (end of its valid rows)."""
    expert = cta_idx_xy_to_batch_idx(count, tile_tokens_dim)
    ends = (offsets(padded_counts(count, tile_tokens_dim)) + count)[expert]
    return np.minimum((np.arange(len(expert)) + 1) * tile_tokens_dim, ends)


def layout(local_ids, num_local_experts, tile_tokens_dim):
    """The Layout of local_ids; total = Σ padded, num_non_exiting_ctas = total / tile."""
    ids = _check_ids(local_ids, num_local_experts, tile_tokens_dim)
    c = counts(ids, num_local_experts)
    p = padded_counts(c, tile_tokens_dim)
    return Layout(c, p, offsets(p), int(p.sum()), cta_idx_xy_to_batch_idx(c, tile_tokens_dim),
                  cta_idx_xy_to_mn_limit(c, tile_tokens_dim), int(p.sum()) // tile_tokens_dim)


def max_num_ctas(num_tokens, top_k, num_experts, tile_tokens_dim):
    """Worst-case tile count (runner.h getMaxNumCtasInBatchDim): one row for each of min(E, T·K) experts,
    the rest poured into full tiles: min(E, T·K) + (T·K - min(E, T·K)) // tile."""
    rows = num_tokens * top_k
    filled = min(num_experts, rows)
    return filled + (rows - filled) // tile_tokens_dim


def max_num_padded_tokens(num_tokens, top_k, num_experts, tile_tokens_dim):
    """Worst-case permuted rows = max_num_ctas·tile (the size of permuted_idx_to_token_idx)."""
    return max_num_ctas(num_tokens, top_k, num_experts, tile_tokens_dim) * tile_tokens_dim


def expanded_idx_to_permuted_idx(local_ids, num_local_experts, tile_tokens_dim):
    """One valid realization, rows of an expert in expanded-index order (the single-block kernels' order):
    p[t, k] = offset[e] + #{x' < x : id(x') = e} for e = local_ids[t, k] >= 0, else -1."""
    ids = _check_ids(local_ids, num_local_experts, tile_tokens_dim)
    flat = ids.ravel()
    start = layout(ids, num_local_experts, tile_tokens_dim).offsets
    p = np.full(flat.shape, -1, np.int64)
    for e in range(num_local_experts):
        rows = np.flatnonzero(flat == e)
        p[rows] = start[e] + np.arange(len(rows))
    return p.reshape(ids.shape)


def permuted_idx_to_token_idx(expanded_to_permuted, total_num_padded_tokens):
    """Inverse map, [total]: row p holds token t where expanded_to_permuted[t, k] = p; padding rows -1."""
    e2p = np.asarray(expanded_to_permuted)
    out = np.full(total_num_padded_tokens, -1, np.int64)
    t, _ = np.nonzero(e2p >= 0)
    out[e2p[e2p >= 0]] = t
    return out


def ids_from_permutation(expanded_to_permuted, cta_idx_xy_to_batch_idx, tile_tokens_dim):
    """Local expert ids read back from the layout (FlashInfer's trtllm_gen_routing wrapper):
    id[t, k] = batch_idx[p // tile] for p = expanded_to_permuted[t, k] >= 0, else -1."""
    e2p = np.asarray(expanded_to_permuted, np.int64)
    batch = np.asarray(cta_idx_xy_to_batch_idx, np.int64)
    ids = np.full(e2p.shape, -1, np.int64)
    ids[e2p >= 0] = batch[e2p[e2p >= 0] // tile_tokens_dim]
    return ids


def check_permutation(local_ids, num_local_experts, tile_tokens_dim, *, total_num_padded_tokens,
                      expanded_idx_to_permuted_idx, permuted_idx_to_token_idx, cta_idx_xy_to_batch_idx,
                      cta_idx_xy_to_mn_limit, num_non_exiting_ctas):
    """One-line violations of the layout that local_ids determine ([] when the outputs are a valid
    realization). Checked: the scalars, the first num_non_exiting_ctas CTA entries, -1 for remote slots,
    each local (t, k) at a distinct row inside its expert's [offset, offset + count), the inverse
    token map at those rows, and -1 in every padding row."""
    ids = _check_ids(local_ids, num_local_experts, tile_tokens_dim)
    want = layout(ids, num_local_experts, tile_tokens_dim)
    total, ctas = int(np.ravel(total_num_padded_tokens)[0]), int(np.ravel(num_non_exiting_ctas)[0])
    e2p = np.asarray(expanded_idx_to_permuted_idx, np.int64).reshape(ids.shape)
    p2t = np.asarray(permuted_idx_to_token_idx, np.int64).ravel()
    out = []
    if total != want.total_num_padded_tokens:
        out.append(f"total_num_padded_tokens={total} but Σ padded counts={want.total_num_padded_tokens}")
    if ctas != want.num_non_exiting_ctas:
        out.append(f"num_non_exiting_ctas={ctas} but Σ ceil(count/tile)={want.num_non_exiting_ctas}")
    n = want.num_non_exiting_ctas
    for name, got, exp in (("cta_idx_xy_to_batch_idx", cta_idx_xy_to_batch_idx, want.cta_idx_xy_to_batch_idx),
                           ("cta_idx_xy_to_mn_limit", cta_idx_xy_to_mn_limit, want.cta_idx_xy_to_mn_limit)):
        got = np.asarray(got, np.int64).ravel()[:n]
        bad = np.flatnonzero(got != exp[:len(got)]) if len(got) == n else [len(got)]
        if len(bad):
            c = bad[0]
            out.append(f"{name}[{c}]={got[c] if c < len(got) else 'missing'} but expected {exp[c]}")
    if len(p2t) < want.total_num_padded_tokens:
        return out + [f"permuted_idx_to_token_idx has {len(p2t)} rows < {want.total_num_padded_tokens}"]
    remote = (ids < 0) & (e2p != -1)
    for t, k in zip(*np.nonzero(remote), strict=True):
        out.append(f"expanded_idx_to_permuted_idx[{t}, {k}]={e2p[t, k]} but the expert is remote (-1)")
    lo, hi = want.offsets, want.offsets + want.counts
    rows = {}
    for t, k in zip(*np.nonzero(ids >= 0), strict=True):
        e, p = ids[t, k], e2p[t, k]
        if not lo[e] <= p < hi[e]:
            out.append(f"expanded_idx_to_permuted_idx[{t}, {k}]={p} outside expert {e}'s rows [{lo[e]}, {hi[e]})")
        elif p in rows:
            out.append(f"expanded_idx_to_permuted_idx[{t}, {k}]={p} also holds {rows[p]}")
        elif p2t[p] != t:
            out.append(f"permuted_idx_to_token_idx[{p}]={p2t[p]} but expanded_idx_to_permuted_idx[{t}, {k}]={p}")
        rows.setdefault(p, (int(t), int(k)))
    for e in np.flatnonzero(want.padded_counts > want.counts):
        pad = np.arange(hi[e], lo[e] + want.padded_counts[e])
        bad = pad[p2t[pad] != -1]
        if len(bad):
            out.append(f"permuted_idx_to_token_idx[{bad[0]}]={p2t[bad[0]]} is padding of expert {e} (-1)")
    return out
