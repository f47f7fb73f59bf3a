"""Precision recipes: where an implementation rounds, one field per rounding point.

The spec computes two results for every layer: the float64 *ideal* (``recipe=None``: no rounding after the
given inputs) and the *recipe-exact* result, which rounds exactly where the recipe says. Bounds
(spec/bounds.py) are derived from the same fields, so a recipe is the single statement of an
implementation's precision. Format names are those of spec/numerics.py ("fp64", "fp32", "bf16", "fp16").
"""

from dataclasses import asdict, dataclass, replace

# σ (spec/routing.py _sigmoid): "exact" the float64 value rounded once; "expf" 1/(1 + fl(exp(-x))) in fp32, each step
# rounded; "tanh" 0.5·tanhf(0.5x) + 0.5; "torch_cpu" / "torch_cuda" torch's CPU / CUDA kernel, the expf formula
# with an exp that is not correctly rounded: within TORCH_CPU_SIGMOID_REL·u / TORCH_CUDA_SIGMOID_REL·u of σ at normal
# results and 0 below x ≈ -88.72 (spec/bounds.py, measured by tools/measure_sigmoid.py over every fp32 in [-105, 105]).
SIGMOIDS = ("exact", "expf", "tanh", "torch_cpu", "torch_cuda")
# How exp is evaluated (spec/routing.py _exp): "rn" correctly rounded (the bounds also admit torch's exps, measured
# within bounds.TORCH_EXP_REL·u by tools/measure_exp.py), or "ex2" CUDA fast-math __expf.
EXPS = ("rn", "ex2")
RENORM_ORDERS = ("divide_then_scale", "scale_then_divide")
# spec/quant.py per_token_group_quant_fp8: the three host formulations (correctly rounded operations, drawn by the
# strategies) and the device ones with the GPU's reciprocal (hopper.hopper_rcp), which only implementations that
# declare them in their `space` are given: x·fl(448·rcp(amax)) (mono_moe, SGLang's v2 quantizer) and x·rcp(s)
# (SGLang's v1 quantizer, and the trtllm-gen DeepSeek-FP8 activation kernel's re-quantization of the intermediate).
HOST_QUANT_VARIANTS = ("div", "mul_rcp_scale", "mul_rcp_amax")
ACT_QUANT_VARIANTS = (*HOST_QUANT_VARIANTS, "mul_448_div_amax")
QUANT_VARIANTS = (*ACT_QUANT_VARIANTS, "mul_mufu_rcp_scale")
REQUANT_GROUPS = (64, 128)
SCALE_FORMULAS = ("div448", "mul_rcp448")
# The intermediate's quantizers may also scale as the trtllm-gen DeepSeek-FP8 dev kernels do (spec.quant.deepseek_scale:
# s = max(fl(amax·fl(1/448)), FLT_MIN), amax not floored); not a quant-op formula (the strategies draw SCALE_FORMULAS).
REQUANT_SCALE_FORMULAS = (*SCALE_FORMULAS, "mul_rcp448_flt_min")
# GEMM accumulators: fp64; fp32 (round to nearest at every addition, any order); tensor_core (fp32 whose additions
# may round toward zero: the H200's bf16 tensor cores under cuBLAS move every changed output of a non-negative
# K = 2048 product toward zero, spec/data/gemm_bias.jsonl; a kernel on tensor cores declares it); hopper_fp8 (the
# Hopper FP8 tensor core's e8m13 accumulator inside each K block, emulated bit for bit: spec.hopper).
GEMM_ACCS = ("fp64", "fp32", "tensor_core", "hopper_fp8")
MX_RULES = ("ocp", "ceil448")
ROUTER_WEIGHT_AT = ("gemm2", "combine", "before_requant")
SUBNORMALS = ("keep", "flush")
# Group score of the grouped methods (spec/routing.py group_score): "method" follows the method's namesake:
# deepseek_v3 → FlashInfer's top-2 sum with or without a bias (fused_topk_deepseek requires a bias tensor;
# trtllm_fused_moe_routing_deepseek.cu routingMainKernel adds 0 without mPtrRoutingBias), so the FlashInfer
# recipes state their rule by this default; deepseek_v2 → SGLang grouped_topk's max. "top2_sum_if_biased":
# DeepSeek-V3's reference Gate, vLLM grouped_topk and SGLang select_experts (top-2 sum with a bias, max without).
GROUP_SCORES = ("method", "top2_sum", "max", "top2_sum_if_biased")
ROUTING_ARITHMETIC = ("fp32", "bf16", "fp16")  # routing_scores, routing_bias_add, routing_group_scores, routing_renorm
# Among bit-identical routing keys (experts, or groups, whose keys come from bit-identical inputs): the lower index
# is selected first, the higher one, or no promise (torch.topk). difftest.checking.compare holds a declared rule
# exactly.
TIE_RULES = ("lower_index", "higher_index", "unspecified")
# The weight of each fused shared expert (spec/routing.py _routing): "one" = exactly 1.0 whatever the routed weights
# (the default: DeepSeek-V3's MoE adds the shared expert unweighted; trtllm-gen's routingDeepSeek writes 1.0);
# "routed_sum_over_rsf" = Σ(routed weights)/rsf, 1 whenever the routed weights were normalized to sum to rsf and 0
# where they all vanish (SGLang's fused gate and its torch path). The argument: docs/semantics.md §1.5.
SHARED_WEIGHTS = ("routed_sum_over_rsf", "one")
# Formats of the fields without a list of their own. Logits as the caller gives them (fp64: the ideal); the bias as an
# implementation reads it (spec/routing.py); routing weights as written (FlashInfer's reference paths and DeepSeek-V3's
# Gate write them in the logits' dtype); the layer's stores (gemm1_out ... out; fp64: the ideal).
LOGIT_FORMATS = ("fp64", "fp32", "bf16", "fp16")
BIAS_FORMATS = ("fp32", "bf16")
ROUTING_WEIGHT_FORMATS = ("fp32", "bf16", "fp16")
STORE_FORMATS = ("fp64", "fp32", "bf16", "fp16")


# The values each field of Recipe takes (its check at construction; spec.routing.OPTIONS reads the routing ones).
FIELD_VALUES = {
    "logits": LOGIT_FORMATS, "bias": BIAS_FORMATS, "sigmoid": SIGMOIDS, "exp": EXPS,
    "routing_weights": ROUTING_WEIGHT_FORMATS, "renorm_order": RENORM_ORDERS, "group_score": GROUP_SCORES,
    "routing_scores": ROUTING_ARITHMETIC, "routing_bias_add": ROUTING_ARITHMETIC,
    "routing_group_scores": ROUTING_ARITHMETIC, "routing_renorm": ROUTING_ARITHMETIC,
    "act_quant_variant": ACT_QUANT_VARIANTS, "act_scale_formula": SCALE_FORMULAS, "gemm_acc": GEMM_ACCS,
    "gemm1_out": STORE_FORMATS, "act_compute": STORE_FORMATS, "act_out": STORE_FORMATS,
    "requant_variant": QUANT_VARIANTS, "requant_scale_formula": REQUANT_SCALE_FORMULAS, "requant_group": REQUANT_GROUPS,
    "gemm1_out_quant_variant": QUANT_VARIANTS, "gemm1_out_quant_scale_formula": REQUANT_SCALE_FORMULAS,
    "mx_rule": MX_RULES, "router_weight_at": ROUTER_WEIGHT_AT, "expert_out": STORE_FORMATS,
    "combine": STORE_FORMATS, "out": STORE_FORMATS, "subnormals": SUBNORMALS, "tie_rule": TIE_RULES,
    "shared_weight": SHARED_WEIGHTS, "weight_quant_variant": QUANT_VARIANTS, "weight_scale_formula": SCALE_FORMULAS,
}


@dataclass(frozen=True)
class Recipe:
    """One implementation's rounding points, in dataflow order.

    Routing: logits are materialized in ``logits``; the correction bias is read as ``bias``; the
    sigmoid is ``exact`` (fp32 rounding of the true value) or ``expf`` (``1/(1+fl(exp(-x)))`` in fp32,
    which underflows to 0 below x ≈ -88.7); weights are written in ``routing_weights``;
    ``renorm_order`` is ``w/(Σ+eps)·rsf`` or ``w·rsf/(Σ+eps)`` (trtllm-gen). Sigmoid ``tanh`` is
    ``0.5·tanhf(0.5x) + 0.5`` (fused_topk_deepseek) with tanhf correctly rounded; it is exactly 0 below
    x ≈ -18.02 (tanhf = -1). ``exp`` says how the exponentials of the sigmoid and the softmax are evaluated:
    ``rn`` correctly rounded, ``ex2`` as CUDA's fast-math ``__expf`` (``-use_fast_math``: MUFU.EX2 of
    fl(x·fl(log2 e)), spec/routing.py ``_exp``), whose rounded argument moves e^x by up to 2|x|·u relatively.
    Routing arithmetic (torch paths that compute in the logits' dtype): σ / softmax are evaluated in fp32 and
    stored in ``routing_scores``; s + bias is stored in ``routing_bias_add``; a top-2 group sum in
    ``routing_group_scores``; the weight sum, + eps, the divide and the rsf multiply each in ``routing_renorm``
    (torch's bf16 sum accumulates in fp32 and rounds once); the result is written in ``routing_weights``.
    ``group_score`` names the grouped methods' group rule (GROUP_SCORES). ``tie_rule`` (TIE_RULES) is how the
    selection orders experts (and groups) whose keys are bit-identical: "lower_index" first (the spec's own rule,
    trtllm-gen, fused_topk_deepseek, mono_moe, moe_fused_gate), "higher_index" first, or "unspecified" (the
    default: torch.topk promises no tie order), where any order among them is accepted. ``shared_weight``
    (SHARED_WEIGHTS) is the fused shared experts' weight: exactly 1.0 (default) or Σ(routed weights)/rsf; the two
    differ where every routed weight vanishes (all selected sigmoids underflow) and without renormalization.
    Quantized paths: activations are quantized per token group with ``act_quant_variant`` /
    ``act_scale_formula``; GEMMs accumulate per ``gemm_acc`` (GEMM_ACCS; ``hopper_fp8``: the tensor core's truncating
    e8m13 accumulator inside each K block, spec.hopper.hopper_fp8_step, then promotion to fp32); the
    intermediate is re-quantized before GEMM2 when ``requant_intermediate``. Then ``gemm1_out`` → activation
    in ``act_compute`` → ``act_out`` → GEMM2 with the router weight in its epilogue → ``expert_out`` → weighted sum in
    ``combine`` → ``out``. MXFP8 scales follow ``mx_rule`` (quant.mxfp8_quant). ``router_weight_at``: "gemm2"
    multiplies the fp32 GEMM2 accumulator before the ``expert_out`` write (SGLang Triton); "combine"
    multiplies the stored expert output inside the finalize sum (trtllm-gen); "before_requant" multiplies
    the activation output (in ``act_out``) before the re-quantization (mono_moe). ``requant_group``: columns
    per scale of the re-quantized intermediate (64: GEMM2 promotes its accumulator every 64 K).
    ``gemm1_out_quant`` (fp8_block): GEMM1's stored output is itself quantized 1×128 to e4m3 with
    ``gemm1_out_quant_variant`` / ``gemm1_out_quant_scale_formula`` (trtllm-gen's DeepSeek-FP8 GEMM1 writes e4m3 codes
    with block scales, which its activation kernel reads), and the activation reads each value as fl(code·scale) in
    ``act_compute``. ``mul_rcp448_flt_min`` (the intermediate's quantizers only): s = max(fl(amax·fl(1/448)), 2^-126).
    ``mul_448_div_amax`` (mono_moe, SGLang's fast-math quantizer): q = e4m3_satfinite(x·fl(448·rcp(amax))), rcp
    the device's reciprocal (hopper.hopper_rcp), eps 1e-10; mono_moe zeroes NaN inputs first.
    Weight preparation (moe cases whose expert weights come unquantized, MoEConfig.expert_weights): fp8_block
    weights are quantized per 128×128 tile (each half of a gated W13 on its own) with ``weight_quant_variant`` /
    ``weight_scale_formula`` (spec.quant.weight_block_quant), mxfp8 weights by ``mx_rule``, nvfp4 weights with one
    global scale per expert matrix (quant.nvfp4_global_scale), bf16 weights rounded to bf16.
    ``subnormals``: "keep" (IEEE gradual underflow at every store) or "flush" (FTZ/DAZ, CUDA kernels: any
    store whose exact value is below the format's min normal may be written as ±0, and an input subnormal may
    be read as 0). The spec's own values stay IEEE; "flush" only widens the hard/prob bounds
    (bounds.rounded, bounds.flushed_input), and only near zero.
    """

    name: str
    logits: str = "fp32"
    bias: str = "fp32"
    sigmoid: str = "exact"
    exp: str = "rn"
    routing_weights: str = "fp32"
    renorm_order: str = "divide_then_scale"
    group_score: str = "method"
    routing_scores: str = "fp32"
    routing_bias_add: str = "fp32"
    routing_group_scores: str = "fp32"
    routing_renorm: str = "fp32"
    act_quant_variant: str = "div"
    act_scale_formula: str = "div448"
    gemm_acc: str = "fp32"
    gemm1_out: str = "bf16"
    act_compute: str = "fp32"
    act_out: str = "bf16"
    requant_intermediate: bool = True
    requant_variant: str = "div"
    requant_scale_formula: str = "div448"
    requant_group: int = 128
    gemm1_out_quant: bool = False
    gemm1_out_quant_variant: str = "div"
    gemm1_out_quant_scale_formula: str = "div448"
    mx_rule: str = "ceil448"
    router_weight_at: str = "gemm2"
    expert_out: str = "bf16"
    combine: str = "fp32"
    out: str = "bf16"
    subnormals: str = "keep"
    tie_rule: str = "unspecified"
    shared_weight: str = "one"
    weight_quant_variant: str = "div"
    weight_scale_formula: str = "div448"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Recipe.name={self.name!r} must be a non-empty string")
        for flag in ("requant_intermediate", "gemm1_out_quant"):
            if getattr(self, flag) not in (True, False):
                raise ValueError(f"Recipe.{flag}={getattr(self, flag)!r} is not a bool")
        for field, allowed in FIELD_VALUES.items():
            if not isinstance(getattr(self, field), (str, int)) or getattr(self, field) not in allowed:
                raise ValueError(f"Recipe.{field}={getattr(self, field)!r} is not one of {allowed}")

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown Recipe fields {sorted(unknown)}")
        return cls(**d)

    def but(self, **changes):
        return replace(self, **changes)


# The ideal: float64 arithmetic, no quantization and no rounding anywhere (spec.layer.moe_layer without a recipe).
IDEAL = Recipe(name="ideal", logits="fp64", gemm_acc="fp64", gemm1_out="fp64", act_compute="fp64", act_out="fp64",
               requant_intermediate=False, expert_out="fp64", combine="fp64", out="fp64")

# The spec's own recipe: every default (fp32 routing and accumulation, bf16 stores) and the lower-index tie rule;
# what difftest compares with when an implementation declares none.
DEFAULT = Recipe(name="spec", tie_rule="lower_index")


# FlashInfer trtllm-gen BF16 (docs/semantics.md §5.1): fp32 routing with bf16 weights written by the routing
# kernel, activation fused into GEMM1's fp32 epilogue, bf16 GEMM2 output, fp32 finalize. Ties: the routing
# kernels' TopKRedType packs (score bits, 65535 − index) into one key, so equal scores go to the lower index
# (docs/trtllm_gen_routing.md §2; groups likewise).
TRTLLM_BF16 = Recipe(name="flashinfer_trtllm_bf16", routing_weights="bf16",
                     renorm_order="scale_then_divide", gemm_acc="tensor_core", gemm1_out="fp32",
                     router_weight_at="combine", tie_rule="lower_index")

# FlashInfer trtllm-gen FP8 block (DeepSeekFp8, docs/semantics.md §4.3, §5.1): hidden states quantized by the caller
# (SGLang's JIT kernel: s = amax·fl(1/448), q = x·fl(448·fl(1/amax))), activation in fp32, intermediate
# re-quantized 1×128 inside the kernel, bf16 routing weights.
TRTLLM_FP8_BLOCK = Recipe(name="flashinfer_trtllm_fp8_block", routing_weights="bf16",
                          renorm_order="scale_then_divide", act_quant_variant="mul_rcp_amax",
                          act_scale_formula="mul_rcp448", gemm_acc="tensor_core", gemm1_out="fp32",
                          router_weight_at="combine", tie_rule="lower_index")

# FlashInfer mono_moe (SM90a block-FP8 single kernel, docs/semantics.md §5.4; impls/flashinfer/mono_moe.py
# RECIPE_FIELDS, read in the 0.7.2.post1 sources): bf16 logits, __expf sigmoid, weights times fl(1/Σ); quantizer
# x·(448/amax), s = amax·fl(1/448); fp32 GEMM1 output and activation; router weight before the 1×64 re-quantization;
# Hopper FP8 accumulation; fp32 expert outputs summed by fp32 atomicAdd, one bf16 write.
# Not stated: its divisions are w·fl(1/Σ) (≤ 1 ulp from w/Σ, inside bounds.routing_weights) and __expf is
# ex2.approx (2 + 1.16|x| ulps, inside bounds.C_EVAL for |x| ≤ 5; routing-weight bound γ_{E+k+8} covers more).
# Ties: moe_routing.cuh warp_min_expert_with_max takes the smallest expert id among the lanes holding the maximum.
MONO_MOE = Recipe(name="flashinfer_mono_moe", logits="bf16", sigmoid="expf", tie_rule="lower_index",
                  act_quant_variant="mul_448_div_amax", act_scale_formula="mul_rcp448", gemm_acc="hopper_fp8",
                  gemm1_out="fp32", act_out="fp32", requant_group=64, requant_variant="mul_448_div_amax",
                  requant_scale_formula="mul_rcp448", router_weight_at="before_requant", expert_out="fp32")

# FlashInfer fused_topk_deepseek (docs/semantics.md §5.3, noAuxTcKernels.cu): s = 0.5·tanhf(0.5x) + 0.5, fp32
# keys and bias, w = (s·rsf)/(Σs + 1e-20) in double, rounded once to the logits' dtype (fp32 here; the _bf16 row
# for bf16 logits). Routing only: the layer fields keep their defaults. Ties: reduceTopK on TopKRedType
# (moeTopKFuncs.cuh: 65535 − index in the low bits) and, on the SM100 "cake" path, redux.sync.min over the
# indices holding the maximum: the lower expert (and group) index.
FUSED_TOPK_DEEPSEEK = Recipe(name="flashinfer_fused_topk_deepseek", sigmoid="tanh", renorm_order="scale_then_divide",
                             tie_rule="lower_index")
FUSED_TOPK_DEEPSEEK_BF16 = FUSED_TOPK_DEEPSEEK.but(name="flashinfer_fused_topk_deepseek_bf16", logits="bf16",
                                                   routing_weights="bf16")

# FlashInfer trtllm-gen routing stage (flashinfer.trtllm_gen_routing, docs/trtllm_gen_routing.md §2, §7): keys in
# fp32 from the given logits; σ = 0.5·tanhf(0.5x) + 0.5 (RoutingKernel.cuh:128) built with -use_fast_math
# (jit/core.py:708,746), so tanhf is tanh.approx.f32 and stores flush subnormals (FTZ); weights written in bf16
# (runner.cu:76,124,163,228,277); w = s·rsf/(Σs + 1e-20) (deepseek.cu:338, RoutingCustomPolicy.cuh:477). The
# routingCustom and Llama4 kernels read the bias as fp32 (RoutingCustomPolicy.cuh:232, loadScalar returns float).
# Ties: TopKRedType (lower index, groups too); Llama4's lane-local `>` scan keeps a lane's first maximum, then the
# warp reduction the lower index (llama4.cu:41-63).
TRTLLM_GEN_ROUTING = Recipe(name="flashinfer_trtllm_gen_routing", sigmoid="tanh", routing_weights="bf16",
                            renorm_order="scale_then_divide", subnormals="flush", tie_rule="lower_index",
                            shared_weight="one")  # fused shared experts weigh exactly 1.0 (deepseek.cu:349-362)
# As built, DeepSeekV3 with n_group > 1 differs: routingDeepSeek's main kernel converts the bias to the bf16 weight
# type before adding it to the fp32 sigmoid (deepseek.cu:159-162, biasVal is OutputT), so keys move by up to half
# a bf16 ulp of the bias. The FP32 correction bias is the declared semantics (FlashInfer's own routingCustom path,
# DeepSeek-V3's reference gate, SGLang's fix of the same rounding), so the adapter declares TRTLLM_GEN_ROUTING
# and this as-built row only on request, to look past that open finding (docs/trtllm_gen_routing.md §3).
TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT = TRTLLM_GEN_ROUTING.but(name="flashinfer_trtllm_gen_routing_grouped_as_built",
                                                            bias="bf16")


# The trtllm-gen pipeline with torch GEMMs in place of its batched GEMMs (flashinfer.trtllm_gen_nogemm,
# impls/flashinfer/trtllm_gen_nogemm.py): routing fields as TRTLLM_GEN_ROUTING (the routing kernel runs as is;
# fast math, so subnormals "flush"). permute is a copy. GEMM1/GEMM2: torch per expert, bf16 path on fp32 operands
# holding the bf16 values (products exact, cuBLAS fp32 sums, TF32 off), fp8_block path on codes·scales decoded in
# fp64 and summed in fp64 (no worse than gemm_acc "fp32"); both outputs stored in bf16 (gemm1_out, expert_out).
# Activation: the trtllm-gen kernel, silu(g)·u in fp32 (ex2/rcp approximations well inside fp32 evaluation
# error) stored in bf16 (act_compute fp32, act_out bf16); relu2 in torch, max(x, 0)² in fp32, stored in bf16.
# Finalize: the kernel, w·x of the stored bf16 expert output and the bf16 router weight as fp32 FFMAs, one bf16
# rounding (router_weight_at "combine", combine fp32, out bf16).
TRTLLM_GEN_NOGEMM_BF16 = TRTLLM_GEN_ROUTING.but(name="flashinfer_trtllm_gen_nogemm_bf16", gemm1_out="bf16",
                                                requant_intermediate=False, router_weight_at="combine")
# fp8_block with relu2 (no DeepSeek-FP8 kernel for it): hidden states quantized in torch as SGLang's quantizer feeding
# trtllm-gen does (TRTLLM_FP8_BLOCK's act fields: s = amax·fl(1/448), q = x·fl(448·fl(1/amax))); the bf16
# intermediate re-quantized per (row, 128) in torch, s = amax·fl(1/448), q = e4m3(y·fl(1/s)), the reciprocal
# correctly rounded.
TRTLLM_GEN_NOGEMM_FP8_BLOCK_RELU2 = TRTLLM_GEN_NOGEMM_BF16.but(
    name="flashinfer_trtllm_gen_nogemm_fp8_block_relu2", act_quant_variant="mul_rcp_amax",
    act_scale_formula="mul_rcp448", requant_intermediate=True, requant_variant="mul_rcp_scale",
    requant_scale_formula="mul_rcp448")
# fp8_block with swiglu: trtllm-gen's DeepSeek-FP8 activation kernel (activationDeepSeekKernel, dev.cu:297-372), as
# FlashInfer's DeepSeek-FP8 pipeline runs it between its GEMMs. GEMM1's bf16 output is quantized per (row, 128) in
# torch (the e4m3 codes and block scales FlashInfer's GEMM1 would write; torch's quantizer: s = amax·fl(1/448),
# q = e4m3(h·fl(1/s))); the kernel reads fl32(code·scale), computes silu(g)·u in fp32 and re-quantizes that fp32 value
# (no bf16 store: act_out fp32) per (row, 128): s = max(fl(amax·fl(1/448)), FLT_MIN), q = e4m3(fl(y·MUFU.RCP(s))).
TRTLLM_GEN_NOGEMM_FP8_BLOCK = TRTLLM_GEN_NOGEMM_FP8_BLOCK_RELU2.but(
    name="flashinfer_trtllm_gen_nogemm_fp8_block", gemm1_out_quant=True, gemm1_out_quant_variant="mul_rcp_scale",
    gemm1_out_quant_scale_formula="mul_rcp448", act_out="fp32", requant_variant="mul_mufu_rcp_scale",
    requant_scale_formula="mul_rcp448_flt_min")
# Grouped DeepSeekV3 as built (bf16 bias, TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT), on request only.
TRTLLM_GEN_NOGEMM_AS_BUILT = tuple(r.but(name=r.name + "_grouped_as_built", bias="bf16")
                                   for r in (TRTLLM_GEN_NOGEMM_BF16, TRTLLM_GEN_NOGEMM_FP8_BLOCK,
                                             TRTLLM_GEN_NOGEMM_FP8_BLOCK_RELU2))


# SGLang Triton FP8 block path (docs/semantics.md §4.3-§4.5), documented semantics for plug-ins: JIT CUDA quantizer,
# bf16 intermediate caches, router weight in GEMM2's fp32 epilogue, fp32 moe_sum_reduce. Ties unspecified: its
# select_experts routes through moe_fused_gate (lower index) or the torch-native biased_grouped_topk (torch.topk).
SGLANG_TRITON_FP8_BLOCK = Recipe(name="sglang_triton_fp8_block", act_quant_variant="mul_rcp_amax",
                                 act_scale_formula="mul_rcp448", gemm_acc="hopper_fp8",
                                 requant_variant="mul_rcp_amax", requant_scale_formula="mul_rcp448",
                                 shared_weight="routed_sum_over_rsf")

# SGLang's own CUDA kernels as sglang-kernel 0.4.4 ships them for SM90 (sgl_kernel/sm90/common_ops.abi3.so, built
# with -use_fast_math; docs/sglang.md has the source and SASS reading). moe_fused_gate (csrc/moe/moe_fused_gate.cu),
# instantiated for the logits' dtype T, the bias read as T: σ = 1/(1 + __expf(-x)) (MUFU.EX2, MUFU.RCP) rounded to
# T, s + b in T, the top-2 group sums in T, keys compared in T, ties to the lower expert / group index; weights the
# selected σ in fp32, summed in selection order in fp32, w·rcp(Σ), times rsf in double when it is applied. SGLang
# calls it with the logits cast to fp32 and its fp32 correction bias (the fp32 row); the bf16 instantiation with the
# bias cast to the logits' bf16 is the pre-fix path. CUDA stores flush subnormals.
SGLANG_MOE_FUSED_GATE = Recipe(name="sglang_moe_fused_gate", sigmoid="expf", exp="ex2", subnormals="flush",
                               shared_weight="routed_sum_over_rsf")  # shared slots: output_sum / rsf
SGLANG_MOE_FUSED_GATE_BF16 = SGLANG_MOE_FUSED_GATE.but(
    name="sglang_moe_fused_gate_bf16", logits="bf16", bias="bf16", routing_scores="bf16", routing_bias_add="bf16",
    routing_group_scores="bf16")
# topk_softmax (csrc/moe/moe_topk_softmax_kernels.cu): fp32 softmax of the logits with __expf, Σ in fp32 (warp
# butterfly or block reduce), p·rcp(Σ); top-k by iterated argmax, ties to the lower index; renormalize: w·rcp(Σ w).
SGLANG_TOPK_SOFTMAX = Recipe(name="sglang_topk_softmax", exp="ex2", subnormals="flush",
                             shared_weight="routed_sum_over_rsf")

# The project's torch eager implementation (impls/torch_eager/recipe.py declares the same, per quant path;
# tests/spec/test_recipes.py holds the two equal): exact fp32 sigmoid, bf16 GEMM1/activation/expert stores, the
# intermediate re-quantized 1×128 (1×32, 1×16 for mxfp8, nvfp4) from its bf16 value, router weight on GEMM2's
# fp32 output, fp32 combine; ties to the lower index (a stable descending sort); fused shared experts Σ/rsf.
TORCH_EAGER_FP8_BLOCK = Recipe(name="torch_eager_fp8_block", tie_rule="lower_index",
                               shared_weight="routed_sum_over_rsf")
TORCH_EAGER_BF16 = TORCH_EAGER_FP8_BLOCK.but(name="torch_eager_bf16", requant_intermediate=False)
TORCH_EAGER_MXFP8 = TORCH_EAGER_FP8_BLOCK.but(name="torch_eager_mxfp8")
TORCH_EAGER_NVFP4 = TORCH_EAGER_FP8_BLOCK.but(name="torch_eager_nvfp4")
# The same code on CUDA (difftest/checking/impl_torch.py torch-cuda): cuBLAS epilogues / fp32→bf16 conversions flush
# subnormals to zero (measured on the H200, docs/device-results.md "torch-CUDA"). Its σ stays "exact", not
# "torch_cuda": routing computes σ and the softmax in float64 and rounds once on either device (docs/semantics.md §1.8).
TORCH_EAGER_CUDA = tuple(r.but(name=r.name.replace("torch_eager_", "torch_eager_cuda_"), subnormals="flush")
                         for r in (TORCH_EAGER_BF16, TORCH_EAGER_FP8_BLOCK, TORCH_EAGER_MXFP8, TORCH_EAGER_NVFP4))

NAMED = {r.name: r for r in (TRTLLM_BF16, TRTLLM_FP8_BLOCK, MONO_MOE, FUSED_TOPK_DEEPSEEK, FUSED_TOPK_DEEPSEEK_BF16,
                              TRTLLM_GEN_ROUTING, TRTLLM_GEN_ROUTING_GROUPED_AS_BUILT, TRTLLM_GEN_NOGEMM_BF16,
                              TRTLLM_GEN_NOGEMM_FP8_BLOCK, TRTLLM_GEN_NOGEMM_FP8_BLOCK_RELU2,
                              *TRTLLM_GEN_NOGEMM_AS_BUILT,
                              SGLANG_TRITON_FP8_BLOCK, SGLANG_MOE_FUSED_GATE, SGLANG_MOE_FUSED_GATE_BF16,
                              SGLANG_TOPK_SOFTMAX, TORCH_EAGER_BF16, TORCH_EAGER_FP8_BLOCK, TORCH_EAGER_MXFP8,
                              TORCH_EAGER_NVFP4, *TORCH_EAGER_CUDA)}


# ---- Routing arithmetic of the reference torch paths (issue 19), written from their public sources. With fp32
# logits every step is fp32; with bf16 (fp16) logits σ is computed in bf16 (fp16), the fp32 bias parameter promotes
# s + b to fp32, and the weights (gathered from the narrow s) are summed, divided and scaled in that dtype. Layer
# fields keep their defaults: these recipes describe routing only. Ties unspecified: each selects with torch.topk.
# Each calls torch's `.sigmoid()`, so σ is torch's ("torch_cpu", issue 36: measured on the CPU, where these paths run
# in this project's tests and plug-ins; on CUDA, torch's kernel differs: tools/measure_sigmoid.py measures it).
# DeepSeek-V3 inference/model.py Gate.forward: scores.sigmoid() in x's dtype, `scores + self.bias` (float32
# parameter), group score amax without a bias, topk(2).sum with one; `weights /= weights.sum()`,
# `weights *= route_scale`, returned `.type_as(x)` (bf16 / fp16 weights for bf16 / fp16 x). score_func "sigmoid"
# (deepseek_v3); its softmax branch asks for float32 scores (deepseek_v2 with renormalize=False: routing_scores
# "fp32").
DEEPSEEK_V3_GATE = Recipe(name="deepseek_v3_gate_fp32", sigmoid="torch_cpu", group_score="top2_sum_if_biased")
DEEPSEEK_V3_GATE_BF16 = DEEPSEEK_V3_GATE.but(name="deepseek_v3_gate_bf16", logits="bf16", routing_scores="bf16",
                                             routing_renorm="bf16", routing_weights="bf16")
DEEPSEEK_V3_GATE_FP16 = DEEPSEEK_V3_GATE.but(name="deepseek_v3_gate_fp16", logits="fp16", routing_scores="fp16",
                                             routing_renorm="fp16", routing_weights="fp16")
# SGLang python/sglang/srt/layers/moe/topk.py biased_grouped_topk_impl (torch-native): gating_output.sigmoid()
# in the logits' dtype, + correction_bias (fp32), topk(2).sum group score, weights scores.gather(...) divided
# by their sum in that dtype, returned .to(torch.float32). select_experts calls grouped_topk (group max) when
# correction_bias is None, so its rule over both paths is top2_sum_if_biased. Fused shared experts: Σ/rsf.
SGLANG_BIASED_GROUPED_TOPK = Recipe(name="sglang_biased_grouped_topk_fp32", sigmoid="torch_cpu",
                                    group_score="top2_sum_if_biased", shared_weight="routed_sum_over_rsf")
SGLANG_BIASED_GROUPED_TOPK_BF16 = SGLANG_BIASED_GROUPED_TOPK.but(
    name="sglang_biased_grouped_topk_bf16", logits="bf16", routing_scores="bf16", routing_renorm="bf16")
SGLANG_BIASED_GROUPED_TOPK_FP16 = SGLANG_BIASED_GROUPED_TOPK.but(
    name="sglang_biased_grouped_topk_fp16", logits="fp16", routing_scores="fp16", routing_renorm="fp16")
# vLLM vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py grouped_topk (torch path):
# softmax / sigmoid in the logits' dtype, + e_score_correction_bias (fp32) and topk(2).sum with a bias, .max
# without; renormalize and `* routed_scaling_factor` on the gathered weights in that dtype; .to(torch.float32).
VLLM_GROUPED_TOPK = Recipe(name="vllm_grouped_topk_fp32", sigmoid="torch_cpu", group_score="top2_sum_if_biased")
VLLM_GROUPED_TOPK_BF16 = VLLM_GROUPED_TOPK.but(name="vllm_grouped_topk_bf16", logits="bf16", routing_scores="bf16",
                                               routing_renorm="bf16")
VLLM_GROUPED_TOPK_FP16 = VLLM_GROUPED_TOPK.but(name="vllm_grouped_topk_fp16", logits="fp16", routing_scores="fp16",
                                               routing_renorm="fp16")
REFERENCE_ROUTING = (DEEPSEEK_V3_GATE, DEEPSEEK_V3_GATE_BF16, DEEPSEEK_V3_GATE_FP16, SGLANG_BIASED_GROUPED_TOPK,
                     SGLANG_BIASED_GROUPED_TOPK_BF16, SGLANG_BIASED_GROUPED_TOPK_FP16, VLLM_GROUPED_TOPK,
                     VLLM_GROUPED_TOPK_BF16, VLLM_GROUPED_TOPK_FP16)
NAMED.update({r.name: r for r in REFERENCE_ROUTING})
