"""The spec as an implementation (the oracle), and the calls through which difftest asks it for outputs.

``expected(case, inputs, recipe)`` is the recipe-exact spec output (``recipe=None``: the float64 ideal);
``SPEC`` runs it with the spec's own default recipe, so `replay` and plug-in checks can treat the spec as any
other implementation.
"""

import linecache
from pathlib import Path

import numpy as np

from spec import layouts, quant, trtllm_ops
from spec import routing as spec_routing
from spec.numerics import E4M3FN, FP32, decode, encode, round_to
from spec.recipes import DEFAULT

from ..model.case import CONTRACT, CaseError, MoEConfig, RoutingConfig
from ..model.generate import weights as generated_weights
from .interface import Impl

LAYOUTS = {
    "row": layouts.row_major,
    "col": layouts.column_major,
    "col_tma": layouts.column_major_tma,
    "ue8m0_packed": layouts.ue8m0_packed,
}


SPEC_DIR = Path(layouts.__file__).resolve().parent


def spec_precondition(e):
    """Whether ValueError e is one of the spec's own preconditions: raised by a ``raise`` statement in spec/.
    A ValueError that numpy or ml_dtypes raised inside the spec (a reshape of an empty array) is not: it is
    a bug of the spec or of difftest, reported as an error, never a skip worded by numpy."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or Path(tb.tb_frame.f_code.co_filename).resolve().parent != SPEC_DIR:
        return False
    return linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).lstrip().startswith("raise ")


def refusals(fn):
    """The spec's precondition ValueErrors become CaseError: the case is outside the spec's domain, and the
    skip reason is the spec's own sentence. Any other ValueError propagates (check.run_case: an error)."""

    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as e:
            if not spec_precondition(e):
                raise
            raise CaseError(f"spec refuses: {str(e).splitlines()[0]}") from None

    return wrapped


layer_kwargs = MoEConfig.layer_kwargs  # the keyword mappers live on the configs (difftest/model/case.py)
routing_kwargs = RoutingConfig.route_kwargs


@refusals
def route(config, inputs, recipe, ids=None):
    """spec Routing of a routing config under `recipe`; `ids` forces the routed selection."""
    extra = {} if ids is None else {"ids": ids}
    return spec_routing.route(inputs["logits"], inputs.get("bias"), **config.route_kwargs(), recipe=recipe or DEFAULT,
                              **extra)


@refusals
def quantize(config, inputs):
    """{q codes, logical scales, scale_buffer (flat bytes), layout (spec ScaleBuffer)} of a QuantConfig."""
    x = inputs["x"]
    if config.scheme == "fp8_group":
        q, s = quant.per_token_group_quant_fp8(
            x,
            config.group_size,
            variant=config.variant,
            scale_formula=config.scale_formula,
            scale_fmt=config.scale_fmt,
        )
        buf = LAYOUTS[config.layout](s)
        return {"q": q, "scales": s, "scale_buffer": buf.data.view(np.uint8), "layout": buf}
    if config.scheme == "mxfp8":
        q, s = quant.mxfp8_quant(x, rule=config.mx_rule)
    else:
        q, s = quant.nvfp4_quant(x, inputs["global_scale"])
    buf = layouts.ScaleBuffer(s.ravel().copy(), s.shape, (s.shape[1], 1))  # e8m0 / e4m3 codes, row-major
    return {"q": q, "scales": s, "scale_buffer": buf.data, "layout": buf}


def expert_weights(case, recipe):
    """(ExpertWeights, quant path to decode them by) of a moe case. Unquantized expert weights (MoEConfig.
    expert_weights bf16 / fp32) are prepared by the recipe (spec.layer.PreparedWeights); the float64 ideal reads
    the given values themselves, as bf16-path weights are read."""
    from spec.layer import PreparedWeights

    c, w = case.config, generated_weights(case)
    if c.expert_weights == "prepared":
        return w, c.quant
    if recipe is None:
        return w, "bf16"
    return PreparedWeights(w, c.quant, recipe, c.gated, c.scale_fmt), c.quant


@refusals
def layer(case, inputs, recipe, ids=None, accumulate=None, router_weights=None):
    """spec LayerResult of a moe case under `recipe` (None: ideal); `ids` forces the expert selection and
    `router_weights` (with ids) their weights; `accumulate` (spec.layer.ACCUMULATIONS) one realization of the
    recipe's sums instead of the recipe-exact one."""
    from spec.layer import moe_layer

    c = case.config
    routing = c.routing.route_kwargs()
    weights, quant = expert_weights(case, recipe)
    return moe_layer(
        inputs["hidden"],
        inputs["logits"],
        inputs.get("bias"),
        weights,
        routing=routing,
        **{**c.layer_kwargs(), "quant": quant, "scale_fmt": c.scale_fmt if quant == c.quant else "fp32"},
        recipe=recipe,
        ids=ids,
        accumulate=accumulate,
        router_weights=router_weights,
    )


def expert_permutation(config, ids):
    """spec/permutation.py's realization (rows of an expert in expanded-index order) at `ids` [T, k + S]."""
    from spec import permutation

    c = config
    L = c.num_local_experts
    local = permutation.local_expert_ids(ids, c.num_experts, c.local_expert_offset, L, c.num_fused_shared_experts)
    n, tile = L + c.num_fused_shared_experts, c.tile_tokens_dim
    lay = permutation.layout(local, n, tile)
    e2p = permutation.expanded_idx_to_permuted_idx(local, n, tile)
    i32 = lambda a: np.asarray(a, np.int32)
    return {"total_num_padded_tokens": i32([lay.total_num_padded_tokens]), "expanded_idx_to_permuted_idx": i32(e2p),
            "permuted_idx_to_token_idx": i32(permutation.permuted_idx_to_token_idx(e2p, lay.total_num_padded_tokens)),
            "cta_idx_xy_to_batch_idx": i32(lay.cta_idx_xy_to_batch_idx),
            "cta_idx_xy_to_mn_limit": i32(lay.cta_idx_xy_to_mn_limit),
            "num_non_exiting_ctas": i32([lay.num_non_exiting_ctas])}


DEV_FORMATS = {"bf16": "bf16", "fp16": "fp16", "e4m3": E4M3FN}


def dev_values(a, dtype):
    """float64 values of a dev-kernel tensor: e4m3 codes decoded, others as given."""
    return decode(a, E4M3FN).astype(np.float64) if dtype == "e4m3" else np.asarray(a, np.float64)


def dev_store(v, dtype):
    """The kernels' one store: RNE to bf16 / fp16 values, or saturating e4m3 codes."""
    return encode(v, E4M3FN, saturate=True) if dtype == "e4m3" else round_to(v, DEV_FORMATS[dtype])


def mapped_rows(inputs, rows):
    """bool [rows]: the permuted rows some (t, k) maps to (the only rows activation and finalize touch)."""
    e2p = inputs["expanded_idx_to_permuted_idx"]
    out = np.zeros(rows, bool)
    out[e2p[e2p >= 0]] = True
    return out


def activation_args(config, inputs):
    """(x [P, 2I] float64, {alpha, beta, clamp_limit} per row [P, 1]): the activation's dequantized input (DeepSeek
    FP8: fl32(scale·code), one FMUL) and its SwiGLU controls, looked up per row through the tile's expert."""
    c = config
    x = dev_values(inputs["gemm1_out"], c.dtype)
    if c.kernel == "activation_deepseek_fp8":
        s = np.repeat(inputs["gemm1_out_scale"].T.astype(np.float64), trtllm_ops.DEEPSEEK_BLOCK, axis=1)
        x = round_to(s * x, FP32).astype(np.float64)
    if not c.swiglu_controls:
        return x, {}
    expert = inputs["cta_idx_xy_to_batch_idx"][np.arange(x.shape[0]) // c.tile_tokens_dim]
    return x, {k: inputs[k].astype(np.float64)[expert][:, None] for k in ("alpha", "beta", "clamp_limit")}


@refusals
def dev_kernel(config, inputs):
    """The outputs of one trtllm-gen dev kernel (docs/trtllm_gen_dev_kernels.md), exact math, one rounding."""
    c = config
    if c.kernel == "convertsf":
        return {"out": trtllm_ops.convertsf(inputs["sf"], c.num_tokens, c.hidden_size, c.sf_layout)}
    e2p = inputs["expanded_idx_to_permuted_idx"]
    if c.kernel == "permute":
        P = int(inputs["num_padded_tokens"])
        out = {"out": trtllm_ops.permute(inputs["hidden_states"], e2p, P)}
        if "hidden_states_scale" in inputs:
            out["out_scale"] = np.ascontiguousarray(trtllm_ops.permute(inputs["hidden_states_scale"].T, e2p, P).T)
        return out
    if c.kernel == "finalize_deepseek_fp8":
        acc = trtllm_ops.finalize_deepseek_fp8(dev_values(inputs["gemm2_out"], c.dtype), inputs["gemm2_out_scale"],
                                               e2p, inputs["expert_weights"])
        q, s = trtllm_ops.requant_deepseek_fp8(acc, fmt=DEV_FORMATS[c.dtype])
        return {"out": q, "out_scale": s}
    if c.kernel == "finalize":
        x = dev_values(inputs["gemm2_out"], c.dtype)
        return {"out": dev_store(trtllm_ops.finalize(x, e2p, inputs.get("expert_weights"), c.hidden_size), c.dtype)}
    x, controls = activation_args(c, inputs)
    y = trtllm_ops.gated_activation(x, **controls)
    rows = mapped_rows(inputs, x.shape[0])[:, None]
    if c.kernel == "activation":
        return {"out": np.where(rows, dev_store(y, c.dtype), 0).astype(np.float32)}
    q, s = trtllm_ops.requant_deepseek_fp8(y)
    return {"out": np.where(rows, q, 0).astype(np.uint8), "out_scale": np.where(rows.T, s, 0).astype(np.float32)}


def expected(case, inputs, recipe):
    if case.op == "trtllm_ops":
        return dev_kernel(case.config, inputs)
    if case.op == "routing":
        r = route(case.config, inputs, recipe)
        out = {"ids": r.ids, "weights": r.weights}
        return out if case.config.tile_tokens_dim is None else {**out, **expert_permutation(case.config, r.ids)}
    if case.op == "quant":
        return {k: v for k, v in quantize(case.config, inputs).items() if k != "layout"}
    res = layer(case, inputs, recipe)
    return {"out": res.out, "ids": res.ids}


def _unsupported(case):
    if case.op == "quant" and case.config.scheme == "nvfp4" and case.dist == "nonfinite":
        return "nvfp4: e2m1 has no NaN, the spec refuses non-finite x"
    return None


def _run(case, inputs):
    return expected(case, inputs, DEFAULT)


SPEC = Impl(
    name="spec",
    version="0.1.0",
    ops=("routing", "quant", "moe", "trtllm_ops"),
    deterministic=True,
    may_crash=False,
    available=lambda: None,
    unsupported=_unsupported,
    recipe=lambda case: DEFAULT,
    run=_run,
    contract=CONTRACT,  # every field of the case model
)


def summed_in(accumulate, recipe=DEFAULT):
    """The spec's moe layer as an implementation of `recipe` that sums its GEMMs in one realization (`accumulate`:
    "fp32" sequential, "fp32_pairwise", "fp32_blocked", "hopper_fp8"): a correct implementation whose results
    differ from the recipe-exact ones (its ids and router weights exposed), for the tests of the bounds and of the
    bias test."""
    return Impl(
        name=f"spec:{accumulate}",
        version="0.1.0",
        ops=("moe",),
        deterministic=True,
        may_crash=False,
        available=lambda: None,
        unsupported=_unsupported,
        recipe=lambda case: recipe,
        run=lambda case, inputs: _exposed(case, layer(case, inputs, recipe, accumulate=accumulate)),
    )


def _exposed(case, result):
    k = case.config.routing.top_k
    return {"out": result.out, "ids": result.ids[:, :k], "weights": result.weights[:, :k]}
