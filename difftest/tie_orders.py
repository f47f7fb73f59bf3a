"""Correct implementations that differ from the spec only where the spec leaves the choice open: the tie order.

``REVERSED_TIES`` is the torch implementation run on the experts in reverse order (groups reversed too, so every
group stays whole) with the ids mapped back: equal keys go to the higher expert id and equal group scores to the
higher group, as an implementation with no promised tie order (torch.topk) may do. Every selection it makes is
valid (difftest/compare.py), so the comparator must accept it; fixtures/R02 holds a case it once rejected.
"""


from .impl_torch import TORCH


def _reversed_run(case, inputs):
    E = case.config.num_experts
    flipped = {name: a[..., ::-1].copy() for name, a in inputs.items()}
    out = TORCH.run(case, flipped)
    k = case.config.top_k
    ids = out["ids"].copy()
    ids[:, :k] = E - 1 - ids[:, :k]
    return {"ids": ids, "weights": out["weights"]}


REVERSED_TIES = TORCH._replace(name="tie_order:reversed", ops=("routing",), run=_reversed_run)
