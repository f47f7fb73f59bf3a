"""The case model: an immutable description from which inputs are generated deterministically.

A ``Case`` is (op, config, dist, seed, weight_seed). ``config`` is one of the frozen dataclasses below; ``dist``
names an input distribution of difftest/model/generate.py; ``seed`` selects the bits. ``weight_seed`` (moe only)
selects the expert weights when a campaign keeps them fixed across cases (difftest/model/presets.py); None, the
default and the value of every case written before it existed, takes them from ``seed``. ``to_dict`` writes
it only when set, so such cases serialize (and name their fixtures) exactly as before.
``Case.to_json``/``from_json`` round trip exactly, and unknown or missing fields are one-line errors.
"""

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields
from typing import NamedTuple

from spec.numerics import FP8_BLOCK, SCALE_BLOCKS
from spec.quant import QUANT_PATHS, QUANT_TABLE  # the quant path table: spec.quant.QUANT_TABLE
from spec.recipes import QUANT_VARIANTS, SCALE_FORMULAS
from spec.routing import (  # the method table (spec.routing.METHODS) and the option table (OPTIONS)
    BIASED_METHODS,  # noqa: F401 (difftest/model/ reads the method lists here)
    CASE_OPTIONS,
    GROUPED_METHODS,  # noqa: F401
    ROUTING_METHODS,
    check_options,
)

from . import OPS  # noqa: F401 (its home is the package, so the command line names ops without numpy)

ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh", "relu2", "silu", "gelu", "identity")
GATED_ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh")
QUANT_SCHEMES = ("fp8_group", "mxfp8", "nvfp4")
SCALE_LAYOUTS = ("row", "col", "col_tma", "ue8m0_packed")
LOGIT_DTYPES = ("fp32", "bf16", "fp16")
BIAS_DTYPES = ("fp32", "bf16")
QUANT_INPUT_DTYPES = ("bf16", "fp16", "fp32")
MAX_TILE_TOKENS = 256
DEV_KERNELS = ("permute", "activation", "activation_deepseek_fp8", "convertsf", "finalize",  # trtllm_ops
               "finalize_deepseek_fp8")
DEV_DTYPES = ("bf16", "fp16", "e4m3")
SF_LAYOUTS = ("R128c4", "R8c4", "R8c16")


class Capability(NamedTuple):
    """What an implementation can do beyond contract 1, as one thing: the contract version that added it, the op
    (or ops) whose configuration it concerns, and per field its neutral value (what every case meant before the field
    existed). A capability of ``ranges`` widens fields that existed instead: per op, per field, the values the
    strategies drew before it (a --where value, "LO..HI" or list), which is all an implementation without it gets."""

    contract: int
    op: str | tuple
    neutral: dict
    ranges: bool = False


# The plug-in contract (docs/plugins.md) this case model implements. An implementation states the contract it was
# written against (``contract``, default 1) and may list capabilities of later ones (``capabilities``); every field
# of a capability it neither has by its contract nor lists is drawn at its neutral value, so a field added tomorrow
# never reaches a plug-in written today. A new field goes in a new row here, with CONTRACT raised to its version.
CONTRACT = 3
CAPABILITIES = {
    "permutation": Capability(2, "routing", {"tile_tokens_dim": None, "local_expert_offset": 0,
                                             "local_num_experts": None}),  # the padded layout for grouped GEMMs
    "ue8m0": Capability(2, "moe", {"scale_fmt": "fp32"}),  # power-of-two block scales on the fp8_block path
    "weight_forms": Capability(2, "moe", {"expert_weights": "prepared"}),  # unquantized weights it prepares itself
    # the kernels' limits (strategies.py): up to 512 experts, top_k above 8, one-expert groups, the kernels' token
    # counts, layers up to 7,168 wide; without it, what the strategies drew before them
    "kernel_limits": Capability(3, ("routing", "moe", "trtllm_ops"), {
        "routing": {"num_experts": "1..64", "top_k": "1..8", "num_tokens": "0..40", "one_expert_groups": False},
        "moe": {"num_experts": "1..8", "top_k": "1..8", "num_tokens": "0..16", "hidden_size": "1..2048",
                "one_expert_groups": False},
        "trtllm_ops": {"top_k": "1..10", "num_tokens": "1..40"}}, ranges=True),
}


def _unknown(op, contract, capabilities, ranges):
    for name, cap in CAPABILITIES.items():
        ops = (cap.op,) if isinstance(cap.op, str) else cap.op
        if cap.ranges == ranges and op in ops and cap.contract > contract and name not in capabilities:
            yield cap.neutral[op] if ranges else cap.neutral


def neutral_fields(op, contract=1, capabilities=()):
    """{field: neutral value} of the fields an implementation of `contract` with `capabilities` does not know, in
    `op`'s configuration (a moe configuration holds its routing's: their case constraints keep them neutral)."""
    out = {}
    for neutral in _unknown(op, contract, capabilities, False):
        out.update(neutral)
    return out


def neutral_ranges(op, contract=1, capabilities=()):
    """{field: the values drawn before} of the widened fields (Capability.ranges) an implementation of `contract`
    with `capabilities` does not know, in `op`'s configuration."""
    out = {}
    for ranges in _unknown(op, contract, capabilities, True):
        out.update(ranges)
    return out


# Fields added after fixtures existed (the capabilities' fields): written only when they differ from their neutral
# values, so every older case serializes (and digests, and names its fixture) exactly as before.
ROUTING_LATE_DEFAULTS = neutral_fields("routing")
MOE_LATE_DEFAULTS = neutral_fields("moe")
SCALE_FMTS = ("fp32", "ue8m0")  # quant op; moe fp8_block (UE8M0: power-of-two scales)
MX_RULES = ("ocp", "ceil448")
HIDDEN_DTYPES = ("bf16", "fp16")
HALF_ORDERS = ("gate_up", "up_gate")
RSF_PLACEMENTS = ("routing", "combine")
GROUP_MASK_VALUES = (-math.inf, 0.0)  # deepseek_v2: vLLM's -inf or SGLang grouped_topk_gpu's 0.0
TILE_TOKENS = tuple(1 << i for i in range(MAX_TILE_TOKENS.bit_length()))  # powers of two up to MAX_TILE_TOKENS
# The expert weights handed to a moe implementation: "prepared" in the quant path's own format (bf16 values, or
# codes and scales), or unquantized bf16 / fp32 values that the implementation quantizes (and lays out) itself.
EXPERT_WEIGHTS = ("prepared", "bf16", "fp32")


class CaseError(ValueError):
    """A case or configuration that violates a constraint; the message names it."""


class Decline(str):
    """An ``unsupported(case)`` answer that says what it refuses: the reason (a str, so whatever reads a reason still
    works) and, as keywords, the configuration values refused, each a value, a list of values or a "LO..HI" range:
    ``Decline("deepseek_v3 routing only", method=c.method)``, ``Decline("at most 256 experts", num_experts="257..")``.
    The campaign stops drawing them for that implementation (difftest/model/learn.py)."""

    def __new__(cls, reason, **refused):
        self = super().__new__(cls, reason)
        self.refused = refused
        return self

    def __reduce__(self):  # pickled across worker processes with what it refuses
        return (_decline, (str(self), self.refused))


def _decline(reason, refused):
    return Decline(reason, **refused)


@dataclass(frozen=True)
class RoutingConfig:
    method: str
    num_tokens: int
    num_experts: int
    top_k: int
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float | None = None
    renormalize: bool = True
    eps: float = 0.0
    logits_dtype: str = "fp32"
    bias_dtype: str | None = None  # None: no correction bias
    num_fused_shared_experts: int = 0
    group_mask_value: float = -math.inf  # deepseek_v2 only: 0.0 (SGLang grouped_topk_gpu) or -inf (vLLM)
    # The permutation a routing stage hands to grouped GEMMs (spec/permutation.py), routing op only: tokens
    # padded per local expert to tile_tokens_dim rows; None: the implementation returns no permutation.
    tile_tokens_dim: int | None = None
    local_expert_offset: int = 0
    local_num_experts: int | None = None  # None: every expert from local_expert_offset on

    @property
    def num_local_experts(self):
        """The shard's routed experts: local_num_experts, or every expert from local_expert_offset on."""
        return self.num_experts - self.local_expert_offset if self.local_num_experts is None else self.local_num_experts

    def route_kwargs(self):
        """The spec/torch route keywords of this config: the method and its spec.routing.CASE_OPTIONS, each a field
        of the same name (everything but the tensors and the recipe)."""
        return {"method": self.method, **{name: getattr(self, name) for name in CASE_OPTIONS}}


@dataclass(frozen=True)
class QuantConfig:
    scheme: str  # fp8_group | mxfp8 | nvfp4
    num_tokens: int
    hidden_size: int
    group_size: int = FP8_BLOCK
    input_dtype: str = "bf16"
    variant: str = "div"
    scale_formula: str = "div448"
    scale_fmt: str = "fp32"  # fp32 | ue8m0
    layout: str = "row"
    mx_rule: str = "ocp"  # mxfp8 scale rule: ocp | ceil448


LAYER_KEYS = ("activation", "half_order", "quant", "local_expert_offset", "local_num_experts", "rsf_placement",
              "router_weight_on_input", "scale_fmt")  # MoEConfig fields that are moe_layer keywords as they are


@dataclass(frozen=True)
class MoEConfig:
    routing: RoutingConfig
    hidden_size: int
    intermediate_size: int
    activation: str = "swiglu"
    half_order: str = "gate_up"
    quant: str = "bf16"
    hidden_dtype: str = "bf16"
    local_expert_offset: int = 0
    local_num_experts: int | None = None
    rsf_placement: str = "routing"  # routing | combine
    router_weight_on_input: bool = False
    # fp8_block only: "ue8m0" scales are powers of two (DeepGEMM, Blackwell FP8 MoE): the activations' and the
    # re-quantized intermediate's per-token-group scales rounded up (quant.ue8m0_ceil), and the weights' block scales
    scale_fmt: str = "fp32"
    expert_weights: str = "prepared"  # EXPERT_WEIGHTS

    @property
    def gated(self):
        return self.activation in GATED_ACTIVATIONS

    def layer_kwargs(self):
        """The fields both moe_layer implementations take by the same keyword."""
        return {key: getattr(self, key) for key in LAYER_KEYS}


@dataclass(frozen=True)
class DevKernelConfig:
    """One trtllm-gen dev kernel (docs/trtllm_gen_dev_kernels.md) on routed tokens: top_k slots over
    num_experts local experts (a slot may be non-local), each expert padded to tile_tokens_dim rows.
    hidden_size: permute's and finalize's H, the activation's output width I, convertsf's scale columns."""

    kernel: str
    num_tokens: int
    hidden_size: int
    top_k: int = 1
    num_experts: int = 1
    tile_tokens_dim: int = 8
    dtype: str = "bf16"  # element dtype: bf16 | fp16 | e4m3 (activation_deepseek_fp8: e4m3; convertsf: bytes)
    swiglu_controls: bool = False  # activations: per-expert alpha, beta, clamp_limit
    weighted: bool = True  # finalize: expert weights (False: w = 1)
    hidden_padding: int = 0  # finalize: gemm2_out is [P, hidden_size + hidden_padding] (hiddenDimPadded)
    sf_layout: str = "R128c4"  # convertsf's source layout


CONFIGS = {"routing": RoutingConfig, "quant": QuantConfig, "moe": MoEConfig, "trtllm_ops": DevKernelConfig}

# The configuration fields with few values, per op, and every value the check_* functions below accept for them
# (sizes, counts, seeds and scaling factors are ranges, not listed). strategies.REACHABLE draws each of them
# (tests/difftest/model/test_strategy_coverage.py).
BOOLS = (False, True)
ROUTING_DOMAINS = {"method": ROUTING_METHODS, "logits_dtype": LOGIT_DTYPES, "bias_dtype": (None, *BIAS_DTYPES),
                   "renormalize": BOOLS, "group_mask_value": GROUP_MASK_VALUES, "tile_tokens_dim": (None, *TILE_TOKENS)}
FIELD_DOMAINS = {
    "routing": ROUTING_DOMAINS,
    "moe": {**{k: v for k, v in ROUTING_DOMAINS.items() if k != "tile_tokens_dim"}, "activation": ACTIVATIONS,
            "half_order": HALF_ORDERS, "quant": QUANT_PATHS, "hidden_dtype": HIDDEN_DTYPES,
            "rsf_placement": RSF_PLACEMENTS, "router_weight_on_input": BOOLS, "scale_fmt": SCALE_FMTS,
            "expert_weights": EXPERT_WEIGHTS},
    "quant": {"scheme": QUANT_SCHEMES, "input_dtype": QUANT_INPUT_DTYPES, "variant": QUANT_VARIANTS,
              "scale_formula": SCALE_FORMULAS, "scale_fmt": SCALE_FMTS, "layout": SCALE_LAYOUTS, "mx_rule": MX_RULES},
    "trtllm_ops": {"kernel": DEV_KERNELS, "dtype": DEV_DTYPES, "swiglu_controls": BOOLS, "weighted": BOOLS,
                   "sf_layout": SF_LAYOUTS, "tile_tokens_dim": TILE_TOKENS},
}


def _require(ok, message):
    if not ok:
        raise CaseError(message)


def check_routing(c):
    """Raise CaseError naming the first violated constraint of a RoutingConfig: the spec's routing call
    (spec.routing.check_options, its message), then the case's own fields."""
    try:
        check_options(num_experts=c.num_experts, biased=c.bias_dtype is not None, **c.route_kwargs())
    except ValueError as e:
        raise CaseError(str(e)) from None
    _require(c.num_tokens >= 0, f"num_tokens={c.num_tokens} must be >= 0")
    _require(c.logits_dtype in LOGIT_DTYPES, f"logits_dtype {c.logits_dtype!r} is not one of {LOGIT_DTYPES}")
    _require(
        c.bias_dtype is None or c.bias_dtype in BIAS_DTYPES,
        f"bias_dtype {c.bias_dtype!r} is not None or one of {BIAS_DTYPES}",
    )
    _require(c.group_mask_value in GROUP_MASK_VALUES,  # the kernels' two: the spec takes any value but NaN
             f"group_mask_value={c.group_mask_value} must be 0.0 or -inf")
    tile = c.tile_tokens_dim
    _require(
        tile is None or (isinstance(tile, int) and 1 <= tile <= MAX_TILE_TOKENS and tile & (tile - 1) == 0),
        f"tile_tokens_dim={tile} must be None or a power of two in [1, {MAX_TILE_TOKENS}]",
    )
    E, local = c.num_experts, c.local_num_experts
    _require(0 <= c.local_expert_offset < E, f"local_expert_offset={c.local_expert_offset} not in [0, {E})")
    _require(
        local is None or 1 <= local <= E - c.local_expert_offset,
        f"local_num_experts={local} must be in [1, num_experts - local_expert_offset = {E - c.local_expert_offset}]",
    )
    _require(
        tile is not None or (c.local_expert_offset == 0 and local is None),
        "local_expert_offset / local_num_experts describe the permutation: they need a tile_tokens_dim",
    )


# A moe layer's hidden / intermediate sizes come in multiples of these: the activation's scale block on the quantized
# paths (spec.quant.QUANT_TABLE), 16 on bf16 (non-multiples of 128 included).
SIZE_STEPS = {name: path.block or 16 for name, path in QUANT_TABLE.items()}


def quant_block(c):
    """The elements of a row that share one scale in a QuantConfig's scheme (spec.numerics.SCALE_BLOCKS)."""
    return c.group_size if c.scheme == "fp8_group" else SCALE_BLOCKS[c.scheme]


def check_quant(c):
    """Raise CaseError naming the first violated constraint of a QuantConfig."""
    _require(c.scheme in QUANT_SCHEMES, f"quant scheme {c.scheme!r} is not one of {QUANT_SCHEMES}")
    _require(c.num_tokens >= 0, f"num_tokens={c.num_tokens} must be >= 0")
    _require(c.hidden_size >= 1, f"hidden_size={c.hidden_size} must be >= 1")
    block = quant_block(c)
    _require(
        block >= 1 and c.hidden_size % block == 0,
        f"hidden_size={c.hidden_size} must be a multiple of the {c.scheme} block {block}",
    )
    _require(
        c.input_dtype in QUANT_INPUT_DTYPES,
        f"input_dtype {c.input_dtype!r} is not one of {QUANT_INPUT_DTYPES}",
    )
    _require(c.variant in QUANT_VARIANTS, f"variant {c.variant!r} is not one of {QUANT_VARIANTS}")
    _require(
        c.scale_formula in SCALE_FORMULAS, f"scale_formula {c.scale_formula!r} is not one of {SCALE_FORMULAS}"
    )
    _require(c.scale_fmt in SCALE_FMTS, f"scale_fmt {c.scale_fmt!r} is not fp32|ue8m0")
    _require(c.layout in SCALE_LAYOUTS, f"layout {c.layout!r} is not one of {SCALE_LAYOUTS}")
    _require(
        c.layout in (("row", "ue8m0_packed") if c.scale_fmt == "ue8m0" else ("row", "col", "col_tma")),
        f"layout {c.layout} with scale_fmt {c.scale_fmt}: ue8m0 scales are row-major fp32 or ue8m0_packed "
        "(SGLang asserts column-major ue8m0 is TMA-aligned packed), fp32 scales row, col or col_tma",
    )
    _require(c.mx_rule in MX_RULES, f"mx_rule {c.mx_rule!r} is not ocp|ceil448")


def check_moe(c):
    """Raise CaseError naming the first violated constraint of a MoEConfig."""
    check_routing(c.routing)
    _require(
        c.hidden_size >= 1 and c.intermediate_size >= 1, "hidden_size and intermediate_size must be >= 1"
    )
    _require(c.activation in ACTIVATIONS, f"activation {c.activation!r} is not one of {ACTIVATIONS}")
    _require(c.half_order in HALF_ORDERS, f"half_order {c.half_order!r} is not gate_up|up_gate")
    _require(c.quant in QUANT_PATHS, f"quant path {c.quant!r} is not one of {QUANT_PATHS}")
    path = QUANT_TABLE[c.quant]
    block = path.block if path.whole_blocks else 1  # fp8_block: a partial last block
    _require(
        c.hidden_size % block == 0 and c.intermediate_size % block == 0,
        f"quant {c.quant} needs hidden_size and intermediate_size multiples of {block}",
    )
    _require(c.hidden_dtype in HIDDEN_DTYPES, f"hidden_dtype {c.hidden_dtype!r} is not bf16|fp16")
    E, local = c.routing.num_experts, c.local_num_experts
    _require(0 <= c.local_expert_offset < E, f"local_expert_offset={c.local_expert_offset} not in [0, {E})")
    _require(
        local is None or 1 <= local <= E - c.local_expert_offset,
        f"local_num_experts={local} must be in [1, num_experts - local_expert_offset = "
        f"{E - c.local_expert_offset}]",
    )
    _require(
        c.rsf_placement in RSF_PLACEMENTS, f"rsf_placement {c.rsf_placement!r} is not routing|combine"
    )
    _require(
        not c.router_weight_on_input or (c.routing.top_k == 1 and c.rsf_placement == "routing"),
        "router_weight_on_input needs top_k == 1 and rsf_placement routing (the full weight on the input)",
    )
    _require(
        c.routing.num_fused_shared_experts == 0, "moe cases take no fused shared experts (routing op only)"
    )
    _require(
        c.routing.tile_tokens_dim is None and c.routing.local_num_experts is None
        and c.routing.local_expert_offset == 0,
        "moe cases shard experts with MoEConfig.local_expert_offset / local_num_experts, not their routing's",
    )
    _require(c.scale_fmt in SCALE_FMTS, f"scale_fmt {c.scale_fmt!r} is not one of {SCALE_FMTS}")
    _require(c.scale_fmt in path.scale_fmts,
             f"scale_fmt {c.scale_fmt!r} needs quant fp8_block (the other paths' scales are their format's)")
    _require(c.expert_weights in EXPERT_WEIGHTS, f"expert_weights {c.expert_weights!r} is not one of {EXPERT_WEIGHTS}")
    _require(c.expert_weights == "prepared" or c.expert_weights in path.weight_forms,
             "expert_weights 'bf16' on the bf16 path are its prepared weights: use 'prepared' (or 'fp32')")


def check_dev_kernel(c):
    """Raise CaseError naming the first violated constraint of a DevKernelConfig (the adapters' own checks)."""
    _require(c.kernel in DEV_KERNELS, f"kernel {c.kernel!r} is not one of {DEV_KERNELS}")
    _require(c.num_tokens >= 1, f"num_tokens={c.num_tokens} must be >= 1 (the kernels take [T >= 1, top_k])")
    _require(1 <= c.top_k <= 64, f"top_k={c.top_k} must be in [1, 64] (finalize's shared-memory tables)")
    _require(c.num_experts >= 1, f"num_experts={c.num_experts} must be >= 1")
    tile = c.tile_tokens_dim
    _require(1 <= tile <= MAX_TILE_TOKENS and tile & (tile - 1) == 0,
             f"tile_tokens_dim={tile} must be a power of two in [1, {MAX_TILE_TOKENS}]")
    _require(c.dtype in DEV_DTYPES, f"dtype {c.dtype!r} is not one of {DEV_DTYPES}")
    _require(c.sf_layout in SF_LAYOUTS, f"sf_layout {c.sf_layout!r} is not one of {SF_LAYOUTS}")
    block = {"activation": 64, "activation_deepseek_fp8": FP8_BLOCK, "convertsf": 16 if c.sf_layout == "R8c16" else 4,
             "permute": FP8_BLOCK if c.dtype == "e4m3" else 1, "finalize": 16,
             "finalize_deepseek_fp8": FP8_BLOCK}[c.kernel]
    _require(c.hidden_size >= 1 and c.hidden_size % block == 0,
             f"hidden_size={c.hidden_size} must be a positive multiple of {block} for {c.kernel} ({c.dtype})")
    _require(c.kernel != "activation" or c.dtype != "e4m3", "activation takes bf16 or fp16 (e4m3: the DeepSeek one)")
    _require(c.kernel != "activation_deepseek_fp8" or c.dtype == "e4m3", "activation_deepseek_fp8 takes e4m3")
    _require(not c.swiglu_controls or c.kernel.startswith("activation"), "swiglu_controls are the activations'")
    _require(c.weighted or c.kernel != "finalize_deepseek_fp8", "finalize_deepseek_fp8 reads its expert weights")
    _require(c.hidden_padding == 0 or (c.kernel == "finalize" and c.hidden_padding > 0 and c.hidden_padding % 16 == 0),
             f"hidden_padding={c.hidden_padding} must be 0, or for finalize a positive multiple of 16 (16-byte rows)")


CHECKS = {"routing": check_routing, "quant": check_quant, "moe": check_moe, "trtllm_ops": check_dev_kernel}


def _config_from_dict(cls, d):
    if not isinstance(d, dict):
        raise CaseError(f"{cls.__name__} must be a JSON object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING}
    unknown, missing = set(d) - names, required - set(d)
    if unknown:
        raise CaseError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
    if missing:
        raise CaseError(f"{cls.__name__}: missing fields {sorted(missing)}")
    d = dict(d)
    for f in fields(cls):
        optional = f.type in ("int | None", int | None)
        if (
            f.name in d
            and (f.type in ("int", int) or (optional and d[f.name] is not None))
            and (not isinstance(d[f.name], int) or isinstance(d[f.name], bool))
        ):
            raise CaseError(f"{cls.__name__}.{f.name} must be an integer{' or null' if optional else ''}, "
                            f"got {d[f.name]!r}")
    if cls is MoEConfig:
        d["routing"] = _config_from_dict(RoutingConfig, d["routing"])
    if "group_mask_value" in d and d["group_mask_value"] is not None:
        d["group_mask_value"] = float(d["group_mask_value"])
    return cls(**d)


def _jsonable(x):
    if isinstance(x, float) and math.isinf(x):
        return "-inf" if x < 0 else "inf"
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    return x


def _unjson(x):
    if x in ("-inf", "inf"):
        return float(x)
    if isinstance(x, dict):
        return {k: _unjson(v) for k, v in x.items()}
    return x


def _is_seed(x):
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63


def _without_late_defaults(d):
    """A config dict without the ROUTING_LATE_DEFAULTS / MOE_LATE_DEFAULTS fields that hold their defaults (nested
    routing too)."""
    if "routing" in d:
        d = {k: v for k, v in d.items() if k not in MOE_LATE_DEFAULTS or v != MOE_LATE_DEFAULTS[k]}
        return {**d, "routing": _without_late_defaults(d["routing"])}
    if "method" not in d:
        return d
    return {k: v for k, v in d.items() if k not in ROUTING_LATE_DEFAULTS or v != ROUTING_LATE_DEFAULTS[k]}


CASE_FIELDS = {"op", "config", "dist", "seed"}
OPTIONAL_CASE_FIELDS = {"weight_seed"}


@dataclass(frozen=True)
class Case:
    op: str
    config: RoutingConfig | QuantConfig | MoEConfig | DevKernelConfig
    dist: str = "normal"
    seed: int = 0
    weight_seed: int | None = None  # moe: the expert weights' seed; None: ``seed``

    def __post_init__(self):
        if self.op not in OPS:
            raise CaseError(f"op {self.op!r} is not one of {OPS}")
        if not isinstance(self.config, CONFIGS[self.op]):
            raise CaseError(f"op {self.op!r} needs a {CONFIGS[self.op].__name__}")
        CHECKS[self.op](self.config)
        _require(_is_seed(self.seed), f"seed={self.seed!r} must be an integer in [0, 2**63)")
        _require(
            self.weight_seed is None or _is_seed(self.weight_seed),
            f"weight_seed={self.weight_seed!r} must be None or an integer in [0, 2**63)",
        )
        _require(
            self.weight_seed is None or self.op == "moe",
            f"weight_seed needs op moe (a {self.op} case has no expert weights)",
        )

    def to_dict(self):
        d = {"op": self.op, "config": _jsonable(_without_late_defaults(asdict(self.config))), "dist": self.dist,
             "seed": self.seed}
        return d if self.weight_seed is None else {**d, "weight_seed": self.weight_seed}

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict) or not CASE_FIELDS <= set(d) <= CASE_FIELDS | OPTIONAL_CASE_FIELDS:
            raise CaseError("a case needs exactly the fields op, config, dist, seed (and optionally weight_seed)")
        if d["op"] not in OPS:
            raise CaseError(f"op {d['op']!r} is not one of {OPS}")
        if not isinstance(d["seed"], int) or isinstance(d["seed"], bool) or d["seed"] < 0:
            raise CaseError("seed must be a non-negative integer")
        config = _config_from_dict(CONFIGS[d["op"]], _unjson(d["config"]))
        return cls(d["op"], config, d["dist"], d["seed"], d.get("weight_seed"))

    def to_json(self):
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))
