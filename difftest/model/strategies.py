"""Hypothesis strategies for cases, named like Hypothesis' own and bounded by module constants.

Arrays are never drawn element by element (hypothesis.extra.numpy cannot draw bf16/fp8, and big arrays
shrink badly): a case is a configuration + a distribution name + a seed, and difftest/model/generate.py makes the
bits. Shrinking therefore moves toward fewer tokens, smaller sizes, the first distribution ("normal") and
seed 0. Size limits and odds are settings (difftest/model/settings.py: max_tokens, max_experts, max_hidden, ...), read
once, at import, so a campaign can be widened without edits (fuzz --set max_tokens=4096). Small cases are the bulk;
the kernels' limits (expert tiers, top_k, one-expert groups, path token counts, model widths) are regimes of a draw
in N each (docs/architecture.md, "The case space"); the expert, top_k and token regimes are drawn after what the bulk
draws in their place, so that shrinking out of one lands on the bulk's draw.
"""

import functools
from typing import NamedTuple

from hypothesis import strategies as st

from spec.numerics import FP8_BLOCK, SCALE_BLOCKS
from spec.quant import QUANT_TABLE
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
from .settings import get as setting

MAX_TOKENS = setting("max_tokens")
MAX_EXPERTS = setting("max_experts")
MAX_HIDDEN = setting("max_hidden")
MAX_INTERMEDIATE = setting("max_intermediate")
# A case without tokens computes nothing: one draw in ZERO_TOKEN_ODDS has T = 0, and it is not the simplest draw (a
# fresh Hypothesis run starts from the simplest, and shrinking moves toward it), so such cases stay a small share.
ZERO_TOKEN_ODDS = setting("zero_token_odds")
# The kernels' limits (docs/trtllm_gen_routing.md §5-6; impls/flashinfer/trtllm_gen_routing.py): expert counts at which
# they change tier (trtllm-gen 128, 160, 256, 384, 512; DeepSeek-V3 has 256 experts), each drawn with its neighbours up
# to MAX_KERNEL_EXPERTS, in one routing case of MANY_EXPERTS_ODDS; top_k above 8 up to MAX_TOP_K (the binding's 22 for
# DeepSeek-V3 above 384 experts, routingCustom's 32 for Renormalize and the biased sigmoid) in one draw of
# LARGE_TOP_K_ODDS where the experts allow it; token counts at which the routing kernels change path beyond MAX_TOKENS
# (64, 128, 256, 1,024, 8,192, and T·k >= 1,536: 192 at top-8), each with its neighbours, in one routing case of
# MANY_TOKENS_ODDS, at most MANY_TOKENS_LOGITS logits (T·E) a case.
EXPERT_TIERS = (128, 160, 256, 384, 512)
MAX_KERNEL_EXPERTS = setting("max_kernel_experts")
MANY_EXPERTS_ODDS = setting("many_experts_odds")
MAX_TOP_K = setting("max_top_k")
LARGE_TOP_K_ODDS = setting("large_top_k_odds")
PATH_TOKENS = (64, 128, 192, 256, 1024, 8192)
MANY_TOKENS_ODDS = setting("many_tokens_odds")
MANY_TOKENS_LOGITS = setting("many_tokens_logits")
# Grouped routing at those sizes: n_group with at most 32 experts a group (one warp per group), DeepSeek-V3's 8 of 32.
KERNEL_GROUPS = (4, 8, 16)
# One grouped draw in ONE_EXPERT_GROUP_ODDS has one expert a group (n_group == num_experts: the group score is its key).
ONE_EXPERT_GROUP_ODDS = setting("one_expert_group_odds")
# The layer is the slow op (two float64 spec passes per case): its own, smaller limits.
MOE_MAX_TOKENS = setting("moe_max_tokens")
MOE_MAX_EXPERTS = setting("moe_max_experts")
MOE_MAX_SIZE = setting("moe_max_size")
# Quantized layers wider than one 128 block (multi-block scale reads, per-block accumulation order): drawn in
# one quantized case of MOE_WIDE_ODDS, with at most MOE_WIDE_MAX_TOKENS tokens and _EXPERTS experts.
MOE_WIDE_SIZE = setting("moe_wide_size")
MOE_WIDE_ODDS = setting("moe_wide_odds")
MOE_WIDE_MAX_TOKENS = setting("moe_wide_max_tokens")
MOE_WIDE_MAX_EXPERTS = setting("moe_wide_max_experts")
# Layers with the kernels' expert counts (EXPERT_TIERS and neighbours, up to MOE_MANY_MAX_EXPERTS; grouped too) in one
# narrower case of MOE_MANY_EXPERTS_ODDS, at most MOE_MANY_EXPERTS_SIZE wide and MOE_MAX_TOKENS tokens: at most T·k
# experts are computed. Layers with the routing kernels' token counts (PATH_TOKENS and neighbours up to
# MOE_MANY_MAX_TOKENS) in one case of MOE_MANY_TOKENS_ODDS, as narrow, with at most MOE_MAX_EXPERTS experts.
MOE_MANY_MAX_EXPERTS = setting("moe_many_max_experts")
MOE_MANY_EXPERTS_ODDS = setting("moe_many_experts_odds")
MOE_MANY_EXPERTS_SIZE = setting("moe_many_experts_size")
MOE_MANY_MAX_TOKENS = setting("moe_many_max_tokens")
MOE_MANY_TOKENS_ODDS = setting("moe_many_tokens_odds")
# Layers of model width, on every path: H in [MOE_MODEL_MIN_HIDDEN, MOE_MODEL_HIDDEN], I in [MOE_MODEL_MIN_INTERMEDIATE,
# MOE_MODEL_INTERMEDIATE], drawn in one case of MOE_MODEL_ODDS with at most MOE_MODEL_MAX_TOKENS tokens and _EXPERTS
# experts. Errors that grow with K live here: a sum of K >= 512 same-sign bf16 products exceeds each by more than 2^8,
# so an fp32 partial sum drops product bits, and an accumulator or store that errs one way crosses the bf16 rounding
# points of the outputs (the bias test's prey: difftest/checking/bias.py). Their inputs are MODEL_WIDTH_DISTS only: the
# routing distributions (ties, underflow, bias shapes) are exercised at every narrower width and would only add cost.
# "sparse" keeps the per-case bound as tight as at small widths (a few nonzero products per output), so an unbiased
# per-element bug, which dense weights of this width hide under the accumulation bound, still fails its case.
# One model-width case in MOE_FULL_ODDS is wider still, up to MOE_FULL_HIDDEN (DeepSeek-V3's 7,168; FULL_WIDTHS are
# released models' widths), with 2 to MOE_FULL_MAX_TOKENS tokens, I at most MOE_FULL_INTERMEDIATE and at most
# MOE_MODEL_MAX_EXPERTS experts: the spec decodes every computed expert's weights in float64, seconds a case at 7,168.
MOE_MODEL_MIN_HIDDEN = setting("moe_model_min_hidden")
MOE_MODEL_HIDDEN = setting("moe_model_hidden")
MOE_MODEL_MIN_INTERMEDIATE = setting("moe_model_min_intermediate")
MOE_MODEL_INTERMEDIATE = setting("moe_model_intermediate")
MOE_MODEL_ODDS = setting("moe_model_odds")
MOE_MODEL_MAX_TOKENS = setting("moe_model_max_tokens")
MOE_MODEL_MAX_EXPERTS = setting("moe_model_max_experts")
MOE_FULL_HIDDEN = setting("moe_full_hidden")
MOE_FULL_ODDS = setting("moe_full_odds")
MOE_FULL_MAX_TOKENS = setting("moe_full_max_tokens")
MOE_FULL_INTERMEDIATE = setting("moe_full_intermediate")
FULL_WIDTHS = (2688, 4096, 5120, 6144, 7168)  # Nemotron-H, Mixtral, GLM-4.5 / Llama-4, GLM-5, DeepSeek-V3 (presets)
MODEL_WIDTH_DISTS = ("normal", "nonneg", "sparse")
MODEL_REGIME = MOE_MODEL_HIDDEN >= MOE_MODEL_MIN_HIDDEN > max(MOE_MAX_SIZE, MOE_WIDE_SIZE)  # else: not drawn
FULL_REGIME = MODEL_REGIME and MOE_FULL_HIDDEN > MOE_MODEL_HIDDEN
TILE_SIZES = (4, 8, 16, 32, 64, 128, 256)  # TMA row padding, warp/tile widths, routing kernel thresholds
GROUP_SIZES = (16, 32, 64, 128, 256)  # fp8_group quantizer groups (spec.quant.GROUP_SIZES)
SCALING_FACTORS = (None, 1.0, 2.5, 2.826, 16.0)  # None: no scaling (Qwen, Mixtral, Llama-4); 2.5: DeepSeek-V3
MAX_SEED = 2**32 - 1
# trtllm-gen's finalize (docs/trtllm_gen_dev_kernels.md) takes its small-grid kernels while ceil(H/256)·T < 1184 and
# top_k <= 64 (k_split groups of 4 above 4): one finalize case in DEV_EDGE_ODDS sits on that token edge, and one dev
# kernel case in DEV_EDGE_ODDS has top_k in (10, DEV_MAX_TOP_K].
FINALIZE_SMALL_GRID = 1184
DEV_MAX_TOP_K = 64
DEV_EDGE_ODDS = setting("dev_edge_odds")

# Strategies are built once and reused (functools.cache for those with arguments): a strategy built inside a
# draw is validated and has its properties computed at every example, which cost a third of Hypothesis'
# drawing time. The draws themselves, hence shrinking and saved examples, are the same.
_cached = functools.cache


@_cached
def positive_tokens(max_value=None, min_value=1):
    """T in [min, max], weighted to min and t-1, t, t+1 around tile / padding boundaries."""
    top = MAX_TOKENS if max_value is None else max_value
    edges = sorted({n for t in TILE_SIZES for n in (t - 1, t, t + 1) if min_value <= n <= top} | {min_value})
    return st.one_of(st.sampled_from(edges), st.integers(min_value, top))


@_cached
@st.composite
def num_tokens(draw, max_value=None):
    """positive_tokens(max_value), or T = 0 in one draw of ZERO_TOKEN_ODDS (never the simplest draw)."""
    if _one_in(draw, ZERO_TOKEN_ODDS, "no_tokens"):
        return 0
    return draw(positive_tokens(max_value), label="tokens")


@_cached
def path_tokens(top, experts=1):
    """Token counts at the kernels' path thresholds (PATH_TOKENS, each with its neighbours) up to `top`, with at most
    MANY_TOKENS_LOGITS logits (T·experts)."""
    edges = {n for t in PATH_TOKENS for n in (t - 1, t, t + 1) if n <= top and n * experts <= MANY_TOKENS_LOGITS}
    return st.sampled_from(sorted(edges))


def _one_in(draw, odds, label):
    """True in one draw of `odds` (never the simplest draw); False when odds < 1 (the regime is off)."""
    return odds >= 1 and draw(_ints(0, odds - 1), label=label) == odds - 1


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


class Groups(NamedTuple):
    num_experts: int
    n_group: int
    topk_group: int


@_cached
def kernel_experts(top=MAX_KERNEL_EXPERTS):
    """The kernels' expert tiers (EXPERT_TIERS), each with its neighbours, up to `top`."""
    return tuple(sorted({n for t in EXPERT_TIERS for n in (t - 1, t, t + 1) if n <= top}))


@_cached
@st.composite
def expert_groups(draw, method, max_experts=None, many=False):
    """(E, n_group, topk_group): grouped methods get E = n_group × per-group (>= 2 for top-2 sums, or one expert a
    group in one draw of ONE_EXPERT_GROUP_ODDS); `many`: E among the kernels' tiers (kernel_experts), grouped ones in
    KERNEL_GROUPS of at most 32 experts."""
    top = MAX_EXPERTS if max_experts is None else max_experts
    grouped = method in GROUPED_METHODS and draw(BOOLEANS, label="grouped")
    if many:
        sizes = kernel_experts(top)
        if grouped:
            shapes = [(E, G) for E in sizes for G in KERNEL_GROUPS if E % G == 0 and E // G <= 32]
            E, G = draw(_sampled(*shapes), label="experts_and_groups")
            return Groups(E, G, draw(_ints(1, G), label="topk_group"))
        return Groups(draw(_sampled(*sizes), label="num_experts"), 1, 1)
    if grouped:
        G = draw(_sampled(*[g for g in (2, 4, 8) if 2 * g <= top]), label="n_group")
        one = _one_in(draw, ONE_EXPERT_GROUP_ODDS, "one_expert_groups")
        per = 1 if one else draw(_ints(2, max(2, min(32, top // G))), label="experts_per_group")
        return Groups(G * per, G, draw(_ints(1, G), label="topk_group"))
    return Groups(draw(_ints(1, top), label="num_experts"), 1, 1)


def _top_k(draw, method, most):
    """top_k in [1, min(8, most)], then in one draw of LARGE_TOP_K_ODDS where `most` (the experts the groups keep)
    allows it, above 8 up to min(MAX_TOP_K, most) in its place; llama4 is top-1."""
    if method == "llama4":
        return 1
    k = draw(_ints(1, min(8, most)), label="top_k")
    if min(most, MAX_TOP_K) > 8 and _one_in(draw, LARGE_TOP_K_ODDS, "large_top_k"):
        k = draw(_ints(9, min(MAX_TOP_K, most)), label="large_top_k")
    return k


@_cached
@st.composite
def routing_configs(draw, method=None, num_tokens_strategy=None, max_experts=None, shared=True, many_experts=None,
                    kernel_top=None, path_odds=None, path_top=None):
    """Routing configurations of up to `max_experts` (MAX_EXPERTS) experts; `many_experts` (None: in one draw of
    MANY_EXPERTS_ODDS) draws the kernels' expert counts up to `kernel_top` (MAX_KERNEL_EXPERTS) instead; one draw in
    `path_odds` (MANY_TOKENS_ODDS without a `num_tokens_strategy`, else none) has the kernels' token counts up to
    `path_top` (8,193). Each regime is drawn after what the bulk draws and replaces it, so that a failure shrunk out of
    the regime lands on the bulk's own draw."""
    method = method or draw(_sampled(*ROUTING_METHODS), label="method")
    groups = draw(expert_groups(method, max_experts))
    kernel_top = kernel_top or MAX_KERNEL_EXPERTS
    if many_experts is None:
        many_experts = bool(kernel_experts(kernel_top)) and _one_in(draw, MANY_EXPERTS_ODDS, "many_experts")
    if many_experts:
        groups = draw(expert_groups(method, kernel_top, True))
    E, G, tg = groups
    top_k = _top_k(draw, method, tg * (E // G))
    path_odds = (MANY_TOKENS_ODDS if num_tokens_strategy is None else 0) if path_odds is None else path_odds
    tokens = draw(num_tokens() if num_tokens_strategy is None else num_tokens_strategy, label="num_tokens")
    if _one_in(draw, path_odds, "many_tokens"):
        tokens = draw(path_tokens(path_top or max(PATH_TOKENS) + 1, E), label="path_tokens")
    bias = (
        draw(_sampled(None, "fp32", "fp32", "bf16"), label="bias_dtype")
        if method in BIASED_METHODS
        else None
    )
    permutation = _permutation(draw, E) if shared else {}
    return RoutingConfig(
        method=method,
        num_tokens=tokens,
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
        group_size=group if scheme == "fp8_group" else FP8_BLOCK,
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
    """MoE layers of at most MOE_MAX_SIZE hidden / intermediate, and regimes that reach further while they stay cheap:
    one case in MOE_MODEL_ODDS is of model width (one of those in MOE_FULL_ODDS up to MOE_FULL_HIDDEN, with T >= 2),
    one of the others in MOE_MANY_EXPERTS_ODDS has the kernels' expert counts and one in MOE_MANY_TOKENS_ODDS their
    token counts (both narrow), and a quantized one in MOE_WIDE_ODDS is wide (up to MOE_WIDE_SIZE: several K blocks);
    all with few tokens or few experts. `max_experts` / `max_tokens` cap the bulk's and turn those regimes off."""
    quant = quant or draw(_sampled(*QUANT_PATHS), label="quant")
    model = MODEL_REGIME and _one_in(draw, MOE_MODEL_ODDS, "model_width")
    full = model and FULL_REGIME and _one_in(draw, MOE_FULL_ODDS, "full_width")
    many_experts = not model and max_experts is None and _one_in(draw, MOE_MANY_EXPERTS_ODDS, "many_experts")
    wide = not (model or many_experts) and quant != "bf16" and MOE_WIDE_SIZE > MOE_MAX_SIZE and _one_in(
        draw, MOE_WIDE_ODDS, "wide")
    tokens, experts = max_tokens or MOE_MAX_TOKENS, max_experts or MOE_MAX_EXPERTS
    size, bottom, top = min(MAX_HIDDEN, MOE_MAX_SIZE), 1, min(MAX_INTERMEDIATE, MOE_MAX_SIZE)
    token_counts = None
    if model:
        tokens = min(max_tokens or MOE_MODEL_MAX_TOKENS, MOE_MODEL_MAX_TOKENS)
        experts = min(experts, MOE_MODEL_MAX_EXPERTS)
    if full:
        token_counts = positive_tokens(max(2, min(tokens, MOE_FULL_MAX_TOKENS)), 2)
    if wide:
        tokens, experts = min(tokens, MOE_WIDE_MAX_TOKENS), min(experts, MOE_WIDE_MAX_EXPERTS)
        size, top = min(MAX_HIDDEN, MOE_WIDE_SIZE), min(MAX_INTERMEDIATE, MOE_WIDE_SIZE)
    plain = not (model or many_experts or wide) and max_tokens is None  # the kernels' token counts in its place
    routing = draw(routing_configs(method, num_tokens(tokens) if token_counts is None else token_counts, experts,
                                   shared=False, many_experts=many_experts, kernel_top=MOE_MANY_MAX_EXPERTS,
                                   path_odds=MOE_MANY_TOKENS_ODDS if plain else 0, path_top=MOE_MANY_MAX_TOKENS))
    if many_experts or routing.num_tokens > tokens:  # the kernels' expert or token counts: narrow layers
        size = top = min(MAX_HIDDEN, MOE_MANY_EXPERTS_SIZE)
    E = routing.num_experts
    offset, local = 0, None
    if E > 1 and draw(BOOLEANS, label="expert_parallel"):
        local = draw(_ints(1, E - 1), label="local_num_experts")
        offset = draw(_ints(0, E - local), label="local_expert_offset")
    if full:
        hidden = _full_widths(quant)
        intermediate = _sizes(quant, MOE_FULL_INTERMEDIATE, min(FP8_BLOCK, MOE_FULL_INTERMEDIATE))
    elif model:
        hidden = _sizes(quant, MOE_MODEL_HIDDEN, MOE_MODEL_MIN_HIDDEN)
        intermediate = _sizes(quant, MOE_MODEL_INTERMEDIATE, MOE_MODEL_MIN_INTERMEDIATE)
    else:
        hidden, intermediate = _sizes(quant, size, bottom), _sizes(quant, top, bottom)
    return MoEConfig(
        routing=routing,
        hidden_size=draw(hidden, label="hidden_size"),
        intermediate_size=draw(intermediate, label="intermediate_size"),
        activation=activation or draw(_sampled(*ACTIVATIONS), label="activation"),
        half_order=draw(_sampled("gate_up", "up_gate"), label="half_order"),
        quant=quant,
        local_expert_offset=offset,
        local_num_experts=local,
        **_weight_placement(draw, routing.top_k),
        **_input_forms(draw, quant),
    )


@_cached
def _full_widths(quant):
    """Widths above MOE_MODEL_HIDDEN up to MOE_FULL_HIDDEN: released models' (FULL_WIDTHS), or any multiple of the
    path's step."""
    step = SIZE_STEPS[quant]
    known = [w for w in FULL_WIDTHS if w % step == 0 and MOE_MODEL_HIDDEN < w <= MOE_FULL_HIDDEN]
    anywhere = _sizes(quant, MOE_FULL_HIDDEN, MOE_MODEL_HIDDEN + 1)
    return st.one_of(st.sampled_from(known), anywhere) if known else anywhere


def _input_forms(draw, quant):
    """The forms the layer's inputs arrive in, the common one first (and three times as likely): bf16 or fp16
    hidden states; fp32 or UE8M0 scales (fp8_block); expert weights prepared in the path's format, or unquantized
    bf16 / fp32 values the implementation prepares itself."""
    return {
        "hidden_dtype": draw(st.sampled_from(("bf16",) * 3 + ("fp16",)), label="hidden_dtype"),
        "scale_fmt": draw(st.sampled_from(("fp32",) * 3 + ("ue8m0",)), label="scale_fmt")
        if QUANT_TABLE[quant].scale_fmts != ("fp32",) else "fp32",
        "expert_weights": draw(st.sampled_from(("prepared",) * 3 + QUANT_TABLE[quant].weight_forms),
                               label="expert_weights"),
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
    4), tiles 1..256 (the kernels ran 8..128 first, then 1, 2, 4, 256 on the H200), widths of one to a few blocks;
    one case in DEV_EDGE_ODDS has top_k up to DEV_MAX_TOP_K, and one finalize case in DEV_EDGE_ODDS the token count on
    either side of its small-grid edge (FINALIZE_SMALL_GRID), with top_k up to 10 there."""
    kernel = kernel or draw(_sampled(*DEV_KERNELS), label="kernel")
    dtype = {"activation": _sampled("bf16", "fp16"), "activation_deepseek_fp8": _JUST_E4M3,
             "convertsf": _JUST_E4M3}.get(kernel, _sampled("bf16", "fp16", "e4m3"))
    dtype = draw(dtype, label="dtype")
    layout = draw(_sampled(*SF_LAYOUTS), label="sf_layout") if kernel == "convertsf" else "R128c4"
    step = {"activation": 64, "activation_deepseek_fp8": FP8_BLOCK, "convertsf": 16 if layout == "R8c16" else 4,
            "permute": FP8_BLOCK if dtype == "e4m3" else 16, "finalize": 16, "finalize_deepseek_fp8": FP8_BLOCK}[kernel]
    hidden = draw(_sizes_of(step, MAX_HIDDEN), label="hidden_size")
    at_edge = kernel == "finalize" and _one_in(draw, DEV_EDGE_ODDS, "small_grid_edge")
    if at_edge:
        edge = -(-FINALIZE_SMALL_GRID // -(-hidden // 256))  # ceil(H/256)·T < 1184 below it
        tokens = draw(_sampled(edge - 1, edge), label="num_tokens")
    else:
        tokens = draw(positive_tokens(), label="num_tokens")
    # not both: torch's finalize of 1,183 tokens at top-64 took 5.2 CPU s a case (0.7 s at top-10)
    large_k = not at_edge and _one_in(draw, DEV_EDGE_ODDS, "large_top_k")
    return DevKernelConfig(
        kernel=kernel,
        num_tokens=tokens,
        hidden_size=hidden,
        top_k=draw(_ints(11, DEV_MAX_TOP_K) if large_k else _ints(1, 10), label="top_k"),
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
# The field each op's campaign is split by, and its values: every one gets its share of a campaign (slices)
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


def slices(op, fixed=None):
    """[(label, configs strategy)]: routing per method, quant per scheme, moe per quant path, trtllm_ops per
    kernel (strategies.SLICES), so that every one gets its share of a campaign instead of what Hypothesis'
    choice order leaves it. ``fixed``: keywords of the op's configuration strategy that narrow every slice;
    fixing the split field itself leaves one slice."""
    fixed = dict(fixed or {})
    keyword, values = SLICES[op]
    configs = CONFIG_STRATEGIES[op]
    if keyword in fixed:
        return [(fixed[keyword], configs(**fixed))]
    return [(v, configs(**fixed, **{keyword: v})) for v in values]


# Every value the strategies above draw, per op, for the configuration fields with few values: what a campaign can
# reach. tests/difftest/model/test_strategy_coverage.py holds each drawn within the default profile's examples and
# accepted by torch, and the finite fields equal to what the case model accepts (case.FIELD_DOMAINS); report.py's
# coverage table lists these.
_ROUTING_REACHABLE = {"method": ROUTING_METHODS, "logits_dtype": LOGIT_DTYPES, "bias_dtype": (None, *BIAS_DTYPES),
                      "renormalize": (False, True), "eps": (0.0, 1e-20), "routed_scaling_factor": SCALING_FACTORS,
                      "group_mask_value": GROUP_MASK_VALUES}
# Values the case model accepts that the default strategies leave to a `--where` filter or a plug-in's `space`: the
# device quantizer fl(448·MUFU.RCP(amax)) (spec.recipes), which neither torch nor a host formulation computes.
SPACE_ONLY = {"quant": {"variant": tuple(v for v in QUANT_VARIANTS if v not in HOST_QUANT_VARIANTS)}}
REACHABLE = {
    "routing": {**_ROUTING_REACHABLE, "n_group": (1, 2, 4, 8, 16), "num_fused_shared_experts": (0, 1, 2),
                "tile_tokens_dim": (None, *TILE_TOKENS)},
    # n_group: the bulk's (the layers with the kernels' expert counts add KERNEL_GROUPS, one draw in hundreds)
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
