"""Expert MLP: activations, the gate/up half order of w13, and one expert's float64 MLP.

Semantics: docs/semantics.md §4.1-§4.2, §5.2. Gated activations read w13 = [E, 2I, H]
as two halves, gate and up; non-gated ones read w13 = [E, I, H]. The half order is a property of the data:
"gate_up" ([gate; up]: checkpoints, SGLang/vLLM Triton, FlashInfer mono_moe) or "up_gate" ([up; gate]:
FlashInfer trtllm-gen and CUTLASS). Converting is swap_halves, never a silent reinterpretation.
Every function here is exact float64 math; rounding belongs to the caller (spec/layer.py).
"""

import math

import numpy as np

GATED_ACTIVATIONS = ("swiglu", "geglu", "geglu_tanh")
NON_GATED_ACTIVATIONS = ("relu2", "silu", "gelu", "identity")
ACTIVATIONS = GATED_ACTIVATIONS + NON_GATED_ACTIVATIONS
HALF_ORDERS = ("gate_up", "up_gate")

_erf = np.vectorize(math.erf, otypes=[np.float64])


def sigmoid(x):
    """σ(x) = 1/(1 + e^-x), as exp(-log(1 + e^-x)): no overflow for any finite x; NaN stays NaN."""
    with np.errstate(invalid="ignore"):  # numpy's logaddexp flags a NaN operand, which simply propagates
        return np.exp(-np.logaddexp(0.0, -np.asarray(x, np.float64)))


def silu(x):
    """silu(x) = x·σ(x)."""
    return np.asarray(x, np.float64) * sigmoid(x)


def gelu(x):
    """gelu(x) = x/2·(1 + erf(x/√2)) (exact erf GELU, CUDA gelu_and_mul)."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    """gelu_tanh(x) = x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (tanh approximation, Triton)."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def relu2(x):
    """relu2(x) = max(x, 0)² (non-gated, Nemotron-H)."""
    return np.square(np.maximum(np.asarray(x, np.float64), 0.0))


def identity(x):
    """identity(x) = x."""
    return np.asarray(x, np.float64)


def swiglu(gate, up):
    """swiglu(gate, up) = silu(gate)·up (silu_and_mul)."""
    return silu(gate) * up


def geglu(gate, up):
    """geglu(gate, up) = gelu(gate)·up (gelu_and_mul, erf GELU)."""
    return gelu(gate) * up


def geglu_tanh(gate, up):
    """geglu_tanh(gate, up) = gelu_tanh(gate)·up."""
    return gelu_tanh(gate) * up


# The elementwise nonlinearity of each activation: the gated ones apply it to the gate half only.
NONLINEARITY = {
    "swiglu": silu,
    "geglu": gelu,
    "geglu_tanh": gelu_tanh,
    "relu2": relu2,
    "silu": silu,
    "gelu": gelu,
    "identity": identity,
}


def check_activation(activation, half_order="gate_up"):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not one of {ACTIVATIONS}")
    if half_order not in HALF_ORDERS:
        raise ValueError(f"half_order={half_order!r} is not one of {HALF_ORDERS}")


def swap_halves(w13):
    """[A; B] -> [B; A] along axis -2: gate_up <-> up_gate. Works on values, codes and per-row or per-block
    scales alike (w13 block scales [.., 2·ceil(I/128), ceil(H/128)] swap their two ceil-ed halves)."""
    w13 = np.asarray(w13)
    if w13.ndim < 2 or w13.shape[-2] % 2:
        raise ValueError(f"swap_halves needs an even number of rows on axis -2, got shape {w13.shape}")
    half = w13.shape[-2] // 2
    return np.concatenate([w13[..., half:, :], w13[..., :half, :]], axis=-2)


def split_halves(h, half_order):
    """(gate, up) halves of the last axis of a GEMM1 output h [.., 2I] stored in `half_order`."""
    if h.shape[-1] % 2:
        raise ValueError(f"a gated GEMM1 output needs an even last axis, got shape {h.shape}")
    first, second = np.split(h, 2, axis=-1)
    return (first, second) if half_order == "gate_up" else (second, first)


def expert_mlp(x, w13, w2, activation, half_order="gate_up"):
    """y = W2·act(W13·x) in float64: x [T, H], w13 [2I or I, H], w2 [H, I] -> [T, H]; gated act(h) =
    f(gate)·up with the halves of h read in `half_order`."""
    check_activation(activation, half_order)
    h = np.asarray(x, np.float64) @ np.asarray(w13, np.float64).T
    f = NONLINEARITY[activation]
    if activation in GATED_ACTIVATIONS:
        gate, up = split_halves(h, half_order)
        a = f(gate) * up
    else:
        a = f(h)
    return a @ np.asarray(w2, np.float64).T
