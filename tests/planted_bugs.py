"""A routing implementation with a rare planted bug, for tests of shared example databases
(tests/test_redis_db.py): torch's routing, except that for one case seed in 64 the first token's first weight
is doubled. A campaign of hundreds of examples finds it; a few fresh examples almost never do."""

from difftest.impl_torch import TORCH

EVERY = 64


def _run(case, inputs):
    out = TORCH.run(case, inputs)
    if case.seed % EVERY != 17 or out["weights"].size == 0:
        return out
    weights = out["weights"].copy()
    weights[0, 0] *= 2
    return {**out, "weights": weights}


ONE_SEED_IN_64 = TORCH._replace(name="planted:one_seed_in_64", ops=("routing",), run=_run)
