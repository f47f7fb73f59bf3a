"""spec.permutation: the padded per-expert layout, its checker (valid realizations pass, broken ones are
reported), and the ids read back from it."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spec import permutation as pm

TILES = (1, 2, 4, 8)


@st.composite
def routed(draw):
    """(local_ids [T, K], L, tile): distinct experts per token, ids >= L drawn as remote (-1)."""
    T = draw(st.integers(0, 12), label="num_tokens")
    L = draw(st.integers(1, 6), label="num_local_experts")
    K = draw(st.integers(1, 4), label="top_k")
    pool = L + draw(st.integers(0, 4), label="remote_experts")
    K = min(K, pool)
    rows = [draw(st.permutations(range(pool)), label=f"token{t}")[:K] for t in range(T)]
    ids = np.array(rows, np.int64).reshape(T, K)
    return np.where(ids < L, ids, -1), L, draw(st.sampled_from(TILES), label="tile")


def outputs(ids, L, tile, e2p=None):
    """Kernel-shaped outputs of one realization (by default the expanded-order one)."""
    lay = pm.layout(ids, L, tile)
    e2p = pm.expanded_idx_to_permuted_idx(ids, L, tile) if e2p is None else e2p
    return dict(total_num_padded_tokens=np.array([lay.total_num_padded_tokens]),
                expanded_idx_to_permuted_idx=e2p,
                permuted_idx_to_token_idx=pm.permuted_idx_to_token_idx(e2p, lay.total_num_padded_tokens),
                cta_idx_xy_to_batch_idx=lay.cta_idx_xy_to_batch_idx.copy(),
                cta_idx_xy_to_mn_limit=lay.cta_idx_xy_to_mn_limit.copy(),
                num_non_exiting_ctas=np.array([lay.num_non_exiting_ctas]))


def shuffled_within_experts(ids, L, tile, seed):
    """The atomics' freedom: rows of each expert in any order inside its segment."""
    rng = np.random.default_rng(seed)
    e2p = pm.expanded_idx_to_permuted_idx(ids, L, tile).ravel()
    for e in range(L):
        rows = np.flatnonzero(ids.ravel() == e)
        e2p[rows] = rng.permutation(e2p[rows])
    return e2p.reshape(ids.shape)


def test_permutation_hand_example():
    ids = np.array([[0, 2], [2, -1], [0, 1]])  # L = 3, tile = 4
    lay = pm.layout(ids, 3, 4)
    assert lay.counts.tolist() == [2, 1, 2] and lay.padded_counts.tolist() == [4, 4, 4]
    assert lay.offsets.tolist() == [0, 4, 8] and lay.total_num_padded_tokens == 12
    assert lay.cta_idx_xy_to_batch_idx.tolist() == [0, 1, 2] and lay.cta_idx_xy_to_mn_limit.tolist() == [2, 5, 10]
    e2p = pm.expanded_idx_to_permuted_idx(ids, 3, 4)
    assert e2p.tolist() == [[0, 8], [9, -1], [1, 4]]
    assert pm.permuted_idx_to_token_idx(e2p, 12).tolist() == [0, 2, -1, -1, 2, -1, -1, -1, 0, 1, -1, -1]


@settings(max_examples=60, deadline=None)
@given(routed(), st.integers(0, 2**32 - 1))
def test_permutation_valid_realizations_pass(case, seed):
    ids, L, tile = case
    assert pm.check_permutation(ids, L, tile, **outputs(ids, L, tile)) == []
    shuffled = outputs(ids, L, tile, shuffled_within_experts(ids, L, tile, seed))
    assert pm.check_permutation(ids, L, tile, **shuffled) == []


@settings(max_examples=60, deadline=None)
@given(routed(), st.integers(0, 2**32 - 1))
def test_permutation_ids_read_back(case, seed):
    ids, L, tile = case
    o = outputs(ids, L, tile, shuffled_within_experts(ids, L, tile, seed))
    got = pm.ids_from_permutation(o["expanded_idx_to_permuted_idx"], o["cta_idx_xy_to_batch_idx"], tile)
    assert (got == ids).all(), f"ids read back {got.tolist()} != {ids.tolist()}"


@settings(max_examples=60, deadline=None)
@given(routed())
def test_permutation_layout_properties(case):
    ids, L, tile = case
    lay = pm.layout(ids, L, tile)
    T, K = ids.shape
    assert lay.counts.sum() == (ids >= 0).sum()
    assert (lay.offsets % tile == 0).all() and (lay.padded_counts - lay.counts < tile).all()
    c = np.arange(lay.num_non_exiting_ctas)
    assert ((lay.cta_idx_xy_to_mn_limit > c * tile) & (lay.cta_idx_xy_to_mn_limit <= (c + 1) * tile)).all()
    assert lay.num_non_exiting_ctas <= pm.max_num_ctas(T, K, L, tile)
    assert lay.total_num_padded_tokens <= pm.max_num_padded_tokens(T, K, L, tile)


def _one_with(ids, L, tile, predicate):
    """Skip draws without the structure a corruption needs."""
    from hypothesis import assume

    assume(predicate(pm.layout(ids, L, tile)))


@settings(max_examples=40, deadline=None)
@given(routed())
def test_permutation_swap_across_experts_reported(case):
    ids, L, tile = case
    _one_with(ids, L, tile, lambda lay: (lay.counts > 0).sum() >= 2)
    o = outputs(ids, L, tile)
    flat = o["expanded_idx_to_permuted_idx"].ravel().copy()
    e = ids.ravel()
    a = np.flatnonzero(e == e[e >= 0].min())[0]
    b = np.flatnonzero(e == e[e >= 0].max())[0]
    flat[a], flat[b] = flat[b], flat[a]
    o["expanded_idx_to_permuted_idx"] = flat.reshape(ids.shape)
    assert pm.check_permutation(ids, L, tile, **o), "rows swapped across experts passed"


@settings(max_examples=40, deadline=None)
@given(routed())
def test_permutation_wrong_padding_reported(case):
    ids, L, tile = case
    _one_with(ids, L, tile, lambda lay: (lay.padded_counts > lay.counts).any())
    o = outputs(ids, L, tile)
    lay = pm.layout(ids, L, tile)
    e = np.flatnonzero(lay.padded_counts > lay.counts)[0]
    o["permuted_idx_to_token_idx"][lay.offsets[e] + lay.counts[e]] = 0
    assert any("padding" in v for v in pm.check_permutation(ids, L, tile, **o))


@settings(max_examples=40, deadline=None)
@given(routed(), st.sampled_from([-1, 1]))
def test_permutation_mn_limit_off_by_one_reported(case, step):
    ids, L, tile = case
    _one_with(ids, L, tile, lambda lay: lay.num_non_exiting_ctas > 0)
    o = outputs(ids, L, tile)
    o["cta_idx_xy_to_mn_limit"][-1] += step
    assert any("mn_limit" in v for v in pm.check_permutation(ids, L, tile, **o))


@settings(max_examples=40, deadline=None)
@given(routed())
def test_permutation_remote_row_and_duplicates_reported(case):
    ids, L, tile = case
    _one_with(ids, L, tile, lambda lay: lay.counts.max(initial=0) >= 2)
    o = outputs(ids, L, tile)
    e2p = o["expanded_idx_to_permuted_idx"]
    e = np.bincount(ids[ids >= 0]).argmax()
    first, second = np.argwhere(ids == e)[:2]
    e2p[tuple(second)] = e2p[tuple(first)]
    assert any("also holds" in v for v in pm.check_permutation(ids, L, tile, **o))
    if (ids < 0).any():
        o = outputs(ids, L, tile)
        o["expanded_idx_to_permuted_idx"][tuple(np.argwhere(ids < 0)[0])] = 0
        assert any("remote" in v for v in pm.check_permutation(ids, L, tile, **o))


def test_permutation_scalars_and_inverse_reported():
    ids = np.array([[0, 1], [1, 0], [0, -1]])
    o = outputs(ids, 2, 2)
    o["total_num_padded_tokens"] = np.array([o["total_num_padded_tokens"][0] + 2])
    o["num_non_exiting_ctas"] = np.array([5])
    o["permuted_idx_to_token_idx"][0] = 2
    v = pm.check_permutation(ids, 2, 2, **o)
    assert any(s.startswith("total_num_padded_tokens") for s in v)
    assert any(s.startswith("num_non_exiting_ctas") for s in v)
    assert any(s.startswith("permuted_idx_to_token_idx[0]") for s in v)
