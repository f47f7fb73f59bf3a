"""The mutant catalogue of the mutation self-test (difftest/selftest/mutants.py, the machinery that builds and hunts
them): each mutant one exact text replacement (old -> new) in one module of impls/torch_eager, with the real bug it
seeds and its class. ``CATALOGUE`` is what `python -m difftest mutants` must kill; ``EQUIVALENT`` mutants change
behaviour only where the comparison allows any choice (exact ties), so the tester must NOT flag them; ``WIDTH`` holds
the fixed-size numeric bugs of the width sweep; ``IDENTITY`` is the unpatched copy. Data only: nothing here imports
the tester.
"""

from typing import NamedTuple


class Mutant(NamedTuple):
    name: str
    module: str | None  # impls/torch_eager/<module>.py; None: the unpatched copy
    old: str
    new: str
    models: str  # the real bug (K1-K15 id of difftest/selftest/known_bugs.py and / or PR) this seeds
    doc: str  # what the change does
    focus: tuple = ()  # (keyword, value) pairs of the strategies for the branch the patch sits in
    also: tuple = ()  # further (module, old, new) replacements of the same mutant (a declaration that goes with it)
    cls: str = "semantic"  # CLASSES: what kind of bug it seeds (the self-test reports each class on its own)


M = Mutant
# semantic: a public bug's mechanism, a wrong formula or layout (difftest/selftest/known_bugs.py); subtle: a numeric
# slip of our own design that only a derived bound sees (a rounding mode, a reduced-precision scale or accumulator, an
# off-by-one group or block extent, a store narrower than declared); tie: a tie order other than the declared one.
CLASSES = ("semantic", "subtle", "tie")
CATALOGUE = (
    # ---- routing.py
    M(
        "weights_from_biased_scores",
        "routing",
        "return c, s",
        "return c, c",
        "K1: vllm PR #12002, transformers PR #41647",
        "DeepSeek-V3 weights gathered from the biased keys s + b instead of s",
    ),
    M(
        "group_score_max",
        "routing",
        "group_mask(c, top2_sum(c, n_group),",
        "group_mask(c, c.unflatten(1, (n_group, -1)).amax(-1),",
        "DeepSeek-V2 group rule used for V3 (docs/semantics.md §1.2)",
        "DeepSeek-V3 group score = group max instead of the sum of the top 2",
        (("method", "deepseek_v3"),),
    ),
    M(
        "group_mask_minus_one",
        "routing",
        'top2_sum(c, n_group), topk_group, float("-inf"))',
        "top2_sum(c, n_group), topk_group, -1.0)",
        "K2: fi issue #2168 (invalidScore = -1 sentinel)",
        "unselected groups masked with -1, which beats keys s + b < -1 from negative biases",
        (("method", "deepseek_v3"),),
    ),
    M(
        "bias_bf16_before_selection",
        "routing",
        'bias.to(torch.bfloat16).float() if bias_dtype == "bf16" else bias.float()',
        "bias.to(torch.bfloat16).float()",
        "K4/K5: vllm PR #25895, sglang PR #31001, TRT-LLM PR #13328",
        "fp32 correction bias narrowed to bf16 before selection while the recipe declares fp32",
    ),
    M(
        "bias_not_used_for_selection",
        "routing",
        "c = s if bias is None else s + bias",
        "c = s",
        "K4 glue class: e_score_correction_bias not forwarded (vllm PR #25895)",
        "DeepSeek-V3 selects by the unbiased sigmoid",
    ),
    M(
        "rsf_applied_twice",
        "routing",
        "rsf=routed_scaling_factor, renorm_order=renorm_order)",
        "rsf=routed_scaling_factor, renorm_order=renorm_order)\n"
        "    w = w if routed_scaling_factor is None else w * routed_scaling_factor",
        "K7/K8: vllm PR #45037, sglang PR #35152",
        "routed_scaling_factor multiplied into the weights twice",
    ),
    M(
        "rsf_dropped_without_renormalize",
        "routing",
        "    return w if rsf is None else w * rsf\n\n\ndef append_shared",
        "    return w\n\n\ndef append_shared",
        "K3 siblings: sglang-jax PR #1282, sglang PR #31449",
        "rsf applied only inside the renormalize branch",
    ),
    M(
        "renormalize_ignored",
        "routing",
        "renormalize and method in (",
        "method in (",
        "K3 sibling: fi PR #2889 Bug C (norm_topk_prob never propagated)",
        "renormalize=False ignored: DeepSeek / sigmoid_renorm weights always renormalized",
    ),
    M(
        "softmax_weights_raw_logits",
        "routing",
        "s = softmax(logits)\n        return s, s",
        "s = softmax(logits)\n        return s, x",
        "K3: sglang PR #35160",
        "default / renormalize_naive weights gathered from the raw logits instead of the softmax",
    ),
    M(
        "sigmoid_weights_raw_logits",
        "routing",
        "return x, sigmoid(logits)",
        "return x, x",
        "K3 class (raw logits returned)",
        "llama4 / topk_sigmoid weights are the raw logit instead of its sigmoid",
    ),
    M(
        "default_softmax_over_k",
        "routing",
        'if method == "renormalize":',
        'if method in ("renormalize", "default"):',
        "RoutingMethodType Default vs Renormalize confusion (docs/semantics.md §1.1)",
        "default routing takes the softmax over the k selected logits instead of over all E",
    ),
    M(
        "shared_weight_one",
        "routing",
        "shared_w = ordered_sum(w) / divisor",
        "shared_w = torch.ones_like(w[..., 0])",
        "fused shared-expert convention (torch eager declares Σ/rsf, docs/semantics.md §1.5)",
        "fused shared experts get weight 1",
    ),
    M(
        "sigmoid_tanh_fast_path",
        "routing",
        "return torch.sigmoid(logits.double()).float()",
        "return 0.5 * torch.tanh(0.5 * logits.float()) + 0.5",
        "fast-math sigmoid (recipe declares sigmoid exact)",
        "sigmoid as 0.5 tanh(x/2) + 0.5 in fp32: absolute, not relative, error; 0 for very negative x",
    ),
    M(
        "eps_dropped",
        "routing",
        "denom = (ordered_sum(w) + eps).unsqueeze(-1)",
        "denom = ordered_sum(w).unsqueeze(-1)",
        "K5/K6: fi PR #3803 (renormalization epsilon)",
        "the renormalizing eps is ignored: 0/0 = NaN on underflow",
    ),
    # ---- quant.py
    M(
        "ue8m0_float_log2",
        "quant",
        "    bits = s.float().contiguous().view(torch.int32)\n    exponent = (bits >> 23) & 0xFF\n"
        "    code = exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)",
        "    code = torch.where(s > 0, torch.ceil(torch.log2(s.float())) + 127, 0).to(torch.int32)",
        "K14: sglang issue #29954 / PR #29956",
        "UE8M0 scale as 2^ceil(log2 s) in fp32 (s one ulp above 2^k -> 2^k)",
    ),
    M(
        "ue8m0_frexp_doubles_pow2",
        "quant",
        "code = exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)",
        "code = exponent + 1",
        "K14 related: onnxruntime PR #32122 review (frexpf rounding)",
        "UE8M0 scale from frexp's exponent: exact powers of two are doubled",
    ),
    M(
        "amax_without_eps",
        "quant",
        "amax = abs_amax(xg, -1).clamp_min(eps)",
        "amax = abs_amax(xg, -1)",
        "K15: vllm PR #53346, TRT-LLM PR #17635",
        "no amax floor: an all-zero group gives scale 0 and 0/0 = NaN codes",
    ),
    M(
        "scale_amax_over_127",
        "quant",
        "return amax / fp32(FP8_MAX, amax)",
        "return amax / fp32(127.0, amax)",
        "int8 constant in an fp8 quantizer",
        "per-token-group scale = amax / 127",
    ),
    M(
        "e4m3_max_480",
        "quant",
        "FP8_MAX = 448.0",
        "FP8_MAX = 480.0",
        "e4m3 vs e4m3fn range (0x7f is NaN in fn)",
        "the fp8 maximum taken as 480 (code 0x7f read as finite): scales amax / 480, clamp at 480",
    ),
    M(
        "e2m1_nibbles_swapped",
        "quant",
        "return codes[..., 0::2] | (codes[..., 1::2] << 4)",
        "return codes[..., 1::2] | (codes[..., 0::2] << 4)",
        "packing convention (interfaces.md: low nibble = even)",
        "NVFP4 packs the odd element in the low nibble",
    ),
    M(
        "e2m1_ties_away",
        "quant",
        "magnitude = torch.where(below % 2 == 0, below, upto)",
        "magnitude = upto",
        "round-half-away in a software fp4 cast (cvt.rn.satfinite.e2m1x2 is RNE)",
        "e2m1 ties round away from zero instead of to even",
    ),
    # ---- layouts.py
    M(
        "column_major_scales_row_major",
        "layouts",
        "    buf.copy_(scales.transpose(-1, -2))\n    return buf.transpose(-1, -2)",
        "    return scales.contiguous()",
        "K13 class: fi PR #4574 / #4741 (scale layout vs kernel config)",
        "column-major activation scales written in row-major memory",
    ),
    M(
        "tma_scales_unpadded",
        "layouts",
        "buf = scales.new_zeros(*lead, G, ceil_div(M, 4) * 4)",
        "buf = scales.new_zeros(*lead, G, M)",
        "K13 class: fi PR #4574 (TMA-aligned scale layout)",
        "column-major TMA scales without the padding of M to a multiple of 4",
    ),
    # ---- layer.py
    M(
        "gate_up_swapped",
        "layer",
        'gate, up = (first, second) if half_order == "gate_up" else (second, first)',
        'gate, up = (second, first) if half_order == "gate_up" else (first, second)',
        "K12: Megatron-LM PR #6045",
        "w13 halves read as [up; gate] where the layout says [gate; up] (and vice versa)",
    ),
    M(
        "relu2_as_silu",
        "layer",
        'NON_GATED = {"relu2": relu2,',
        'NON_GATED = {"relu2": F.silu,',
        "K11 class: vllm PR #36146 (relu2 path hard-coded to SwiGLU's activation)",
        "relu2 computed as silu",
    ),
    M(
        "ep_offset_ignored",
        "layer",
        "if not local_expert_offset <= e < hi:",
        "if not 0 <= e < hi - local_expert_offset:",
        "K10: fi issue #3547 / PR #3591, vllm-gaudi PR #1796",
        "the local expert window starts at 0 instead of local_expert_offset",
    ),
    M(
        "act_scales_read_transposed",
        "layer",
        "a_s.t().unsqueeze(-1)",
        "a_s.reshape(a_s.shape[1], a_s.shape[0]).unsqueeze(-1)",
        "K13 class: fi PR #4574 (activation scale layout)",
        "fp8_block GEMM reads the row-major activation scales [n, K/128] as if column-major",
        (("quant", "fp8_block"),),
    ),
    M(
        "combine_without_router_weight",
        "layer",
        "    if not router_weight_on_input:\n        y = y * w.unsqueeze(1)\n",
        "",
        "K9 class: fi PR #3763 (router weights not read correctly)",
        "expert outputs summed without the router weight",
    ),
    M(
        "rsf_at_combine_twice",
        "layer",
        'if rsf_placement == "combine" and rsf is not None:',
        "if rsf is not None:",
        "K8: sglang PR #35152 (TBO epilogue multiplies rsf again)",
        "rsf multiplied at the combine although folded in",
    ),
    M(
        "requant_skipped",
        "layer",
        'y = gemm(quantize_rows(a, quant, scale_ue8m0), weight_operand(ew, "w2", quant), quant)',
        'y = gemm(a.float() if quant in ("mxfp8", "nvfp4") else quantize_rows(a, quant, scale_ue8m0), '
        'weight_operand(ew, "w2", quant), quant)',
        "recipe mismatch (requant_intermediate declared; no public bug id)",
        "mxfp8 / nvfp4 GEMM2 reads the bf16 intermediate without re-quantizing it",
    ),
)
TIE_HIGHER = ("routing", "return descending_order(keys)[..., :k]",
              "return (keys.shape[-1] - 1 - descending_order(keys.flip(-1)))[..., :k]")
TIE_DECLARED = 'tie_rule="lower_index"'
CATALOGUE += (
    M(
        "tie_higher_index",
        *TIE_HIGHER,
        "vllm PRs #55514 / #54403 / #52679 (torch.topk tie order); serving stacks mixing kernels",
        "equal keys (and group scores) go to the higher index while the recipe declares the lower index",
        cls="tie",
    ),
)
FP8 = (("quant", "fp8_block"),)
OWN = "own design: "
# fp32_accumulator_truncates is found by the bias test (difftest/checking/bias.py) on the layers of model width
# (difftest/model/strategies.py): at H, I <= 128 the truncation rarely crosses a bf16 rounding point, since bf16 x bf16
# products have 16 significant bits and an fp32 partial sum drops bits only where it exceeds a product by 2^8 (300
# nonneg cases: 4 tokens moved); on signed inputs the flips reach the outputs with either sign (H = 512, 16 normal
# cases: 28 tokens toward zero, 25 away); on nonneg inputs at H >= 1024 nearly every token moves toward zero
# (tests/difftest/checking/test_bias.py).
CATALOGUE += tuple(M(*fields, cls="subtle") for fields in (
    ("fp8_block_partials_bf16", "layer",
     "terms = torch.bmm(a, w) * a_s.t().unsqueeze(-1) * ws.unsqueeze(1)  # [KB, n, N]",
     "terms = (torch.bmm(a, w) * a_s.t().unsqueeze(-1) * ws.unsqueeze(1)).to(torch.bfloat16).float()",
     OWN + "reduced-precision accumulator", "fp8_block GEMM: each K block's scaled partial sum kept in bf16", FP8),
    ("gemm1_out_truncated", "layer", "h = h.to(torch.bfloat16)",
     "h = (h.contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)",
     OWN + "rounding mode", "GEMM1's fp32 output stored in bf16 by truncation (round toward zero) instead of RNE"),
    ("activation_in_bf16", "layer", "a = act(h.float(), activation, half_order).to(torch.bfloat16)",
     "a = act(h, activation, half_order).to(torch.bfloat16)",
     OWN + "narrower intermediate", "activation (and gate·up) evaluated in bf16 while the recipe declares fp32"),
    ("router_weight_bf16", "layer", "y = y * w.unsqueeze(1)", "y = y * w.to(torch.bfloat16).float().unsqueeze(1)",
     OWN + "narrower store", "router weights rounded to bf16 before GEMM2's epilogue (declared fp32)"),
    ("combine_in_bf16", "layer", "acc = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)",
     "acc = torch.zeros(T, H, dtype=torch.bfloat16, device=hidden.device)",
     OWN + "reduced-precision accumulator", "the weighted sum over a token's experts accumulated in bf16 (declared "
     "fp32)", (), (("layer", "acc.index_add_(0, tok, y.float())", "acc.index_add_(0, tok, y)"),)),
    ("weight_scale_rows_off_by_one", "layer", "ws = w_s.repeat_interleave(128, dim=0)[:N].t()",
     "ws = torch.cat([w_s, w_s[-1:]]).repeat_interleave(128, dim=0)[1:N + 1].t()",
     OWN + "off-by-one block extent", "fp8_block weight scale rows: the last row of each 128-row block reads the "
     "next block's scale", FP8),
    ("act_ue8m0_ignored", "layer", "return Q.per_token_group_quant_fp8(x, 128, scale_ue8m0=scale_ue8m0)",
     "return Q.per_token_group_quant_fp8(x, 128)",
     OWN + "scale format", "UE8M0 requested (DeepGEMM-style moe): activations quantized with fp32 scales", FP8),
    ("mxfp8_weights_ocp_rule", "layer", 'out[name], out[name + "_scale"] = Q.mxfp8_quant(t, rule="ceil448")',
     'out[name], out[name + "_scale"] = Q.mxfp8_quant(t, rule="ocp")',
     OWN + "weight preparation", "unquantized weights prepared with the OCP MX scale rule, the recipe declares "
     "ceil448", (("quant", "mxfp8"),)),
    ("e4m3_via_bf16", "quant", "return v.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)",
     "return v.clamp(-FP8_MAX, FP8_MAX).to(torch.bfloat16).to(torch.float8_e4m3fn)",
     OWN + "double rounding", "fp32 -> e4m3 through bf16: a narrower store first, so ties round twice"),
    ("fp8_scale_bf16", "quant", "return amax / fp32(FP8_MAX, amax)",
     "return (amax / fp32(FP8_MAX, amax)).to(torch.bfloat16).float()",
     OWN + "reduced-precision scale", "per-token-group scale amax/448 rounded to bf16"),
    ("group_amax_skips_last", "quant", "amax = abs_amax(xg, -1).clamp_min(eps)",
     "amax = abs_amax(xg[..., :-1], -1).clamp_min(eps)",
     OWN + "off-by-one group extent", "per-token-group amax over the group's first g - 1 elements"),
    ("weight_prep_scale_bf16", "quant", "    s = amax / fp32(FP8_MAX, amax)\n    if scale_ue8m0:",
     "    s = (amax / fp32(FP8_MAX, amax)).to(torch.bfloat16).float()\n    if scale_ue8m0:",
     OWN + "weight preparation, reduced-precision scale", "unquantized fp8_block weights: block scales rounded to "
     "bf16", FP8),
    ("renorm_sum_bf16", "routing", "denom = (ordered_sum(w) + eps).unsqueeze(-1)",
     "denom = (ordered_sum(w).to(torch.bfloat16).float() + eps).unsqueeze(-1)",
     OWN + "reduced-precision accumulator", "renormalizing sum of the selected weights rounded to bf16"),
    ("fp32_accumulator_truncates", "layer", "def gemm(a, w, quant):",
     "def _truncating_mm(a, w):\n"
     "    acc = torch.zeros(a.shape[0], w.shape[0], dtype=torch.float64, device=a.device)\n"
     "    for k in range(a.shape[1]):\n"
     "        exact = acc + a[:, k:k + 1].double() * w[:, k].double()\n"
     "        near = exact.float().double()\n"
     "        acc = torch.where(near.abs() > exact.abs(), torch.nextafter(near.float(), torch.zeros_like(near.float()))"
     ".double(), near)\n"
     "    return acc.float()\n\n\ndef gemm(a, w, quant):",
     OWN + "rounding mode (issue 21's example)", "bf16-path GEMMs accumulate in fp32 rounding toward zero at every "
     "addition, a systematic bias", (("quant", "bf16"),),
     (("layer", "    return a @ w.t()\n", "    return _truncating_mm(a, w)\n"),)),
    ("group_top2_sum_bf16", "routing",
     "return top2[..., 0] + top2[..., 1] if top2.shape[-1] == 2 else top2[..., 0]",
     "return (top2[..., 0] + top2[..., 1]).to(torch.bfloat16).float() if top2.shape[-1] == 2 else top2[..., 0]",
     OWN + "narrower store", "DeepSeek-V3 group scores (top-2 sums) rounded to bf16 before ranking the groups",
     (("method", "deepseek_v3"),)),
))
EQUIVALENT = (
    M(
        "tie_higher_index_declared",
        *TIE_HIGHER,
        "vllm PRs #55514 / #54403 / #52679 (torch.topk tie order)",
        "equal keys go to the higher index and the recipe says so: a valid selection by its declared rule",
        also=(("recipe", TIE_DECLARED, TIE_DECLARED.replace("lower_index", "higher_index")),),
    ),
    M(
        "tie_higher_index_unspecified",
        *TIE_HIGHER,
        "vllm PRs #55514 / #54403 / #52679 (torch.topk tie order)",
        "equal keys go to the higher index and the recipe promises no tie order: any valid selection passes",
        also=(("recipe", TIE_DECLARED, TIE_DECLARED.replace("lower_index", "unspecified")),),
    ),
)
_CATALOGUED = {m.name: m for m in CATALOGUE}
# Fixed-size numeric bugs for the width sweep (`detection`, tests/difftest/selftest/test_mutant_kill_by_width.py, heavy
# tier): their size per element does not depend on the layer's width, so a tester whose kill power falls with H misses
# them at model widths. Two are the catalogue's own mutants (the same objects); the other three are kept out of the
# catalogue, where they would only repeat what its subtle class already holds at the fuzzer's default widths.
WIDTH = (
    _CATALOGUED["gemm1_out_truncated"],
    M(
        "expert_out_truncated",
        "layer",
        "    return y.to(torch.bfloat16)\n",
        "    return (y.contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)\n",
        "a truncating fp32 -> bf16 conversion on the expert output",
        "each expert's weighted output stored in bf16 by truncation instead of RNE",
    ),
    _CATALOGUED["fp32_accumulator_truncates"],
    M(
        "router_weights_bf16",
        "layer",
        "    return ids, w.to(WEIGHT_DTYPES[weights_dtype]).float(), S, rsf\n",
        "    return ids, w.to(torch.bfloat16).float(), S, rsf\n",
        "issue 21: bf16 router weights where the recipe declares fp32",
        "router weights rounded to bf16 although the recipe declares fp32",
    ),
    M(
        "silu_stored_bf16",
        "layer",
        "    return F.silu(gate) * up",
        "    return F.silu(gate).to(torch.bfloat16).float() * up",
        "issue 21: an intermediate stored in a narrower format than declared",
        "silu(gate) stored in bf16 before the product, where the recipe computes the activation in fp32",
    ),
)
IDENTITY = Mutant("identity", None, "", "", "none", "the unpatched copy: must never be flagged")
MUTANTS = {m.name: m for m in CATALOGUE + EQUIVALENT + WIDTH + (IDENTITY,)}
