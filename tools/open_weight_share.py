"""How many routing tokens a tanh.approx recipe leaves open: docs/comparisons.md, "No bound passes vacuously".

    python tools/open_weight_share.py

Draws 3,000 routing cases of the default strategies (derandomized), keeps the sigmoid-scored methods, routes each
under the trtllm-gen routing recipe (sigmoid = "tanh": tanh.approx.f32) and counts the tokens whose router-weight
bound is +inf (bounds.routing_weights: the renormalized scores' sum within k·η̄ of 0), which the comparison
excludes and counts; per (method, input distribution) where any are.
"""
import collections

import numpy as np
from hypothesis import HealthCheck, given, settings

from difftest.checking import impl_spec
from difftest.checking.compare import keys
from difftest.model import generate, strategies
from spec.recipes import TRTLLM_GEN_ROUTING

SIGMOID_METHODS = ("sigmoid", "sigmoid_renorm", "deepseek_v3", "topk_sigmoid", "minimax2")
tokens, open_tokens = collections.Counter(), collections.Counter()


@settings(max_examples=3000, database=None, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(strategies.cases(op="routing"))
def count(case):
    c = case.config
    if c.method not in SIGMOID_METHODS or c.num_tokens == 0:
        return
    inputs = generate.inputs(case)
    r = impl_spec.route(c, inputs, TRTLLM_GEN_ROUTING)
    ids = np.sort(r.ids[:, :c.top_k], axis=1).astype(np.int64)
    bound = keys.weight_bound(c, TRTLLM_GEN_ROUTING, r.weights[:, :c.top_k], inputs=inputs, ids=ids)
    tokens[c.method, case.dist] += c.num_tokens
    open_tokens[c.method, case.dist] += int(np.isposinf(bound).any(axis=1).sum())


if __name__ == "__main__":
    count()
    t, o = sum(tokens.values()), sum(open_tokens.values())
    print(f"{t} tokens of sigmoid-scored routing, {o} with open weights ({100 * o / max(t, 1):.2f} %)")
    for (method, dist), n in sorted(open_tokens.items()):
        if n:
            print(f"  {method} / {dist}: {n} of {tokens[method, dist]} ({100 * n / tokens[method, dist]:.1f} %)")
