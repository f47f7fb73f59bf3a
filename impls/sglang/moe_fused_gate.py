"""SGLang ``moe_fused_gate``: DeepSeek-V3 grouped routing with the correction bias, as SGLang calls it.

Kernel (sglang-kernel 0.4.4, csrc/moe/moe_fused_gate.cu, SM90 build with -use_fast_math; SASS read in
docs/sglang.md), instantiated for T = the input's dtype, the bias read as T (the host checks
``input.dtype() == bias.dtype()``): σ = MUFU.RCP(1 + MUFU.EX2(x·fl(-log2 e))) in fp32, stored as T; key = σ + b in
T; per group the two largest keys summed in T; the num_expert_group − topk_group smallest group sums dropped one at
a time, equal sums dropping the higher group index; top-k by iterated argmax over the kept groups, equal keys to
the lower expert index; weights the selected σ as fp32, summed in selection order in fp32, divided (w·rcp(Σ)) and,
with ``apply_routed_scaling_factor_on_output``, multiplied by rsf in double. Fused shared experts take the last
columns with ids E, E + 1, ... and weight Σ/rsf before the same division. Always renormalizes, no eps.
Limits (host checks and SGLang's caller, python/sglang/srt/layers/moe/topk.py biased_grouped_topk_gpu, which
falls back to torch otherwise): E a power of two, E % num_expert_group == 0, E / num_expert_group <= 32; found on
the H200 (docs/device-results.md, "SGLang kernels"): T >= 1 (a 0-block grid is an invalid launch), and in bf16
E >= 2 (misaligned vector reads of 1-expert rows).

SGLang's call: ``moe_fused_gate(router_logits.to(torch.float32), correction_bias, ...)`` with its fp32
correction bias (the seed's fix keeps it fp32), so every case runs the fp32 instantiation. The bf16
instantiation, the bias cast to the logits' bf16 (the bug before the fix), is ``sglang.moe_fused_gate_bf16``.
"""

from ._env import problem, to_numpy, to_torch, version  # noqa: F401 (version: the registry's)

NAME = "sglang.moe_fused_gate"
OP = "routing"
DETERMINISTIC = True
RECIPE = "sglang_moe_fused_gate"
KERNEL_DTYPE = "fp32"  # the instantiation SGLang's caller selects
MAX_PER_GROUP = 32  # MAX_VPT: experts one thread holds
POWERS_OF_TWO = [2**i for i in range(9)]  # E = 1 .. 256
SPACE = {"method": "deepseek_v3", "renormalize": True, "eps": 0.0, "num_experts": POWERS_OF_TWO,
         "experts_per_group": f"1..{MAX_PER_GROUP}", "one_expert_groups": False, "num_tokens": "1..",
         "tile_tokens_dim": None}  # what limits() takes, field by field (difftest/model/where.py)
EMPTY = ("num_tokens=0: the host launcher launches a grid of num_blocks = ceil(ceil(0 / rows_per_warp) / 6) = 0 "
         "blocks (moe_fused_gate.cu, moe_fused_gate(): `<<<num_blocks, block_dim, 0, stream>>>`), which CUDA rejects "
         "with cudaErrorInvalidValue (measured on the H200, every T=0 case)")
NO_PERMUTATION = "tile_tokens_dim: the kernel returns ids and weights, no padded permutation"


def available():
    return problem()


def unsupported(config):
    """None when a RoutingConfig is within the kernel's limits and SGLang's conditions for calling it."""
    return _unsupported(config, KERNEL_DTYPE)


def _unsupported(c, kernel_dtype):
    if c.method != "deepseek_v3":
        return f"method {c.method!r}: the kernel computes deepseek_v3 routing only"
    if not c.renormalize:
        return "renormalize=False: the kernel always renormalizes"
    if c.eps != 0.0:
        return f"eps={c.eps}: the kernel divides by the plain sum"
    if kernel_dtype == "bf16" and c.logits_dtype != "bf16":
        return f"logits_dtype {c.logits_dtype!r}: the bf16 instantiation reads bf16 logits"
    if c.tile_tokens_dim is not None:
        return NO_PERMUTATION
    if c.num_tokens == 0:
        return EMPTY
    if kernel_dtype == "bf16" and c.num_experts == 1:
        return BF16_ONE_EXPERT
    return limits(c.num_experts, c.n_group)


BF16_ONE_EXPERT = (
    "num_experts=1 in bf16: each thread reads its row chunk through AccessType<T> = AlignedArray<T, MAX_VPT> "
    "(moe_fused_gate.cu, `vec_thread_read_ptr = reinterpret_cast<AccessType<T> const*>(thread_read_ptr)`), "
    "which promises 64-byte alignment, while 1-expert bf16 rows start 2 bytes apart: 72 of 93 such cases on "
    "the H200 stopped with 'misaligned address': every one with T >= 2, none of the 21 with T = 1 (row 0 is "
    "aligned); fp32 rows, 4 bytes apart, ran clean")


def limits(E, n_group):
    """The kernel's and its caller's shape conditions; one-expert groups and more than 32 groups are refused here
    with the mechanism read off the source (docs/sglang.md; campaigns/sglang_smoke.py runs them once)."""
    if E & (E - 1):
        return f"num_experts={E} is not a power of two (host TORCH_CHECK; SGLang falls back to torch)"
    if E % n_group:
        return f"num_experts={E} is not a multiple of num_expert_group={n_group} (host TORCH_CHECK)"
    if E // n_group > MAX_PER_GROUP:
        return (f"num_experts/num_expert_group={E // n_group} > {MAX_PER_GROUP} (host TORCH_CHECK; SGLang falls back "
                "to torch)")
    if E // n_group == 1 and n_group > 1:
        return ("one-expert groups: the kernel's top-2 group sum adds -FLT_MAX for the missing second key, so every "
                "group scores -FLT_MAX and the lowest-index groups are kept whatever the keys")
    if n_group > 32:
        return (f"num_expert_group={n_group} > 32: a row's threads span more than a warp, and the kernel's shuffles "
                "(width num_expert_group) and row mapping assume one warp")
    return None


def moe_fused_gate(logits, bias, *, n_group, topk_group, top_k, num_fused_shared_experts=0,
                   routed_scaling_factor=None):
    """logits [T, E] (fp32 or bf16, contiguous CUDA), bias [E] of the same dtype -> (weights fp32 [T, k + S], ids
    int32 [T, k + S]); rsf applied on the output when given (SGLang passes 1.0 and applies none otherwise)."""
    import sgl_kernel

    from ._env import launch_check

    if logits.dim() != 2 or not logits.is_contiguous():
        raise ValueError(f"logits must be a contiguous [T, E] tensor, got shape {tuple(logits.shape)}")
    if bias.shape != (logits.shape[1],) or bias.dtype != logits.dtype:
        raise ValueError(f"bias must be [E={logits.shape[1]}] of the logits' dtype {logits.dtype}, got "
                         f"{tuple(bias.shape)} {bias.dtype}")
    problem = limits(logits.shape[1], n_group) or (EMPTY if logits.shape[0] == 0 else None) or (
        BF16_ONE_EXPERT if logits.shape[1] == 1 and logits.dtype.itemsize == 2 else None)
    if problem:
        raise ValueError(problem)
    rsf = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    weights, ids = sgl_kernel.moe_fused_gate(logits, bias, n_group, topk_group, top_k + num_fused_shared_experts,
                                             num_fused_shared_experts, rsf, routed_scaling_factor is not None)
    launch_check("moe_fused_gate")
    return weights, ids


def run(config, inputs, device="cuda"):
    return _run(config, inputs, KERNEL_DTYPE, device)


def _run(config, inputs, kernel_dtype, device):
    """inputs {"logits" [T, E] float32 (values of logits_dtype), "bias" [E] or absent} -> {"ids", "weights"}, the
    kernel's columns: the routed experts in selection order, then the shared ones."""
    import numpy as np
    import torch

    logits = to_torch(inputs["logits"], "fp32", device)
    bias_np = inputs.get("bias")
    if bias_np is None:
        bias_np = np.zeros(config.num_experts, np.float32)  # s + 0 == s: the keys of no bias
    bias = to_torch(bias_np, "fp32", device)
    if kernel_dtype == "bf16":  # bf16 logits are exact in bf16; the fp32 bias is rounded (RNE): the caller's cast
        logits, bias = logits.to(torch.bfloat16), bias.to(torch.bfloat16)
    weights, ids = moe_fused_gate(logits, bias, n_group=config.n_group, topk_group=config.topk_group,
                                  top_k=config.top_k, num_fused_shared_experts=config.num_fused_shared_experts,
                                  routed_scaling_factor=config.routed_scaling_factor)
    return {"ids": to_numpy(ids), "weights": to_numpy(weights)}

