"""SGLang ``topk_softmax``: softmax routing (Mixtral, Qwen-MoE), as SGLang's fused_topk calls it (no soft-capping,
no correction bias).

Kernel (sglang-kernel 0.4.4, csrc/moe/moe_topk_softmax_kernels.cu, SM90 build with -use_fast_math; docs/sglang.md):
logits read as fp32 (exact for bf16 / fp16); E a power of two up to 512: topkGatingSoftmax, one warp slice per row,
max by butterfly, e = __expf(x − max) (MUFU.EX2 of fl(fl(x − max)·fl(log2 e))), Σ by thread then butterfly,
p = e·MUFU.RCP(Σ); otherwise moeSoftmax (block reduce, same formula) then moeTopK (k = 1) or moeTopKFast (two per
pass). Top-k by iterated argmax on p, equal values to the lower index within a thread and across the butterfly;
renormalize: the selected p summed in selection order in fp32, times MUFU.RCP of the sum. Weights fp32, ids
int32, no scaling factor (SGLang applies it in the combine).
renormalize=False is spec method "default" (weights = softmax values); renormalize=True is "renormalize_naive".
"""

from ._env import problem, to_numpy, to_torch, version  # noqa: F401 (version: the registry's)

NAME = "sglang.topk_softmax"
OP = "routing"
DETERMINISTIC = True
RECIPE = "sglang_topk_softmax"
METHODS = {"default": False, "renormalize_naive": True}  # spec method -> the kernel's renormalize
SPACE = {"method": list(METHODS), "eps": 0.0, "routed_scaling_factor": None, "num_fused_shared_experts": 0,
         "tile_tokens_dim": None}
EMPTY = ("num_tokens=0: the launcher's grid is ceil(0 / ROWS_PER_CTA) = 0 blocks for a power-of-two E (CUDA: "
         "cudaErrorInvalidValue), and otherwise its softmax workspace of T·E floats is empty, so its data_ptr() is "
         "null and the host's TORCH_CHECK(softmax_workspace != nullptr, \"softmax_workspace must be provided for "
         "num_experts that are not a power of 2.\") fires (moe_topk_softmax_kernels.cu, topkGatingSoftmaxLauncher "
         "default branch; measured on the H200, every T=0 case)")


def available():
    return problem()


def unsupported(config):
    c = config
    if c.method not in METHODS:
        return f"method {c.method!r}: the kernel is softmax → top-k, optionally renormalized ({list(METHODS)})"
    if c.eps != 0.0 and METHODS[c.method]:
        return f"eps={c.eps}: the kernel renormalizes by the plain sum"
    if c.routed_scaling_factor is not None:
        return "routed_scaling_factor: the kernel returns unscaled weights (SGLang scales in the combine)"
    if c.num_fused_shared_experts:
        return "fused shared experts are appended by the caller, not this kernel"
    if c.tile_tokens_dim is not None:
        return "tile_tokens_dim: the kernel returns ids and weights, no padded permutation"
    if c.num_tokens == 0:
        return EMPTY
    return None


def topk_softmax(logits, top_k, renormalize):
    """logits [T, E] fp32 | bf16 | fp16 contiguous CUDA -> (weights fp32 [T, k], ids int32 [T, k])."""
    import sgl_kernel
    import torch

    from ._env import launch_check

    if logits.dim() != 2 or not logits.is_contiguous():
        raise ValueError(f"logits must be a contiguous [T, E] tensor, got shape {tuple(logits.shape)}")
    if not 1 <= top_k <= logits.shape[1]:
        raise ValueError(f"top_k={top_k} must be in [1, E={logits.shape[1]}]")
    T = logits.shape[0]
    if T == 0:
        raise ValueError(EMPTY)
    weights = torch.empty((T, top_k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((T, top_k), dtype=torch.int32, device=logits.device)
    sgl_kernel.topk_softmax(weights, ids, logits, renormalize)
    launch_check("topk_softmax")
    return weights, ids


def run(config, inputs, device="cuda"):
    """inputs {"logits" [T, E] float32 (values of logits_dtype)} -> {"ids", "weights"} in selection order."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[config.logits_dtype]
    logits = to_torch(inputs["logits"], "fp32", device).to(dtype)  # exact: the values are of that dtype
    weights, ids = topk_softmax(logits, config.top_k, METHODS[config.method])
    return {"ids": to_numpy(ids), "weights": to_numpy(weights)}
