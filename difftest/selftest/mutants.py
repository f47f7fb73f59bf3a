"""A mutation self-test: seeded bugs in copies of impls/torch_eager, and `python -m difftest mutants`, which
hunts each with the tester's own search and reports whether, how fast and how small it was caught.

A mutant is one exact text replacement (old -> new) in one module of impls/torch_eager. ``build(name)`` reads
that module's source, asserts ``old`` occurs exactly once (a refactor of the torch code breaks the mutant
loudly instead of silently making it equivalent), executes the patched copy as a fresh package whose other
modules load unpatched from disk, and wraps it exactly as difftest/checking/impl_torch.py wraps the original (that
file's own source, run with the copy bound to ``te``), as the implementation "mutant:<name>". Mutants are
named by reference, ``difftest.selftest.mutants:<name>``, so a fixture recorded from one replays like any plug-in.

``hunt`` fuzzes the ops that reach the mutated module round-robin, in chunks of Hypothesis examples (each
chunk its own seed and one slice of its op, per method / scheme / quant path, as `difftest fuzz` does; a
chunk of the slow layer is cut to about TURN_S seconds), with no example database, until the first finding or
the
example / time budget; the finding is shrunk as in any campaign. ``EQUIVALENT`` mutants change behaviour
only where the comparison allows any choice (exact ties), so the tester must NOT flag them.
"""

import argparse
import importlib.util
import json
import multiprocessing
import statistics
import sys
import time
import types
from pathlib import Path
from typing import NamedTuple

import numpy as np
from hypothesis import settings

from ..checking import bias
from ..model import generate
from ..model.case import OPS, Case
from ..running import campaign

ROOT = Path(__file__).resolve().parents[2]
TORCH_EAGER = ROOT / "impls" / "torch_eager"
ADAPTER = Path(__file__).resolve().parents[1] / "checking" / "impl_torch.py"
MODULE_OPS = {
    "routing": ("routing", "moe"),
    "quant": ("quant", "moe"),
    "layouts": ("quant", "moe"),
    "layer": ("moe",),
    None: OPS,
}  # the ops whose torch code path runs the module; None: identity
FOCUS_KEYWORDS = {"routing": ("method",), "quant": ("scheme",), "moe": ("method", "activation", "quant"),
                  "trtllm_ops": ("kernel",)}
CHUNK = 25  # examples per Hypothesis run at most; the ops of a mutant alternate chunk by chunk
TURN_S = 1.0  # a chunk of a slow op (the layer) is cut to about this many seconds, so it does not starve
SECONDS_PER_EXAMPLE = {"routing": 0.01, "quant": 0.01, "moe": 0.2, "trtllm_ops": 0.01}  # until measured in the hunt
MAX_EXAMPLES = 600
TIME_BUDGET_S = 120.0


class MutantError(ValueError):
    """A patch that does not apply exactly once, or an unknown mutant name."""


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
# (tests/test_bias.py).
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
# Fixed-size numeric bugs for the width sweep (`detection`, tests/test_width.py, heavy tier): their size per
# element does not depend on the layer's width, so a tester whose kill power falls with H misses them at model
# widths. Two are the catalogue's own mutants (the same objects); the other three are kept out of the catalogue,
# where they would only repeat what its subtle class already holds at the fuzzer's default widths.
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
_BUILT = {}


def patch(source, old, new, where="source"):
    """source with the one occurrence of old replaced by new; MutantError unless old occurs exactly once."""
    n = source.count(old)
    if n != 1:
        raise MutantError(
            f"{where}: the patch text occurs {n} times, not once (torch_eager changed?): {old!r}"
        )
    return source.replace(old, new)


def _exec_module(name, path, source):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def torch_eager_copy(mutant):
    """A fresh package `difftest_mutant_<name>`: torch_eager, mutant.module patched, the rest from disk."""
    pkg = f"difftest_mutant_{mutant.name}"
    init = TORCH_EAGER / "__init__.py"
    spec = importlib.util.spec_from_file_location(pkg, init, submodule_search_locations=[str(TORCH_EAGER)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[pkg] = package
    edits = {}
    for module, old, new in ((mutant.module, mutant.old, mutant.new), *mutant.also):
        if module is not None:
            path = TORCH_EAGER / f"{module}.py"
            source = edits.get(module, path.read_text())
            edits[module] = patch(source, old, new, f"{mutant.name}: {path.name}")
    for module, patched in edits.items():
        setattr(package, module, _exec_module(f"{pkg}.{module}", TORCH_EAGER / f"{module}.py", patched))
    spec.loader.exec_module(package)  # the other modules import from disk as pkg.<module>
    return package


def build(name):
    """The Impl "mutant:<name>": difftest/checking/impl_torch.py's wrapping around the patched copy (cached)."""
    if name not in MUTANTS:
        raise MutantError(f"unknown mutant {name!r}; known: {', '.join(MUTANTS)}")
    if name not in _BUILT:
        te = torch_eager_copy(MUTANTS[name])
        adapter = types.ModuleType(f"difftest.mutant_adapter_{name}")
        adapter.__package__ = "difftest.checking"
        adapter.__file__ = str(ADAPTER)
        exec(compile(ADAPTER.read_text(), str(ADAPTER), "exec"), adapter.__dict__)
        adapter.te = te  # every adapter function reads the global te at call time
        _BUILT[name] = adapter._impl(f"mutant:{name}", "cpu", lambda: None)
    return _BUILT[name]


def __getattr__(name):
    """`difftest.selftest.mutants:<name>` as an implementation reference (interface.load, fixtures, replay)."""
    if name in MUTANTS:
        return build(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- hunting


class Kill(NamedTuple):
    mutant: str
    killed: bool
    op: str | None  # the op whose cell found it
    examples: int  # generated cases up to and including the first failing one (all of them if survived)
    seconds: float  # wall time from the start of the hunt to the first failing case
    total_seconds: float  # including shrinking
    case: dict | None  # the shrunk reproducer (Case.to_dict())
    message: str | None
    fixture: str | None


def reproducer_size(case_dict):
    """(tokens, experts, hidden, input elements) of a case; None where the op has no such dimension."""
    case = Case.from_dict(case_dict)
    c = case.config
    r = c.routing if case.op == "moe" else c
    experts = None if case.op == "quant" else r.num_experts
    hidden = None if case.op == "routing" else c.hidden_size
    elements = sum(a.size for a in generate.inputs(case).values())
    return {"tokens": r.num_tokens, "experts": experts, "hidden": hidden, "input_elements": int(elements)}


def slices(op, focus=()):
    """[(label, configs strategy)] of `op`, as the CLI's campaign.slices (routing per method, quant per
    scheme, moe per quant path) within the focus: a method, scheme or path the focus fixes is one slice."""
    return campaign.slices(op, {k: v for k, v in focus if k in FOCUS_KEYWORDS[op]})


def plan(mutant):
    """The chunk order of a hunt: [(op, slice label, configs)], ops alternating, each op's slices in turn."""
    per_op = {op: slices(op, mutant.focus) for op in MODULE_OPS[mutant.module]}
    n = max(len(v) for v in per_op.values())
    return [(op, *per_op[op][j % len(per_op[op])]) for j in range(n) for op in per_op]


def hunt(
    name, *, max_examples=MAX_EXAMPLES, time_budget=TIME_BUDGET_S, seed=0, chunk=CHUNK, fixtures_root=None
):
    """Fuzz mutant `name` on the ops reaching its module, chunk by chunk, until a finding or a budget ends."""
    impl = build(name)
    mutant = MUTANTS[name]
    state = {"n": 0, "first": None, "last_case": None, "biased": None}
    monitor = bias.Monitor()  # the cells' bias test (difftest/checking/bias.py): a finding of the cell, not of one case
    t0 = time.perf_counter()

    def record(row):
        state["n"] += 1
        if row["status"] in ("fail", "error"):
            state["last_case"] = row["case"]  # Hypothesis replays the shrunk example last
            if state["first"] is None:
                state["first"] = (state["n"], time.perf_counter() - t0)
        if monitor.add(row) and state["biased"] is None:
            state["biased"] = (state["n"], time.perf_counter() - t0, row)

    chunks = plan(mutant)
    per_example = dict(SECONDS_PER_EXAMPLE)
    generated, i = 0, 0
    while generated < max_examples and time.perf_counter() - t0 < time_budget:
        op, _, configs = chunks[i % len(chunks)]
        n = min(chunk, max(2, int(TURN_S / per_example[op])), max_examples - generated)
        t_chunk = time.perf_counter()
        # no example database: a mutant must be found by search, never by replaying an earlier failure
        chunk_settings = settings(campaign.cli_settings(n), database=None)
        res = campaign.fuzz_cell(
            impl,
            f"difftest.selftest.mutants:{name}",
            op,
            hypothesis_settings=chunk_settings,
            configs=configs,
            record=record,
            fixtures_root=fixtures_root,
            run_seed=seed * 1_000_003 + i,
            provenance=f"difftest mutants: {mutant.models}",
        )
        if res.finding:
            n_first, s_first = state["first"]
            return Kill(
                name,
                True,
                op,
                n_first,
                s_first,
                time.perf_counter() - t0,
                state["last_case"],
                res.finding,
                res.fixture,
            )
        generated += res.examples
        per_example[op] = (time.perf_counter() - t_chunk) / max(1, res.examples)
        i += 1
        if state["biased"] is not None:
            n_first, s_first, at = state["biased"]
            return Kill(name, True, at["op"], n_first, s_first, time.perf_counter() - t0, at["case"],
                        monitor.findings()[0]["message"], None)
    return Kill(
        name, False, None, generated, time.perf_counter() - t0, time.perf_counter() - t0, None, None, None
    )


# ---- detection across widths (issue 21 item 3)

WIDTHS = {64: 64, 512: 256, 2048: 768, 7168: 2048}  # H -> I: Qwen3-30B-A3B's I at 2048, DeepSeek-V3's at 7168


class Detection(NamedTuple):
    mutant: str
    hidden: int
    intermediate: int
    dist: str  # the moe input distribution
    cases: int
    changed: int  # cases whose output the mutant changed (against the unpatched copy)
    caught: int  # changed cases that failed on their own (bound, exposed weights, per-case bias test)
    flagged: int  # cases that failed, changed or not: on the identity, false alarms
    cell_cases: int | None  # cases after which the cell's bias test rejected (difftest/checking/bias.py), None: never
    seconds: float

    @property
    def detected(self):
        return self.caught > 0 or self.cell_cases is not None


def detection(name, hidden, cases=8, tokens=16, quant="bf16", dist="normal"):
    """Detection of mutant `name` on `cases` moe cases of width `hidden` (intermediate WIDTHS[hidden]; 8 experts,
    top-2 renormalize, swiglu, one set of expert weights; input distribution `dist`), as a campaign cell sees it:
    each case on its own, and the cell's bias test over all of them."""
    from ..checking.check import read_only, run_case
    from ..model.case import MoEConfig, RoutingConfig

    impl, ref, monitor = build(name), build("identity"), bias.Monitor()
    changed = caught = flagged = 0
    cell_cases = None
    t0 = time.perf_counter()
    for seed in range(cases):
        config = MoEConfig(RoutingConfig("renormalize", tokens, 8, 2), hidden, WIDTHS[hidden], quant=quant)
        case = Case("moe", config, dist, seed, weight_seed=0)
        inputs = generate.inputs(case)
        differs = bool(np.any(impl.run(case, read_only(inputs))["out"] != ref.run(case, read_only(inputs))["out"]))
        result = run_case(impl, case, inputs)
        changed += differs
        flagged += result.status in ("fail", "error")
        caught += differs and result.status in ("fail", "error")
        if monitor.add(campaign.case_row(impl.name, case, result)) and cell_cases is None:
            cell_cases = seed + 1
    return Detection(name, hidden, WIDTHS[hidden], dist, cases, changed, caught, flagged, cell_cases,
                     time.perf_counter() - t0)


def detection_table(rows):
    """Markdown: one line per mutant and input distribution, one column per width: caught / changed cases, and the
    cell's bias test (the identity: cases flagged, which must be none)."""
    widths = sorted({d.hidden for d in rows})
    head = ["| mutant | inputs | " + " | ".join(f"H = {h} (I = {WIDTHS[h]})" for h in widths) + " |",
            "|---|---|" + "---|" * len(widths)]
    lines = []
    for name, dist in dict.fromkeys((d.mutant, d.dist) for d in rows):
        cells = []
        for h in widths:
            d = next((x for x in rows if (x.mutant, x.dist, x.hidden) == (name, dist, h)), None)
            if d is None:
                cells.append("")
            elif name == "identity":
                cells.append(f"{d.flagged} flagged of {d.cases}")
            else:
                cell = f"bias test after {d.cell_cases}" if d.cell_cases else "bias test: no"
                cells.append(f"{d.caught}/{d.changed} of {d.cases}; {cell}")
        lines.append(f"| {name} | {dist} | " + " | ".join(cells) + " |")
    return "\n".join(head + lines)


def _hunt_star(args):
    name, kwargs = args
    return hunt(name, **kwargs)


# ---- report


def kind(m):
    """A mutant's class, or what it is outside the catalogue (an equivalent, the identity)."""
    return m.cls if m in CATALOGUE else "equivalent" if m in EQUIVALENT else m.name


def row(k):
    """One table row of a Kill (a markdown line)."""
    m = MUTANTS[k.mutant]
    if not k.killed:
        return f"| {k.mutant} | {kind(m)} | {m.models} | survived | {k.examples} | {k.seconds:.1f} | | |"
    size = reproducer_size(k.case)
    dims = " ".join(
        f"{d[0].upper()}={size[d]}" for d in ("tokens", "experts", "hidden") if size[d] is not None
    )
    cells = (k.mutant, kind(m), m.models, k.op, k.examples, f"{k.seconds:.1f}", dims, size["input_elements"])
    return "| " + " | ".join(map(str, cells)) + " |"


def _kill_stats(killed):
    """Time-to-kill and reproducer size statistics of killed mutants ({} for none)."""
    if not killed:
        return {}
    secs, exs = [k.seconds for k in killed], [k.examples for k in killed]
    sizes = [reproducer_size(k.case) for k in killed]
    return {
        "median_seconds": statistics.median(secs),
        "max_seconds": max(secs),
        "median_examples": statistics.median(exs),
        "max_examples": max(exs),
        "median_input_elements": statistics.median(s["input_elements"] for s in sizes),
        "median_tokens": statistics.median(s["tokens"] for s in sizes),
    }


def summary(kills):
    """Kill rate over the catalogue, time-to-kill and reproducer size statistics (overall and per class), the
    equivalents' outcome."""
    names = {m.name for m in CATALOGUE}
    cat = [k for k in kills if k.mutant in names]
    killed = [k for k in cat if k.killed]
    out = {
        "catalogue": len(cat),
        "killed": len(killed),
        "survivors": [k.mutant for k in cat if not k.killed],
        "equivalent_flagged": [k.mutant for k in kills if k.mutant not in names and k.killed],
        **_kill_stats(killed),
        "classes": {},
    }
    for cls in CLASSES:
        mine = [k for k in cat if MUTANTS[k.mutant].cls == cls]
        if mine:
            done = [k for k in mine if k.killed]
            out["classes"][cls] = {"catalogue": len(mine), "killed": len(done), **_kill_stats(done)}
    return out


def class_table(s):
    """Kill rate and time to kill per class (markdown)."""
    head = ["| class | killed | median s to kill | max s to kill | median examples | max examples |",
            "|---|---|---|---|---|---|"]
    rows = [f"| {cls} | {c['killed']} of {c['catalogue']} | {c.get('median_seconds', float('nan')):.2f} | "
            f"{c.get('max_seconds', float('nan')):.1f} | {c.get('median_examples', float('nan')):g} | "
            f"{c.get('max_examples', float('nan')):g} |" for cls, c in s["classes"].items()]
    return "\n".join(head + rows)


def table(kills):
    head = [
        "| mutant | class | models | killed by | examples to kill | seconds to kill | shrunk reproducer"
        " | input elements |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + [row(k) for k in kills])


def main(argv=None):
    """`python -m difftest mutants`: exit 0 when every catalogue mutant is killed and no equivalent one is
    flagged, 1 otherwise, 2 on bad arguments."""
    p = argparse.ArgumentParser(prog="python -m difftest mutants", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--mutant", action="append", help=f"mutant name (repeatable; default all): {', '.join(MUTANTS)}"
    )
    p.add_argument("--max-examples", type=int, default=MAX_EXAMPLES, help="generated cases per mutant")
    p.add_argument("--time-budget", type=float, default=TIME_BUDGET_S, help="seconds per mutant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="mutants hunted in parallel (1: unloaded timings)")
    p.add_argument("--out", help="directory for mutants.json and the shrunk reproducers as fixtures")
    p.add_argument("--list", action="store_true", help="list the catalogue and exit")
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if args.list:
        for m in CATALOGUE + EQUIVALENT:
            print(f"{m.name:34s} {m.module:8s} {kind(m):10s} {m.models}\n{'':54s} {m.doc}")
        return 0
    names = args.mutant or [m.name for m in CATALOGUE + EQUIVALENT]
    unknown = [n for n in names if n not in MUTANTS]
    if unknown or args.workers < 1 or args.max_examples < 1:
        print(
            f"difftest: error: unknown mutants {unknown}"
            if unknown
            else "difftest: error: --workers and --max-examples must be >= 1",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out) if args.out else None
    kwargs = {
        "max_examples": args.max_examples,
        "time_budget": args.time_budget,
        "seed": args.seed,
        "fixtures_root": None if out is None else out / "fixtures",
    }
    jobs = [(n, kwargs) for n in names]
    if args.workers == 1:
        kills = []
        for job in jobs:
            kills.append(_hunt_star(job))
            print(row(kills[-1]), flush=True)
    else:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            kills = []
            for k in pool.imap(_hunt_star, jobs):
                kills.append(k)
                print(row(k), flush=True)
    s = summary(kills)
    print("\n" + table(kills) + "\n")
    print(class_table(s) + "\n")
    print(json.dumps(s, indent=1))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "mutants.json").write_text(
            json.dumps(
                {
                    "summary": s,
                    "kills": [k._asdict() for k in kills],
                    "budget": {k: v for k, v in kwargs.items() if k != "fixtures_root"},
                },
                indent=1,
                default=str,
            )
            + "\n"
        )
    return 0 if not s["survivors"] and not s["equivalent_flagged"] else 1
