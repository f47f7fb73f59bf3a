"""SGLang per-token-group FP8 quantization, v1 kernel at every group size (csrc/gemm/per_token_group_quant_8bit.cu;
what the wrapper runs for group sizes other than 16..128, and for any with enable_v2=False). Buffers, layouts and
launch: impls/sglang/per_token_group_quant_8bit.py.

v1 (-use_fast_math, SASS in docs/sglang.md), bf16 / fp16 / fp32 inputs: amax = max(eps, |x|...) (fmaxf);
s = fl(amax·MUFU.RCP(448)) = fl(amax·fl(1/448)); q = e4m3_satfinite(clamp(fl(x·MUFU.RCP(s)), ±448)): variant
"mul_mufu_rcp_scale" (spec.hopper.hopper_rcp: the measured reciprocal of every fp32 s). UE8M0 (source
`y_s = exp2f(ceilf(log2f(fmaxf(y_s, 1e-10f))))`, byte `(uint8_t)(((int)log2f(y_s)) + 127)`):
s = MUFU.EX2(FRND.CEIL(MUFU.LG2(max(s, 1e-10)))), byte F2I.TRUNC(MUFU.LG2(s)) + 127: a second floor at 1e-10 on
the scale (not the amax), an approximate log2 where the spec rounds s up by its bits, and a byte that is one above
the scale's exponent for every s < 1 (open fixture sglang-per_token_group_quant_8bit_v1-ue8m0_exponent_plus_one,
docs/sglang.md §8).
"""

from . import per_token_group_quant_8bit as _wrapper
from ._env import problem, version  # noqa: F401 (version: the registry's)

NAME = "sglang.per_token_group_quant_8bit_v1"
OP = "quant"
DETERMINISTIC = True
RECIPE = None
# UE8M0 scales only as SGLang allocates them for DeepGEMM: packed, K/128 groups (the wrapper's _unsupported), a joint
# limit on three fields (difftest/model/where.py); with fp32 scales v1 draws every group size and layout
SPACE = {"scheme": "fp8_group", "variant": _wrapper.VARIANT["v1"], "scale_formula": _wrapper.SCALE_FORMULA,
         "layout": {"scale_fmt=ue8m0": "ue8m0_packed"}, "group_size": {"scale_fmt=ue8m0": 128}}


def available():
    return problem()


def unsupported(config):
    return _wrapper._unsupported(config, "v1")


def run(config, inputs, device="cuda"):
    return _wrapper._run(config, inputs, False, device)
