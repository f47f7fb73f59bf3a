"""Where impls/torch_eager rounds, per quant path, keyed by the field names of spec/recipes.py ``Recipe``.

Routing fields are the defaults of ``route``; its keywords bias_dtype, weights_dtype, renorm_order and
shared_weight override them per call. The sigmoid is "exact": float64 sigmoid rounded once to fp32
(routing.sigmoid); exponentials are torch's (exp "rn": within an ulp, no fast-math argument rounding). Equal keys
go to the lower expert index, equal group scores to the lower group (routing.descending_order: a stable sort).
Quantized paths: activations and the bf16 intermediate are quantized per token with s = fl(amax / 448) and
q = e4m3(x / s) (fp8_block, groups of 128); mxfp8 rounds that s up to a power of two (groups of 32, the
"ceil448" rule, exact x / s); nvfp4 uses groups of 16, a per-token encode global scale and the TRT-LLM scale
math (quant.nvfp4_quant). GEMMs accumulate in fp32 (see layer.py for the per-block order of fp8_block).
Unquantized expert weights are prepared by layer.quantize_expert_weights: fp8_block per 128×128 tile (each half
of a gated W13 on its own), s = fl(max(amax, 1e-10) / 448), q = e4m3(w / s); mxfp8 "ceil448"; nvfp4 one encode
global scale per expert matrix.
"""

_BASE = dict(logits="fp32", bias="fp32", sigmoid="exact", exp="rn", routing_weights="fp32",
             renorm_order="divide_then_scale", group_score="method", routing_scores="fp32",
             routing_bias_add="fp32", routing_group_scores="fp32", routing_renorm="fp32",
             act_quant_variant="div", act_scale_formula="div448",
             gemm_acc="fp32", gemm1_out="bf16", act_compute="fp32", act_out="bf16", requant_intermediate=True,
             requant_variant="div", requant_scale_formula="div448", requant_group=128, gemm1_out_quant=False,
             gemm1_out_quant_variant="div", gemm1_out_quant_scale_formula="div448", mx_rule="ceil448",
             router_weight_at="gemm2", expert_out="bf16", combine="fp32", subnormals="keep",
             out="bf16", tie_rule="lower_index", shared_weight="routed_sum_over_rsf", weight_quant_variant="div",
             weight_scale_formula="div448")

RECIPE = {
    "bf16": {**_BASE, "name": "torch_eager_bf16", "requant_intermediate": False},
    "fp8_block": {**_BASE, "name": "torch_eager_fp8_block"},
    "mxfp8": {**_BASE, "name": "torch_eager_mxfp8"},
    "nvfp4": {**_BASE, "name": "torch_eager_nvfp4"},
}
