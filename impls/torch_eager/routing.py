"""MoE routing in torch: FlashInfer ``RoutingMethodType`` methods (snake case) and SGLang's grouped softmax.

Every method reads the logits as given (any float dtype), computes sigmoid / softmax in float64 and rounds
the result to fp32 once (correctly rounded, so an underflowing sigmoid is the true subnormal, not expf's 0).
All later arithmetic is fp32: bias add, top-2 group sums, the sum of the selected weights (left to right in
selection order), the divide by (sum + eps) and the rsf multiply.

Group scores (``group_score``): "top2_sum", the sum of a group's two largest keys (its only key when the group
has one expert); "max", the largest key; "top2_sum_if_biased", top2_sum when a correction bias is passed and max
without (DeepSeek-V3's reference Gate, vLLM grouped_topk); "method" (default): top2_sum for deepseek_v3
(FlashInfer's kernels), max for deepseek_v2 (SGLang grouped_topk).

Selection: larger key first; equal keys -> lower expert index; equal group scores -> lower group index. NaN
keys rank below every number, -inf included (the CUDA routing kernels pick by iterated `>` comparisons, which
a NaN never wins; torch.sort alone would put NaN first). ids come in selection order.
"""

import torch

ROUTING_METHODS = ("default", "renormalize", "renormalize_naive", "deepseek_v3", "llama4", "topk",
                   "sigmoid_renorm", "sigmoid", "topk_sigmoid", "minimax2", "deepseek_v2")
GROUPED = ("deepseek_v3", "deepseek_v2")
BIASED = ("deepseek_v3", "minimax2")
RENORM_ORDERS = ("divide_then_scale", "scale_then_divide")
GROUP_SCORES = ("method", "top2_sum", "max", "top2_sum_if_biased")
SHARED_WEIGHTS = ("routed_sum_over_rsf", "one")
WEIGHT_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # weights_dtype: the write


def sigmoid(logits):
    """fp32(1 / (1 + exp(-x))) computed in float64: correctly rounded except within 2^-29 of a tie."""
    return torch.sigmoid(logits.double()).float()


def softmax(logits):
    """fp32(softmax(x)) over the last dim, computed in float64."""
    return torch.softmax(logits.double(), dim=-1).float()


def descending_order(keys):
    """Indices sorting each row: key descending, index ascending on ties, NaN after every number."""
    filled = keys.masked_fill(keys.isnan(), float("-inf"))
    order = torch.sort(filled, dim=-1, descending=True, stable=True).indices
    nan_last = torch.sort(keys.isnan().gather(-1, order).float(), dim=-1, stable=True).indices
    return order.gather(-1, nan_last)


def topk_ids(keys, k):
    """ids [T, k] of the k largest keys per row (descending_order)."""
    return descending_order(keys)[..., :k]


def group_mask(keys, group_scores, topk_group, mask_value):
    """keys with every expert outside the topk_group best groups set to mask_value. [T, E] -> [T, E]."""
    T, G = group_scores.shape
    kept = topk_ids(group_scores, topk_group)  # [T, tg]; ties: lower group index
    keep = torch.zeros(T, G, dtype=torch.bool, device=keys.device).scatter_(1, kept, True)
    keep = keep.repeat_interleave(keys.shape[1] // G, dim=1)  # [T, E]
    return keys.masked_fill(~keep, mask_value)


def top2_sum(keys, n_group):
    """Group score = sum of the two largest keys of each group (fp32); one-expert groups: the key. [T, E] -> [T, G]."""
    T, E = keys.shape
    grouped = keys.view(T, n_group, E // n_group)
    top2 = grouped.gather(-1, descending_order(grouped)[..., :2])  # NaN only when fewer than 2 numbers
    return top2[..., 0] + top2[..., 1] if top2.shape[-1] == 2 else top2[..., 0]


def group_max(keys, n_group):
    """Group score = the largest key of each group, NaN ignored unless all are NaN. [T, E] -> [T, G]."""
    T, E = keys.shape
    grouped = keys.view(T, n_group, E // n_group)
    return grouped.gather(-1, descending_order(grouped)[..., :1]).squeeze(-1)


def uses_top2_sum(method, group_score, biased):
    """Whether the group rule is the top-2 sum (module docstring)."""
    if group_score == "method":
        return method == "deepseek_v3"
    return group_score == "top2_sum" or (group_score == "top2_sum_if_biased" and biased)


def ordered_sum(w):
    """fp32 sum over the last dim, left to right (selection order), so the rounding sequence is fixed."""
    total = w[..., 0]
    for j in range(1, w.shape[-1]):
        total = total + w[..., j]
    return total


def _keys_and_scores(method, logits, bias, n_group, topk_group, group_mask_value, group_score="method"):
    """(selection keys [T, E], scores [T, E] the weights are gathered from), both fp32."""
    x = logits.float()
    if method in ("default", "renormalize_naive"):
        s = softmax(logits)
        return s, s
    if method in ("renormalize", "topk"):
        return x, x
    if method in ("llama4", "topk_sigmoid"):
        return x, sigmoid(logits)
    if method in ("sigmoid_renorm", "sigmoid"):
        s = sigmoid(logits)
        return s, s
    if method == "minimax2":
        s = sigmoid(logits)
        return (s if bias is None else s + bias), s
    if method == "deepseek_v3":
        s = sigmoid(logits)
        c = s if bias is None else s + bias  # selection uses the biased score, weights the unbiased one
        if n_group > 1 and not uses_top2_sum(method, group_score, bias is not None):
            c = group_mask(c, group_max(c, n_group), topk_group, float("-inf"))
        elif n_group > 1:
            c = group_mask(c, top2_sum(c, n_group), topk_group, float("-inf"))
        return c, s
    s = softmax(logits)  # deepseek_v2: group score is the group max; weights come from the masked softmax
    if n_group > 1:
        scores = top2_sum(s, n_group) if uses_top2_sum(method, group_score, False) else group_max(s, n_group)
        s = group_mask(s, scores, topk_group, group_mask_value)
    return s, s


def normalize(w, *, eps, rsf, renorm_order):
    """w / (sum + eps) * rsf ("divide_then_scale") or w * rsf / (sum + eps) ("scale_then_divide"), fp32."""
    denom = (ordered_sum(w) + eps).unsqueeze(-1)
    if rsf is None:
        return w / denom
    return w / denom * rsf if renorm_order == "divide_then_scale" else w * rsf / denom


def selected_weights(method, logits, scores, ids, *, renormalize, eps, rsf, renorm_order):
    """Routed weights [T, k] fp32 of the experts ids, from the scores of their method."""
    if method == "renormalize":  # softmax over the k selected logits
        w = softmax(logits.gather(1, ids))
        return w if rsf is None else w * rsf
    w = scores.gather(1, ids)
    normalizes = method in ("renormalize_naive", "minimax2") or (
        renormalize and method in ("deepseek_v3", "deepseek_v2", "sigmoid_renorm"))
    if normalizes:
        return normalize(w, eps=eps, rsf=rsf, renorm_order=renorm_order)
    return w if rsf is None else w * rsf


def append_shared(ids, w, num_experts, num_shared, rsf, shared_weight="one"):
    """Fused shared experts: ids E..E+S-1 and weight 1.0 (shared_weight "one"), or sum(routed w) / rsf (rsf None
    -> 1) with "routed_sum_over_rsf", appended."""
    if num_shared == 0:
        return ids, w
    T = ids.shape[0]
    shared_ids = torch.arange(num_experts, num_experts + num_shared, dtype=ids.dtype, device=ids.device)
    if shared_weight == "one":
        shared_w = torch.ones(T, dtype=w.dtype, device=w.device)
    else:
        divisor = torch.tensor(1.0 if rsf is None else rsf, dtype=torch.float32, device=w.device)
        shared_w = ordered_sum(w) / divisor  # a tensor divisor: CUDA divides by python scalars via a reciprocal
    return (torch.cat([ids, shared_ids.expand(T, num_shared)], dim=1),
            torch.cat([w, shared_w.unsqueeze(1).expand(T, num_shared)], dim=1))


def check_routing(logits, bias, *, method, top_k, n_group, topk_group, routed_scaling_factor, eps,
                  num_fused_shared_experts, bias_dtype, weights_dtype, renorm_order, group_score="method",
                  shared_weight="one"):
    """Raise ValueError naming the first violated constraint."""
    if method not in ROUTING_METHODS:
        raise ValueError(f"method {method!r} is not one of {ROUTING_METHODS}")
    if logits.ndim != 2 or not logits.is_floating_point():
        raise ValueError(f"logits must be a floating [T, E] tensor, got {tuple(logits.shape)} {logits.dtype}")
    E = logits.shape[1]
    if bias is not None:
        if method not in BIASED:
            raise ValueError(f"a correction bias is only used by {BIASED}, not {method!r}")
        if tuple(bias.shape) != (E,):
            raise ValueError(f"bias must have shape [E]=({E},), got {tuple(bias.shape)}")
    if n_group < 1 or E % n_group:
        raise ValueError(f"num_experts={E} must be divisible by n_group={n_group}")
    if n_group > 1 and method not in GROUPED:
        raise ValueError(f"n_group={n_group} > 1 needs a grouped method {GROUPED}, not {method!r}")
    if not 1 <= topk_group <= n_group:
        raise ValueError(f"topk_group={topk_group} must be in [1, n_group={n_group}]")
    available = topk_group * (E // n_group) if method in GROUPED else E
    if not 1 <= top_k <= available:
        raise ValueError(f"top_k={top_k} must be in [1, available experts={available}]")
    if method == "llama4" and top_k != 1:
        raise ValueError(f"llama4 routing needs top_k == 1, got {top_k}")
    if routed_scaling_factor is not None and not routed_scaling_factor > 0:
        raise ValueError(f"routed_scaling_factor must be positive, got {routed_scaling_factor}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if num_fused_shared_experts < 0:
        raise ValueError(f"num_fused_shared_experts must be >= 0, got {num_fused_shared_experts}")
    if bias_dtype not in ("fp32", "bf16"):
        raise ValueError(f"bias_dtype must be 'fp32' or 'bf16', got {bias_dtype!r}")
    if weights_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weights_dtype {weights_dtype!r} is not one of {tuple(WEIGHT_DTYPES)}")
    if group_score not in GROUP_SCORES:
        raise ValueError(f"group_score {group_score!r} is not one of {GROUP_SCORES}")
    if renorm_order not in RENORM_ORDERS:
        raise ValueError(f"renorm_order {renorm_order!r} is not one of {RENORM_ORDERS}")
    if shared_weight not in SHARED_WEIGHTS:
        raise ValueError(f"shared_weight {shared_weight!r} is not one of {SHARED_WEIGHTS}")


def check_forced_ids(ids, num_tokens, top_k, num_experts):
    if ids.shape != (num_tokens, top_k):
        raise ValueError(f"forced ids must have shape [T, top_k]=({num_tokens}, {top_k}), "
                         f"got {tuple(ids.shape)}")
    if ((ids < 0) | (ids >= num_experts)).any():
        raise ValueError(f"forced ids must be routed expert ids in [0, {num_experts})")
    if top_k > 1 and (ids.sort(dim=1).values.diff(dim=1) == 0).any():
        raise ValueError("forced ids must be distinct within a token")


def route(logits, bias=None, *, method, top_k, n_group=1, topk_group=1, routed_scaling_factor=None,
          renormalize=True, eps=0.0, num_fused_shared_experts=0, group_mask_value=float("-inf"),
          bias_dtype="fp32", weights_dtype="fp32", renorm_order="divide_then_scale", group_score="method",
          shared_weight="one", ids=None):
    """Route tokens: (ids int32 [T, k + S], weights float32 [T, k + S]).

    ``renormalize`` applies to deepseek_v3, deepseek_v2 and sigmoid_renorm (norm_topk_prob); renormalize,
    renormalize_naive and minimax2 always normalize, the rest never do. rsf, when given, multiplies the
    weights of every method (after normalizing, or before the divide with "scale_then_divide").
    ``bias_dtype="bf16"`` rounds the bias to bf16 first; ``weights_dtype="bf16"`` / ``"fp16"`` rounds the final
    weights. ``group_score`` picks the grouped methods' group rule (module docstring). Fused shared experts weigh
    exactly 1.0 (``shared_weight="one"``, DeepSeek-V3's unweighted shared expert), or sum(routed w) / rsf
    (``"routed_sum_over_rsf"``, SGLang).
    ``ids`` [T, k] (routed ids only) replaces the selection; weights are then gathered at those ids.
    """
    check_routing(logits, bias, method=method, top_k=top_k, n_group=n_group, topk_group=topk_group,
                  routed_scaling_factor=routed_scaling_factor, eps=eps,
                  num_fused_shared_experts=num_fused_shared_experts, bias_dtype=bias_dtype,
                  weights_dtype=weights_dtype, renorm_order=renorm_order, group_score=group_score,
                  shared_weight=shared_weight)
    T, E = logits.shape
    if bias is not None:
        bias = bias.to(torch.bfloat16).float() if bias_dtype == "bf16" else bias.float()
    keys, scores = _keys_and_scores(method, logits, bias, n_group, topk_group, group_mask_value, group_score)
    if ids is None:
        ids = topk_ids(keys, top_k)
    else:
        check_forced_ids(ids, T, top_k, E)
        ids = ids.to(device=logits.device, dtype=torch.int64)
    w = selected_weights(method, logits, scores, ids, renormalize=renormalize, eps=eps,
                         rsf=routed_scaling_factor, renorm_order=renorm_order)
    ids, w = append_shared(ids, w, E, num_fused_shared_experts, routed_scaling_factor, shared_weight)
    return ids.to(torch.int32), w.to(WEIGHT_DTYPES[weights_dtype]).float()


def expert_permutation(ids, *, num_experts, tile_tokens_dim, local_expert_offset=0, local_num_experts=None,
                       num_fused_shared_experts=0):
    """The padded per-local-expert row layout a routing stage hands to grouped GEMMs, from global ids [T, K].

    Local expert of a slot: id - offset for routed ids in [offset, offset + L), L + i for fused shared expert
    E + i (replicated on every shard), else remote. Rows are grouped by local expert in expert order, each
    group padded with -1 rows to a multiple of tile_tokens_dim; inside a group rows follow the expanded index
    t·K + k. Returns int32 tensors: total_num_padded_tokens [1], expanded_idx_to_permuted_idx [T, K] (-1:
    remote), permuted_idx_to_token_idx [total], cta_idx_xy_to_batch_idx / cta_idx_xy_to_mn_limit [tiles],
    num_non_exiting_ctas [1]."""
    E, tile = num_experts, tile_tokens_dim
    L = E - local_expert_offset if local_num_experts is None else local_num_experts
    ids = ids.long()
    local = torch.where(ids >= E, ids - E + L, ids - local_expert_offset)
    local = torch.where((ids >= E) | ((local >= 0) & (local < L)), local, torch.full_like(local, -1))
    flat = local.flatten()
    counts = torch.bincount(flat[flat >= 0], minlength=L + num_fused_shared_experts)
    tiles = (counts + tile - 1) // tile
    starts = torch.cumsum(tiles * tile, 0) - tiles * tile
    order = torch.argsort(torch.where(flat >= 0, flat, torch.iinfo(torch.int64).max), stable=True)
    ranked = torch.empty_like(order)
    ranked[order] = torch.arange(order.numel(), device=ids.device)
    before = torch.cumsum(counts, 0) - counts
    rank_in_expert = ranked - before[flat.clamp(min=0)]
    e2p = torch.where(flat >= 0, starts[flat.clamp(min=0)] + rank_in_expert, torch.full_like(flat, -1))
    total = int((tiles * tile).sum())
    p2t = torch.full((total,), -1, dtype=torch.long, device=ids.device)
    p2t[e2p[flat >= 0]] = torch.arange(flat.numel(), device=ids.device)[flat >= 0] // ids.shape[1]
    batch = torch.repeat_interleave(torch.arange(counts.numel(), device=ids.device), tiles)
    tile_start = torch.arange(batch.numel(), device=ids.device) * tile
    limit = torch.minimum(tile_start + tile, starts[batch] + counts[batch])
    i32 = lambda t: t.to(torch.int32)
    return {"total_num_padded_tokens": i32(torch.tensor([total])), "expanded_idx_to_permuted_idx":
            i32(e2p.view(ids.shape)), "permuted_idx_to_token_idx": i32(p2t), "cta_idx_xy_to_batch_idx": i32(batch),
            "cta_idx_xy_to_mn_limit": i32(limit), "num_non_exiting_ctas": i32(torch.tensor([batch.numel()]))}
