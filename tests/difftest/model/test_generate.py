"""difftest.model.case and difftest.model.generate: validation, JSON round trip, bit-exact generation, distributions."""

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given

from difftest.model import generate, strategies
from difftest.model.case import QUANT_PATHS, SIZE_STEPS, Case, CaseError, MoEConfig, QuantConfig, RoutingConfig

DS = RoutingConfig("deepseek_v3", 4, 16, 4, 4, 2, 2.5, bias_dtype="fp32")

# SHA-256 of the inputs, pinned: a change means every recorded fixture's inputs changed (generator drift).
PINNED = [
    (Case("routing", DS, "glm_bias", 7), "52228431e4796ba7ba755a02fbd64d4f0a7254d8e6519b6624a8709fcdff27cc"),
    (
        Case("routing", RoutingConfig("renormalize", 3, 8, 2, logits_dtype="bf16"), "near_ties", 1),
        "413cdbd6f35b50826fde3cd92be6fbe10a0472498a6007aaecfd22b4f2e88b77",
    ),
    (
        Case("quant", QuantConfig("fp8_group", 2, 256), "pow2_edge", 3),
        "b236c033cac86aef51d7f362057beb99644d605c21737d2dfba8bd03fb8aef1a",
    ),
    (
        Case("moe", MoEConfig(RoutingConfig("topk", 2, 4, 2), 32, 16), "normal", 5),
        "ea87bb93862dc87d6885751846a8f4b96e4e0ac03f4022ffde72b9a978848b4f",
    ),
    (  # inputs/2: the logits' magnitudes too
        Case("moe", MoEConfig(RoutingConfig("topk", 2, 4, 2), 32, 16), "nonneg", 5),
        "730a2d9651c2f33e3d9352244be55f0aae745450cc8e928c296b3dbd91f51f73",
    ),
    (  # the hidden states and logits of "normal"; only the expert weights differ
        Case("moe", MoEConfig(RoutingConfig("topk", 2, 4, 2), 32, 16), "sparse", 5),
        "ea87bb93862dc87d6885751846a8f4b96e4e0ac03f4022ffde72b9a978848b4f",
    ),
]


@pytest.mark.parametrize(
    "case, sha", PINNED, ids=lambda x: x.op + "-" + x.dist if isinstance(x, Case) else ""
)
def test_inputs_digest_pinned(case, sha):
    assert generate.digest(generate.inputs(case)) == sha


def test_expert_weights_digest_pinned_and_independent_of_expert_count():
    def w(E):
        return generate.weights(
            Case("moe", MoEConfig(RoutingConfig("topk", 2, E, 2), 128, 128, quant="fp8_block"), "normal", 5)
        )

    assert (
        generate.digest(w(4).expert(3)) == "0b6efcfd1d76897bae21bc73e74c9c56ac2a2fa4a3e6e87dcbad95d7129bf6ed"
    )
    assert generate.digest(w(64).expert(3)) == generate.digest(w(4).expert(3))
    assert generate.digest(w(4).expert(2)) != generate.digest(w(4).expert(3))
    sparse = generate.weights(Case("moe", MoEConfig(RoutingConfig("topk", 2, 4, 2), 128, 128, quant="fp8_block"),
                                   "sparse", 5))
    assert generate.digest(sparse.expert(3)) == "b3f283d4dc2d44ea3e7da20f76ef847c9093e57d75d54288021401356f80eaa3"


@given(strategies.cases())
def test_inputs_are_a_pure_function_of_the_case(case):
    a, b = generate.inputs(case), generate.inputs(Case.from_json(case.to_json()))
    assert generate.digest(a) == generate.digest(b)


@given(strategies.cases())
def test_case_json_round_trip(case):
    assert Case.from_json(case.to_json()) == case


def test_normal_is_standardized_and_bounded():
    z = generate.normal(0, "x", (200_000,))
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert np.abs(z).max() <= 2 * math.sqrt(3)


def test_bf16_rounding_is_round_to_nearest_even():
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20, -1 - 2.0**-8], np.float32)
    assert generate.round_bf16(x).tolist() == [1.0, 1 + 2.0**-6, 1 + 2.0**-7, -1.0]


def test_exact_ties_and_glm_bias_have_ties():
    ties = generate.inputs(Case("routing", RoutingConfig("sigmoid", 4, 32, 4), "exact_ties", 0))["logits"]
    assert all(len(np.unique(row)) < 32 for row in ties)
    glm = generate.inputs(Case("routing", DS, "glm_bias", 0))
    assert len(np.unique(glm["bias"])) < 16 and np.all(glm["bias"] > 11)
    s = (1 / (1 + np.exp(-glm["logits"].astype(np.float64)))).astype(np.float32)
    assert np.all(s + glm["bias"] == glm["bias"][None, :])  # the sigmoid vanishes below the bias' ulp (K5)


def test_underflow_rows_are_below_expf_range():
    x = generate.inputs(Case("routing", RoutingConfig("sigmoid_renorm", 16, 8, 2), "underflow", 2))["logits"]
    deep = np.all(x < -88.8, axis=1)
    assert deep.any() and (~deep).any()


def test_pow2_edge_group_amax_is_448_or_450_times_power_of_two():
    x = generate.inputs(Case("quant", QuantConfig("fp8_group", 4, 512), "pow2_edge", 1))["x"]
    amax = np.abs(x.reshape(4, 4, 128)).max(axis=-1)
    m, _ = np.frexp(amax.astype(np.float64))  # 448 = 0.875·2^9, 450 = 0.87890625·2^9
    assert set(np.unique(m).tolist()) <= {0.875, 450 / 512}


@pytest.mark.parametrize("formula", ["div448", "mul_rcp448"])
def test_pow2_edge_fp32_scale_lands_one_ulp_above_a_power_of_two(formula):
    """K14: float log2 of an fp32 scale one ulp above 2^k (k >= 4 or k <= -5) rounds to k: the ceil misses."""
    from spec.quant import FP8_MAX, RCP448, ue8m0_ceil, ue8m0_ceil_log2

    case = Case("quant", QuantConfig("fp8_group", 8, 512, input_dtype="fp32"), "pow2_edge", 1)
    x = generate.inputs(case)["x"]
    amax = np.abs(x.reshape(8, 4, 128)).max(axis=-1)
    s = amax / FP8_MAX if formula == "div448" else amax * RCP448
    assert (ue8m0_ceil(s) != ue8m0_ceil_log2(s)).any()


def test_zero_groups_are_all_zero():
    x = generate.inputs(Case("quant", QuantConfig("fp8_group", 8, 512), "zero_group", 1))["x"]
    assert (np.abs(x.reshape(8, 4, 128)).max(axis=-1) == 0).any()


@pytest.mark.parametrize(
    "config, message",
    [
        (RoutingConfig("deepseek_v3", 1, 10, 2, 4, 2), "^n_group=4 must be an integer >= 1 dividing num_experts=10$"),
        (RoutingConfig("renormalize", 1, 8, 9), "top_k=9"),
        (RoutingConfig("renormalize", 1, 8, 2, bias_dtype="fp32"), "correction bias"),
        (RoutingConfig("llama4", 1, 8, 2), "top_k=2 must be 1: llama4 routes to exactly one expert"),
        (RoutingConfig("sigmoid", -1, 8, 2), "num_tokens"),
        (QuantConfig("fp8_group", 2, 200), "multiple of the fp8_group block 128"),
        (QuantConfig("fp8_group", 2, 256, scale_fmt="ue8m0", layout="col"), "ue8m0"),
        (MoEConfig(RoutingConfig("topk", 1, 8, 2), 64, 64, local_expert_offset=8), "local_expert_offset"),
        (MoEConfig(RoutingConfig("topk", 1, 8, 2), 48, 64, quant="mxfp8"), "multiples of 32"),
    ],
)
def test_bad_configs_are_one_line_errors(config, message):
    op = {RoutingConfig: "routing", QuantConfig: "quant", MoEConfig: "moe"}[type(config)]
    with pytest.raises(CaseError, match=message) as e:
        Case(op, config)
    assert "\n" not in str(e.value)


def test_bad_json_fields_are_errors():
    d = Case("routing", DS).to_dict()
    with pytest.raises(CaseError, match="unknown fields"):
        Case.from_dict({**d, "config": {**d["config"], "topk": 3}})
    with pytest.raises(CaseError, match="must be an integer"):
        Case.from_dict({**d, "config": {**d["config"], "top_k": 2.5}})
    with pytest.raises(CaseError, match="unknown routing distribution|is not one of"):
        generate.inputs(Case("routing", DS, "bogus", 0))


def small_enough(c):
    """Whether a moe configuration keeps the rest small where one of its sizes is large (strategies.moe_configs)."""
    S = strategies
    H, I, T, E = c.hidden_size, c.intermediate_size, c.routing.num_tokens, c.routing.num_experts
    narrow = max(H, I) <= max(S.MOE_MANY_EXPERTS_SIZE, max(SIZE_STEPS.values()))  # fp8_block's least is 128
    if S.model_width("moe", c) and H > S.MOE_MODEL_HIDDEN:
        return H <= S.MOE_FULL_HIDDEN and 2 <= T <= S.MOE_FULL_MAX_TOKENS and I <= S.MOE_FULL_INTERMEDIATE and (
            E <= S.MOE_MODEL_MAX_EXPERTS)
    if S.model_width("moe", c):
        return T <= S.MOE_MODEL_MAX_TOKENS and E <= S.MOE_MODEL_MAX_EXPERTS
    if E > S.MOE_MAX_EXPERTS:  # the kernels' expert counts
        return narrow and T <= S.MOE_MAX_TOKENS and E <= S.MOE_MANY_MAX_EXPERTS
    if T > S.MOE_MAX_TOKENS:  # the kernels' token counts
        return narrow and T <= S.MOE_MANY_MAX_TOKENS
    if max(H, I) > S.MOE_MAX_SIZE:  # wide: several K blocks
        return H <= S.MOE_WIDE_SIZE and T <= S.MOE_WIDE_MAX_TOKENS and E <= S.MOE_WIDE_MAX_EXPERTS
    return True


REGIMES = {"wide": lambda c: 128 < c.hidden_size <= strategies.MOE_WIDE_SIZE and c.intermediate_size > 128,
           "model width": lambda c: strategies.MOE_MODEL_MIN_HIDDEN <= c.hidden_size <= strategies.MOE_MODEL_HIDDEN,
           "full width": lambda c: c.hidden_size > strategies.MOE_MODEL_HIDDEN,
           "kernel expert counts": lambda c: c.routing.num_experts >= 128,
           "kernel token counts": lambda c: c.routing.num_tokens >= 64, "top_k above 8": lambda c: c.routing.top_k > 8,
           "one-expert groups": lambda c: c.routing.n_group == c.routing.num_experts > 1}


@pytest.mark.parametrize("regime", REGIMES)
def test_layers_are_sometimes_wide_of_model_width_or_at_the_kernels_limits(regime):
    """fp8_block scales and the per-block accumulation order need K > 128 (wide layers, quantized paths); errors
    that grow with K need model widths (K >= 512, every path, bf16 included), up to DeepSeek-V3's 7,168 with two
    tokens or more; kernels branch on expert and token counts, top_k and one-expert groups: each drawn, and the
    widths on every path they apply to, and what is drawn there keeps the rest small (small_enough)."""
    from hypothesis import Phase, find, settings

    first = settings(max_examples=3000, database=None, phases=[Phase.generate], derandomize=True)
    paths = {"wide": QUANT_PATHS[1:], "model width": QUANT_PATHS, "full width": QUANT_PATHS}.get(regime, [None])
    for quant in paths:
        assert small_enough(find(strategies.moe_configs(quant=quant), REGIMES[regime], settings=first))


def test_the_regimes_of_the_layer_keep_the_rest_small():
    """In 1,000 derandomized moe draws each large size keeps the others small (small_enough), and model-width cases
    draw only MODEL_WIDTH_DISTS."""
    from hypothesis import HealthCheck, settings

    @settings(max_examples=1000, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategies.cases(op="moe"))
    def draw(case):
        assert small_enough(case.config), case.config
        assert not strategies.model_width("moe", case.config) or case.dist in strategies.MODEL_WIDTH_DISTS, case

    draw()


@pytest.mark.parametrize("name, condition", [
    ("every expert tier and its neighbours", None),
    ("DeepSeek-V3's 256 experts in 8 groups", lambda c: (c.num_experts, c.n_group) == (256, 8)),
    ("one-expert groups", lambda c: c.n_group == c.num_experts > 1),
    ("top_k at the kernels' 32", lambda c: c.top_k == strategies.MAX_TOP_K),
    ("T either side of 8,192", lambda c: c.num_tokens == 8193),
    ("T either side of 1,024 with 256 experts or more", lambda c: c.num_tokens == 1025 and c.num_experts >= 256),
])
def test_routing_reaches_the_kernels_limits(name, condition):
    """docs/trtllm_gen_routing.md §5-6: tiers of 128, 160, 256, 384 and 512 experts, top_k up to 32, the token
    counts where the kernels change path (strategies.PATH_TOKENS)."""
    from hypothesis import Phase, find, settings

    first = settings(max_examples=5000, database=None, phases=[Phase.generate], derandomize=True)
    conditions = [condition] if condition else [lambda c, n=n: c.num_experts == n for n in strategies.kernel_experts()]
    for cond in conditions:
        find(strategies.routing_configs(), cond, settings=first)


def test_dev_kernels_reach_finalize_edges():
    """The finalize kernels switch at ceil(H/256)·T = 1184 and take top_k up to 64 (derandomized: top_k = 64 is one
    draw in some 430, and a random run of 3,000 examples missed it once)."""
    from hypothesis import Phase, find, settings

    first = settings(max_examples=3000, database=None, phases=[Phase.generate], derandomize=True)

    def grid(c, tokens):
        return -(-c.hidden_size // 256) * tokens < strategies.FINALIZE_SMALL_GRID

    for side in (True, False):  # the last T of the small grid, the first past it
        find(strategies.dev_kernel_configs("finalize"), lambda c, side=side: grid(c, c.num_tokens) == side and grid(
            c, c.num_tokens + (1 if side else -1)) != side, settings=first)
    find(strategies.dev_kernel_configs(), lambda c: c.top_k == strategies.DEV_MAX_TOP_K, settings=first)


@pytest.mark.parametrize("op", ["routing", "quant", "moe"])
def test_cases_without_tokens_are_few_and_never_the_simplest(op):
    """A case without tokens computes nothing: at most one draw in 20 of each op's strategy (ZERO_TOKEN_ODDS), and
    not the simplest draw, with which Hypothesis starts each run (a timed campaign's every turn)."""
    from hypothesis import HealthCheck, settings

    tokens = []

    @settings(max_examples=400, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategies.CONFIG_STRATEGIES[op]())
    def draw(config):
        tokens.append(getattr(config, "routing", config).num_tokens)

    draw()
    assert tokens[0] == 1 and 0 < tokens.count(0) <= len(tokens) / 20, (op, tokens[:3], tokens.count(0), len(tokens))


def test_fused_kernel_adapters_get_the_stacked_expert_weights():
    from difftest.checking.interface import with_stacked_weights

    case = Case("moe", MoEConfig(RoutingConfig("renormalize", 2, 4, 2), 32, 16, quant="fp8_block"), "normal", 3)
    full = with_stacked_weights(case, generate.inputs(case))
    w = generate.weights(case)
    assert full["w13"].shape == (4, 32, 32) and full["w13_scale"].shape[0] == 4
    for e in range(4):
        for key, value in w.expert(e).items():
            np.testing.assert_array_equal(full[key][e], value)
    routing = Case("routing", RoutingConfig("renormalize", 2, 4, 2), "normal", 3)
    assert with_stacked_weights(routing, generate.inputs(routing)).keys() == generate.inputs(routing).keys()


# ---- weight seeds: presets that keep the expert weights fixed for a campaign (mono-moe)

SMALL_MOE = MoEConfig(RoutingConfig("renormalize", 2, 4, 2), 32, 16, quant="fp8_block")
W_KEYS = ("w13", "w13_scale", "w2", "w2_scale")


def test_weight_seed_fixes_the_weights_and_defaults_to_the_case_seed():
    from difftest.store.fixtures import weights_digest

    a, b = Case("moe", SMALL_MOE, "normal", 1, weight_seed=0), Case("moe", SMALL_MOE, "normal", 2, weight_seed=0)
    assert weights_digest(a) == weights_digest(b) == weights_digest(Case("moe", SMALL_MOE, "normal", 0))
    assert generate.digest(generate.inputs(a)) != generate.digest(generate.inputs(b))
    assert weights_digest(Case("moe", SMALL_MOE, "normal", 1)) != weights_digest(a)


def test_case_json_round_trips_the_weight_seed_and_old_cases_load_as_before():
    fixed = Case("moe", SMALL_MOE, "normal", 7, weight_seed=3)
    assert fixed.to_dict()["weight_seed"] == 3 and Case.from_json(fixed.to_json()) == fixed
    old = Case("moe", SMALL_MOE, "normal", 7).to_dict()
    assert "weight_seed" not in old  # the JSON of a case without one is unchanged: fixture ids stay
    loaded = Case.from_dict(old)
    assert loaded.weight_seed is None and generate.weights(loaded).seed == 7


@pytest.mark.parametrize(
    "op, config, weight_seed, message",
    [
        ("routing", RoutingConfig("topk", 2, 4, 2), 0, "weight_seed needs op moe"),
        ("moe", SMALL_MOE, -1, "weight_seed=-1 must be None or an integer"),
        ("moe", SMALL_MOE, 2**63, "must be None or an integer in"),
        ("moe", SMALL_MOE, True, "weight_seed=True"),
        ("moe", SMALL_MOE, "0", "weight_seed='0'"),
    ],
)
def test_bad_weight_seeds_are_one_line_errors(op, config, weight_seed, message):
    with pytest.raises(CaseError, match=message) as e:
        Case(op, config, "normal", 0, weight_seed)
    assert "\n" not in str(e.value)
    with pytest.raises(CaseError, match="exactly the fields"):
        Case.from_dict({**Case("moe", SMALL_MOE).to_dict(), "weights_seed": 0})


@given(strategies.cases(weight_seed=5))
def test_a_campaign_weight_seed_goes_to_moe_cases_only(case):
    assert case.weight_seed == (5 if case.op == "moe" else None)


def test_fixed_weights_keep_their_sign_and_free_weights_reach_nonneg():
    """A campaign with fixed expert weights never draws a distribution that changes them (nonneg): its adapters
    prepare one set of weights once; without a weight seed nonneg is drawn."""
    from hypothesis import find, settings
    from hypothesis.errors import NoSuchExample

    quick = settings(max_examples=300, database=None)
    assert find(strategies.cases("moe"), lambda c: c.dist == "nonneg", settings=quick).dist == "nonneg"
    with pytest.raises(NoSuchExample):
        find(strategies.cases("moe", weight_seed=5), lambda c: c.dist in strategies.WEIGHT_DISTS, settings=quick)


@pytest.mark.parametrize("quant,given", [("bf16", "prepared"), ("fp8_block", "prepared"), ("mxfp8", "prepared"),
                                         ("nvfp4", "prepared"), ("fp8_block", "bf16"), ("nvfp4", "fp32")])
def test_sparse_weights_keep_a_few_entries_per_row(quant, given):
    """Under the moe distribution "sparse" every row of w13 and w2 has at most SPARSE_ROW_TERMS nonzero weights
    (codes without their sign bit, scales being positive), at least one, and those are the signed weights' own
    codes (unquantized values: N(0, 1/16) in place of N(0, 1/fan_in)); the hidden states stay dense."""
    from spec.quant import unpack_nibbles

    config = MoEConfig(RoutingConfig("renormalize", 4, 4, 2), 512, 256, quant=quant, expert_weights=given)
    sparse, signed = (Case("moe", config, dist, 9) for dist in ("sparse", "normal"))
    assert np.count_nonzero(generate.inputs(sparse)["hidden"]) > 0.99 * 4 * 512
    for e in range(2):
        wd, dense = generate.weights(sparse).expert(e), generate.weights(signed).expert(e)
        assert generate.weights(sparse).expert(e) is wd  # cached
        for name in ("w13", "w2"):
            values, full = np.asarray(wd[name]), np.asarray(dense[name])
            if quant == "nvfp4" and given == "prepared":
                values, full = unpack_nibbles(values), unpack_nibbles(full)
            if given == "prepared" and quant != "bf16":
                kept = values & (0x7 if quant == "nvfp4" else 0x7F) != 0
                assert np.array_equal(values[kept], full[kept])
            else:
                kept = values != 0
                ratio = values[kept] / full[kept]
                assert np.allclose(ratio, ratio[0], rtol=2**-7) and ratio[0] > 1
            live = np.count_nonzero(kept, axis=1)
            assert 1 <= live.min() and live.max() <= generate.SPARSE_ROW_TERMS


@given(case=strategies.cases("moe", configs=strategies.moe_configs(quant="bf16")))
def test_nonneg_makes_every_factor_of_the_layer_non_negative(case):
    """Under "nonneg" the hidden states, the expert weights and the router weights of every method are >= 0 (the
    "topk" method weighs by the logits themselves), so a one-way error moves every output toward zero: a negative
    router weight on the input sent silu into its decreasing range and moved tokens the other way."""
    from spec import routing

    case = replace(case, dist="nonneg")
    inputs = generate.inputs(case)
    r = routing.route(inputs["logits"], inputs.get("bias"), **case.config.routing.route_kwargs(), ideal=True)
    assert (inputs["hidden"] >= 0).all() and (np.nan_to_num(r.weights) >= 0).all(), r.weights
    wd = generate.weights(case).expert(0)
    assert (wd["w13"] >= 0).all() and (wd["w2"] >= 0).all()


def test_only_presets_with_fixed_weights_have_a_weight_seed(monkeypatch):
    from difftest.model import presets

    assert [n for n in presets.PRESETS if presets.weight_seed(n) is not None] == [presets.MONO_MOE]
    # the setting weight_seed (bad values: tests/difftest/model/test_settings.py)
    monkeypatch.setattr(presets, "WEIGHT_SEED", 12)
    assert presets.weight_seed(presets.MONO_MOE) == 12


def test_mono_moe_cases_share_their_weights_but_not_their_inputs():
    """Drawn as `fuzz --model mono-moe` draws them. Compared through GeneratedWeights, from which every expert
    is a pure function (pinned above): generating all 256 experts here would take a minute."""
    from hypothesis import assume, settings

    from difftest.model import presets

    mono = strategies.cases("moe", presets.configs(presets.MONO_MOE, "moe"),
                            weight_seed=presets.weight_seed(presets.MONO_MOE))

    @settings(max_examples=10, database=None, deadline=None)
    @given(mono, mono)
    def pair(a, b):
        assume(a.seed != b.seed and a.config.routing.num_tokens > 0 and b.config.routing.num_tokens > 0)
        assert a.weight_seed == b.weight_seed == presets.weight_seed(presets.MONO_MOE)
        assert generate.weights(a) == generate.weights(b)
        assert generate.digest(generate.inputs(a)) != generate.digest(generate.inputs(b))

    pair()


def test_stacked_weights_are_the_same_read_only_arrays_while_the_weights_stay():
    from difftest.checking.interface import with_stacked_weights

    a, b = Case("moe", SMALL_MOE, "normal", 1, weight_seed=0), Case("moe", SMALL_MOE, "tiny", 2, weight_seed=0)
    first = with_stacked_weights(a, generate.inputs(a))
    again = with_stacked_weights(b, generate.inputs(b))
    assert all(again[k] is first[k] for k in W_KEYS)  # what the mono_moe adapter's `is` check needs
    assert not any(first[k].flags.writeable for k in W_KEYS)
    other = generate.weights(Case("moe", SMALL_MOE, "normal", 1)).stacked()
    assert not np.array_equal(other["w13"], first["w13"])
    for e in range(4):
        for k, v in generate.weights(a).expert(e).items():
            np.testing.assert_array_equal(first[k][e], v)


def test_mono_moe_adapter_prepares_fixed_weights_once(monkeypatch):
    """Two cases of one campaign weight seed: one weight preparation (the 800 MB GPU upload), not two; the other
    half order prepares again."""
    torch = pytest.importorskip("torch")
    from difftest.checking.interface import with_stacked_weights
    from impls.flashinfer import mono_moe

    prepared = []
    monkeypatch.setattr(mono_moe, "_prepared", [])
    monkeypatch.setattr(mono_moe, "prepare_weights", lambda *arrays, **kw: prepared.append(arrays) or {})
    monkeypatch.setattr(mono_moe, "mono_moe", lambda hidden, *a, **kw: torch.zeros_like(hidden))
    config = replace(SMALL_MOE, routing=replace(SMALL_MOE.routing, logits_dtype="bf16"))  # the kernel's
    for seed in (1, 2):
        case = Case("moe", config, "normal", seed, weight_seed=0)
        mono_moe.run(case.config, with_stacked_weights(case, generate.inputs(case)), device="cpu")
    assert len(prepared) == 1
    up_gate = Case("moe", replace(config, half_order="up_gate"), "normal", 3, weight_seed=0)
    mono_moe.run(up_gate.config, with_stacked_weights(up_gate, generate.inputs(up_gate)), device="cpu")
    assert len(prepared) == 2, "the same arrays in the other half order are another preparation"


@pytest.mark.parametrize("quant, given", [(q, "prepared") for q in ("bf16", "fp8_block", "mxfp8", "nvfp4")]
                         + [("fp8_block", "bf16"), ("nvfp4", "fp32")])
def test_nonneg_gives_every_operand_its_magnitude(quant, given):
    """moe dist nonneg: hidden states and every expert weight are the magnitudes of the signed ones (float values
    |·|, fp8 codes without bit 7, packed e2m1 without bits 3 and 7), and so are the logits; scales unchanged."""
    config = MoEConfig(RoutingConfig("renormalize", 4, 8, 2), 64, 64, quant=quant, expert_weights=given)
    signed, nonneg = Case("moe", config, "normal", 3), Case("moe", config, "nonneg", 3)
    x, y = generate.inputs(signed), generate.inputs(nonneg)
    assert (x["hidden"] < 0).any() and np.array_equal(np.abs(x["hidden"]), y["hidden"])
    assert (x["logits"] < 0).any() and np.array_equal(np.abs(x["logits"]), y["logits"])
    mask = {"bf16": None, "fp8_block": 0x7F, "mxfp8": 0x7F, "nvfp4": 0x77}[quant if given == "prepared" else "bf16"]
    for e in (0, 7):
        a, b = generate.weights(signed).expert(e), generate.weights(nonneg).expert(e)
        assert a.keys() == b.keys()
        for k in a:
            if k not in ("w13", "w2"):
                assert np.array_equal(a[k], b[k]), k
            elif mask is None:
                assert (a[k] < 0).any() and np.array_equal(np.abs(a[k]), b[k]), k
            else:
                assert (a[k] & ~np.uint8(mask)).any() and not (b[k] & ~np.uint8(mask)).any(), k
                assert np.array_equal(a[k] & np.uint8(mask), b[k]), k


def test_nonneg_is_a_moe_distribution_only():
    with pytest.raises(CaseError, match="nonneg"):
        generate.inputs(Case("routing", DS, "nonneg", 1))


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("method", ["renormalize", "default", "sigmoid_renorm", "sigmoid"])
def test_mono_moe_adapter_renormalizes_as_the_spec(monkeypatch, method, renormalize):
    """The kernel's renormalize flag is the spec's for the case (spec.routing.renormalizes): H200 fixture
    moe-flashinfer.mono_moe-132cee46b215, sigmoid_renorm with renormalize=False, top-1 σ = 0.924, came out
    renormalized (weight 1): out 1/0.924 of the spec's, 18x its bound."""
    torch = pytest.importorskip("torch")
    from difftest.checking.interface import with_stacked_weights
    from impls.flashinfer import mono_moe
    from spec import routing as spec_routing

    calls = []
    monkeypatch.setattr(mono_moe, "_prepared", [])
    monkeypatch.setattr(mono_moe, "prepare_weights", lambda *arrays, **kw: {})
    monkeypatch.setattr(mono_moe, "mono_moe", lambda hidden, *a, **kw: calls.append(kw) or torch.zeros_like(hidden))
    config = replace(SMALL_MOE, routing=replace(SMALL_MOE.routing, method=method, renormalize=renormalize,
                                                logits_dtype="bf16"))
    case = Case("moe", config, "normal", 1, weight_seed=0)
    mono_moe.run(case.config, with_stacked_weights(case, generate.inputs(case)), device="cpu")
    scores = spec_routing.METHODS[method].scores  # softmax_of_selected: the softmax renormalized over the top-k
    want = scores == "softmax_of_selected" or spec_routing.renormalizes(method, renormalize)
    assert calls[0]["renormalize"] == want
    assert calls[0]["scoring_func"] == scores.split("_")[0]
