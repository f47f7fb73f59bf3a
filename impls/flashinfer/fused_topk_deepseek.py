"""FlashInfer ``fused_topk_deepseek``: standalone DeepSeek-V3 routing (docs/semantics.md §5.3), runs on SM89/90/10x/12x.

Kernel math (``data/csrc/fused_moe/noAuxTcKernels.cu``, read in the 0.7.2.post1 wheel): ``s =
0.5·tanhf(0.5·x) + 0.5`` in fp32 (so s is exactly 0 for x below about -17.3, where the true sigmoid is
still a normal fp32), key = s + bias (fp32), group score = top-2 sum, top ``topk_group`` groups, top-k by
key with ties to the lower expert id, weight = ``(s·rsf) / (Σs + 1e-20)`` evaluated in double (rsf is a
double) from the fp32 warp-reduced Σs, rounded once to the logits' dtype. Always renormalizes.
"""

from ._env import cuda_problem, first_problem, flashinfer_problem, raise_pending_launch_error, to_numpy, to_torch

NAME = "flashinfer.fused_topk_deepseek"
OP = "routing"
DETERMINISTIC = True
RECIPE = "flashinfer_fused_topk_deepseek"  # spec.recipes.FUSED_TOPK_DEEPSEEK (fp32 logits); _BF16 for bf16
RECIPE_FIELDS = {"logits": "per case (fp32 | bf16)", "bias": "fp32", "sigmoid": "tanh",
                 "routing_weights": "logits dtype", "renorm_order": "scale_then_divide", "eps": 1e-20,
                 "tie_rule": "lower_index"}
CAPABILITIES = ((8, 9), (9, 0), (10, 0), (10, 3), (10, 7), (12, 0), (12, 1))
EPS = 1e-20
LOGITS_DTYPES = ("fp32", "bf16")


def available():
    return first_problem(flashinfer_problem, lambda: cuda_problem(CAPABILITIES))

# What unsupported() takes, field by field and in the derived quantities of difftest/model/where.py, so that the search
# draws no case it declines: the group limits of _limits. Without groups it takes top_k = 1 only (topk_group·n_group >=
# top_k), so the search draws grouped routing (n_group 2..8, 2 to 32 experts a group; experts_per_group is num_experts /
# n_group) and leaves n_group = 1 to a plug-in of its own; group_slack = topk_group·n_group − top_k >= 0 is that joint
# limit (unstated, it was a fifth of the draws declined, 77.4 % compared on the H200, and the decline learner blamed
# n_group for it on some seeds). topk_group <= n_group and top_k within the kept groups are how the strategies draw.
SPACE = {"method": "deepseek_v3", "logits_dtype": "fp32", "renormalize": True, "eps": EPS,
         "num_fused_shared_experts": 0, "tile_tokens_dim": None, "num_tokens": "1..", "top_k": "1..8",
         "n_group": [2, 4, 8], "topk_group": "1..4", "experts_per_group": "2..32", "group_slack": "0.."}


def unsupported(config):
    """None when a RoutingConfig-like ``config`` is within the kernel's limits; else the violated one."""
    c = config
    if c.num_tokens == 0:  # F4: fixtures/flashinfer-fused_topk_deepseek-zero_tokens
        return ("num_tokens=0: the kernel launches a 0-block grid (CUDA invalid configuration argument, sticky for "
                "the process); open fixture flashinfer-fused_topk_deepseek-zero_tokens")
    if c.method != "deepseek_v3":
        return f"method {c.method!r}: the kernel computes deepseek_v3 routing only"
    if c.logits_dtype not in LOGITS_DTYPES:
        return f"logits_dtype {c.logits_dtype!r} not in {LOGITS_DTYPES} (fp16 is accepted but not modelled)"
    if c.logits_dtype != "fp32":
        return ("bf16 logits give bf16 weights (recipe flashinfer_fused_topk_deepseek_bf16), and an adapter names "
                "one recipe: checked instead by the H200's record-then-verify campaign (docs/device-results.md)")
    if c.bias_dtype not in (None, "fp32", "bf16"):
        return f"bias_dtype {c.bias_dtype!r} not in (None, 'fp32', 'bf16')"
    if not c.renormalize:
        return "renormalize=False: the kernel always renormalizes"
    if c.eps != EPS:
        return f"eps={c.eps}: the kernel always adds {EPS} to the sum"
    if c.num_fused_shared_experts:
        return "fused shared experts are appended by the caller, not the kernel"
    if c.tile_tokens_dim is not None:
        return "tile_tokens_dim: the kernel returns ids and weights, no padded permutation"
    return _limits(c.num_experts, c.n_group, c.topk_group, c.top_k)


def _limits(E, n_group, topk_group, top_k):
    if top_k > 8:
        return f"top_k={top_k} > 8"
    if topk_group > n_group or topk_group * n_group < top_k:
        return f"needs topk_group <= n_group and topk_group*n_group >= top_k (got {topk_group}, {n_group}, {top_k})"
    if n_group > 1:
        if E % n_group:
            return f"num_experts={E} is not a multiple of n_group={n_group}"
        if E // n_group > 32:
            return f"num_experts/n_group={E // n_group} > 32"
        if E // n_group < 2:  # noAuxTcKernels.cu: reduceTopK pads the second key with -inf, every group scores -inf
            return "one-expert groups: the kernel's top-2 group sum is -inf, the spec's is the expert's key"
        if E // n_group * topk_group > 128:
            return f"num_experts/n_group*topk_group={E // n_group * topk_group} > 128"
        if top_k > topk_group * (E // n_group):
            return f"top_k={top_k} > experts in the kept groups ({topk_group * (E // n_group)})"
    elif E > 384:
        return f"num_experts={E} > 384 with n_group=1"
    return None


def fused_topk_deepseek(scores, bias, *, n_group, topk_group, top_k, routed_scaling_factor):
    """scores [T, E] fp32|bf16 contiguous CUDA, bias [E] fp32|bf16
    -> (weights [T, k] in the scores' dtype, ids [T, k] int32)."""
    import torch
    from flashinfer.fused_moe import fused_topk_deepseek as kernel

    if scores.dim() != 2 or not scores.is_contiguous():
        raise ValueError(f"scores must be a contiguous [T, E] tensor, got shape {tuple(scores.shape)}")
    if scores.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"scores dtype must be float32 or bfloat16, got {scores.dtype}")
    if bias.shape != (scores.shape[1],) or not bias.is_contiguous():
        raise ValueError(f"bias must be a contiguous [E={scores.shape[1]}] tensor, got {tuple(bias.shape)}")
    problem = _limits(scores.shape[1], n_group, topk_group, top_k)
    if problem:
        raise ValueError(problem)
    T = scores.shape[0]
    weights = torch.empty(T, top_k, dtype=scores.dtype, device=scores.device)
    ids = torch.empty(T, top_k, dtype=torch.int32, device=scores.device)
    kernel(scores, bias, n_group, topk_group, top_k, float(routed_scaling_factor), weights, ids)
    return weights, ids


def run(config, inputs, device="cuda"):
    """inputs {"logits" [T, E] float32 (values of logits_dtype), "bias" [E] or absent} -> {"ids", "weights"}.

    ``weights`` come back as float32 holding values of the logits' dtype, in selection order; ids are
    int32 in the kernel's column order (descending key, ties to the lower id).
    """
    import numpy as np
    import torch

    scores = to_torch(inputs["logits"], config.logits_dtype, device)
    bias_np = inputs.get("bias")
    if bias_np is None:
        bias_np = np.zeros(config.num_experts, np.float32)  # s + 0 == s exactly: same keys as no bias
    bias = to_torch(bias_np, "fp32", device)
    if config.bias_dtype == "bf16":
        # the caller's cast (SGLang before PR #28555, docs/semantics.md §1.6): RNE to bf16
        bias = bias.to(torch.bfloat16)
    rsf = 1.0 if config.routed_scaling_factor is None else config.routed_scaling_factor
    weights, ids = fused_topk_deepseek(scores, bias, n_group=config.n_group, topk_group=config.topk_group,
                                       top_k=config.top_k, routed_scaling_factor=rsf)
    raise_pending_launch_error(device)  # T = 0: the launch fails silently (F4), and the copies below do not check
    return {"ids": to_numpy(ids), "weights": to_numpy(weights)}
