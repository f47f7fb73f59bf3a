"""A complete external implementation for difftest: DeepSeek-V3 routing in numpy. Copy it and replace `run`.

Fuzz it against the spec (docs/plugins.md):

    python -m difftest fuzz --impl examples/plugin_example.py:DEEPSEEK_V3 --op routing --time-budget 60

The routing follows DeepSeek-V3's reference gate: s = sigmoid(logits); selection keys s + bias; group score =
sum of the two largest keys of each group; the topk_group best groups kept (ties: lower group index); top_k
experts by key (ties: lower expert index); weights s[ids], divided by (sum + eps) when renormalizing, times
routed_scaling_factor. It rounds where the spec's default recipe rounds, and says so with `recipe`: the
sigmoid is computed in float64 and rounded once to float32; the bias add, the group sums, the weight sum (left
to right, in selection order), the divide and the scale are float32 operations.
"""

import numpy as np

from spec.recipes import Recipe

RECIPE = Recipe(name="example_numpy_fp32")  # the defaults: fp32 logits, bias and weights, exact sigmoid


class DeepSeekV3Routing:
    name = "example:deepseek_v3_numpy"
    version = "1.0"
    ops = ("routing",)
    deterministic = True  # checked: repeated runs must give identical bits
    may_crash = False  # True would run it in a separate process (a native kernel that can abort)

    def available(self):
        return None  # numpy is always there; a GPU plug-in returns e.g. "no CUDA device"

    def unsupported(self, case):
        c = case.config
        if c.method != "deepseek_v3":
            return f"implements deepseek_v3 routing only, not {c.method}"
        if c.num_fused_shared_experts:
            return "no fused shared experts"
        return None

    def recipe(self, case):
        return RECIPE

    def run(self, case, inputs):
        c = case.config
        x = inputs["logits"].astype(np.float64)  # [T, E], values already rounded to c.logits_dtype
        T, E = x.shape
        with np.errstate(over="ignore"):  # exp(-x) = inf for x < -709: sigmoid 0, as it should be
            s = (1.0 / (1.0 + np.exp(-x))).astype(np.float32)
        keys = s + inputs["bias"] if "bias" in inputs else s
        if c.n_group > 1:
            grouped = -np.sort(-keys.reshape(T, c.n_group, E // c.n_group), axis=-1)
            group_score = grouped[..., 0] + grouped[..., 1]
            kept = np.argsort(-group_score, axis=-1, kind="stable")[:, : c.topk_group]
            in_kept = np.zeros((T, c.n_group), bool)
            np.put_along_axis(in_kept, kept, True, axis=-1)
            keys = np.where(np.repeat(in_kept, E // c.n_group, axis=-1), keys, -np.inf)
        ids = np.argsort(-keys, axis=-1, kind="stable")[:, : c.top_k]
        w = np.take_along_axis(s, ids, axis=-1)
        if c.renormalize:
            total = w[:, 0].copy()
            for j in range(1, c.top_k):
                total += w[:, j]
            with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0 = NaN when eps = 0, as specified
                w = w / (total + np.float32(c.eps))[:, None]
        if c.routed_scaling_factor is not None:
            w = w * np.float32(c.routed_scaling_factor)
        return {"ids": ids.astype(np.int32), "weights": w}


DEEPSEEK_V3 = DeepSeekV3Routing()
