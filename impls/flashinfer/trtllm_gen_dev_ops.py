"""FlashInfer's trtllm-gen MoE dev kernels as the tester's ``trtllm_ops`` op: permute, activation,
activation_deepseek_fp8, convertsf, finalize, finalize_deepseek_fp8, one launch each through ``_trtllm_gen_ops``
(the project's tvm-ffi binding of FlashInfer's trtllm_fused_moe_dev_kernel.cu, built for the device's arch;
docs/trtllm_gen_dev_kernels.md). The case's ``kernel`` picks the function; inputs and outputs are the keys of
difftest/model/generate.py's dev_kernel_inputs and difftest/checking/impl_spec.py's dev_kernel (numpy; bf16 / fp16
values as float32, e4m3 as uint8 codes).
"""

import numpy as np

from . import trtllm_gen_routing as routing
from ._env import to_numpy

NAME = "flashinfer.trtllm_gen_dev_ops"
OP = "trtllm_ops"
DETERMINISTIC = True  # no atomics: every kernel writes each output element once, sums in a fixed order
RECIPE = None  # compare.compare_trtllm_ops takes its allowances from spec/bounds.py, not from a recipe


def available():
    """The routing adapter's checks (flashinfer-python, a CUDA device of an arch it builds), then the exported
    trtllm-gen headers the dev-kernel module is built from."""
    from . import _trtllm_gen_jit as jit

    return routing.available() or jit.export_headers()[1]


def unsupported(config):
    """None when a DevKernelConfig is inside what the binding takes; else the violated constraint."""
    c = config
    if c.kernel == "activation" and 2 * c.hidden_size < 128:
        return f"activation: 2I = {2 * c.hidden_size} < 128 (run() launches 2I/128 CTAs)"
    if c.kernel == "finalize" and c.top_k > 64:
        return f"finalize: top_k={c.top_k} > 64 (its shared-memory tables)"
    return None


def _tensor(a, dtype, device):
    import torch

    a = np.ascontiguousarray(a)
    if dtype == "e4m3":
        return torch.from_numpy(a.astype(np.uint8)).view(torch.float8_e4m3fn).to(device)
    if dtype in ("bf16", "fp16"):
        return torch.from_numpy(a.astype(np.float32)).to({"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]) \
            .to(device)
    return torch.from_numpy(a.copy()).to(device)  # a copy: torch warns on a read-only array (a fixture's inputs)


def run(config, inputs, device="cuda"):
    """One dev-kernel launch on the case's inputs -> {"out"} (+ "out_scale")."""
    import torch

    from . import _trtllm_gen_ops as ops

    c = config
    t = {k: _tensor(v, None, device) for k, v in inputs.items()}
    if c.kernel == "convertsf":
        out = {"out": ops.convertsf(t["sf"], c.num_tokens, c.hidden_size, c.sf_layout)}
    elif c.kernel == "permute":
        got = ops.permute(_tensor(inputs["hidden_states"], c.dtype, device), t["expanded_idx_to_permuted_idx"],
                          int(inputs["num_padded_tokens"]), t.get("hidden_states_scale"))
        out = dict(zip(("out", "out_scale"), got if isinstance(got, tuple) else (got,), strict=False))
    elif c.kernel == "finalize_deepseek_fp8":
        q, s = ops.finalize_deepseek_fp8(_tensor(inputs["gemm2_out"], c.dtype, device),
                                         _tensor(inputs["expert_weights"], "bf16", device),
                                         t["expanded_idx_to_permuted_idx"], t["gemm2_out_scale"])
        out = {"out": q, "out_scale": s}
    elif c.kernel == "finalize":
        w = inputs.get("expert_weights")
        out = {"out": ops.finalize(_tensor(inputs["gemm2_out"], c.dtype, device), t["expanded_idx_to_permuted_idx"],
                                   None if w is None else _tensor(w, "bf16", device), hidden=c.hidden_size)}
    else:
        controls = {k: t[k] for k in ("alpha", "beta", "clamp_limit", "cta_idx_xy_to_batch_idx") if k in t}
        if controls:
            controls["tile_tokens_dim"] = c.tile_tokens_dim
        x = _tensor(inputs["gemm1_out"], c.dtype, device)
        if c.kernel == "activation":
            out = {"out": ops.activation(x, t["expanded_idx_to_permuted_idx"], **controls)}
        else:
            q, s = ops.activation_deepseek_fp8(x, t["gemm1_out_scale"], t["expanded_idx_to_permuted_idx"], **controls)
            out = {"out": q, "out_scale": s}
    torch.cuda.synchronize()
    return {k: to_numpy(v) for k, v in out.items()}
