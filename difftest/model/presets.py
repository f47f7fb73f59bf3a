"""Model presets: the MoE configuration of released models, one row each with its source, for
`python -m difftest fuzz --model NAME`.

A preset fixes what defines the model's numerics (routing method, experts, top-k, groups, scaling factor,
activation, quant path) and lets Hypothesis draw the rest (tokens, distributions, seeds, logit/bias dtypes).
Hidden and intermediate sizes are scaled down by default to at most MODEL_HIDDEN / MODEL_INTERMEDIATE
(the settings model_hidden, default 256, and model_intermediate, default 128; kept multiples of the quant
block), because the bound scales with the sizes and the bugs these presets target live in routing, layouts
and rounding points, not in GEMM length; --set model_full=1 uses the real sizes (slow on CPU).

Against an implementation, a preset's draws are narrowed to what the implementation states it takes (its ``space``,
difftest/model/where.py; difftest/running/run.py campaign_cells): a preset draws eps, rsf_placement and T = 0 freely,
and the trtllm-gen adapters' eps of 1e-20, rsf applied in routing and T >= 1 replace them, so a preset campaign
compares what it draws instead of declining it (tests/impls/test_adapter_search_fit.py).

A preset with ``fixed_weights`` (mono-moe) keeps its expert weights for the whole campaign: its moe cases
take them from WEIGHT_SEED (the setting weight_seed, default 0) instead of each case's seed, while tokens and
logits still vary per case (``weight_seed(name)``; the campaign passes it to strategies.cases).
"""

from typing import NamedTuple

from hypothesis import strategies as st

from impls.flashinfer.mono_moe import SCORING as MONO_SCORING
from spec.quant import QUANT_TABLE
from spec.routing import METHODS

from .case import SIZE_STEPS, MoEConfig, QuantConfig, RoutingConfig
from .settings import get as setting
from .strategies import num_tokens

MODEL_HIDDEN = setting("model_hidden")
MODEL_INTERMEDIATE = setting("model_intermediate")
MODEL_FULL = setting("model_full")
MODEL_MAX_TOKENS = setting("model_max_tokens")
WEIGHT_SEED = setting("weight_seed")


class Preset(NamedTuple):
    method: str
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    source: str
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float | None = None
    biased: bool = False
    activation: str = "swiglu"
    quant: str = "bf16"
    router_weight_on_input: bool = False
    fixed_weights: bool = False  # moe cases take their expert weights from WEIGHT_SEED, not the case seed


HF = "https://huggingface.co/{}/blob/main/config.json"
PRESETS = {
    "deepseek-v3": Preset(method="deepseek_v3", num_experts=256, top_k=8, n_group=8, topk_group=4,
        routed_scaling_factor=2.5, biased=True, quant="fp8_block", hidden_size=7168, intermediate_size=2048,
        source=HF.format("deepseek-ai/DeepSeek-V3")),
    "deepseek-r1": Preset(method="deepseek_v3", num_experts=256, top_k=8, n_group=8, topk_group=4,
        routed_scaling_factor=2.5, biased=True, quant="fp8_block", hidden_size=7168, intermediate_size=2048,
        source=HF.format("deepseek-ai/DeepSeek-R1")),
    # The MTP draft layer (num_nextn_predict_layers = 1) is unquantized BF16 (docs/semantics.md §5.5).
    "deepseek-v3-mtp": Preset(method="deepseek_v3", num_experts=256, top_k=8, n_group=8, topk_group=4,
        routed_scaling_factor=2.5, biased=True, hidden_size=7168, intermediate_size=2048,
        source=HF.format("deepseek-ai/DeepSeek-V3")),
    "glm-4.5": Preset(method="deepseek_v3", num_experts=160, top_k=8, routed_scaling_factor=2.5, biased=True,
        hidden_size=5120, intermediate_size=1536, source=HF.format("zai-org/GLM-4.5")),
    # GLM-5.x: 256 experts, top-8, n_group 1, large biases (K5, difftest/selftest/known_bugs.py).
    "glm-5": Preset(method="deepseek_v3", num_experts=256, top_k=8, routed_scaling_factor=2.5, biased=True,
        quant="fp8_block", hidden_size=6144, intermediate_size=2048, source=HF.format("zai-org/GLM-5")),
    "nemotron-h": Preset(method="deepseek_v3", num_experts=128, top_k=6, routed_scaling_factor=2.5, biased=True,
        activation="relu2", hidden_size=2688, intermediate_size=1856,
        source=HF.format("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")),
    "qwen3-moe": Preset(method="renormalize", num_experts=128, top_k=8, hidden_size=2048, intermediate_size=768,
        source=HF.format("Qwen/Qwen3-30B-A3B")),
    "llama-4": Preset(method="llama4", num_experts=16, top_k=1, hidden_size=5120, intermediate_size=8192,
        router_weight_on_input=True, source=HF.format("meta-llama/Llama-4-Scout-17B-16E")),
    "mixtral": Preset(method="renormalize", num_experts=8, top_k=2, hidden_size=4096, intermediate_size=14336,
        source=HF.format("mistralai/Mixtral-8x7B-v0.1")),
}
QUANT_SCHEME = {name: path.scheme for name, path in QUANT_TABLE.items() if path.scheme}  # the quant op of a path

# FlashInfer mono_moe (impls/flashinfer/mono_moe.py): one fixed shape, always at its real sizes (the kernel
# refuses any other), T ≤ 8, bf16 logits, no bias / groups / routed scaling, [gate; up] rows, block FP8.
# The adapter takes all 256 experts stacked (768 MiB, 15 s or more to generate on one core): the weights
# are fixed for the campaign (fixed_weights), so they are generated and uploaded to the GPU once per process.
# Per-case spec cost is capped by the kernel's own limits: ≤ 8 tokens × top_k ≤ 8 experts, each expert's
# weights generated on demand and cached (≈ 4 s per case for recipe + ideal on one CPU core while cold).
MONO_MOE = "mono-moe"
MONO_METHODS = tuple(MONO_SCORING)  # the routing methods the kernel takes
MONO_MAX_TOKENS = setting("mono_max_tokens")
PRESETS[MONO_MOE] = Preset(
    method="renormalize",  # one of MONO_METHODS, drawn per case
    num_experts=256,
    top_k=8,  # the largest top_k; 1..8 drawn
    n_group=1,
    topk_group=1,
    routed_scaling_factor=None,
    biased=False,
    activation="swiglu",
    quant="fp8_block",
    hidden_size=2048,
    intermediate_size=512,
    router_weight_on_input=False,
    source="https://github.com/flashinfer-ai/flashinfer (0.7.2.post1 fused_moe/monomoe.py: E=256, I=512, H=2048, T<=8)",
    fixed_weights=True,
)


# FlashInfer's trtllm-gen routing stage (impls/flashinfer/trtllm_gen_routing.py): every RoutingMethodType it
# runs, within the kernels' limits, with the permutation it hands to the GEMMs (a tile_tokens_dim of 8…128 and
# expert-parallel shards), fused shared experts on the grouped DeepSeekV3 path, and token counts up to
# TRTLLM_GEN_MAX_TOKENS that reach every kernel path: TRTLLM_GEN_TOKEN_EDGES are the thresholds at which the
# runner switches path (docs/trtllm_gen_routing.md), each drawn with its neighbours.
TRTLLM_GEN_ROUTING = "trtllm-gen-routing"
TRTLLM_GEN_METHODS = ("deepseek_v3", "minimax2", "default", "renormalize", "renormalize_naive", "topk",
                      "sigmoid_renorm", "sigmoid", "topk_sigmoid", "llama4")
TRTLLM_GEN_MAX_TOKENS = setting("trtllm_gen_max_tokens")
TRTLLM_GEN_TOKEN_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
TRTLLM_GEN_EXPERTS = ((256, 8, 4), (256, 1, 1), (384, 1, 1), (512, 1, 1), (128, 8, 4), (160, 1, 1), (128, 1, 1),
                      (64, 4, 2), (64, 8, 4), (72, 8, 3), (32, 4, 4), (16, 1, 1), (8, 1, 1))
PRESETS[TRTLLM_GEN_ROUTING] = Preset(
    method="deepseek_v3", num_experts=256, top_k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5, biased=True,
    activation="swiglu", quant="bf16", hidden_size=7168, intermediate_size=2048, router_weight_on_input=False,
    source="https://github.com/flashinfer-ai/flashinfer (0.7.2.post1 fused_moe/trtllm_gen_routing.py: Routing::Runner)",
)


def trtllm_gen_tokens():
    """T in [1, TRTLLM_GEN_MAX_TOKENS]: the path thresholds ± 1, or log-uniform (every octave as likely)."""
    top = TRTLLM_GEN_MAX_TOKENS
    edges = sorted({n for e in TRTLLM_GEN_TOKEN_EDGES for n in (e - 1, e, e + 1) if 1 <= n <= top})
    octave = st.integers(0, max(0, top.bit_length() - 1)).flatmap(
        lambda b: st.integers(1 << b, min(top, (2 << b) - 1)))
    return st.one_of(st.sampled_from(edges), octave)


@st.composite
def _trtllm_gen_routing(draw):
    from impls.flashinfer.trtllm_gen_routing import MAX_EXPERTS

    method = draw(st.sampled_from(TRTLLM_GEN_METHODS), label="method")
    E, G, tg = draw(st.sampled_from([e for e in TRTLLM_GEN_EXPERTS
                                     if e[0] <= MAX_EXPERTS[method] or e[1] > 1 and method == "deepseek_v3"]),
                    label="experts")
    if method != "deepseek_v3":
        G = tg = 1
    grouped = G > 1
    most = min(8, E - 1, tg * (E // G) - 1 if grouped else E)
    k = 1 if method == "llama4" else draw(st.integers(1, most), label="top_k")
    row = METHODS[method]
    biased = row.biased
    renorm = biased or method == "sigmoid_renorm" and draw(st.booleans(), label="renormalize")
    shared = draw(st.integers(0, 2), label="shared") if grouped else 0
    tile = draw(st.sampled_from([8, 16, 32, 64, 128]), label="tile_tokens_dim")
    offset, local = 0, None
    if draw(st.integers(0, 2), label="expert_parallel") == 0:
        local = draw(st.integers(1, E), label="local_num_experts")
        offset = draw(st.integers(0, E - local), label="local_expert_offset")
    return RoutingConfig(
        method=method, num_tokens=draw(trtllm_gen_tokens(), label="num_tokens"), num_experts=E, top_k=k,
        n_group=G, topk_group=tg,
        routed_scaling_factor=draw(st.sampled_from([None, 1.0, 2.5, 2.826]), label="rsf") if biased else None,
        renormalize=renorm or row.normalizes != "if_renormalize",
        eps=1e-20 if row.keys == "sigmoid" and row.normalizes != "none" else 0.0,  # its σ kernels that renormalize
        logits_dtype=draw(st.sampled_from(["fp32", "bf16"]), label="logits_dtype"),
        bias_dtype=draw(st.sampled_from([None, "fp32", "fp32", "bf16"] if G > 1 else ["fp32", "fp32", "bf16"]),
                        label="bias_dtype") if biased else None,
        num_fused_shared_experts=shared, tile_tokens_dim=tile, local_expert_offset=offset, local_num_experts=local,
    )


def weight_seed(name):
    """The expert-weight seed shared by preset ``name``'s moe cases, or None: weights from each case's seed."""
    if not PRESETS[name].fixed_weights:
        return None
    return WEIGHT_SEED


def _scaled(size, limit, block):
    return size if MODEL_FULL else max(block, min(size, limit) // block * block)


@st.composite
def _routing(draw, p, T):
    return RoutingConfig(
        method=p.method,
        num_tokens=draw(T, label="num_tokens"),
        num_experts=p.num_experts,
        top_k=p.top_k,
        n_group=p.n_group,
        topk_group=p.topk_group,
        routed_scaling_factor=p.routed_scaling_factor,
        renormalize=True,
        eps=draw(st.sampled_from([0.0, 1e-20]), label="eps"),
        logits_dtype=draw(st.sampled_from(["fp32", "bf16"]), label="logits_dtype"),
        bias_dtype=draw(st.sampled_from(["fp32", "bf16"]), label="bias_dtype") if p.biased else None,
    )


@st.composite
def _moe(draw, p):
    block = SIZE_STEPS[p.quant]
    H = _scaled(p.hidden_size, MODEL_HIDDEN, block)
    I = _scaled(p.intermediate_size, MODEL_INTERMEDIATE, block)
    return MoEConfig(
        routing=draw(_routing(p, num_tokens(MODEL_MAX_TOKENS))),
        hidden_size=draw(st.sampled_from(sorted({H, max(block, H - block)})), label="hidden_size"),
        intermediate_size=I,
        activation=p.activation,
        quant=p.quant,
        rsf_placement="routing"
        if p.router_weight_on_input
        else draw(st.sampled_from(["routing", "combine"]), label="rsf_placement"),
        router_weight_on_input=p.router_weight_on_input,
    )


@st.composite
def _quant(draw, p):
    scheme = QUANT_SCHEME[p.quant]
    H = _scaled(p.hidden_size, MODEL_HIDDEN, SIZE_STEPS[p.quant])
    return QuantConfig(
        scheme=scheme,
        num_tokens=draw(num_tokens(), label="num_tokens"),
        hidden_size=H,
        scale_fmt=draw(st.sampled_from(["fp32", "ue8m0"]), label="scale_fmt")
        if scheme == "fp8_group"
        else "fp32",
    )


@st.composite
def _mono_routing(draw, T):
    return RoutingConfig(
        method=draw(st.sampled_from(MONO_METHODS), label="method"),
        num_tokens=draw(T, label="num_tokens"),
        num_experts=PRESETS[MONO_MOE].num_experts,
        top_k=draw(st.integers(1, PRESETS[MONO_MOE].top_k), label="top_k"),
        renormalize=True,
        eps=0.0,
        logits_dtype="bf16",
    )


@st.composite
def _mono_moe(draw):
    p = PRESETS[MONO_MOE]
    return MoEConfig(
        routing=draw(_mono_routing(num_tokens(MONO_MAX_TOKENS))),
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        activation="swiglu",
        half_order="gate_up",
        quant="fp8_block",
    )


def configs(name, op):
    """Strategy of `op` configurations around preset `name`; None when the model has no such op (bf16: no
    quantizer; no preset configures the trtllm-gen dev kernels, whose op has its own config)."""
    p = PRESETS[name]
    if name == TRTLLM_GEN_ROUTING:
        return _trtllm_gen_routing() if op == "routing" else None
    if name == MONO_MOE:
        mono = {"routing": _mono_routing(num_tokens(MONO_MAX_TOKENS)), "moe": _mono_moe()}
        return mono.get(op, _quant(p) if op == "quant" else None)
    if op == "routing":
        return _routing(p, num_tokens())
    if op == "moe":
        return _moe(p)
    return _quant(p) if op == "quant" and p.quant in QUANT_SCHEME else None


def space(name, op):
    """{field: where.Constraint}: the values preset ``name`` draws for the fields it fixes or narrows, per op
    (the report greys the values outside them instead of marking them never hit). An op the preset does not
    run gets {}. tests/difftest/readers/test_report.py draws from configs() and checks that nothing falls outside."""
    from .where import Constraint

    p = PRESETS[name]
    if configs(name, op) is None:
        return {}

    def one(*values):
        return Constraint(tuple(values))

    if name == TRTLLM_GEN_ROUTING:
        return {"method": one(*TRTLLM_GEN_METHODS), "num_experts": one(*sorted({e for e, _, _ in TRTLLM_GEN_EXPERTS})),
                "top_k": Constraint(None, 1, 8), "logits_dtype": one("fp32", "bf16"),
                "num_tokens": Constraint(None, 1, TRTLLM_GEN_MAX_TOKENS), "tile_tokens_dim": one(8, 16, 32, 64, 128)}
    routing = {"method": one(p.method), "num_experts": one(p.num_experts), "top_k": one(p.top_k),
               "logits_dtype": one("fp32", "bf16"), "bias_dtype": one("fp32", "bf16") if p.biased else one(None)}
    if name == MONO_MOE:
        routing.update(method=one(*MONO_METHODS), top_k=Constraint(None, 1, p.top_k), logits_dtype=one("bf16"),
                       num_tokens=Constraint(None, 0, MONO_MAX_TOKENS))
    if op == "routing":
        return {**routing, "tile_tokens_dim": one(None)}
    if op == "moe":
        block = SIZE_STEPS[p.quant]
        H, I = _scaled(p.hidden_size, MODEL_HIDDEN, block), _scaled(p.intermediate_size, MODEL_INTERMEDIATE, block)
        sizes = {"num_tokens": Constraint(None, 0, MODEL_MAX_TOKENS),
                 "hidden_size": one(*sorted({H, max(block, H - block)})), "intermediate_size": one(I)}
        if name == MONO_MOE:  # always at the kernel's real sizes
            sizes = {"hidden_size": one(p.hidden_size), "intermediate_size": one(p.intermediate_size)}
        return {**routing, **sizes, "activation": one(p.activation), "quant": one(p.quant),
                "hidden_dtype": one("bf16"), "scale_fmt": one("fp32"), "expert_weights": one("prepared")}
    scheme = QUANT_SCHEME[p.quant]
    return {"scheme": one(scheme), "hidden_size": one(_scaled(p.hidden_size, MODEL_HIDDEN, SIZE_STEPS[p.quant])),
            "input_dtype": one("bf16"), "variant": one("div"), "layout": one("row"),
            "scale_fmt": one("fp32", "ue8m0") if scheme == "fp8_group" else one("fp32")}
