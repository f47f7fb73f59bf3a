"""impls/torch_eager as an implementation under test: numpy in, torch on CPU (or CUDA), numpy out.

The adapter only converts: narrow floats travel as float32 values and become bf16 / fp16 tensors here; fp8
codes become float8_e4m3fn views of the same bytes. Its recipe is impls.torch_eager.RECIPE of the quant path
(routing and quant ops: the bf16 path's routing fields, which every path shares).
"""

import numpy as np
import torch

import impls.torch_eager as te
from impls.torch_eager import trtllm_ops as te_ops
from spec.recipes import Recipe

from ..model.case import CONTRACT
from ..model.generate import weights as generated_weights
from .interface import Impl

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FP8_KEYS = {"fp8_block": ("w13", "w2"), "mxfp8": ("w13", "w2"), "nvfp4": ("w13_scale", "w2_scale")}
SCALE_LAYOUT_FLAGS = {
    "row": {},
    "col": {"column_major_scales": True},
    "col_tma": {"column_major_scales": True, "scale_tma_aligned": True},
    "ue8m0_packed": {"column_major_scales": True, "scale_tma_aligned": True},
}


# The recipe fields (spec.routing.RECIPE_OPTIONS) the torch implementation takes as route keywords, by its own names
# (impls/torch_eager stays apart from spec/). Its other routing rounding points are fixed by its code and declared
# in its recipe (sigmoid "exact", exp "rn", fp32 routing arithmetic).
TORCH_ROUTE_KEYWORDS = {"bias_dtype": "bias", "weights_dtype": "routing_weights", "renorm_order": "renorm_order",
                        "group_score": "group_score", "shared_weight": "shared_weight"}


def route_keywords(r):
    """impls.torch_eager.route's rounding keywords under recipe `r`."""
    return {keyword: getattr(r, field) for keyword, field in TORCH_ROUTE_KEYWORDS.items()}


def tensor(a, dtype, device):
    return torch.from_numpy(np.array(a, dtype=np.float32)).to(device=device, dtype=DTYPES[dtype])


def numpy(t):
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    elif t.dtype == torch.float8_e4m3fn:
        t = t.view(torch.uint8)
    return t.detach().cpu().numpy()


def recipe(case):
    quant = case.config.quant if case.op == "moe" else "bf16"
    return Recipe(**te.RECIPE[quant])


def recipe_cuda(case):
    """The same code on CUDA: kernels flush subnormals to zero (spec/recipes.py TORCH_EAGER_CUDA)."""
    r = recipe(case)
    return r.but(name=r.name.replace("torch_eager_", "torch_eager_cuda_"), subnormals="flush")


def expert_tensors(source, quant, device="cpu", *, given="prepared", gated=False, scale_fmt="fp32"):
    """An ExpertWeights source (numpy) as the torch layer's callable e -> dict of tensors on `device`. Unquantized
    weights (`given` bf16 / fp32, MoEConfig.expert_weights) are prepared by te.quantize_expert_weights."""
    fp8 = FP8_KEYS.get(quant, ())

    def prepare(e):
        raw = source.expert(e)
        w13, w2 = (torch.from_numpy(np.array(raw[k])).to(device=device, dtype=DTYPES[given])[None]
                   for k in ("w13", "w2"))
        out = te.quantize_expert_weights(w13, w2, quant, gated=gated, scale_ue8m0=scale_fmt == "ue8m0")
        return {k: v[0] for k, v in out.items()}

    def expert(e):
        if given != "prepared":
            return prepare(e)
        out = {}
        for k, v in source.expert(e).items():
            t = torch.from_numpy(np.array(v)).to(device)  # a writable copy of the cached, read-only expert
            if v.dtype == np.uint8:
                out[k] = t.view(torch.float8_e4m3fn) if k in fp8 else t
            else:
                out[k] = t.to(torch.bfloat16) if k in ("w13", "w2") else t
        return out

    return expert


def _route(case, inputs, device):
    c, r = case.config, recipe(case)
    bias = inputs.get("bias")
    ids, w = te.route(
        tensor(inputs["logits"], c.logits_dtype, device),
        None if bias is None else tensor(bias, c.bias_dtype, device),
        **c.route_kwargs(),
        **route_keywords(r),
    )
    out = {"ids": numpy(ids), "weights": numpy(w)}
    if c.tile_tokens_dim is None:
        return out
    layout = te.expert_permutation(ids, num_experts=c.num_experts, tile_tokens_dim=c.tile_tokens_dim,
                                   local_expert_offset=c.local_expert_offset, local_num_experts=c.local_num_experts,
                                   num_fused_shared_experts=c.num_fused_shared_experts)
    return {**out, **{k: numpy(v) for k, v in layout.items()}}


def _quant(case, inputs, device):
    c = case.config
    x = tensor(inputs["x"], c.input_dtype, device)
    if c.scheme == "fp8_group":
        q, s = te.per_token_group_quant_fp8(
            x,
            c.group_size,
            variant=c.variant,
            scale_formula=c.scale_formula,
            scale_ue8m0=c.scale_fmt == "ue8m0",
            **SCALE_LAYOUT_FLAGS[c.layout],
        )
        buffer = numpy(te.scale_buffer(s)).view(np.uint8).ravel()
        if c.layout == "ue8m0_packed":
            s = te.e8m0_to_float(te.unpack_ue8m0(s, c.hidden_size // c.group_size))
        return {"q": numpy(q), "scales": numpy(s.contiguous()), "scale_buffer": buffer}
    if c.scheme == "mxfp8":
        q, s = te.mxfp8_quant(x, rule=c.mx_rule)
    else:
        q, s = te.nvfp4_quant(x, torch.tensor(float(inputs["global_scale"]), device=device))
    s = numpy(s)
    return {"q": numpy(q), "scales": s, "scale_buffer": np.ascontiguousarray(s).view(np.uint8).ravel()}


def _moe(case, inputs, device):
    c, r = case.config, recipe(case)
    bias = inputs.get("bias")
    routing = {**c.routing.route_kwargs(), **route_keywords(r)}
    res = te.moe_layer(
        tensor(inputs["hidden"], c.hidden_dtype, device),
        tensor(inputs["logits"], c.routing.logits_dtype, device),
        None if bias is None else tensor(bias, c.routing.bias_dtype, device),
        expert_tensors(generated_weights(case), c.quant, device, given=c.expert_weights, gated=c.gated,
                       scale_fmt=c.scale_fmt),
        routing=routing,
        **c.layer_kwargs(),
    )
    return {"out": numpy(res.out), "ids": numpy(res.ids), "weights": numpy(res.weights)}


def dev_tensor(a, dtype, device):
    """A dev-kernel input: float32 values as bf16 / fp16, e4m3 codes as float8_e4m3fn, others as they are."""
    if dtype == "e4m3":
        return torch.from_numpy(np.array(a, np.uint8)).to(device).view(torch.float8_e4m3fn)
    if dtype in DTYPES:
        return tensor(a, dtype, device)
    return torch.from_numpy(np.array(a)).to(device)


def _trtllm_ops(case, inputs, device):
    c = case.config
    t = {k: dev_tensor(v, None, device) for k, v in inputs.items()}
    if c.kernel == "convertsf":
        return {"out": numpy(te_ops.convertsf(t["sf"], c.num_tokens, c.hidden_size, c.sf_layout))}
    e2p = t["expanded_idx_to_permuted_idx"]
    if c.kernel == "permute":
        P = int(inputs["num_padded_tokens"])
        out = {"out": numpy(te_ops.permute(dev_tensor(inputs["hidden_states"], c.dtype, device), e2p, P))}
        if "hidden_states_scale" in t:
            out["out_scale"] = numpy(te_ops.permute(t["hidden_states_scale"].t(), e2p, P).t().contiguous())
        return out
    if c.kernel == "finalize_deepseek_fp8":
        q, s = te_ops.finalize_deepseek_fp8(dev_tensor(inputs["gemm2_out"], c.dtype, device), t["gemm2_out_scale"],
                                            e2p, tensor(inputs["expert_weights"], "bf16", device))
        return {"out": numpy(q), "out_scale": numpy(s)}
    if c.kernel == "finalize":
        w = inputs.get("expert_weights")
        w = None if w is None else tensor(w, "bf16", device)
        return {"out": numpy(te_ops.finalize(dev_tensor(inputs["gemm2_out"], c.dtype, device), e2p, w, c.hidden_size))}
    controls = {k: t[k] for k in ("alpha", "beta", "clamp_limit", "cta_idx_xy_to_batch_idx") if k in t}
    if controls:
        controls["tile_tokens_dim"] = c.tile_tokens_dim
    x = dev_tensor(inputs["gemm1_out"], c.dtype, device)
    if c.kernel == "activation":
        return {"out": numpy(te_ops.activation(x, e2p, **controls))}
    q, s = te_ops.activation_deepseek_fp8(x, t["gemm1_out_scale"], e2p, **controls)
    return {"out": numpy(q), "out_scale": numpy(s)}


RUN = {"routing": _route, "quant": _quant, "moe": _moe, "trtllm_ops": _trtllm_ops}


def unsupported(case):
    if case.op == "quant" and case.config.scheme == "nvfp4" and case.dist == "nonfinite":
        return "nvfp4: e2m1 has no NaN"
    if case.op == "quant" and case.config.variant not in te.quant.QUANT_VARIANTS:
        return f"variant {case.config.variant!r}: a device reciprocal (MUFU.RCP) that torch does not model"
    if case.op == "moe" and case.config.quant in ("fp8_block", "mxfp8", "nvfp4"):
        block = te.layer.BLOCK[case.config.quant]
        if case.config.hidden_size % block or case.config.intermediate_size % block:
            return f"quant {case.config.quant} needs hidden and intermediate sizes divisible by {block}"
    return None


def _cuda_reason():
    return None if torch.cuda.is_available() else "no CUDA device (torch.cuda.is_available() is False)"


def _impl(name, device, available, recipe=recipe):
    return Impl(
        name=name,
        version=f"torch {torch.__version__}",
        ops=("routing", "quant", "moe", "trtllm_ops"),
        deterministic=True,
        may_crash=False,
        available=available,
        unsupported=unsupported,
        recipe=recipe,
        run=lambda case, inputs: RUN[case.op](case, inputs, device),
        contract=CONTRACT,  # every field of the case model
    )


TORCH = _impl("torch", "cpu", lambda: None)
TORCH_CUDA = _impl("torch-cuda", "cuda", _cuda_reason, recipe_cuda)
