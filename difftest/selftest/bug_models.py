"""Small implementations with a known bug, loadable by their registry name (``bug:deepseek_biased_weights``,
``bug:rsf_twice``; difftest/checking/interface.py SELF_TEST) or by reference
(``difftest.selftest.bug_models:NAME``), so the tester can be shown to find, shrink and record real bug classes
(difftest/selftest/known_bugs.py, fixtures/README.md).

Each wraps the torch implementation and changes one thing.
"""

import numpy as np
import torch

from impls.torch_eager import layer as te_layer
from impls.torch_eager import routing as te_routing

from ..checking.impl_torch import TORCH, expert_tensors, numpy, route_keywords, tensor
from ..model.generate import weights as generated_weights


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


# ---- bugs that live where the search must reach (issue 33): the kernels' expert counts, one-expert groups, layers of
# model width with several tokens, UE8M0 scales of weights the implementation prepares itself. The self-test finds each
# within a bounded number of examples (tests/difftest/model/test_search_reach.py); benchmarks/search_fit.py times the
# plain command.

INT8_IDS_EXPERTS = 128  # the kernel tier that holds several experts a thread: from 128 experts on (EXPERT_TIERS)


def _int8_ids_run(case, inputs):
    """From 128 experts on, the expert ids go through an int8 buffer: an id of 128 or more wraps to id - 256."""
    out = TORCH.run(case, inputs)
    if case.config.num_experts < INT8_IDS_EXPERTS:
        return out
    return {**out, "ids": out["ids"].astype(np.int8).astype(np.int32)}


def _one_expert_groups_run(case, inputs):
    """DeepSeek-V3 groups of one expert: the group score, the top-2 sum, pads the missing second key with -inf (as
    FlashInfer's noAuxTc reduceTopK does), so every group scores -inf and the first topk_group groups are kept."""
    c = case.config
    if not (c.method == "deepseek_v3" and c.n_group == c.num_experts and c.topk_group < c.n_group):
        return TORCH.run(case, inputs)
    r = TORCH.recipe(case)
    logits = tensor(inputs["logits"], c.logits_dtype, "cpu")
    bias = inputs.get("bias")
    bias = None if bias is None else tensor(bias, c.bias_dtype, "cpu").float()
    keys = te_routing.sigmoid(logits)
    if bias is not None:
        keys = keys + (bias.to(torch.bfloat16).float() if r.bias == "bf16" else bias)
    ids = te_routing.topk_ids(keys[:, : c.topk_group], c.top_k)  # groups 0 .. topk_group - 1, one expert each
    ids, w = te_routing.route(logits, bias, **c.route_kwargs(), **route_keywords(r), ids=ids)
    return {"ids": numpy(ids.to(torch.int32)), "weights": numpy(w)}


WIDE_ROWS_HIDDEN = 512  # the layer width from which the kernel takes its wide epilogue


def _row_pairs_run(case, inputs):
    """From 512 hidden on, the epilogue stores output rows in pairs from the first row's accumulator: token 2i + 1
    gets token 2i's output (a layer needs two tokens to show it)."""
    out = TORCH.run(case, inputs)
    c = case.config
    if c.hidden_size < WIDE_ROWS_HIDDEN or c.routing.num_tokens < 2:
        return out
    y = out["out"].copy()
    y[1::2] = y[0::2][: len(y[1::2])]
    return {**out, "out": y}


def _ue8m0_fp32_scales_run(case, inputs):
    """fp8_block weights that the implementation quantizes itself (expert_weights bf16 / fp32) get fp32 block scales
    though UE8M0 ones are asked for; the activations' scales are UE8M0 as asked."""
    c = case.config
    if not (c.quant == "fp8_block" and c.scale_fmt == "ue8m0" and c.expert_weights != "prepared"):
        return TORCH.run(case, inputs)
    r = TORCH.recipe(case)
    bias = inputs.get("bias")
    routing = {**c.routing.route_kwargs(), **route_keywords(r)}
    experts = expert_tensors(generated_weights(case), c.quant, "cpu", given=c.expert_weights, gated=c.gated,
                             scale_fmt="fp32")
    res = te_layer.moe_layer(tensor(inputs["hidden"], c.hidden_dtype, "cpu"),
                             tensor(inputs["logits"], c.routing.logits_dtype, "cpu"),
                             None if bias is None else tensor(bias, c.routing.bias_dtype, "cpu"), experts,
                             routing=routing, **c.layer_kwargs())
    return {"out": numpy(res.out), "ids": numpy(res.ids), "weights": numpy(res.weights)}


# Routing ones return ids and weights only (contract 1, with the kernels' limits); the layer ones are of torch's own
# contract.
WIDE_TIER_INT8_IDS = TORCH._replace(name="bug:wide_tier_int8_ids", ops=("routing",), run=_int8_ids_run, contract=1,
                                    capabilities=("kernel_limits",))
ONE_EXPERT_GROUPS_MINUS_INF = TORCH._replace(name="bug:one_expert_groups_minus_inf", ops=("routing",),
                                             run=_one_expert_groups_run, contract=1, capabilities=("kernel_limits",))
WIDE_LAYER_ROW_PAIRS = TORCH._replace(name="bug:wide_layer_row_pairs", ops=("moe",), run=_row_pairs_run)
UE8M0_WEIGHTS_FP32_SCALES = TORCH._replace(name="bug:ue8m0_weights_fp32_scales", ops=("moe",),
                                           run=_ue8m0_fp32_scales_run)
REACH = ((WIDE_TIER_INT8_IDS, "routing with 129 or more experts (an id of 128 or more selected)"),
         (ONE_EXPERT_GROUPS_MINUS_INF, "DeepSeek-V3 routing in one-expert groups, topk_group < n_group"),
         (WIDE_LAYER_ROW_PAIRS, "layers of hidden size 512 or more with 2 or more tokens, every quant path"),
         (UE8M0_WEIGHTS_FP32_SCALES, "fp8_block layers with UE8M0 scales and unquantized expert weights"))
