"""trtllm-gen dev-kernel adapters on CPU: argument checks (python and the built binding), the finalize variant
rule, the scale-factor layouts. The kernels themselves run in campaigns/trtllm_gen_dev_ops_smoke.py."""

import ctypes
import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="flashinfer-python not installed "
                       "(pip install --no-deps flashinfer-python==0.7.2.post1 apache-tvm-ffi)"),
]
torch = pytest.importorskip("torch")

from impls.flashinfer import _trtllm_gen_ops as ops  # noqa: E402

BF16, FP8, I32, F32 = torch.bfloat16, torch.float8_e4m3fn, torch.int32, torch.float32
T, K, P, H = 3, 2, 16, 256


def z(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


def idx(num_tokens=T, top_k=K):
    return torch.arange(num_tokens * top_k, dtype=I32).view(num_tokens, top_k)


# (label, call, exception, fragment of the one-line message)
BAD_CALLS = [
    ("permute rows", lambda: ops.permute(z(T + 1, H), idx(), P), ValueError, "num_tokens=3"),
    ("permute idx dtype", lambda: ops.permute(z(T, H), idx().long(), P), TypeError, "must be int32"),
    ("permute scale H%128", lambda: ops.permute(z(T, 200), idx(), P, z(1, T, dtype=F32)), ValueError,
     "multiple of 128"),
    ("permute scale shape", lambda: ops.permute(z(T, H), idx(), P, z(T, 2, dtype=F32)), ValueError, "[2, 3]"),
    ("permute padded", lambda: ops.permute(z(T, H), idx(), 0), ValueError, "num_padded_tokens"),
    ("activation odd", lambda: ops.activation(z(P, 255), idx()), ValueError, "even and >= 128"),
    ("activation narrow", lambda: ops.activation(z(P, 64), idx()), ValueError, "even and >= 128"),
    ("activation fp8", lambda: ops.activation(z(P, H, dtype=FP8), idx()), TypeError, "bfloat16 or float16"),
    ("activation alpha alone", lambda: ops.activation(z(P, H), idx(), alpha=z(4, dtype=F32)), ValueError,
     "cta_idx_xy_to_batch_idx"),
    ("activation control lengths", lambda: ops.activation(z(P, H), idx(), alpha=z(4, dtype=F32), beta=z(5, dtype=F32)),
     ValueError, "same length"),
    ("activation tile map short", lambda: ops.activation(z(P, H), idx(), alpha=z(4, dtype=F32),
                                                         cta_idx_xy_to_batch_idx=z(1, dtype=I32), tile_tokens_dim=8),
     ValueError, ">= ceil(rows / tile_tokens_dim) = 2"),
    ("ds activation width", lambda: ops.activation_deepseek_fp8(z(P, 384, dtype=FP8), z(3, P, dtype=F32), idx()),
     ValueError, "multiple of 128"),
    ("ds activation dtype", lambda: ops.activation_deepseek_fp8(z(P, H), z(2, P, dtype=F32), idx()), TypeError,
     "float8_e4m3fn"),
    ("ds activation scale", lambda: ops.activation_deepseek_fp8(z(P, H, dtype=FP8), z(P, 2, dtype=F32), idx()),
     ValueError, "[2, 16]"),
    ("convertsf layout", lambda: ops.convertsf(z(512, dtype=torch.uint8), 4, 4, "R64c4"), ValueError, "R128c4"),
    ("convertsf cols", lambda: ops.convertsf(z(1024, dtype=torch.uint8), 4, 6, "R128c4"), ValueError,
     "multiple of 4"),
    ("convertsf r8c16 cols", lambda: ops.convertsf(z(1024, dtype=torch.uint8), 4, 8, "R8c16"), ValueError,
     "multiple of 16"),
    ("convertsf short", lambda: ops.convertsf(z(511, dtype=torch.uint8), 4, 4, "R128c4"), ValueError, "= 512"),
    ("convertsf dtype", lambda: ops.convertsf(z(512), 4, 4, "R128c4"), TypeError, "one-byte"),
    ("finalize top_k", lambda: ops.finalize(z(P, H), idx(1, 65)), ValueError, "top_k must be <= 64"),
    ("finalize hidden", lambda: ops.finalize(z(P, H), idx(), hidden=H + 1), ValueError, "hidden_padded=256"),
    ("finalize weights", lambda: ops.finalize(z(P, H), idx(), z(T, K + 1)), ValueError, "[3, 2]"),
    ("finalize weights dtype", lambda: ops.finalize(z(P, H), idx(), z(T, K, dtype=torch.float16)), TypeError,
     "bfloat16 or float32"),
    ("finalize second input", lambda: ops.finalize(z(P, H), idx(), gemm2_out2=z(P, H, dtype=torch.float16)),
     TypeError, "gemm2_out2 must be bfloat16"),
    ("ds finalize weights", lambda: ops.finalize_deepseek_fp8(z(P, H), None, idx()), ValueError, "required"),
    ("ds finalize hidden", lambda: ops.finalize_deepseek_fp8(z(P, H), z(T, K), idx(), hidden=200), ValueError,
     "multiple of 128"),
    ("ds finalize scale", lambda: ops.finalize_deepseek_fp8(z(P, H, dtype=FP8), z(T, K), idx(), z(P, 2, dtype=F32)),
     ValueError, "[2, 16]"),
]

# Valid arguments: they pass every check and stop at the device.
GOOD_CALLS = [
    ("permute", lambda: ops.permute(z(T, H, dtype=FP8), idx(), P, z(2, T, dtype=F32))),
    ("activation", lambda: ops.activation(z(P, H), idx(), alpha=z(4, dtype=F32), beta=z(4, dtype=F32),
                                          cta_idx_xy_to_batch_idx=z(2, dtype=I32), tile_tokens_dim=8)),
    ("activation_deepseek_fp8", lambda: ops.activation_deepseek_fp8(z(P, H, dtype=FP8), z(2, P, dtype=F32), idx())),
    ("convertsf", lambda: ops.convertsf(z(1024, dtype=torch.uint8), 4, 16, "R8c16")),
    ("finalize", lambda: ops.finalize(z(P, H), idx(), z(T, K, dtype=F32), hidden=128, gemm2_out2=z(P, H))),
    ("finalize_deepseek_fp8", lambda: ops.finalize_deepseek_fp8(z(P, H, dtype=FP8), z(T, K), idx(),
                                                                z(2, P, dtype=F32))),
]


@pytest.mark.parametrize("call, kind, fragment", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_arguments_raise_one_line_naming_the_constraint(call, kind, fragment):
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert fragment in message and "\n" not in message, f"got {kind.__name__}: {message!r}"


@pytest.mark.parametrize("call", [c[1] for c in GOOD_CALLS], ids=[c[0] for c in GOOD_CALLS])
def test_valid_arguments_pass_every_check_and_stop_at_the_device(call):
    with pytest.raises(ValueError, match="must be CUDA tensors"):
        call()


@pytest.mark.parametrize("num_tokens, hidden, hidden_padded, top_k, dtype, expected", [
    (5, 256, 256, 8, BF16, ("small_batch", 2)),      # 1 * 5 < 1184, aligned, 4 < 8 <= 64
    (5, 256, 256, 9, BF16, ("small_batch", 4)),      # least power of two with 4 * k_split >= 9
    (5, 256, 256, 64, BF16, ("small_batch", 16)),
    (5, 256, 256, 4, BF16, ("scalar", 1)),           # top_k <= 4: one group, no split
    (1183, 256, 256, 8, BF16, ("small_batch", 2)),   # 1183 CTAs: still under 1184
    (1184, 256, 256, 8, BF16, ("vec_load", 1)),
    (592, 512, 512, 8, BF16, ("vec_load", 1)),       # 2 * 592 = 1184
    (2000, 250, 256, 8, BF16, ("scalar", 1)),        # 250 bf16 is not whole 16-byte vectors
    (2000, 264, 264, 8, FP8, ("scalar", 1)),         # 264 e4m3 is not whole 16-byte vectors
    (2000, 264, 264, 8, BF16, ("vec_load", 1)),
    (9000, 256, 256, 8, BF16, ("vec_load", 1)),      # min(T, 8192) CTAs along y
])
def test_finalize_variant_follows_run(num_tokens, hidden, hidden_padded, top_k, dtype, expected):
    assert ops.finalize_variant(num_tokens, hidden, hidden_padded, top_k, dtype) == expected


def sf_offset(layout, i, j, n):
    """SfLayoutDecl.h's element position, written out per layout: the offset of (i, j) in an [M, n] tensor."""
    if layout == "R128c4":
        return (((i // 128 * (n // 4) + j // 4) * 32 + i % 32) * 4 + (i % 128) // 32) * 4 + j % 4
    cols = 4 if layout == "R8c4" else 16
    return ((i // 8 * (n // cols) + j // cols) * 8 + i % 8) * cols + j % cols


@pytest.mark.parametrize("layout, m, n", [("R128c4", 130, 8), ("R8c4", 13, 12), ("R8c16", 9, 32)])
def test_sf_from_linear_places_each_element_as_declared(layout, m, n):
    linear = torch.arange(m * n, dtype=torch.int32).view(m, n)
    flat = ops.sf_from_linear(linear, layout)
    rows = -(-m // (128 if layout == "R128c4" else 8)) * (128 if layout == "R128c4" else 8)
    assert flat.numel() == rows * n
    for i in range(m):
        for j in range(n):
            assert flat[sf_offset(layout, i, j, n)] == linear[i, j], f"{layout}: element ({i}, {j})"
    placed = torch.zeros(flat.numel(), dtype=torch.bool)
    placed[[sf_offset(layout, i, j, n) for i in range(m) for j in range(n)]] = True
    assert (flat[~placed] == 0).all(), f"{layout}: padding is not zero"


def binding():
    """The built library in DIFFTEST_TRTLLM_GEN_PREBUILT, loaded without a GPU, or a skip."""
    import tvm_ffi

    name = "difftest_trtllm_gen_dev_kernels_sm90a.so"
    folder = os.environ.get("DIFFTEST_TRTLLM_GEN_PREBUILT")
    found = [Path(folder) / name] if folder and (Path(folder) / name).is_file() else []
    if not found:
        pytest.skip(f"{name} not in DIFFTEST_TRTLLM_GEN_PREBUILT={folder or ''} (docs/trtllm_gen_dev_kernels.md, "
                    "'Building')")
    cudart = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64" / "libcudart.so.13"
    try:
        if cudart.is_file():
            ctypes.CDLL(str(cudart), mode=ctypes.RTLD_GLOBAL)
        return tvm_ffi.load_module(str(found[0]))
    except OSError as error:
        pytest.skip(f"cannot load {found[0]} here: {error}")


# Calls straight into the binding with CPU tensors: its checks run before any CUDA call.
BINDING_CALLS = [
    ("permute", lambda m: m.permute(z(T, H), z(P, H + 1), idx(), z(1, dtype=I32), None, None, False),
     "output must be [num_padded_tokens, hidden]"),
    ("permute", lambda m: m.permute(z(T, H), z(P, H), idx(), z(1, dtype=I32), z(2, T, dtype=F32), None, False),
     "given together"),
    ("activation", lambda m: m.activation(z(P, 100), z(P, 50), idx(), None, None, None, None, 0, False),
     "even and >= 128"),
    ("activation", lambda m: m.activation(z(P, H), z(P, H // 2), idx(), z(4, dtype=F32), None, None, None, 8, False),
     "cta_idx_xy_to_batch_idx is required"),
    ("activation_deepseek_fp8", lambda m: m.activation_deepseek_fp8(
        z(P, H, dtype=FP8), z(2, P, dtype=F32), z(P, H // 2, dtype=FP8), z(2, P, dtype=F32), idx(), z(1, dtype=I32),
        None, None, None, None, 0, False), "output_scale must have shape [1, 16]"),
    ("convertsf", lambda m: m.convertsf(z(512, dtype=torch.uint8), z(4, 4, dtype=torch.uint8), 4, 4, "Linear", False),
     "src_layout must be"),
    ("finalize", lambda m: m.finalize(z(P, H), None, z(T, H + 8), None, idx(), False), "hidden_padded"),
    ("finalize_deepseek_fp8", lambda m: m.finalize_deepseek_fp8(
        z(P, H), None, z(T, 192), None, z(T, K), idx(), z(1, dtype=I32), False), "multiple of 128"),
]
BINDING_GOOD = [
    ("permute", lambda m: m.permute(z(T, H), z(P, H), idx(), z(1, dtype=I32), None, None, False)),
    ("activation", lambda m: m.activation(z(P, H), z(P, H // 2), idx(), None, None, None, None, 0, False)),
    ("convertsf", lambda m: m.convertsf(z(512, dtype=torch.uint8), z(4, 4, dtype=torch.uint8), 4, 4, "R128c4",
                                        False)),
    ("finalize", lambda m: m.finalize(z(P, H), z(P, H), z(T, 128), z(T, K, dtype=F32), idx(), False)),
    ("finalize_deepseek_fp8", lambda m: m.finalize_deepseek_fp8(
        z(P, H, dtype=FP8), z(2, P, dtype=F32), z(T, H, dtype=FP8), z(2, T, dtype=F32), z(T, K), idx(),
        z(1, dtype=I32), False)),
]


@pytest.mark.parametrize("call, fragment", [c[1:] for c in BINDING_CALLS], ids=[c[0] for c in BINDING_CALLS])
def test_binding_rejects_bad_arguments_before_any_cuda_call(call, fragment):
    module = binding()
    with pytest.raises(Exception) as info:
        call(module)
    assert fragment in str(info.value), f"binding said {info.value!r}"


@pytest.mark.parametrize("call", [c[1] for c in BINDING_GOOD], ids=[c[0] for c in BINDING_GOOD])
def test_binding_accepts_valid_arguments_up_to_the_device_check(call):
    module = binding()
    with pytest.raises(Exception, match="must be a CUDA tensor"):
        call(module)


def test_kernels_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the kernels run in campaigns/trtllm_gen_dev_ops_smoke.py on the H200")
    out = ops.finalize(torch.ones(4, 256, dtype=BF16, device="cuda"), idx(2, 2).cuda(),
                       torch.full((2, 2), 0.5, dtype=BF16, device="cuda"))
    assert torch.equal(out, torch.ones(2, 256, dtype=BF16, device="cuda")), "0.5 * 1 + 0.5 * 1 != 1"
