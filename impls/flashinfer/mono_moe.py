"""FlashInfer ``mono_moe``: single-kernel block-FP8 MoE, SM90a only, fixed E=256, I=512, H=2048, T <= 8.

What the kernel computes (read in the 0.7.2.post1 wheel: ``fused_moe/monomoe.py`` and
``data/csrc/fused_moe/monomoe/src/*.cuh``, compiled with ``-use_fast_math``):

- routing from **bf16** logits (NaN/±Inf read as -FLT_MAX); top-k on the raw logits by iterative
  argmax, ties to the lower expert id; softmax+renormalize: ``w = __expf(x_k - x_max) · (1/Σ)``;
  softmax without renormalize: full softmax with ``__expf``; sigmoid: ``1/(1+__expf(-x))``, times
  ``1/Σ`` when renormalizing. Weights stay **fp32**. No bias, no groups, no routed scaling.
- hidden states quantized per (token, 128 columns): NaN -> 0, ``amax = max(|x|, 1e-10)``, scale
  ``amax·fl(1/448)``, ``q = e4m3_satfinite(x · fl(448·MUFU.RCP(amax)))`` (fast-math 448/amax: MUFU.RCP
  then FMUL, read in the module's SASS).
- GEMM1: FP8 WGMMA (the tensor core's truncating e8m13 accumulator) inside each 128-wide K block, then
  ``acc += (block·w_scale)·a_scale`` in fp32; no bf16 rounding of GEMM1's output.
- ``h = (w · up · gate) / (1 + __expf(-gate))`` in fp32 (``__fdividef``): the **router weight is applied
  before the intermediate is quantized**; w13 rows are **[gate; up]**.
- h re-quantized per (token, **64** intermediate columns), same formula as the input quantizer.
- GEMM2 the same way (the two 64-wide halves of each 128-K block scaled separately), fp32 expert
  outputs summed with fp32 ``atomicAdd`` across blocks (order not fixed: not bitwise deterministic),
  one RNE rounding to bf16.
"""

import numpy as np

from ._env import cuda_problem, first_problem, flashinfer_problem, prepared_inputs_problem, to_numpy, to_torch

NAME = "flashinfer.mono_moe"
OP = "moe"
DETERMINISTIC = False  # fp32 atomicAdd combine across thread blocks
RECIPE = "flashinfer_mono_moe"
RECIPE_FIELDS = {"logits": "bf16", "bias": None, "sigmoid": "expf", "routing_weights": "fp32",
                 "renorm_order": "multiply_by_reciprocal", "act_quant_variant": "mul_448_div_amax",
                 "act_scale_formula": "mul_rcp448", "quant_eps": 1e-10, "gemm_acc": "hopper_fp8",
                 "gemm1_out": "fp32", "act_compute": "fp32", "act_out": "fp32",
                 "router_weight": "before_requant", "requant_intermediate": True, "requant_group": 64,
                 "requant_variant": "mul_448_div_amax", "requant_scale_formula": "mul_rcp448",
                 "expert_out": "fp32", "combine": "fp32", "out": "bf16", "hidden_nan": "zero",
                 "tie_rule": "lower_index"}
CAPABILITIES = ((9, 0),)
E, I, H, MAX_TOKENS, BLOCK = 256, 512, 2048, 8, 128
# method -> (scoring_func, renormalize); None: the case's own renormalize flag (sigmoid_renorm renormalizes only when
# asked, as spec.routing.METHODS says: run as renormalized, renormalize=False cases came out 1/σ too large).
SCORING = {"renormalize": ("softmax", True), "default": ("softmax", False),
           "sigmoid_renorm": ("sigmoid", None), "sigmoid": ("sigmoid", False)}


def scoring(routing):
    """(scoring_func, renormalize) the kernel is called with for a RoutingConfig-like ``routing``."""
    func, renormalize = SCORING[routing.method]
    return func, routing.renormalize if renormalize is None else renormalize

# The kernel's one shape and semantics, field by field (difftest/model/where.py): what unsupported() takes.
SPACE = {"num_experts": E, "intermediate_size": I, "hidden_size": H, "num_tokens": f"1..{MAX_TOKENS}", "top_k": "1..8",
         "method": list(SCORING), "logits_dtype": "bf16", "bias_dtype": None, "routed_scaling_factor": None,
         "num_fused_shared_experts": 0, "quant": "fp8_block", "hidden_dtype": "bf16", "activation": "swiglu",
         "local_expert_offset": 0, "local_num_experts": None, "rsf_placement": "routing",
         "router_weight_on_input": False, "scale_fmt": "fp32", "expert_weights": "prepared"}


def available():
    return first_problem(flashinfer_problem, lambda: cuda_problem(CAPABILITIES))


def unsupported(config):
    """None when a MoEConfig-like ``config`` is the kernel's one shape and semantics; else why not."""
    c, r = config, config.routing
    problem = prepared_inputs_problem(c)
    if problem:
        return problem
    shape = (r.num_experts, c.intermediate_size, c.hidden_size)
    if shape != (E, I, H):
        return f"(E, I, H)={shape}: mono_moe is fixed at E={E}, I={I}, H={H}"
    if not 1 <= r.num_tokens <= MAX_TOKENS:
        return f"num_tokens={r.num_tokens} outside 1..{MAX_TOKENS}"
    if not 1 <= r.top_k <= 8:
        return f"top_k={r.top_k} outside 1..8"
    if r.method not in SCORING:
        return f"method {r.method!r} not in {tuple(SCORING)}"
    if r.logits_dtype != "bf16":
        return f"logits_dtype {r.logits_dtype!r}: the kernel reads bf16 logits"
    if r.bias_dtype is not None or r.routed_scaling_factor is not None or r.num_fused_shared_experts:
        return "no correction bias, routed scaling factor or fused shared experts"
    if c.quant != "fp8_block" or c.hidden_dtype != "bf16" or c.activation != "swiglu":
        return (f"quant={c.quant!r}, hidden_dtype={c.hidden_dtype!r}, activation={c.activation!r}: "
                "needs fp8_block, bf16, swiglu")
    if c.local_expert_offset != 0 or c.local_num_experts not in (None, E):
        return "expert parallelism is not supported"
    if c.rsf_placement != "routing" or c.router_weight_on_input:
        return "rsf_placement must be 'routing' and router_weight_on_input False"
    return None


def gate_up_rows(w13, half_order):
    """[E, 2I, ...] in ``half_order`` -> [E, 2I, ...] in [gate; up] (rows 0:I gate), the kernel's input order: the
    codes [E, 2I, K], or their scales [E, 2I/128, K/128], whose row blocks follow the rows they scale."""
    if half_order == "gate_up":
        return w13
    if half_order != "up_gate":
        raise ValueError(f"half_order must be 'gate_up' or 'up_gate', got {half_order!r}")
    n = w13.shape[1] // 2
    return np.concatenate([w13[:, n:], w13[:, :n]], axis=1)


def prepare_weights(w13, w13_scale, w2, w2_scale, *, half_order="gate_up", device="cuda"):
    """numpy codes and scales -> dict of CUDA tensors ready for :func:`mono_moe`.

    w13 uint8 e4m3 [256, 1024, 2048] (row-major, stride (2^21, 2048, 1)) -> [gate; up] ->
    ``interleave_for_tma_wgmma_up`` (rows regrouped into 8-row gate/up pairs per warp, same shape);
    w13_scale f32 [256, 8, 16]; w2 uint8 [256, 2048, 512] raw row-major; w2_scale f32 [256, 16, 4].
    """
    from flashinfer.fused_moe.monomoe import interleave_for_tma_wgmma_up

    for name, a, shape in (("w13", w13, (E, 2 * I, H)), ("w13_scale", w13_scale, (E, 2 * I // BLOCK, H // BLOCK)),
                           ("w2", w2, (E, H, I)), ("w2_scale", w2_scale, (E, H // BLOCK, I // BLOCK))):
        if a.shape != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(a.shape)}")
    return {"w13": interleave_for_tma_wgmma_up(to_torch(gate_up_rows(w13, half_order), "e4m3fn", device)),
            "w13_scale": to_torch(gate_up_rows(w13_scale, half_order), "fp32", device),
            "w2": to_torch(w2, "e4m3fn", device), "w2_scale": to_torch(w2_scale, "fp32", device)}


_scratchpads = {}


def scratchpad(device):
    """One zero-initialized scratchpad per device, reused as the kernel requires (monomoe.alloc_scratchpad)."""
    from flashinfer.fused_moe.monomoe import alloc_scratchpad

    key = str(device)
    if key not in _scratchpads:
        _scratchpads[key] = alloc_scratchpad(device)
    return _scratchpads[key]


def mono_moe(hidden, logits, weights, *, top_k, scoring_func, renormalize):
    """hidden [T, 2048] bf16, logits [T, 256] bf16, ``weights`` from prepare_weights -> out [T, 2048] bf16."""
    import torch
    from flashinfer.fused_moe.monomoe import mono_moe as kernel

    if hidden.dtype != torch.bfloat16 or logits.dtype != torch.bfloat16:
        raise ValueError(f"hidden and logits must be bfloat16, got {hidden.dtype}, {logits.dtype}")
    if not (hidden.is_contiguous() and logits.is_contiguous()):
        raise ValueError("hidden and logits must be contiguous")
    T = hidden.shape[0]
    if not 1 <= T <= MAX_TOKENS or hidden.shape != (T, H) or logits.shape != (T, E):
        raise ValueError(f"needs hidden [T, {H}] and logits [T, {E}] with 1 <= T <= {MAX_TOKENS}, "
                         f"got {tuple(hidden.shape)}, {tuple(logits.shape)}")
    if not 1 <= top_k <= 8:
        raise ValueError(f"top_k={top_k} outside 1..8")
    out = torch.empty(T, H, dtype=torch.bfloat16, device=hidden.device)
    return kernel(hidden, logits, weights["w13"], weights["w13_scale"], weights["w2"], weights["w2_scale"],
                  top_k, scoring_func=scoring_func, renormalize=renormalize, out=out,
                  scratchpad=scratchpad(hidden.device), interleave_up=False)


_prepared = []  # [(numpy arrays, half order, prepared tensors)]: the last weights, kept while they recur


def run(config, inputs, device="cuda"):
    """inputs {"hidden", "logits", "w13", "w13_scale", "w2", "w2_scale"} (numpy) -> {"out" [T, H] float32}."""
    arrays = tuple(inputs[k] for k in ("w13", "w13_scale", "w2", "w2_scale"))
    same = _prepared and _prepared[0][1] == config.half_order and all(
        a is b for a, b in zip(_prepared[0][0], arrays, strict=True))
    if not same:
        _prepared[:] = [(arrays, config.half_order,
                         prepare_weights(*arrays, half_order=config.half_order, device=device))]
    scoring_func, renormalize = scoring(config.routing)
    out = mono_moe(to_torch(inputs["hidden"], "bf16", device), to_torch(inputs["logits"], "bf16", device),
                   _prepared[0][2], top_k=config.routing.top_k, scoring_func=scoring_func,
                   renormalize=renormalize)
    return {"out": to_numpy(out)}
