"""Hypothesis strategies for cases, named like Hypothesis' own and bounded by module constants.

Arrays are never drawn element by element (hypothesis.extra.numpy cannot draw bf16/fp8, and big arrays
shrink badly): a case is a configuration + a distribution name + a seed, and difftest/model/generate.py makes the
bits. Shrinking therefore moves toward fewer tokens, smaller sizes, the first distribution ("normal") and
seed 0. Size limits come from the environment once, at import (DIFFTEST_MAX_TOKENS, ..._EXPERTS,
..._HIDDEN, ..._INTERMEDIATE), so a campaign can be widened without edits.
"""

import functools
import os
from typing import NamedTuple

from hypothesis import strategies as st

from spec.numerics import SCALE_BLOCKS
from spec.recipes import HOST_QUANT_VARIANTS, QUANT_VARIANTS, SCALE_FORMULAS

from .case import (
    ACTIVATIONS,
    BIAS_DTYPES,
    BIASED_METHODS,
    DEV_DTYPES,
    DEV_KERNELS,
    EXPERT_WEIGHTS,
    GROUP_MASK_VALUES,
    GROUPED_METHODS,
    HALF_ORDERS,
    HIDDEN_DTYPES,
    LOGIT_DTYPES,
    MX_RULES,
    QUANT_INPUT_DTYPES,
    QUANT_PATHS,
    QUANT_SCHEMES,
    ROUTING_METHODS,
    RSF_PLACEMENTS,
    SCALE_FMTS,
    SCALE_LAYOUTS,
    SF_LAYOUTS,
    SIZE_STEPS,
    TILE_TOKENS,
    Case,
    DevKernelConfig,
    MoEConfig,
    QuantConfig,
    RoutingConfig,
)
from .generate import DISTS, WEIGHT_DISTS

MAX_TOKENS = int(os.environ.get("DIFFTEST_MAX_TOKENS", "40"))
MAX_EXPERTS = int(os.environ.get("DIFFTEST_MAX_EXPERTS", "64"))
MAX_HIDDEN = int(os.environ.get("DIFFTEST_MAX_HIDDEN", "512"))
MAX_INTERMEDIATE = int(os.environ.get("DIFFTEST_MAX_INTERMEDIATE", "384"))
# The layer is the slow op (two float64 spec passes per case): its own, smaller limits.
MOE_MAX_TOKENS = int(os.environ.get("DIFFTEST_MOE_MAX_TOKENS", "8"))
MOE_MAX_EXPERTS = int(os.environ.get("DIFFTEST_MOE_MAX_EXPERTS", "8"))
MOE_MAX_SIZE = int(os.environ.get("DIFFTEST_MOE_MAX_SIZE", "128"))
# Quantized layers wider than one 128 block (multi-block scale reads, per-block accumulation order): drawn in
# one quantized case of MOE_WIDE_ODDS, with at most MOE_WIDE_MAX_TOKENS tokens and _EXPERTS experts.
MOE_WIDE_SIZE = int(os.environ.get("DIFFTEST_MOE_WIDE_SIZE", "256"))
MOE_WIDE_ODDS = int(os.environ.get("DIFFTEST_MOE_WIDE_ODDS", "6"))
MOE_WIDE_MAX_TOKENS = int(os.environ.get("DIFFTEST_MOE_WIDE_MAX_TOKENS", "6"))
MOE_WIDE_MAX_EXPERTS = int(os.environ.get("DIFFTEST_MOE_WIDE_MAX_EXPERTS", "4"))
# Layers of model width, on every path: H in [MOE_MODEL_MIN_HIDDEN, MOE_MODEL_HIDDEN], I in [MOE_MODEL_MIN_INTERMEDIATE,
# MOE_MODEL_INTERMEDIATE], drawn in one case of MOE_MODEL_ODDS with at most MOE_MODEL_MAX_TOKENS tokens and _EXPERTS
# experts. Errors that grow with K live here: a sum of K >= 512 same-sign bf16 products exceeds each by more than 2^8,
# so an fp32 partial sum drops product bits, and an accumulator or store that errs one way crosses the bf16 rounding
# points of the outputs (the bias test's prey: difftest/checking/bias.py). Their inputs are MODEL_WIDTH_DISTS only: the
# routing distributions (ties, underflow, bias shapes) are exercised at every narrower width and would only add cost.
# "sparse" keeps the per-case bound as tight as at small widths (a few nonzero products per output), so an unbiased
# per-element bug, which dense weights of this width hide under the accumulation bound, still fails its case.
MOE_MODEL_MIN_HIDDEN = int(os.environ.get("DIFFTEST_MOE_MODEL_MIN_HIDDEN", "512"))
MOE_MODEL_HIDDEN = int(os.environ.get("DIFFTEST_MOE_MODEL_HIDDEN", "2048"))
MOE_MODEL_MIN_INTERMEDIATE = int(os.environ.get("DIFFTEST_MOE_MODEL_MIN_INTERMEDIATE", "256"))
MOE_MODEL_INTERMEDIATE = int(os.environ.get("DIFFTEST_MOE_MODEL_INTERMEDIATE", "512"))
MOE_MODEL_ODDS = int(os.environ.get("DIFFTEST_MOE_MODEL_ODDS", "8"))
MOE_MODEL_MAX_TOKENS = int(os.environ.get("DIFFTEST_MOE_MODEL_MAX_TOKENS", "16"))
MOE_MODEL_MAX_EXPERTS = int(os.environ.get("DIFFTEST_MOE_MODEL_MAX_EXPERTS", "4"))
MODEL_WIDTH_DISTS = ("normal", "nonneg", "sparse")
MODEL_REGIME = MOE_MODEL_HIDDEN >= MOE_MODEL_MIN_HIDDEN > max(MOE_MAX_SIZE, MOE_WIDE_SIZE)  # else: not drawn
TILE_SIZES = (4, 8, 16, 32, 64, 128, 256)  # TMA row padding, warp/tile widths, routing kernel thresholds
GROUP_SIZES = (16, 32, 64, 128, 256)  # fp8_group quantizer groups (spec.quant.GROUP_SIZES)
SCALING_FACTORS = (None, 1.0, 2.5, 2.826, 16.0)  # None: no scaling (Qwen, Mixtral, Llama-4); 2.5: DeepSeek-V3
MAX_SEED = 2**32 - 1

# Strategies are built once and reused (functools.cache for those with arguments): a strategy built inside a
# draw is validated and has its properties computed at every example, which cost a third of Hypothesis'
# drawing time. The draws themselves, hence shrinking and saved examples, are the same.
_cached = functools.cache


@_cached
def num_tokens(max_value=None):
    """T in [0, max], weighted to 0, 1 and t-1, t, t+1 around tile / padding boundaries."""
    top = MAX_TOKENS if max_value is None else max_value
    edges = sorted({n for t in TILE_SIZES for n in (t - 1, t, t + 1) if n <= top} | {0, 1})
    return st.one_of(st.sampled_from(edges), st.integers(0, top))


@_cached
def seeds():
    return st.integers(0, MAX_SEED)


@_cached
def routing_scaling_factors():
    return st.sampled_from(SCALING_FACTORS)


@_cached
def _sampled(*values):
    return st.sampled_from(values)


@_cached
def _ints(lo, hi):
    return st.integers(lo, hi)


BOOLEANS = st.booleans()
_JUST_E4M3 = st.just("e4m3")
_POSITIVE_TOKENS = num_tokens().filter(lambda n: n >= 1)


class Groups(NamedTuple):
    num_experts: int
    n_group: int
    topk_group: int


@_cached
@st.composite
def expert_groups(draw, method, max_experts=None):
    """(E, n_group, topk_group): grouped methods get E = n_group × per-group (>= 2 for top-2 sums)."""
    top = MAX_EXPERTS if max_experts is None else max_experts
    if method in GROUPED_METHODS and draw(BOOLEANS, label="grouped"):
        G = draw(_sampled(*[g for g in (2, 4, 8) if 2 * g <= top]), label="n_group")
        per = draw(_ints(2, max(2, min(32, top // G))), label="experts_per_group")
        return Groups(G * per, G, draw(_ints(1, G), label="topk_group"))
    return Groups(draw(_ints(1, top), label="num_experts"), 1, 1)


@_cached
@st.composite
def routing_configs(draw, method=None, num_tokens_strategy=None, max_experts=None, shared=True):
    method = method or draw(_sampled(*ROUTING_METHODS), label="method")
    E, G, tg = draw(expert_groups(method, max_experts))
    top_k = 1 if method == "llama4" else draw(_ints(1, min(8, tg * (E // G))), label="top_k")
    bias = (
        draw(_sampled(None, "fp32", "fp32", "bf16"), label="bias_dtype")
        if method in BIASED_METHODS
        else None
    )
    permutation = _permutation(draw, E) if shared else {}
    return RoutingConfig(
        method=method,
        num_tokens=draw(
            num_tokens() if num_tokens_strategy is None else num_tokens_strategy, label="num_tokens"
        ),
        num_experts=E,
        top_k=top_k,
        n_group=G,
        topk_group=tg,
        routed_scaling_factor=draw(routing_scaling_factors(), label="routed_scaling_factor"),
        renormalize=draw(BOOLEANS, label="renormalize"),
        eps=draw(_sampled(0.0, 1e-20), label="eps"),
        logits_dtype=draw(_sampled("fp32", "bf16", "fp16"), label="logits_dtype"),
        bias_dtype=bias,
        num_fused_shared_experts=draw(_ints(0, 2), label="shared") if shared else 0,
        group_mask_value=draw(_sampled(float("-inf"), 0.0), label="group_mask_value")
        if method == "deepseek_v2"
        else float("-inf"),
        **permutation,
    )


def _permutation(draw, E):
    """In one routing case of three, the padded permutation handed to grouped GEMMs (a tile of TILE_TOKENS rows),
    on an expert-parallel shard half of those times."""
    if draw(_ints(0, 2), label="permutation") < 2:
        return {}
    out = {"tile_tokens_dim": draw(_sampled(*TILE_TOKENS), label="tile_tokens_dim")}
    if draw(BOOLEANS, label="shard"):
        local = draw(_ints(1, E), label="local_num_experts")
        out.update(local_num_experts=local, local_expert_offset=draw(_ints(0, E - local), label="offset"))
    return out


@_cached
@st.composite
def quant_configs(draw, scheme=None):
    scheme = scheme or draw(_sampled("fp8_group", "mxfp8", "nvfp4"), label="scheme")
    group = (
        draw(_sampled(*GROUP_SIZES), label="group_size")
        if scheme == "fp8_group"
        else SCALE_BLOCKS[scheme]
    )
    H = group * draw(_ints(1, max(1, MAX_HIDDEN // group)), label="groups_per_row")
    fmt = draw(_sampled("fp32", "ue8m0"), label="scale_fmt") if scheme == "fp8_group" else "fp32"
    layouts = ("row", "ue8m0_packed") if fmt == "ue8m0" else ("row", "col", "col_tma")
    return QuantConfig(
        scheme=scheme,
        num_tokens=draw(num_tokens(), label="num_tokens"),
        hidden_size=H,
        group_size=group if scheme == "fp8_group" else 128,
        input_dtype=draw(_sampled("bf16", "fp16", "fp32"), label="input_dtype"),
        variant=draw(_sampled(*HOST_QUANT_VARIANTS), label="variant"),
        scale_formula=draw(_sampled(*SCALE_FORMULAS), label="scale_formula"),
        scale_fmt=fmt,
        layout=draw(_sampled(*layouts), label="layout") if scheme == "fp8_group" else "row",
        mx_rule=draw(_sampled("ocp", "ceil448"), label="mx_rule"),
    )


@_cached
def _sizes(quant, top, bottom=1):
    """Hidden / intermediate sizes in [bottom, top]: multiples of the activation block (fp8 128, mxfp8 32, nvfp4
    16); bf16 takes any multiple of 16, non-multiples of 128 included."""
    step = SIZE_STEPS[quant]
    return _sizes_of(step, top, bottom)


@_cached
@st.composite
def moe_configs(draw, method=None, activation=None, quant=None, max_experts=None, max_tokens=None):
    """MoE layers of at most MOE_MAX_SIZE hidden / intermediate; one in MOE_MODEL_ODDS is of model width (above),
    and of the others a quantized one in MOE_WIDE_ODDS is wide (up to MOE_WIDE_SIZE: several K blocks); both with
    few tokens and experts, so that they stay cheap."""
    quant = quant or draw(_sampled(*QUANT_PATHS), label="quant")
    model = MODEL_REGIME and draw(
        _ints(0, MOE_MODEL_ODDS - 1), label="model_width") == MOE_MODEL_ODDS - 1
    wide = not model and quant != "bf16" and MOE_WIDE_SIZE > MOE_MAX_SIZE and draw(
        _ints(0, MOE_WIDE_ODDS - 1), label="wide") == MOE_WIDE_ODDS - 1
    tokens, experts = max_tokens or MOE_MAX_TOKENS, max_experts or MOE_MAX_EXPERTS
    if model:
        tokens = min(max_tokens or MOE_MODEL_MAX_TOKENS, MOE_MODEL_MAX_TOKENS)
        experts = min(experts, MOE_MODEL_MAX_EXPERTS)
    if wide:
        tokens, experts = min(tokens, MOE_WIDE_MAX_TOKENS), min(experts, MOE_WIDE_MAX_EXPERTS)
    size = MOE_WIDE_SIZE if wide else MOE_MAX_SIZE
    routing = draw(routing_configs(method, num_tokens(tokens), experts, shared=False))
    E = routing.num_experts
    offset, local = 0, None
    if E > 1 and draw(BOOLEANS, label="expert_parallel"):
        local = draw(_ints(1, E - 1), label="local_num_experts")
        offset = draw(_ints(0, E - local), label="local_expert_offset")
    return MoEConfig(
        routing=routing,
        hidden_size=draw(_sizes(quant, MOE_MODEL_HIDDEN, MOE_MODEL_MIN_HIDDEN) if model
                         else _sizes(quant, min(MAX_HIDDEN, size)), label="hidden_size"),
        intermediate_size=draw(_sizes(quant, MOE_MODEL_INTERMEDIATE, MOE_MODEL_MIN_INTERMEDIATE) if model
                               else _sizes(quant, min(MAX_INTERMEDIATE, size)), label="intermediate_size"),
        activation=activation or draw(_sampled(*ACTIVATIONS), label="activation"),
        half_order=draw(_sampled("gate_up", "up_gate"), label="half_order"),
        quant=quant,
        local_expert_offset=offset,
        local_num_experts=local,
        **_weight_placement(draw, routing.top_k),
        **_input_forms(draw, quant),
    )


def _input_forms(draw, quant):
    """The forms the layer's inputs arrive in, the common one first (and three times as likely): bf16 or fp16
    hidden states; fp32 or UE8M0 scales (fp8_block); expert weights prepared in the path's format, or unquantized
    bf16 / fp32 values the implementation prepares itself."""
    forms = {"bf16": ("fp32",), "fp8_block": ("bf16", "fp32"), "mxfp8": ("bf16", "fp32"), "nvfp4": ("bf16", "fp32")}
    return {
        "hidden_dtype": draw(st.sampled_from(("bf16",) * 3 + ("fp16",)), label="hidden_dtype"),
        "scale_fmt": draw(st.sampled_from(("fp32",) * 3 + ("ue8m0",)), label="scale_fmt")
        if quant == "fp8_block" else "fp32",
        "expert_weights": draw(st.sampled_from(("prepared",) * 3 + forms[quant]), label="expert_weights"),
    }


def _weight_placement(draw, top_k):
    """router_weight_on_input (top-1 only) takes the whole weight, rsf included: rsf_placement "routing"."""
    if top_k == 1 and draw(BOOLEANS, label="router_weight_on_input"):
        return {"router_weight_on_input": True, "rsf_placement": "routing"}
    return {
        "router_weight_on_input": False,
        "rsf_placement": draw(_sampled("routing", "combine"), label="rsf_placement"),
    }


@_cached
@st.composite
def dev_kernel_configs(draw, kernel=None):
    """One trtllm-gen dev kernel on up to MAX_TOKENS tokens, top_k up to 10 (finalize's k-split starts above
    4), tiles 1..256 (the kernels ran 8..128 first, then 1, 2, 4, 256 on the H200), widths of one to a few blocks."""
    kernel = kernel or draw(_sampled(*DEV_KERNELS), label="kernel")
    dtype = {"activation": _sampled("bf16", "fp16"), "activation_deepseek_fp8": _JUST_E4M3,
             "convertsf": _JUST_E4M3}.get(kernel, _sampled("bf16", "fp16", "e4m3"))
    dtype = draw(dtype, label="dtype")
    layout = draw(_sampled(*SF_LAYOUTS), label="sf_layout") if kernel == "convertsf" else "R128c4"
    step = {"activation": 64, "activation_deepseek_fp8": 128, "convertsf": 16 if layout == "R8c16" else 4,
            "permute": 128 if dtype == "e4m3" else 16, "finalize": 16, "finalize_deepseek_fp8": 128}[kernel]
    return DevKernelConfig(
        kernel=kernel,
        num_tokens=draw(_POSITIVE_TOKENS, label="num_tokens"),
        hidden_size=draw(_sizes_of(step, MAX_HIDDEN), label="hidden_size"),
        top_k=draw(_ints(1, 10), label="top_k"),
        num_experts=draw(_ints(1, 8), label="num_experts"),
        tile_tokens_dim=draw(_sampled(*TILE_TOKENS), label="tile_tokens_dim"),
        dtype=dtype,
        swiglu_controls=kernel.startswith("activation") and draw(BOOLEANS, label="swiglu_controls"),
        weighted=kernel != "finalize" or draw(BOOLEANS, label="weighted"),
        hidden_padding=draw(_sampled(0, 16, 128), label="hidden_padding") if kernel == "finalize" else 0,
        sf_layout=layout,
    )


@_cached
def _sizes_of(step, top, bottom=1):
    lo = max(1, -(-bottom // step))
    return st.integers(lo, max(lo, top // step)).map(lambda n: n * step)


CONFIG_STRATEGIES = {"routing": routing_configs, "quant": quant_configs, "moe": moe_configs,
                     "trtllm_ops": dev_kernel_configs}
# The field each op's campaign is split by, and its values: every one gets its share of a campaign (campaign.slices)
SLICES = {"routing": ("method", ROUTING_METHODS), "quant": ("scheme", QUANT_SCHEMES), "moe": ("quant", QUANT_PATHS),
          "trtllm_ops": ("kernel", DEV_KERNELS)}
SPECIAL_DISTS = ("nonfinite",)  # NaN/Inf inputs are their own checks, drawn only on request
# generate.WEIGHT_DISTS change the expert weights: not drawn where a campaign fixes them (weight_seed: presets with
# fixed weights, whose adapters prepare one set of weights once)


def model_width(op, config):
    """Whether a case of `op` is a layer of model width (wider than the other regimes reach)."""
    return op == "moe" and MODEL_REGIME and config.hidden_size >= MOE_MODEL_MIN_HIDDEN


@st.composite
def cases(draw, op=None, configs=None, special=False, weight_seed=None, **config_kwargs):
    """A Case of `op` (drawn if None); `configs` overrides the configuration strategy (model presets);
    `special` adds the NaN/Inf distributions; `weight_seed` fixes the expert weights of moe cases (presets
    with fixed_weights; no WEIGHT_DISTS then), None takes them from each case's seed."""
    op = op or draw(_sampled("routing", "quant", "moe", "trtllm_ops"), label="op")
    config = draw(configs if configs is not None else CONFIG_STRATEGIES[op](**config_kwargs), label="config")
    names = [d for d in DISTS[op] if (special or d not in SPECIAL_DISTS)
             and (weight_seed is None or op != "moe" or d not in WEIGHT_DISTS)
             and (d in MODEL_WIDTH_DISTS or not model_width(op, config))]
    dist = draw(_sampled(*names), label="dist")
    return Case(op, config, dist, draw(seeds(), label="seed"), weight_seed if op == "moe" else None)


# Every value the strategies above draw, per op, for the configuration fields with few values: what a campaign can
# reach. tests/test_strategy_coverage.py holds each drawn within the default profile's examples and accepted by
# torch, and the finite fields equal to what the case model accepts (case.FIELD_DOMAINS); report.py's coverage
# table lists these.
_ROUTING_REACHABLE = {"method": ROUTING_METHODS, "logits_dtype": LOGIT_DTYPES, "bias_dtype": (None, *BIAS_DTYPES),
                      "renormalize": (False, True), "eps": (0.0, 1e-20), "routed_scaling_factor": SCALING_FACTORS,
                      "group_mask_value": GROUP_MASK_VALUES}
# Values the case model accepts that the default strategies leave to a `--where` filter or a plug-in's `space`: the
# device quantizer fl(448·MUFU.RCP(amax)) (spec.recipes), which neither torch nor a host formulation computes.
SPACE_ONLY = {"quant": {"variant": tuple(v for v in QUANT_VARIANTS if v not in HOST_QUANT_VARIANTS)}}
REACHABLE = {
    "routing": {**_ROUTING_REACHABLE, "n_group": (1, 2, 4, 8), "num_fused_shared_experts": (0, 1, 2),
                "tile_tokens_dim": (None, *TILE_TOKENS)},
    "moe": {**_ROUTING_REACHABLE, "n_group": tuple(g for g in (1, 2, 4, 8) if g == 1 or 2 * g <= MOE_MAX_EXPERTS),
            "activation": ACTIVATIONS, "half_order": HALF_ORDERS, "quant": QUANT_PATHS, "hidden_dtype": HIDDEN_DTYPES,
            "rsf_placement": RSF_PLACEMENTS, "router_weight_on_input": (False, True), "scale_fmt": SCALE_FMTS,
            "expert_weights": EXPERT_WEIGHTS},
    "quant": {"scheme": QUANT_SCHEMES, "group_size": GROUP_SIZES, "input_dtype": QUANT_INPUT_DTYPES,
              "variant": HOST_QUANT_VARIANTS, "scale_formula": SCALE_FORMULAS, "scale_fmt": SCALE_FMTS,
              "layout": SCALE_LAYOUTS, "mx_rule": MX_RULES},
    "trtllm_ops": {"kernel": DEV_KERNELS, "dtype": DEV_DTYPES, "swiglu_controls": (False, True),
                   "weighted": (False, True), "hidden_padding": (0, 16, 128), "sf_layout": SF_LAYOUTS,
                   "tile_tokens_dim": TILE_TOKENS},
}
