"""SGLang ``moe_fused_gate``, bf16 instantiation: bf16 logits with the correction bias cast to bf16 by the caller,
as before the seed's fix (``correction_bias.to(hidden_states.dtype)``): the bias rounded to bf16, σ stored in bf16,
σ + b and the top-2 group sums computed in bf16 (cutlass::bfloat16_t arithmetic, each result rounded), the weights
renormalized in fp32. Kernel, limits and launch: impls/sglang/moe_fused_gate.py.
"""

from . import moe_fused_gate as _fp32
from ._env import problem, version  # noqa: F401 (version: the registry's)

NAME = "sglang.moe_fused_gate_bf16"
OP = "routing"
DETERMINISTIC = True
RECIPE = "sglang_moe_fused_gate_bf16"
KERNEL_DTYPE = "bf16"
SPACE = {**_fp32.SPACE, "logits_dtype": "bf16", "num_experts": _fp32.POWERS_OF_TWO[1:]}  # BF16_ONE_EXPERT


def available():
    return problem()


def unsupported(config):
    return _fp32._unsupported(config, KERNEL_DTYPE)


def run(config, inputs, device="cuda"):
    return _fp32._run(config, inputs, KERNEL_DTYPE, device)
