"""The case model: an immutable description from which inputs are generated deterministically.

A ``Case`` is (op, config, dist, seed). ``config`` is one of the frozen dataclasses below; ``dist`` names an
input distribution of difftest/generate.py; ``seed`` selects the bits. ``Case.to_json``/``from_json`` round
trip exactly, and unknown or missing fields are one-line errors.
"""

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields

OPS = ("routing", "quant", "moe")
ROUTING_METHODS = ("default", "renormalize", "renormalize_naive", "deepseek_v3", "llama4", "topk",
                   "sigmoid_renorm", "sigmoid", "topk_sigmoid", "minimax2", "deepseek_v2")
ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh", "relu2", "silu", "gelu", "identity")
GATED_ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh")
QUANT_PATHS = ("bf16", "fp8_block", "mxfp8", "nvfp4")
QUANT_SCHEMES = ("fp8_group", "mxfp8", "nvfp4")
SCALE_LAYOUTS = ("row", "col", "col_tma", "ue8m0_packed")


class CaseError(ValueError):
    """A case or configuration that violates a constraint; the message names it."""


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


@dataclass(frozen=True)
class QuantConfig:
    scheme: str  # fp8_group | mxfp8 | nvfp4
    num_tokens: int
    hidden_size: int
    group_size: int = 128
    input_dtype: str = "bf16"
    variant: str = "div"
    scale_formula: str = "div448"
    scale_fmt: str = "fp32"  # fp32 | ue8m0
    layout: str = "row"
    mx_rule: str = "ocp"  # mxfp8 scale rule: ocp | ceil448


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

    @property
    def gated(self):
        return self.activation in GATED_ACTIVATIONS


CONFIGS = {"routing": RoutingConfig, "quant": QuantConfig, "moe": MoEConfig}


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


@dataclass(frozen=True)
class Case:
    op: str
    config: RoutingConfig | QuantConfig | MoEConfig
    dist: str = "normal"
    seed: int = 0

    def __post_init__(self):
        if self.op not in OPS:
            raise CaseError(f"op {self.op!r} is not one of {OPS}")
        if not isinstance(self.config, CONFIGS[self.op]):
            raise CaseError(f"op {self.op!r} needs a {CONFIGS[self.op].__name__}")

    def to_dict(self):
        return {"op": self.op, "config": _jsonable(asdict(self.config)), "dist": self.dist, "seed": self.seed}

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict) or set(d) != {"op", "config", "dist", "seed"}:
            raise CaseError("a case needs exactly the fields op, config, dist, seed")
        if d["op"] not in OPS:
            raise CaseError(f"op {d['op']!r} is not one of {OPS}")
        if not isinstance(d["seed"], int) or isinstance(d["seed"], bool) or d["seed"] < 0:
            raise CaseError("seed must be a non-negative integer")
        return cls(d["op"], _config_from_dict(CONFIGS[d["op"]], _unjson(d["config"])), d["dist"], d["seed"])

    def to_json(self):
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))
