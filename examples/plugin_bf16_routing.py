"""An external routing implementation that computes in the logits' dtype, and the recipe that says so.

    python -m difftest fuzz --impl examples/plugin_bf16_routing.py:GROUPED_TOPK_BF16 --op routing --time-budget 60

Written from the semantics of vLLM's torch ``grouped_topk`` (vllm/model_executor/layers/fused_moe/router/
grouped_topk_router.py), not from its code: σ = torch's sigmoid of the logits in their dtype (bf16 for bf16 logits;
on the CPU not correctly rounded and 0 below x ≈ -88.72: Recipe.sigmoid "torch_cpu");
with a correction bias the keys are σ + bias, promoted to fp32 by the fp32 bias, and a group scores the sum of
its two largest keys; without a bias a group scores its largest σ; top ``topk_group`` groups, top ``top_k``
experts (torch.topk: no promised tie order); weights σ[ids] divided by their sum and scaled by
routed_scaling_factor in the logits' dtype, returned as fp32. Against the fp32 spec these weights differ by a
bf16 rounding and ids flip at bf16 near-ties: correct for this arithmetic, which ``recipe`` declares
(spec/recipes.py VLLM_GROUPED_TOPK_BF16; _FP16 for fp16 logits, where σ below 2^-25 is 0).
tests/examples/test_plugin_example.py shows it failing under the spec's default recipe and passing under its own.
"""

import torch

from spec.recipes import VLLM_GROUPED_TOPK, VLLM_GROUPED_TOPK_BF16, VLLM_GROUPED_TOPK_FP16

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
RECIPES = {"fp32": VLLM_GROUPED_TOPK, "bf16": VLLM_GROUPED_TOPK_BF16, "fp16": VLLM_GROUPED_TOPK_FP16}


def grouped_topk(logits, bias, *, top_k, n_group, topk_group, renormalize, eps, routed_scaling_factor):
    """(weights fp32 [T, k], ids int32 [T, k]), every step in logits.dtype except the fp32 biased keys."""
    s = logits.sigmoid()
    T, E = s.shape
    if bias is not None:
        keys = s + bias  # bf16 + fp32 -> fp32
        group_scores = keys.view(T, n_group, E // n_group).topk(min(2, E // n_group), dim=-1).values.sum(-1)
    else:
        keys = s
        group_scores = keys.view(T, n_group, E // n_group).amax(dim=-1)
    groups = group_scores.topk(topk_group, dim=-1).indices  # [T, tg]
    kept = torch.zeros(T, n_group, dtype=torch.bool).scatter_(1, groups, True)
    keys = keys.masked_fill(~kept.repeat_interleave(E // n_group, dim=1), float("-inf"))
    ids = keys.topk(top_k, dim=-1).indices  # [T, k]
    w = s.gather(1, ids)
    if renormalize:
        w = w / (w.sum(dim=-1, keepdim=True) + eps)
    if routed_scaling_factor is not None:
        w = w * routed_scaling_factor
    return w.float(), ids.int()


class GroupedTopkInLogitsDtype:
    name = "example:grouped_topk_bf16"
    version = "1.0"
    ops = ("routing",)
    deterministic = True
    may_crash = False

    def __init__(self, declare=True):
        self.declare = declare  # False: claims fp32 routing arithmetic, as if it had no recipe of its own

    def available(self):
        return None

    def unsupported(self, case):
        c = case.config
        if c.method != "deepseek_v3" or c.num_fused_shared_experts or c.logits_dtype not in DTYPES:
            return "deepseek_v3 routing with fp32, bf16 or fp16 logits and no fused shared experts only"
        if c.tile_tokens_dim is not None:
            return "returns no padded permutation (tile_tokens_dim)"
        if c.bias_dtype not in (None, "fp32"):
            return "the correction bias is an fp32 parameter"
        return None

    def recipe(self, case):
        return RECIPES[case.config.logits_dtype if self.declare else "fp32"]

    def run(self, case, inputs):
        c = case.config
        logits = torch.from_numpy(inputs["logits"].copy()).to(DTYPES[c.logits_dtype])
        bias = torch.from_numpy(inputs["bias"].copy()).float() if "bias" in inputs else None
        w, ids = grouped_topk(logits, bias, top_k=c.top_k, n_group=c.n_group, topk_group=c.topk_group,
                              renormalize=c.renormalize, eps=c.eps, routed_scaling_factor=c.routed_scaling_factor)
        return {"ids": ids.numpy(), "weights": w.numpy()}


GROUPED_TOPK_BF16 = GroupedTopkInLogitsDtype()
UNDECLARED = GroupedTopkInLogitsDtype(declare=False)
