"""Implementations with planted bugs, loaded as plug-ins (tests/plugins/planted_bugs.py:NAME).

ONE_SEED_IN_64, for tests of shared example databases (tests/difftest/running/test_redis_db.py): torch's routing, except
that for one case seed in 64 the first token's first weight is doubled. A campaign of hundreds of examples finds it; a
few fresh examples almost never do. RNE_ACC / TRUNCATING_ACC (below): a correct fp32-store layer and its twin with a
truncating accumulator, for the bias test (tests/difftest/checking/test_bias.py); their *_EXPF twins and WEIGHTS_LOW
under an expf recipe."""

import numpy as np
import torch

import impls.torch_eager as te
from difftest.checking.impl_spec import routing_kwargs
from difftest.checking.impl_torch import TORCH
from difftest.model.generate import weights as generated_weights
from spec.recipes import Recipe
from spec.routing import METHODS

EVERY = 64


def _run(case, inputs):
    out = TORCH.run(case, inputs)
    if case.seed % EVERY != 17 or out["weights"].size == 0:
        return out
    weights = out["weights"].copy()
    weights[0, 0] *= 2
    return {**out, "weights": weights}


ONE_SEED_IN_64 = TORCH._replace(name="planted:one_seed_in_64", ops=("routing",), run=_run)


# ---- fp32 stores, and an accumulator that truncates (issue 21: the bug no worst-case bound sees)
# A bf16-path layer that stores everything in fp32 (FP32_STORES: gemm1_out, act_out, expert_out, out), so that
# every accumulation error reaches the output. RNE_ACC sums its GEMMs with torch's fp32 matmul (a correct
# implementation of the recipe); TRUNCATING_ACC sums them in K order in an fp32 accumulator that rounds toward
# zero. The truncation changes nearly every output of every case, far below the hard bound (its worst case over
# summation orders), but always toward zero of the partial sums: the bias test (difftest/checking/bias.py) is what sees
# it.
FP32_STORES = Recipe(name="fp32_stores", gemm1_out="fp32", act_out="fp32", expert_out="fp32", out="fp32",
                     requant_intermediate=False)


def _truncating_mm(a, w):
    """fp32 a @ w.T, each product added in K order to an fp32 accumulator that rounds toward zero."""
    p = a.unsqueeze(1) * w.unsqueeze(0)  # [n, N, K] fp32 products (exact for bf16 operands)
    acc = torch.zeros(p.shape[:2], dtype=torch.float32)
    for k in range(p.shape[-1]):
        s = acc.double() + p[..., k].double()  # exact: two fp32 values within 2^29 of each other
        f = s.float()
        acc = torch.where(f.double().abs() > s.abs(), torch.nextafter(f, torch.zeros_like(f)), f)
    return acc


def _rne_mm(a, w):
    return a @ w.t()


def _fp32_layer(mm, weigh=None):
    def run(case, inputs):
        c = case.config
        routing = {**routing_kwargs(c.routing), "bias_dtype": "fp32", "weights_dtype": "fp32"}
        bias = inputs.get("bias")
        ids, w, _, rsf = te.layer.layer_routing(
            torch.from_numpy(np.array(inputs["logits"], np.float32)),
            None if bias is None else torch.from_numpy(np.array(bias, np.float32)), routing, c.rsf_placement, None)
        w = w if weigh is None else weigh(w, c)
        x = torch.from_numpy(np.array(inputs["hidden"], np.float32))
        source = generated_weights(case)
        hi = c.local_expert_offset + (c.routing.num_experts - c.local_expert_offset if c.local_num_experts is None
                                      else c.local_num_experts)
        acc = torch.zeros(x.shape, dtype=torch.float32)
        for e in sorted(set(ids.flatten().tolist())):
            if not c.local_expert_offset <= e < hi:
                continue
            tok, slot = torch.nonzero(ids == e, as_tuple=True)
            ew = {k: torch.from_numpy(np.array(v, np.float32)) for k, v in source.expert(e).items()}
            h = mm(x[tok], ew["w13"])
            wt = w[tok, slot].unsqueeze(1)
            if c.router_weight_on_input:
                h = h * wt
            y = mm(te.layer.act(h, c.activation, c.half_order), ew["w2"])
            acc.index_add_(0, tok, y if c.router_weight_on_input else y * wt)
        if c.rsf_placement == "combine" and rsf is not None:
            acc = (acc.double() * rsf).float()  # rsf as the spec applies it, a double (fp32: one-way by fl(rsf)/rsf)
        return {"out": acc.numpy(), "ids": ids.numpy(), "weights": w.numpy()}

    return run


def _fp32_unsupported(case):
    if case.op != "moe" or case.config.quant != "bf16" or case.config.hidden_dtype != "bf16":
        return "fp32-store plug-ins: moe bf16 path with bf16 hidden states only"
    if case.config.expert_weights != "prepared":
        return "fp32-store plug-ins: prepared (bf16) expert weights only, they prepare no weights of their own"
    return None


RNE_ACC = TORCH._replace(name="planted:fp32_stores", ops=("moe",), unsupported=_fp32_unsupported,
                         recipe=lambda case: FP32_STORES, run=_fp32_layer(_rne_mm))
TRUNCATING_ACC = RNE_ACC._replace(name="planted:truncating_fp32_accumulator", run=_fp32_layer(_truncating_mm))


# ---- the same layers under an expf recipe (issue 36: the bias test wherever it is sound). The recipe admits an
# expf of a few ulps, so its router weights are not held to symmetric errors; the layers expose their ids and
# weights, and the bias test takes their outputs at those weights (difftest/checking/bias.py, What H0 needs).
# WEIGHTS_LOW writes the router weights of the sigmoid methods one ulp toward zero, as an exp one ulp high leaves an
# expf sigmoid (inside the weight bound): a one-way routing bug under FP32_STORES (σ rounded once), a correct layer
# under EXPF_STORES.
EXPF_STORES = FP32_STORES.but(name="fp32_stores_expf", sigmoid="expf")
RNE_ACC_EXPF = RNE_ACC._replace(name="planted:fp32_stores_expf", recipe=lambda case: EXPF_STORES)
TRUNCATING_ACC_EXPF = TRUNCATING_ACC._replace(name="planted:truncating_fp32_accumulator_expf",
                                              recipe=lambda case: EXPF_STORES)


def _sigmoid_weights_low(w, config):
    return torch.nextafter(w, torch.zeros_like(w)) if METHODS[config.routing.method].scores == "sigmoid" else w


WEIGHTS_LOW = RNE_ACC._replace(name="planted:fp32_stores_weights_one_ulp_low",
                               run=_fp32_layer(_rne_mm, _sigmoid_weights_low))
WEIGHTS_LOW_EXPF = WEIGHTS_LOW._replace(name="planted:fp32_stores_expf_weights_one_ulp_low",
                                        recipe=lambda case: EXPF_STORES)
