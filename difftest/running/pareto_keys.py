"""Memoized shrink-order keys for Hypothesis' Pareto front: the same search, a third less of a worker's time.

A run with target observations and an example database keeps a Pareto front of its examples
(hypothesis.internal.conjecture.pareto): every new example is compared with about ten members of the front, and
every comparison recomputes both sides' shrink-order key (shrinker.sort_key: choice_to_index of every choice).
In a campaign worker that bookkeeping took about 30 % of the CPU time (benchmarks/RESULTS.md, profile). The key
is a pure function of an example's choice nodes, which are immutable, so here it is computed once per node tuple;
the front, and everything Hypothesis does with it (the database's pareto entries, pareto_optimise), stays the
same: tests/test_throughput.py runs a seeded cell with and without this and compares every example.

install() is called once by difftest.running.campaign. A Hypothesis whose pareto module has no sort_key is left alone.
"""

CACHE_LIMIT = 1 << 15  # node tuples remembered (each key is a tuple of small ints); cleared when full


def install():
    """Replace hypothesis' pareto.sort_key by a memoized one; True if it is in place (idempotent)."""
    try:
        from hypothesis.internal.conjecture import pareto
    except ImportError:
        return False
    original = getattr(pareto, "sort_key", None)
    if original is None:
        return False
    if getattr(original, "memoizes", None) is not None:
        return True
    cache = {}

    def sort_key(nodes):
        hit = cache.get(id(nodes))
        if hit is not None and hit[0] is nodes:  # the tuple itself is kept, so its id is not reused meanwhile
            return hit[1]
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        key = original(nodes)
        cache[id(nodes)] = (nodes, key)
        return key

    sort_key.memoizes = original
    pareto.sort_key = sort_key
    return True


def uninstall():
    """Put the original back (tests compare the two)."""
    from hypothesis.internal.conjecture import pareto

    original = getattr(pareto.sort_key, "memoizes", None)
    if original is not None:
        pareto.sort_key = original
