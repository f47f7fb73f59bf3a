"""What the three trtllm-gen MoE adapters share: capability, enums by member, config checks."""

from ._env import cubin_problem, cuda_problem, first_problem, flashinfer_problem, prepared_inputs_problem

CAPABILITIES = ((10, 0), (10, 3))  # prebuilt cubins exist for Sm100a/f and Sm103a only (docs/semantics.md §5.4)
METHODS = {"default": "Default", "renormalize": "Renormalize", "deepseek_v3": "DeepSeekV3",
           "llama4": "Llama4", "renormalize_naive": "RenormalizeNaive", "topk": "TopK",
           "sigmoid_renorm": "SigmoidRenorm", "minimax2": "MiniMax2", "sigmoid": "Sigmoid",
           "topk_sigmoid": "TopKSigmoid"}
ACTIVATIONS = {"swiglu": "Swiglu", "geglu": "Geglu", "relu2": "Relu2", "identity": "Identity",
               "gelu": "Gelu"}


def available():
    return first_problem(flashinfer_problem, lambda: cuda_problem(CAPABILITIES), cubin_problem)


def routing_method(method):
    """The RoutingMethodType member for a spec method name (members, never ints: their values move between
    releases, docs/semantics.md §1.1)."""
    from flashinfer.fused_moe import RoutingMethodType

    if method not in METHODS:
        raise ValueError(f"routing method {method!r} has no trtllm-gen RoutingMethodType (not in {tuple(METHODS)})")
    return getattr(RoutingMethodType, METHODS[method])


def activation_type(activation):
    from flashinfer.fused_moe.core import ActivationType

    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} has no trtllm-gen ActivationType here")
    return getattr(ActivationType, ACTIVATIONS[activation])


def space(quant, activations, logits_dtypes=("fp32", "bf16")):
    """The configurations an entry point takes, in the case model's terms (difftest/model/where.py), as far as single
    fields say it; unsupported() below keeps the combinations (E % 4, groups, top_k limits)."""
    return {"quant": quant, "activation": list(activations), "method": list(METHODS),
            "logits_dtype": list(logits_dtypes), "scale_fmt": "fp32", "expert_weights": "prepared",
            "num_fused_shared_experts": 0, "router_weight_on_input": False, "rsf_placement": "routing",
            "hidden_size": [128, 256], "intermediate_size": [128, 256], "num_experts": [8, 16, 32, 64, 128],
            "topk_group": "1..4"}  # sizes: multiples of 128 and of 4 (E); at most 128 experts' weights per case


def unsupported(config, *, quant, activations, logits_dtypes=("fp32", "bf16")):
    """Checks common to the trtllm-gen entry points (launcher limits, docs/semantics.md §5.1); None or the
    violated one."""
    c, r = config, config.routing
    if c.quant != quant:
        return f"quant={c.quant!r}, this entry point takes {quant!r}"
    if prepared_inputs_problem(c):
        return prepared_inputs_problem(c)
    if r.method not in METHODS:
        return f"method {r.method!r} not in {tuple(METHODS)}"
    if c.activation not in activations:
        return f"activation {c.activation!r} not in {activations}"
    if r.logits_dtype not in logits_dtypes:
        return f"logits_dtype {r.logits_dtype!r} not in {logits_dtypes}"
    E, k = r.num_experts, r.top_k
    if E % 4 or E <= k:
        return f"needs num_experts % 4 == 0 and num_experts > top_k (E={E}, k={k})"
    if c.hidden_size % 128 or c.intermediate_size % 128:
        return f"hidden_size={c.hidden_size} and intermediate_size={c.intermediate_size} must be multiples of 128"
    if r.method == "deepseek_v3":
        if r.n_group < 1 or r.topk_group < 1 or r.topk_group > 4 or r.topk_group > r.n_group:
            return f"deepseek_v3 needs 1 <= topk_group <= min(4, n_group) (got {r.topk_group}, {r.n_group})"
        if k > (8 if E <= 384 else 22):
            return f"deepseek_v3 top_k={k} above its limit for E={E}"
    elif r.n_group > 1 or r.topk_group > 1:
        return f"method {r.method!r} takes no groups (n_group={r.n_group}, topk_group={r.topk_group})"
    if r.method == "llama4" and k != 1:
        return "llama4 needs top_k == 1"
    if r.num_fused_shared_experts:
        return "fused shared experts are not modelled by this adapter"
    if c.router_weight_on_input or c.rsf_placement != "routing":
        return "router_weight_on_input and rsf_placement='combine' are not supported"
    return None


def local_experts(config):
    """(offset, count) of the expert shard a call computes; count defaults to every expert from the offset on."""
    offset = config.local_expert_offset
    return offset, (config.routing.num_experts - offset if config.local_num_experts is None
                    else config.local_num_experts)


def local_weights(config, inputs):
    """The shard's experts of every stacked [E, ...] weight input: the kernels index weights by local expert and take
    [local_num_experts, ...], as their per-expert scalars are ``[local_num_experts]`` (FP4 docstring; its launcher
    checks dim 0 against local_num_experts + num_fused_shared_experts when shared experts are fused)."""
    offset, count = local_experts(config)
    return {k: v[offset:offset + count] for k, v in inputs.items() if k.startswith(("w13", "w2"))}


def routing_args(config, logits, bias):
    """The positional routing block shared by the trtllm-gen calls, with the local-expert shard."""
    r = config.routing
    offset, local = local_experts(config)
    n_group = r.n_group if r.method == "deepseek_v3" else None
    topk_group = r.topk_group if r.method == "deepseek_v3" else None
    return dict(routing_logits=logits, routing_bias=bias, num_experts=r.num_experts, top_k=r.top_k,
                n_group=n_group, topk_group=topk_group, intermediate_size=config.intermediate_size,
                local_expert_offset=offset, local_num_experts=local,
                routed_scaling_factor=r.routed_scaling_factor,
                routing_method_type=routing_method(r.method))
