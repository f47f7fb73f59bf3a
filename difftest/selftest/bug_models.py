"""Small implementations with a known bug, loadable by their registry name (``bug:deepseek_biased_weights``,
``bug:rsf_twice``; difftest/checking/interface.py SELF_TEST) or by reference
(``difftest.selftest.bug_models:NAME``), so the tester can be shown to find, shrink and record real bug classes
(difftest/selftest/known_bugs.py, fixtures/README.md).

Each wraps the torch implementation and changes one thing.
"""

import numpy as np

from ..checking.impl_torch import TORCH


def _biased_weights_run(case, inputs):
    """K1 (vllm #12002): DeepSeek-V3 weights gathered from the biased scores s + b instead of s."""
    out = TORCH.run(case, inputs)
    c = case.config
    if case.op != "routing" or c.method != "deepseek_v3" or "bias" not in inputs:
        return out
    s = (1 / (1 + np.exp(-inputs["logits"].astype(np.float64)))).astype(np.float32)
    biased = s + inputs["bias"].astype(np.float32)
    k = c.top_k
    w = np.take_along_axis(biased, out["ids"][:, :k].astype(np.int64), axis=1)
    if c.renormalize:
        w = w / (w.sum(axis=1, keepdims=True) + np.float32(c.eps))
    w = w * np.float32(1.0 if c.routed_scaling_factor is None else c.routed_scaling_factor)
    weights = out["weights"].copy()
    weights[:, :k] = w
    return {**out, "weights": weights}  # the ids and the padded permutation (tile_tokens_dim) as torch's


def _rsf_twice_run(case, inputs):
    """K7/K8 (vllm #45037, sglang #35152): rsf applied in routing and again on the output."""
    out = TORCH.run(case, inputs)
    rsf = case.config.routed_scaling_factor if case.op == "routing" else None
    if rsf is None:
        return out
    return {**out, "weights": (out["weights"] * np.float32(rsf)).astype(np.float32)}


# Routing bug models return ids and weights only: of contract 1, before the padded permutation existed.
DEEPSEEK_BIASED_WEIGHTS = TORCH._replace(
    name="bug:deepseek_biased_weights", ops=("routing",), run=_biased_weights_run, contract=1
)
RSF_TWICE = TORCH._replace(name="bug:rsf_twice", ops=("routing",), run=_rsf_twice_run)
