"""Coverage: impls/torch_eager runs every configuration the spec runs, over routing method × activation ×
quantization path × logits dtype (the full product, no skips). Values are tests/impls/test_torch_vs_spec.py's business;
here a configuration counts as supported when the call returns outputs of the right shapes and dtypes.
"""

import itertools

import numpy as np
import pytest
import torch

import impls.torch_eager as te
from difftest.checking.impl_torch import expert_tensors
from difftest.model import generate as gen
from spec import routing as sr
from spec.layer import QUANT_PATHS, moe_layer
from spec.mlp import ACTIVATIONS, GATED_ACTIVATIONS
from spec.recipes import Recipe

DTYPES = ("fp32", "bf16", "fp16")
TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
STEP = {"bf16": 16, "fp8_block": 128, "mxfp8": 32, "nvfp4": 16}  # smallest H, I of each quant path
T, E = 2, 4
MATRIX = list(itertools.product(sr.ROUTING_METHODS, ACTIVATIONS, QUANT_PATHS, DTYPES))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_matrix_is_the_spec_matrix():
    """The axes are the spec's own tuples and torch declares the same names: a new spec entry lands here."""
    assert set(te.ROUTING_METHODS) == set(sr.ROUTING_METHODS), set(te.ROUTING_METHODS) ^ set(
        sr.ROUTING_METHODS
    )
    assert set(te.ACTIVATIONS) == set(ACTIVATIONS), set(te.ACTIVATIONS) ^ set(ACTIVATIONS)
    assert set(te.layer.QUANT_PATHS) == set(QUANT_PATHS), set(te.layer.QUANT_PATHS) ^ set(QUANT_PATHS)
    assert set(te.RECIPE) == set(QUANT_PATHS), (
        f"torch RECIPE declares {sorted(te.RECIPE)}, spec paths {QUANT_PATHS}"
    )



@pytest.mark.parametrize("method, activation, quant, dtype", MATRIX, ids=["-".join(c) for c in MATRIX])
def test_torch_supports(method, activation, quant, dtype):
    grouped = method in ("deepseek_v3", "deepseek_v2")
    routing = dict(
        method=method,
        top_k=1 if method == "llama4" else 2,
        n_group=2 if grouped else 1,
        topk_group=1,
        routed_scaling_factor=2.5,
    )
    H = I = STEP[quant]
    weights = gen.GeneratedWeights(0, quant, E, (2 if activation in GATED_ACTIVATIONS else 1) * I, H, I)
    hidden = gen.round_bf16(gen.normal(0, "hidden", (T, H)))
    logits = gen.round_to_dtype(gen.logits(0, "normal", T, E, routing["n_group"]), dtype)
    bias = gen.bias(0, "normal", E).astype(np.float32) if method in ("deepseek_v3", "minimax2") else None
    kw = dict(routing=routing, activation=activation, quant=quant)
    spec = moe_layer(hidden, logits, bias, weights, recipe=Recipe(**te.RECIPE[quant]), **kw)  # must not raise
    out = te.moe_layer(
        torch.from_numpy(hidden).bfloat16(),
        torch.from_numpy(logits).to(TORCH_DTYPE[dtype]),
        None if bias is None else torch.from_numpy(bias),
        expert_tensors(weights, quant),
        **kw,
    )
    assert out.out.dtype == torch.bfloat16 and tuple(out.out.shape) == spec.out.shape, (
        out.out.dtype,
        out.out.shape,
    )
    assert out.ids.dtype == torch.int32 and tuple(out.ids.shape) == spec.ids.shape, (
        out.ids.dtype,
        out.ids.shape,
    )
    assert tuple(out.weights.shape) == spec.weights.shape, (out.weights.shape, spec.weights.shape)
    assert np.isfinite(spec.out).all() == torch.isfinite(out.out).all().item(), "finiteness differs"
