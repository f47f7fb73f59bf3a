"""What a campaign of each FlashInfer and SGLang adapter compares of what it draws (issue 33), measured on CPU:
tests/helpers/dry_adapters.py runs each adapter's own unsupported(), contract, space and recipe with the spec's output
in place of the kernel's, so the draws and declines are the adapter's. Counted in examples, never seconds; the share
after 30 s of the plain command is a benchmark (benchmarks/search_fit.py)."""

import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from difftest import plugin
from difftest.model import presets, where
from difftest.running import campaign
from difftest.running.run import campaign_cells
from impls.flashinfer import trtllm_gen_routing as routing
from tests.helpers import dry_adapters

DRY = Path(__file__).resolve().parents[1] / "helpers" / "dry_adapters.py"

EXAMPLES = {"routing": 60, "quant": 40, "trtllm_ops": 20, "moe": 20}  # per slice: the learning is paid once
PRESET_EXAMPLES = 10  # per preset cell: half of them declined (eps = 0) before the adapters stated their eps
FEWER = {"flashinfer.mono_moe": 4}  # its one shape (E = 256, H = 2,048) costs the spec seconds a case; its space is all
# ...so its dry campaign (about a CPU-minute even at 4 a slice) is in the heavy tier; the H200 campaigns measure it
# on the kernel (docs/gpu.md: 71 of 71 and 16 of 16 compared on 2026-12-02)
HEAVY = {"flashinfer.mono_moe"}


# Measured below 80 % at these counts (compared/drawn), each for a constraint between fields that neither its space
# nor the single-field probing of difftest/model/learn.py can say: strict, so the day one meets it the test says so.
SHORT = {
    "flashinfer.cutlass_fused_moe": "21 of 42 moe cases: block and size constraints of the CUTLASS FP8 path",
    "flashinfer.trtllm_fp4_block_scale_moe": "0 of 20: declines every case until the case model carries NVFP4 "
                                             "activation global scales (its CALIBRATION; issue 36)",
}


# Adapters whose space states every limit of theirs, so that nothing is left to decline: at least nine in ten. The
# fused_topk_deepseek kernel's top_k <= topk_group · n_group (group_slack) had been declined, a fifth of its draws
# (42 of 60 here on seed 0, 79 % on seeds 0-4; 77.4 % compared on the H200 without a preset, docs/gpu.md).
# The trtllm-gen adapters and SGLang's v1 quantizer state their joint limits (routingCustom's (E, top_k) tiers per
# method, I >= 64 for the activation kernel, UE8M0 only packed at K/128): on the H200 without a preset no-GEMM had
# compared 85.7 % and v1 55 %; here (60 examples a slice, learning declines) routing 474 → 540 of 482 → 541, no-GEMM
# 113 → 120 of 120, v1 59 → 60 of 60; without learning, test_a_space_never_draws_what_its_kernel_refuses_jointly.
AT_LEAST = {"flashinfer.fused_topk_deepseek": 0.9, "flashinfer.trtllm_gen_routing": 0.9,
            "flashinfer.trtllm_gen_nogemm": 0.9, "sglang.per_token_group_quant_8bit_v1": 0.9}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=SHORT[n], strict=True))
                                  if n in SHORT else pytest.param(n, marks=pytest.mark.heavy) if n in HEAVY else n
                                  for n in dry_adapters.NAMES])
def test_each_adapter_compares_most_of_what_its_campaign_draws(name):
    """Each declined case is one the search learned from: at most one in five is declined (one in ten where the
    adapter's space states all its limits, AT_LEAST), and the adapter compares cases in every op it implements."""
    impl = dry_adapters.DRY[name]
    for op in impl.ops:
        found = plugin.fuzz(f"{DRY}:{name.replace('.', '_')}", op, max_examples=FEWER.get(name, EXAMPLES[op]))
        assert found.compared and found.compared >= AT_LEAST.get(name, 0.8) * found.drawn, (op, found)
        assert not found.findings, found.findings  # the spec against itself under the adapter's recipe


# The trtllm-gen adapters around each model preset they run (mono-moe is the mono_moe kernel's own preset): on the
# H200 such campaigns skipped 55–58 % of their draws (eps = 0, rsf_placement 'combine', T = 0; issue 38).
PRESET_ADAPTERS = ("flashinfer.trtllm_gen_routing", "flashinfer.trtllm_gen_nogemm")
PRESET_CELLS = [(name, model) for name in PRESET_ADAPTERS for model in sorted(presets.PRESETS)
                if model != presets.MONO_MOE and presets.configs(model, dry_adapters.DRY[name].ops[0]) is not None]


@pytest.mark.parametrize("name, model", PRESET_CELLS)
def test_a_preset_campaign_draws_the_kernels_own_settings(name, model):
    """`fuzz --impl NAME --model MODEL` compares at least four in five of its draws with nothing learned: the preset's
    draws are narrowed to the adapter's space (its eps, rsf placement and token range), not declined case by case."""
    impl = dry_adapters.DRY[name]
    ref = f"{DRY}:{name.replace('.', '_')}"
    for i, (_, _, op, configs) in enumerate(campaign_cells([ref], impl.ops, model)):
        res = campaign.fuzz_cell(impl, ref, op, configs=configs, run_seed=i, known=set(),
                                 hypothesis_settings=campaign.cli_settings(PRESET_EXAMPLES), refusals=None)
        assert res.compared >= 0.8 * res.examples, (op, res.compared, res.examples, res.skips)
        assert not res.finding, res.finding


def drawn(name, examples):
    """The configurations of `examples` draws of each campaign cell of an adapter (no --where, preset or learning)."""
    impl, out = dry_adapters.DRY[name], []
    for _, _, _, configs in campaign_cells([f"{DRY}:{name.replace('.', '_')}"], impl.ops, None):
        @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(configs)
        def draw(config):
            out.append(config)

        draw()
    return out


def declined(name, config):
    return dry_adapters.DRY[name].unsupported(types.SimpleNamespace(config=config))


# The limits each space states jointly (difftest/model/where.py conditions) and the declines that name them: on the
# H200 without a preset, routingCustom refused (E, top_k) pairs of no compiled tier ((9, 9), (19, 9), (48, 31),
# (127, 9)), and nogemm and the v1 quantizer declined the others, 402 and 6,301 draws.
# Then (two-field conditions, "method=deepseek_v3&n_group=1") the ungrouped DeepSeek-V3 kernel's bias and shared
# experts, the grouped kernel's group limits and the binding's top_k by E: 95 of 1,500 routing draws declined → 19.
DEEPSEEK = ("through a null pointer", "only the grouped DeepSeekV3 kernel", "takes n_group <=", "experts per group",
            "above the binding's limit")
STATED = {"flashinfer.trtllm_gen_routing": ("no compiled routingCustom tier", "kernel tier", "no scaling factor",
                                            *DEEPSEEK),
          "flashinfer.trtllm_gen_nogemm": ("no compiled routingCustom tier", "kernel tier", "no scaling factor",
                                          "needs I >= 64", "always renormalize", *DEEPSEEK),
          "sglang.per_token_group_quant_8bit_v1": ("ue8m0 with",)}


@pytest.mark.parametrize("name", sorted(STATED))
def test_a_space_never_draws_what_its_kernel_refuses_jointly(name):
    """No draw of these adapters' cells is declined for a limit their space states; the draws still reach the limits'
    edges (routing: top_k above 8 where a tier holds it; UE8M0 scales), so the space narrowed no more than it must."""
    configs = drawn(name, {"sglang.per_token_group_quant_8bit_v1": 150}.get(name, 60))
    why = [w for w in (declined(name, c) for c in configs) if w and any(s in w for s in STATED[name])]
    assert not why, why[:3]
    if name == "sglang.per_token_group_quant_8bit_v1":
        assert sum(c.scale_fmt == "ue8m0" for c in configs) >= 10
        return
    r = [getattr(c, "routing", c) for c in configs]
    if name == "flashinfer.trtllm_gen_nogemm":  # a moe layer's top_k above 8 is rarer: none in these 120
        assert any(c.activation == "swiglu" for c in configs) and any(c.method == "topk" for c in r)
    else:
        assert any(c.top_k > 8 for c in r) and any(c.top_k > 8 and c.method == "renormalize" for c in r)
    assert all(routing.covered(routing.CUSTOM_TIERS[c.method], c.num_experts, c.top_k) for c in r
               if c.method in routing.CUSTOM_TIERS and not (c.method == "deepseek_v3" and c.n_group > 1))


def test_the_routing_tiers_cover_what_the_space_draws_and_no_more():
    """routingCustom's tiers as the space states them: the four pairs refused on the H200 are outside, each method's
    largest tier inside, and the decline names the tier in one line."""
    for method, E, k in (("topk", 19, 9), ("sigmoid", 48, 31), ("default", 127, 9), ("topk_sigmoid", 9, 9)):
        config = routing_config(method, E, k)
        why = routing.unsupported(config)
        assert why and "no compiled routingCustom tier covers" in why and "\n" not in why, (method, why)
        assert not where.from_space(routing.SPACE, label=method)["top_k"].allows(k)
    for method, tiers in routing.CUSTOM_TIERS.items():
        E, k = tiers[-1]
        assert routing.unsupported(routing_config(method, E, k)) is None or method == "deepseek_v3", method


def routing_config(method, E, k):
    from difftest.model.case import RoutingConfig

    biased = method in ("minimax2", "deepseek_v3")
    return RoutingConfig(method=method, num_tokens=3, num_experts=E, top_k=k, renormalize=biased or method.endswith(
        "renorm"), bias_dtype="fp32" if biased else None, eps=routing.EPS)
