"""Correct implementations that differ from the spec only where the spec's choice is a declared rule: the tie order.

``REVERSED_TIES`` is the torch implementation run on the experts in reverse order (groups reversed too, so every
group stays whole) with the ids mapped back: equal keys go to the higher expert id and equal group scores to the
higher group. It declares that rule (``tie_rule="higher_index"``), so the comparator holds it to exactly that order
among bit-identical keys and accepts every other valid selection it makes (difftest/checking/compare/); fixtures/R02
holds a case it once rejected.
"""


from ..checking.impl_torch import TORCH


def _reversed_run(case, inputs):
    E = case.config.num_experts
    flipped = {name: a[..., ::-1].copy() for name, a in inputs.items()}
    out = TORCH.run(case, flipped)
    k = case.config.top_k
    ids = out["ids"].copy()
    ids[:, :k] = E - 1 - ids[:, :k]
    return {"ids": ids, "weights": out["weights"]}


def _declaring(rule):
    return lambda case: TORCH.recipe(case).but(tie_rule=rule)


REVERSED_TIES = TORCH._replace(name="tie_order:reversed", ops=("routing",), run=_reversed_run,
                               recipe=_declaring("higher_index"))
