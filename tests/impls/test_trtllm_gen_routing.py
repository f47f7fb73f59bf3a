"""The trtllm-gen routing adapter on CPU: the build it asks FlashInfer's JIT for, the binding's arguments and
output sizes, the ids it reconstructs from the permuted layout, its limits and availability reasons."""

import ast
import dataclasses
import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="flashinfer-python not installed "
                       "(pip install --no-deps flashinfer-python==0.7.2.post1 apache-tvm-ffi)"),
]
torch = pytest.importorskip("torch")

from difftest.model.case import RoutingConfig  # noqa: E402
from impls.flashinfer import _trtllm_gen_jit as jit  # noqa: E402
from impls.flashinfer import trtllm_gen_routing as tg  # noqa: E402

DSV3 = RoutingConfig("deepseek_v3", 5, 256, 8, 8, 4, 2.5, eps=tg.EPS, tile_tokens_dim=16)


def test_source_list_is_flashinfers():
    """The project builds exactly the files FlashInfer's own routing JitSpec lists (read from its source, so a
    FlashInfer release that adds or renames one fails here instead of at link time on the GPU host)."""
    from flashinfer.jit import fused_moe

    tree = ast.parse(inspect.getsource(fused_moe.gen_trtllm_gen_routing_module))
    named = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and str(n.value).endswith(".cu")]
    assert tuple(named) == jit.ROUTING_SOURCES


def test_routing_spec_targets_the_arch_with_the_headers(monkeypatch, tmp_path):
    from flashinfer.jit import env
    from flashinfer.jit.core import current_compilation_context as ctx

    headers = tmp_path / "hdr"
    for h in jit.EXPORT_HEADERS:
        (headers / h).parent.mkdir(parents=True, exist_ok=True)
        (headers / h).write_text("")
    monkeypatch.setattr(env, "FLASHINFER_GEN_SRC_DIR", tmp_path / "gen")
    monkeypatch.setattr(ctx, "TARGET_CUDA_ARCHS", set())  # as on a host without a GPU: the arch is given
    spec = jit.routing_spec("90a", headers)
    assert spec.name == "difftest_trtllm_gen_routing_sm90a"
    assert [p.name for p in spec.sources] == [Path(s).name for s in jit.ROUTING_SOURCES]
    flags = spec.extra_cuda_cflags
    assert "-gencode=arch=compute_90a,code=sm_90a" in flags and "-DTLLM_RUBIN_FEATURES" in flags
    roots = [Path(p) for p in spec.extra_include_dirs]
    assert any((r / jit.EXPORT_REL / "trtllm/gen/DtypeDecl.h").is_file() for r in roots)
    assert ctx.TARGET_CUDA_ARCHS == {(9, "0a")}


def test_missing_headers_name_where_they_were_looked_for(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHINFER_CUBIN_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_header_root_candidates", lambda: iter([tmp_path / jit.EXPORT_REL]))
    path, why = jit.export_headers()
    assert path is None and str(tmp_path) in why and "flashinfer-cubin" in why


def test_sizes_match_flashinfers_mirror():
    from flashinfer.fused_moe.trtllm_gen_routing import _max_num_ctas_in_batch_dim, max_num_padded_tokens

    for T, k, S, E, tile in [(1, 8, 0, 256, 8), (5, 8, 1, 256, 16), (4096, 8, 2, 256, 128), (3, 1, 0, 16, 64)]:
        c = dataclasses.replace(DSV3, num_tokens=T, top_k=k, num_fused_shared_experts=S, num_experts=E,
                                n_group=8 if E % 8 == 0 and E // 8 >= 2 else 1,
                                topk_group=4 if E % 8 == 0 and E // 8 >= 2 else 1, tile_tokens_dim=tile)
        a = tg.call_args(c)
        assert a["max_ctas"] == _max_num_ctas_in_batch_dim(T, k + S, E + S, tile)
        assert a["max_padded"] == max_num_padded_tokens(T, k + S, E + S, tile)
        assert a["histogram_size"] == max(2 * (E + S), 512)


def test_call_args_per_method():
    a = tg.call_args(DSV3)
    assert (a["n_group"], a["topk_group"], a["routed_scaling_factor"], a["tile_tokens_dim"]) == (8, 4, 2.5, 16)
    ungrouped = tg.call_args(RoutingConfig("deepseek_v3", 3, 256, 8, eps=tg.EPS))
    assert (ungrouped["n_group"], ungrouped["topk_group"]) == (1, 1)  # the binding refuses 0 for DeepSeekV3
    flat = tg.call_args(RoutingConfig("renormalize", 3, 64, 4))
    assert (flat["n_group"], flat["topk_group"], flat["routed_scaling_factor"]) == (0, 0, 1.0)
    assert flat["tile_tokens_dim"] == tg.DEFAULT_TILE
    shard = tg.call_args(dataclasses.replace(DSV3, local_expert_offset=64, local_num_experts=32))
    assert (shard["local_expert_offset"], shard["local_num_experts"]) == (64, 32)


def test_slot_ids_read_the_tile_of_each_permuted_row():
    # tile 4: tiles 0,1 belong to local expert 2, tile 2 to local expert 5; offset 10
    e2p = np.array([[0, 9], [4, -1], [1, 8]])
    ctas = np.array([2, 2, 5])
    assert tg.slot_ids(e2p, ctas, 4, 10).tolist() == [[12, 15], [12, -1], [12, 15]]
    assert tg.slot_ids(np.array([[12]]), ctas, 4, 0).tolist() == [[-1]]  # a row past the CTAs: not an expert


@pytest.mark.parametrize("change, reason", [
    (dict(num_tokens=0), "num_tokens=0"),
    (dict(logits_dtype="fp16"), "logits_dtype 'fp16'"),
    (dict(method="deepseek_v2"), "no trtllm-gen RoutingMethodType"),
    (dict(topk_group=5, n_group=8), "topk_group <= 4"),
    (dict(eps=0.0), "Σ + 1e-20"),
    (dict(renormalize=False), "always renormalize"),
    (dict(num_experts=512, n_group=8), "experts per group 64 > 32"),
])
def test_limits_name_the_violated_constraint(change, reason):
    assert tg.unsupported(DSV3) is None
    got = tg.unsupported(dataclasses.replace(DSV3, **change))
    assert got is not None and reason in got, got


def test_shared_experts_only_on_the_grouped_kernel():
    assert tg.unsupported(dataclasses.replace(DSV3, num_fused_shared_experts=2)) is None
    flat = RoutingConfig("deepseek_v3", 4, 256, 8, eps=tg.EPS, bias_dtype="fp32", num_fused_shared_experts=1)
    assert "grouped DeepSeekV3 kernel" in tg.unsupported(flat)


def test_launch_failures_seen_on_the_h200_are_declared_limits():
    """What the first H200 campaign hit: E above a method's largest compiled tier, Llama4 above 128 experts, and
    the null bias pointer of the routingCustom sigmoid-bias kernels (the open crash fixture)."""
    assert "largest compiled kernel tier" in tg.unsupported(RoutingConfig("default", 1, 384, 1))
    assert tg.unsupported(RoutingConfig("renormalize", 1, 384, 1)) is None
    assert "largest compiled kernel tier" in tg.unsupported(RoutingConfig("llama4", 1, 256, 1))
    for no_bias in (RoutingConfig("deepseek_v3", 1, 256, 1, eps=tg.EPS), RoutingConfig("minimax2", 1, 256, 1,
                                                                                        eps=tg.EPS)):
        assert tg.NO_BIAS_CRASH in tg.unsupported(no_bias)
        assert tg.unsupported(dataclasses.replace(no_bias, bias_dtype="fp32")) is None
    assert tg.unsupported(DSV3) is None and DSV3.bias_dtype is None  # the grouped kernel checks for a null bias
    # the campaign without a preset after the case space reached top_k 32: no Tier<E, K> with K >= top_k
    assert "tier covers num_experts=9, top_k=9" in tg.unsupported(RoutingConfig("topk", 1, 9, 9))
    assert tg.unsupported(RoutingConfig("renormalize", 1, 48, 31)) is None
    # session 4 (tiles 1-256): FlashInfer's top_k < topk_group·E/n_group check holds ungrouped too (E = 1, top-1)
    one = RoutingConfig("deepseek_v3", 1, 1, 1, eps=tg.EPS, bias_dtype="fp32")
    assert "top_k < topk_group·E/n_group" in tg.unsupported(one)
    assert tg.unsupported(dataclasses.replace(one, num_experts=2)) is None


def test_preset_draws_only_supported_cases_over_every_method():
    from hypothesis import find, given, settings

    from difftest.model import presets

    strategy = presets.configs(presets.TRTLLM_GEN_ROUTING, "routing")

    @settings(max_examples=200, database=None, deadline=None)
    @given(strategy)
    def draw(c):
        assert tg.unsupported(c) is None, (c, tg.unsupported(c))
        assert c.tile_tokens_dim in (8, 16, 32, 64, 128)

    draw()
    for method in presets.TRTLLM_GEN_METHODS:  # every method is reachable, whatever the run's random choices
        find(strategy, lambda c, m=method: c.method == m, settings=settings(database=None, max_examples=2000))


def test_unavailable_on_cpu_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert tg.available() == "no CUDA device (torch.cuda.is_available() is False)"


@pytest.mark.parametrize("shard", [dict(), dict(local_expert_offset=32, local_num_experts=64)])
def test_comparator_checks_the_permutation_an_implementation_returns(shard):
    """The torch implementation's layout passes; each way of breaking it is a failure naming the entry."""
    from difftest.checking import check, impl_torch
    from difftest.model.case import Case

    c = dataclasses.replace(DSV3, num_tokens=9, num_fused_shared_experts=1, **shard)
    case = Case("routing", c, "normal", 3)
    assert check.run_case(impl_torch.TORCH, case).status == "pass"
    good = impl_torch.TORCH.run(case, __import__("difftest.model.generate", fromlist=["inputs"]).inputs(case))

    def broken(change):
        out = {k: np.array(v, copy=True) for k, v in good.items()}
        change(out)
        impl = impl_torch.TORCH._replace(run=lambda case, inputs: out)
        return check.run_case(impl, case)

    def swap_across_experts(o):
        e2p = o["expanded_idx_to_permuted_idx"]
        a, b = np.argwhere(e2p >= 0)[[0, -1]]
        e2p[tuple(a)], e2p[tuple(b)] = e2p[tuple(b)], e2p[tuple(a)]

    for change, words in [
        (lambda o: o["cta_idx_xy_to_mn_limit"].__setitem__(0, o["cta_idx_xy_to_mn_limit"][0] + 1), "mn_limit"),
        (lambda o: o["total_num_padded_tokens"].__setitem__(0, o["total_num_padded_tokens"][0] + 8), "total_num"),
        (swap_across_experts, "expanded_idx_to_permuted_idx"),
        (lambda o: o.pop("num_non_exiting_ctas"), "num_non_exiting_ctas"),
    ]:
        r = broken(change)
        assert r.status == "fail" and words in r.message, r.message


@pytest.mark.parametrize("method, E, k", [("default", 127, 9), ("sigmoid", 48, 31), ("sigmoid_renorm", 9, 9),
                                          ("topk", 19, 9), ("topk_sigmoid", 9, 9)])
def test_top_k_above_the_policys_tiers_is_declined(method, E, k):
    """Tier<128, 8> and Tier<256, 8> only for these policies: the H200 campaigns' RuntimeErrors ('no compiled tier
    covers numExperts=127 topK=9', fixtures moe-flashinfer.trtllm_gen_nogemm-10efbfdc2d4c and the routing
    campaign's) are declined with the reason; top_k 8 runs."""
    assert "no compiled routingCustom tier" in (tg.unsupported(RoutingConfig(method, 1, E, k, eps=tg.EPS)) or "")
    assert tg.unsupported(RoutingConfig(method, 1, E, 8, eps=tg.EPS)) is None
