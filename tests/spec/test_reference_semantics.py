"""Which real routing code each spec rule follows: small hand-derived cases, each citing the reference
(repository, path, function) and the value it produces there (derived by hand from the quoted source line).

References read: deepseek-ai/DeepSeek-V3 @ 9b4e978 inference/model.py Gate.forward; vllm-project/vllm @ 055e47c
vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py grouped_topk; sgl-project/sglang
python/sglang/srt/layers/moe/topk.py biased_grouped_topk_impl, grouped_topk, select_experts; flashinfer-python
0.7.2.post1 csrc fused_moe/noAuxTcKernels.cu (fused_topk_deepseek) and
fused_moe/trtllm_backend/trtllm_fused_moe_routing_deepseek.cu (routingMainKernel).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from difftest.checking import check, compare, impl_spec
from difftest.model.case import Case, RoutingConfig
from difftest.selftest.tie_orders import REVERSED_TIES
from spec import recipes
from spec.routing import route

ROOT = Path(__file__).resolve().parents[2]


def logit(p):
    return np.log(np.asarray(p, np.float64) / (1 - np.asarray(p, np.float64))).astype(np.float32)


# ---- 1. group score rule

# Issue 19's example: σ = [0.700, 0.814 | 0.495, 0.894], one group kept, k = 1.
SIGMA = [[0.700, 0.814, 0.495, 0.894]]
GROUPED = dict(method="deepseek_v3", top_k=1, n_group=2, topk_group=1)
rounded = recipes.DEFAULT.but  # the spec's fp32 routing but for the named rounding points (route(..., recipe=R))


def test_top2_sum_is_flashinfers_rule_with_or_without_bias():
    """FlashInfer fused_topk_deepseek (noAuxTcKernels.cu: groupScore = topExpGroupScores[0] +
    topExpGroupScores[1]; the API requires a bias tensor) and trtllm-gen routingMainKernel (biasVal = 0 without
    mPtrRoutingBias): group 0 scores 0.700 + 0.814 = 1.514 > 0.495 + 0.894 = 1.389, so expert 1."""
    assert route(logit(SIGMA), **GROUPED).ids[0, 0] == 1
    assert route(logit(SIGMA), **GROUPED, recipe=rounded(group_score="top2_sum")).ids[0, 0] == 1


def test_deepseek_gate_without_bias_ranks_groups_by_max():
    """DeepSeek-V3 Gate.forward: `if self.bias is None: group_scores = scores.amax(dim=-1)`; vLLM grouped_topk:
    `.max(dim=-1).values` without e_score_correction_bias: group 1 scores 0.894 > 0.814, so expert 3."""
    assert route(logit(SIGMA), **GROUPED, recipe=rounded(group_score="top2_sum_if_biased")).ids[0, 0] == 3
    assert route(logit(SIGMA), **GROUPED, recipe=rounded(group_score="max")).ids[0, 0] == 3


def test_deepseek_gate_with_bias_ranks_groups_by_top2_sum():
    """Gate.forward: `group_scores = scores.topk(2, dim=-1)[0].sum(dim=-1)` once `scores = scores + self.bias`;
    with a zero bias the sums are 1.514 and 1.389: expert 1 again."""
    r = route(logit(SIGMA), np.zeros(4, np.float32), **GROUPED, recipe=rounded(group_score="top2_sum_if_biased"))
    assert r.ids[0, 0] == 1


def test_deepseek_v2_defaults_to_sglang_group_max():
    """SGLang grouped_topk (softmax, DeepSeek-V2): group_scores = scores.view(...).max(dim=-1).values. p of
    logits [0, 1 | 0.9, 0.95]: maxima p(1) > p(0.95), sums p(0)+p(1) < p(0.9)+p(0.95); max keeps group 0."""
    x = np.array([[0.0, 1.0, 0.9, 0.95]], np.float32)
    options = dict(method="deepseek_v2", top_k=1, n_group=2, topk_group=1)
    assert route(x, **options).ids[0, 0] == 1
    assert route(x, **options, recipe=rounded(group_score="top2_sum")).ids[0, 0] == 3


def test_named_recipes_state_their_group_rule():
    """The FlashInfer recipes state theirs by the default ("method": top-2 sum for deepseek_v3); each reference
    torch path recipe states top2_sum_if_biased."""
    for r in recipes.NAMED.values():
        assert r.group_score in recipes.GROUP_SCORES
    for r in recipes.REFERENCE_ROUTING:
        assert r.group_score == "top2_sum_if_biased", r.name
    for name in ("flashinfer_fused_topk_deepseek", "flashinfer_trtllm_bf16", "flashinfer_trtllm_fp8_block"):
        config = RoutingConfig(method="deepseek_v3", num_tokens=1, num_experts=4, top_k=1, n_group=2)
        assert compare.group_rule(config, recipes.NAMED[name], biased=False) == "top2_sum"


def test_torch_eager_has_the_same_group_rules():
    import torch

    from impls.torch_eager import route as te_route

    for rule, want in (("method", 1), ("top2_sum", 1), ("max", 3), ("top2_sum_if_biased", 3)):
        ids, _ = te_route(torch.from_numpy(logit(SIGMA)), **GROUPED, group_score=rule)
        assert int(ids[0, 0]) == want, rule


# ---- 2. tie-aware validity, groups and mask values included


def test_zero_mask_ties_accept_any_tie_order():
    """SGLang grouped_topk masks dropped groups with 0.0 (masked_fill(~score_mask.bool(), 0.0)) and picks with
    torch.topk, whose tie order is unspecified. Softmax of [0, -200 | -200, -200 | ...] underflows to 0 for
    every expert but 0: the remaining picks tie at 0 between kept and dropped experts, in any order."""
    config = RoutingConfig(method="deepseek_v2", num_tokens=1, num_experts=8, top_k=4, n_group=4, topk_group=2,
                           group_mask_value=0.0)
    inputs = {"logits": np.array([[0.0, -200, -200, -200, -200, -200, -200, -200]], np.float32)}
    for ids in ([0, 1, 2, 3], [0, 5, 6, 7], [0, 1, 4, 7]):
        v, _, _ = compare.check_ids(config, inputs, np.array([ids]), None, "ties")
        assert v.ok, v.message
    v, _, _ = compare.check_ids(config, inputs, np.array([[1, 2, 3, 4]]), None, "ties")
    assert not v.ok  # expert 0 (p = 1) left out: no tie covers that


# ---- 3. routing arithmetic precision


def test_bf16_scores_and_renormalization_round_where_the_torch_paths_do():
    """vLLM grouped_topk with bf16 logits: `gating_output.sigmoid()` is bf16, `topk_weights / sum` and
    `* routed_scaling_factor` are bf16 ops (torch's bf16 sum rounds once). σ(0.5) = 0.62246 → bf16 0.62109375,
    σ(0) = 0.5; the sum 1.12109375 is a bf16 tie → 1.125 (even); 0.62109375/1.125 = 0.55208 → 0.55078125;
    × 2.5 = 1.37695 → 1.375."""
    r = route(np.array([[0.5, 0.0]], np.float32), method="sigmoid_renorm", top_k=2, routed_scaling_factor=2.5,
              recipe=rounded(routing_scores="bf16", routing_renorm="bf16"))
    assert r.weights[0, 0] == np.float32(1.375)
    fp32 = route(np.array([[0.5, 0.0]], np.float32), method="sigmoid_renorm", top_k=2, routed_scaling_factor=2.5)
    assert abs(fp32.weights[0, 0] - 1.386374) < 1e-5  # the fp32 spec: 0.622459/1.122459 × 2.5


def test_bias_add_promotes_to_fp32():
    """Gate.forward, biased_grouped_topk_impl and grouped_topk add an fp32 bias to bf16 scores: the keys are
    fp32 (bf16 + fp32 → fp32), so a bias difference of 2^-20 still orders two equal bf16 σ."""
    x = np.array([[1.0, 1.0]], np.float32)
    b = np.array([0.0, 2.0**-20], np.float32)
    bf16_scores = rounded(routing_scores="bf16")
    r = route(x, b, method="deepseek_v3", top_k=1, recipe=bf16_scores)
    assert r.ids[0, 0] == 1
    assert route(x, b, method="deepseek_v3", top_k=1, recipe=bf16_scores.but(routing_bias_add="bf16")).ids[0, 0] == 0


# ---- 4. open choices, decided


def test_renormalize_naive_ranks_by_probability_and_accepts_logit_ranking():
    """Decided: the spec ranks renormalize_naive by its fp32 softmax (SGLang/vLLM fused_topk: softmax, then
    top-k). FlashInfer's kernel ranks by the logits, the exact order of the probabilities: logits
    [0, -300, -200] give p = [1, 0, 0] in fp32, the spec takes expert 1 (tie → lower id), FlashInfer expert 2,
    and the comparator accepts both (p(-200) - p(-300) is far below the fp32 min normal in δ)."""
    x = np.array([[0.0, -300.0, -200.0]], np.float32)
    assert route(x, method="renormalize_naive", top_k=2).ids[0].tolist() == [0, 1]
    config = RoutingConfig(method="renormalize_naive", num_tokens=1, num_experts=3, top_k=2)
    v, _, _ = compare.check_ids(config, {"logits": x}, np.array([[0, 2]]), None, "logit ranking")
    assert v.ok, v.message


@pytest.mark.parametrize("method", ["deepseek_v3", "sigmoid_renorm", "deepseek_v2"])
def test_rsf_applies_without_renormalize(method):
    """Decided: w = s[ids]·rsf whether or not renormalize, as DeepSeek-V3 Gate.forward (`weights *=
    self.route_scale` after the sigmoid-only renormalization), vLLM grouped_topk (`if routed_scaling_factor !=
    1.0`, outside `if renormalize`) and FlashInfer. SGLang's biased_grouped_topk_impl multiplies only inside
    `if renormalize:`; a plug-in of it declares MoEConfig.rsf_placement="combine" or passes rsf itself."""
    x = np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)
    plain = route(x, method=method, top_k=2, renormalize=False)
    scaled = route(x, method=method, top_k=2, renormalize=False, routed_scaling_factor=2.5)
    np.testing.assert_array_equal(scaled.weights, plain.weights * np.float32(2.5))


def test_zero_tokens_route_to_empty_outputs():
    """Decided: T = 0 is a valid input with empty ids and weights [0, k] (FlashInfer's fused_topk_deepseek
    fixture F4 shows a kernel that does not return early)."""
    r = route(np.zeros((0, 8), np.float32), np.zeros(8, np.float32), method="deepseek_v3", top_k=2, n_group=4,
              topk_group=2)
    assert r.ids.shape == (0, 2) and r.weights.shape == (0, 2)


def test_one_expert_groups_with_bias_score_their_key():
    """Decided: a one-expert group's top-2 sum is its only key. DeepSeek's Gate, SGLang's and vLLM's torch
    `topk(2, dim=-1)` raise on a group of one (vLLM's router falls back to ungrouped top-k when E <= n_group);
    FlashInfer's reduceTopK pads the second key with -inf, so every group scores -inf (its adapter declares such
    cases unsupported). Keys σ + b of [0.5+0, 0.73+0, 0.27+1 | ...]: groups are experts, the best two kept."""
    x = np.array([[0.0, 1.0, -1.0, 0.5]], np.float32)
    b = np.array([0.0, 0.0, 1.0, 0.0], np.float32)
    r = route(x, b, method="deepseek_v3", top_k=2, n_group=4, topk_group=2)
    assert sorted(r.ids[0].tolist()) == [1, 2]
    import torch

    from impls.torch_eager import route as te_route

    ids, _ = te_route(torch.from_numpy(x), torch.from_numpy(b), method="deepseek_v3", top_k=2, n_group=4,
                      topk_group=2)
    assert sorted(ids[0].tolist()) == [1, 2]


# ---- 5. the three findings as fixtures


@pytest.mark.parametrize("fid", ["R01_deepseek_gate_group_max_without_bias", "R02_deepseek_v2_zero_mask_ties",
                                 "R03_bf16_routing_arithmetic"])
def test_finding_fixture_passes_and_recorded_a_failure(fid):
    meta = json.loads((ROOT / "fixtures" / fid / "case.json").read_text())
    assert meta["status"] == "fixed" and meta["observed"]["status"] == "fail"
    case = Case.from_dict(meta["case"])
    from difftest.checking.interface import load

    impl = load(meta["impl"]["ref"])
    assert check.run_case(impl, case).status == "pass"


def test_r02_reversed_ties_differ_from_the_spec():
    """R02 is not vacuous: the other tie order really selects other experts than the spec."""
    case = Case("routing", RoutingConfig(method="deepseek_v2", num_tokens=4, num_experts=8, top_k=4, n_group=4,
                                         topk_group=2, group_mask_value=0.0), "large", 0)
    from difftest.model import generate

    inputs = generate.inputs(case)
    own = impl_spec.route(case.config, inputs, None).ids
    other = REVERSED_TIES.run(case, inputs)["ids"]
    assert (np.sort(own, 1) != np.sort(other, 1)).any()


# ---- 6. torch's sigmoid in the reference paths (issue 36): Recipe.sigmoid "torch_cpu"


def deepseek_gate(logits, *, top_k, n_group=1, topk_group=1, route_scale=1.0, renormalize=True):
    """The routing of deepseek-ai/DeepSeek-V3 inference/model.py Gate.forward (score_func "sigmoid", no bias),
    written from its semantics: scores = logits.sigmoid() in the logits' dtype; groups scored by their amax;
    torch.topk of groups, then of experts; weights gathered, divided by their sum, times route_scale, returned
    `.type_as(x)`. (weights as float32, ids)."""
    import torch

    s = logits.sigmoid()
    T, E = s.shape
    if n_group > 1:
        groups = s.view(T, n_group, E // n_group).amax(dim=-1).topk(topk_group, dim=-1).indices
        kept = torch.zeros(T, n_group, dtype=torch.bool).scatter_(1, groups, True)
        s_sel = s.masked_fill(~kept.repeat_interleave(E // n_group, dim=1), 0.0)
    else:
        s_sel = s
    ids = s_sel.topk(top_k, dim=-1).indices
    w = s.gather(1, ids)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return (w * route_scale).to(logits.dtype).float().numpy(), ids.int().numpy()


def _against(config, x, recipe, ids, w):
    case = Case("routing", config, "normal", 0)
    inputs = {"logits": np.asarray(x, np.float32)}
    return compare.compare_routing(case, inputs, {"ids": ids, "weights": w}, recipe, "reference")


def test_torch_sigmoid_underflow_passes_under_the_gate_recipe():
    """Gate.forward's `scores.sigmoid()` on the CPU is 0 below x ≈ -88.72 (1/(1 + exp(-x)), exp overflowing;
    docs/semantics.md §1.8): logit -100.80398559570312 gets weight 0 where the correctly rounded σ is 1.68e-44.
    Its recipe (sigmoid "torch_cpu") accepts it; "exact" rejects that 0."""
    import torch

    config = RoutingConfig(method="deepseek_v3", num_tokens=1, num_experts=1, top_k=1, renormalize=False)
    x = [[-100.80398559570312]]
    w, ids = deepseek_gate(torch.tensor(x), top_k=1, renormalize=False)
    assert w[0, 0] == 0 and ids[0, 0] == 0
    assert _against(config, x, recipes.DEEPSEEK_V3_GATE, ids, w).ok
    v = _against(config, x, recipes.DEEPSEEK_V3_GATE.but(sigmoid="exact"), ids, w)
    assert not v.ok and "spec=1.68156e-44" in v.message


SIGMOID_MEASURED = {"torch_cpu": "sigmoid_2.13.0_cpu_cpu_vector_cpu_scalar.json",
                    "torch_cuda": "sigmoid_2.11.0_cu130_cuda.json"}


@pytest.mark.parametrize("sigmoid", sorted(SIGMOID_MEASURED))
def test_torch_sigmoid_model_covers_its_measurement(sigmoid):
    """The δ of sigmoid "torch_cpu" / "torch_cuda" holds the worst error tools/measure_sigmoid.py recorded over every
    fp32 in [-105, 105] (benchmarks/sigmoid/), the flush below -88.72 stays under routing_underflow's 2^-127, and
    torch's σ is monotone there; on this CPU, torch's σ at the recorded worst x is within δ of σ."""
    import torch

    from spec import bounds

    measured = json.loads((ROOT / "benchmarks" / "sigmoid" / SIGMOID_MEASURED[sigmoid]).read_text())
    recipe = recipes.Recipe(name="m", sigmoid=sigmoid)
    for path in measured["paths"].values():
        m = path["fp32"]
        worst = m["at_max_relative_error"]
        delta = bounds.routing_key_delta(np.array([[worst["x"]]]), np.array([[worst["true"]]]), "sigmoid", recipe)
        assert abs(worst["torch"] - worst["true"]) <= delta[0]
        assert m["max_relative_error_in_u_at_normal_results"] <= {"torch_cpu": bounds.TORCH_CPU_SIGMOID_REL,
                                                                   "torch_cuda": bounds.TORCH_CUDA_SIGMOID_REL}[sigmoid]
        assert m["largest_true_sigma_flushed_to_zero"] < 2.0**-127 and m["nonmonotone_steps"] == 0
    if sigmoid == "torch_cpu":
        x = np.float32(worst["x"])
        got, true = float(torch.tensor([x]).sigmoid()), 1 / (1 + np.exp(-np.float64(x)))
        assert abs(got - true) <= bounds.routing_key_delta(np.array([[x]]), np.array([[true]]), "sigmoid", recipe)[0]


EXP_MEASURED = sorted((ROOT / "benchmarks" / "exp").glob("exp_*.json"))  # tools/measure_exp.py, one file per host
# softmax rows: a near tie of two, a spread of eight, 256 drawn logits (std 4), 64 equal but one
SOFTMAX_ROWS = [np.array([0.0, -2.0**-20]), np.array([0.0, -1e-3, -0.5, -1.0, -2.0, -4.0, -8.0, -30.0]),
                np.random.default_rng(36).normal(0.0, 4.0, 256), np.r_[1.0, np.zeros(63)]]


def worst_softmax(x, c, sign):
    """Each p_i of an fp32 softmax of x pushed as far up (sign 1) or down (-1) as its roundings allow, exps off by
    c·u: x_i − max rounded toward its side and its exp c·u further, every other term the other way (the row maximum's
    exp too), the sum γ_{E−1} the other way, the reciprocal and the multiply one u each toward the side. float64."""
    from spec.bounds import U32, gamma

    z = np.asarray(x, np.float64) - np.max(x)
    near, far = np.exp(z * (1 - sign * U32)) * (1 + sign * c * U32), np.exp(z * (1 + sign * U32)) * (1 - sign * c * U32)
    total = (far.sum() - far + near) * (1 - sign * gamma(len(z) - 1, U32))
    return near / total * (1 + sign * U32) ** 2


@pytest.mark.parametrize("name", [p.name for p in EXP_MEASURED])
def test_softmax_allowance_covers_the_measured_exp(name):
    """torch's fp32 exp as a softmax uses it (tools/measure_exp.py over every fp32 in [-104, 0], benchmarks/exp/):
    every path within bounds.TORCH_EXP_REL·u at normal results and TORCH_EXP_SUBNORMAL·2^-149 below (an underflow to 0
    included), the softmax's exp recovered without a misfit. A softmax whose exps are off by the largest measured
    error, its other roundings (argument, sum, reciprocal, multiply) each at their worst, stays within the key δ
    (bounds.routing_key_delta) and, at its top-k ids, within the weights' bound vs ideal (bounds.routing_weights);
    on this CPU, torch's softmax of [0, x] at the recorded worst x lies within δ."""
    import torch

    from spec import bounds
    from spec import routing as sr

    measured = json.loads((ROOT / "benchmarks" / "exp" / name).read_text())
    paths = [p["fp32"] for p in measured["paths"].values()]
    assert paths, name
    for m in paths:
        assert m["max_relative_error_in_u_at_normal_results"] <= bounds.TORCH_EXP_REL
        assert m["max_abs_error_below_min_normal"] <= bounds.TORCH_EXP_SUBNORMAL * 2.0**-149
        assert m["largest_true_exp_flushed_to_zero"] <= bounds.TORCH_EXP_SUBNORMAL * 2.0**-149
        assert m.get("inconsistent", 0) == 0 and m.get("wide_row_outputs_differing", 0) == 0
    c = max(m["max_relative_error_in_u_at_normal_results"] for m in paths)
    recipe = recipes.Recipe(name="m")
    for x in SOFTMAX_ROWS:
        p = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
        delta = bounds.routing_key_delta(x[None], p[None], "softmax", recipe)[0]
        for k in sorted({1, min(4, len(x))}):  # top-1 too: the weights' γ has the least room there
            ids = np.argsort(-p, kind="stable")[None, :k]
            w = p[ids]
            ideal = bounds.routing_weights(w, recipe, len(x), k,
                                           softmax_exponents=sr.softmax_exponents(x[None], "default", ids)).ideal
            for sign in (1, -1):
                worst = worst_softmax(x, c, sign)
                assert (np.abs(worst - p) <= delta).all(), (len(x), sign, np.abs(worst - p).max() / delta)
                written = worst[ids] * (1 + sign * bounds.U32)  # the fp32 write
                assert (np.abs(written - w) <= ideal).all(), (len(x), k, sign)
    if measured["cuda_device"] is None:
        worst_x = max(paths, key=lambda m: m["max_relative_error_in_u_at_normal_results"])["at_max_relative_error"]["x"]
        got = torch.softmax(torch.tensor([0.0, worst_x]), dim=-1).double().numpy()
        true = np.exp(np.array([0.0, worst_x])) / (1 + np.exp(worst_x))
        delta = bounds.routing_key_delta(np.array([[0.0, worst_x]]), true[None], "softmax", recipe)[0]
        assert (np.abs(got - true) <= delta).all()


# issue 36: six logits within 6 fp32 ulps of 0.5078125; torch's σ maps all six to 0.6242935657501221, the correctly
# rounded σ keeps 1 and 4 one ulp above 0, 2 and 3.
TIED = [[0.5078125, 0.5078128576278687, 0.5078125, 0.5078125, 0.5078128576278687, 0.5078127384185791]]


def test_torch_sigmoid_ties_pass_under_the_gate_recipe():
    """Gate.forward with n_group 2, topk_group 1, k 1, no bias: torch's σ makes the six keys equal, so torch.topk
    may return any of them (it returns expert 2 in torch 2.13); every one is valid under sigmoid "torch_cpu",
    whose δ carries torch's measured 2.48u; under "exact", experts 0, 2 and 3 lie beyond 2δ."""
    import torch

    config = RoutingConfig(method="deepseek_v3", num_tokens=1, num_experts=6, top_k=1, n_group=2, topk_group=1)
    s = torch.tensor(TIED).sigmoid()
    assert (s == s[0, 0]).all() and float(s[0, 0]) == 0.6242935657501221
    w, ids = deepseek_gate(torch.tensor(TIED), top_k=1, n_group=2, topk_group=1)
    assert _against(config, TIED, recipes.DEEPSEEK_V3_GATE, ids, w).ok
    for e in range(6):
        assert _against(config, TIED, recipes.DEEPSEEK_V3_GATE, np.array([[e]]), w).ok, e
    v = _against(config, TIED, recipes.DEEPSEEK_V3_GATE.but(sigmoid="exact"), np.array([[2]]), w)
    assert not v.ok and "ids[0]=[2] but spec=[1]" in v.message


def test_fp16_sigmoid_underflow_is_a_tie_under_the_fp16_gate_recipe():
    """Gate.forward on fp16 logits: σ in fp16 is 0 below 2^-25 ≈ 3e-8, so logits [-26, -30] give σ = [0, 0], a
    tie; weights `.type_as(x)` are fp16 (Recipe routing_weights "fp16"). Both ids pass under deepseek_v3_gate_fp16,
    whose δ adds fp16's half min subnormal; without it (scores in fp32) id 1 is rejected."""
    import torch

    config = RoutingConfig(method="deepseek_v3", num_tokens=1, num_experts=2, top_k=1, renormalize=False,
                           logits_dtype="fp16")
    x = [[-26.0, -30.0]]
    assert torch.tensor(x, dtype=torch.float16).sigmoid().tolist() == [[0.0, 0.0]]
    w, _ = deepseek_gate(torch.tensor(x, dtype=torch.float16), top_k=1, renormalize=False)
    for e in (0, 1):
        assert _against(config, x, recipes.DEEPSEEK_V3_GATE_FP16, np.array([[e]]), w).ok, e
    v = _against(config, x, recipes.DEEPSEEK_V3_GATE_FP16.but(routing_scores="fp32"), np.array([[1]]), w)
    assert not v.ok and "expert 0" in v.message


def test_fp16_routing_weights_are_written_in_fp16():
    """Recipe(routing_weights="fp16") is routable: the spec and torch eager both write the weights in fp16, and
    the comparison holds an fp32 write of the same weights to fp16's bound (it passes) but not a weight off by
    ten fp16 ulps."""
    import torch

    from impls.torch_eager import route as te_route

    x = np.array([[0.3, -1.2, 2.0, 0.7]], np.float32)
    r = route(x, method="sigmoid_renorm", top_k=2, routed_scaling_factor=2.5, recipe=rounded(routing_weights="fp16"))
    np.testing.assert_array_equal(r.weights, r.weights.astype(np.float16).astype(np.float32))
    ids, w = te_route(torch.from_numpy(x), method="sigmoid_renorm", top_k=2, routed_scaling_factor=2.5,
                      weights_dtype="fp16")
    np.testing.assert_array_equal(w.numpy(), r.weights)
    config = RoutingConfig(method="sigmoid_renorm", num_tokens=1, num_experts=4, top_k=2, routed_scaling_factor=2.5)
    fp16 = recipes.Recipe(name="fp16_weights", routing_weights="fp16")
    exact = route(x, method="sigmoid_renorm", top_k=2, routed_scaling_factor=2.5).weights
    assert _against(config, x, fp16, r.ids, exact).ok
    off = r.weights.copy()
    off[0, 0] += 10 * np.spacing(np.float16(off[0, 0]))
    assert not _against(config, x, fp16, r.ids, off).ok


# ---- 7. the fused shared expert's weight where every routed weight vanishes (issue 36 item 4)


def test_shared_expert_weighs_one_by_default_where_routed_weights_vanish():
    """Decided (docs/semantics.md §1.5): a fused shared expert weighs exactly 1 by default, as DeepSeek-V3
    inference/model.py MoE.forward adds `self.shared_experts(x)` unweighted (`y + z`) and trtllm-gen's
    routingDeepSeek writes 1.0; SGLang's fused gate and torch path (Σ routed / rsf) declare "routed_sum_over_rsf".
    Logits below -104 make every fp32 σ 0, so with eps = 1e-20 the routed weights are 0: the default keeps the
    shared expert at 1, Σ/rsf drops it to 0. Where the routed weights sum to rsf both give 1."""
    dead = np.full((1, 8), -120.0, np.float32)
    kw = dict(method="deepseek_v3", top_k=2, n_group=4, topk_group=2, routed_scaling_factor=2.5, eps=1e-20,
              num_fused_shared_experts=1)
    assert recipes.DEFAULT.shared_weight == recipes.Recipe(name="x").shared_weight == "one"
    assert route(dead, np.zeros(8, np.float32), **kw).weights.tolist() == [[0.0, 0.0, 1.0]]
    summed = route(dead, np.zeros(8, np.float32), **kw, recipe=rounded(shared_weight="routed_sum_over_rsf"))
    assert summed.weights.tolist() == [[0.0, 0.0, 0.0]]
    live = np.linspace(-1, 1, 8, dtype=np.float32)[None]
    for rule in ("one", "routed_sum_over_rsf"):
        r = route(live, np.zeros(8, np.float32), **kw, recipe=rounded(shared_weight=rule))
        assert r.weights[0, 2] == np.float32(1.0)
    for r in (recipes.SGLANG_MOE_FUSED_GATE, recipes.SGLANG_BIASED_GROUPED_TOPK, recipes.SGLANG_TRITON_FP8_BLOCK):
        assert r.shared_weight == "routed_sum_over_rsf", r.name
    assert recipes.TRTLLM_GEN_ROUTING.shared_weight == recipes.DEEPSEEK_V3_GATE.shared_weight == "one"
