"""What every FlashInfer adapter needs: capability checks and numpy <-> torch conversion.

Capability checks return ``None`` or one line saying exactly why the kernel cannot run here. They never
start a JIT build or a download: the trtllm-gen cubins are fetched from NVIDIA's artifactory on first
use, with about a minute of retries when offline (docs/semantics.md §5.4), so an offline machine
without them is refused up front.
"""

import importlib.metadata
import importlib.util
import os
from pathlib import Path

import numpy as np

EXPECTED_VERSION = "0.7.2.post1"


def _dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def flashinfer_problem():
    """None when flashinfer-python EXPECTED_VERSION and apache-tvm-ffi import; else the reason."""
    found = _dist_version("flashinfer-python")
    if found is None:
        return f"flashinfer-python is not installed (expected {EXPECTED_VERSION})"
    if found != EXPECTED_VERSION:
        return f"flashinfer-python {found} is installed, expected {EXPECTED_VERSION}"
    if importlib.util.find_spec("tvm_ffi") is None:
        return "apache-tvm-ffi is not installed (flashinfer imports tvm_ffi)"
    try:
        import flashinfer.fused_moe  # noqa: F401
    except Exception as e:  # an import that fails for any reason makes the adapter unusable
        return f"import flashinfer.fused_moe failed: {type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def cuda_problem(capabilities):
    """None when a CUDA device with one of ``capabilities`` ((major, minor) pairs) is visible."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) not in capabilities:
        wanted = "/".join(f"{a}.{b}" for a, b in capabilities)
        return f"compute capability {major}.{minor} not supported (needs {wanted})"
    return None


def cubin_dir():
    """The directory FlashInfer reads cubins from (jit/env.py priority: env var, flashinfer-cubin, cache)."""
    from flashinfer.jit import env

    return Path(env.FLASHINFER_CUBIN_DIR)


def cubin_problem():
    """None when the trtllm-gen batched-GEMM artifacts are present locally; else why not.

    Checks the same files ``gen_trtllm_gen_fused_moe_sm100_module`` fetches first (checksums.txt and
    include/flashinferMetaInfo.h under ArtifactPath.TRTLLM_GEN_BMM), so a miss here is a miss there.
    """
    from flashinfer.artifacts import ArtifactPath

    cubin_version = _dist_version("flashinfer-cubin")
    if cubin_version is not None and cubin_version != _dist_version("flashinfer-python") \
            and not os.environ.get("FLASHINFER_CUBIN_DIR"):
        return (f"flashinfer-cubin {cubin_version} does not match flashinfer-python "
                f"{_dist_version('flashinfer-python')}, and FLASHINFER_CUBIN_DIR is unset")
    root = cubin_dir() / ArtifactPath.TRTLLM_GEN_BMM
    for rel in ("checksums.txt", "include/flashinferMetaInfo.h"):
        if not (root / rel).is_file():
            return (f"trtllm-gen cubins unavailable offline: {root / rel} is missing (set FLASHINFER_CUBIN_DIR, "
                    f"install flashinfer-cubin=={EXPECTED_VERSION}, or run `flashinfer download-cubin` online)")
    return None


def first_problem(*checks):
    for check in checks:
        problem = check()
        if problem is not None:
            return problem
    return None


def to_torch(x, dtype, device):
    """numpy -> torch: float32 holding bf16 values -> bf16 (exact); uint8 codes -> float8_e4m3fn view."""
    import torch

    x = np.ascontiguousarray(x)
    if dtype == "e4m3fn":
        return torch.from_numpy(x.astype(np.uint8)).view(torch.float8_e4m3fn).to(device)
    t = torch.from_numpy(x.astype(np.float32))
    if dtype == "bf16":
        rounded = t.to(torch.bfloat16)
        if not torch.equal(rounded.float(), t):
            raise ValueError("bf16 input holds values that are not exactly representable in bf16")
        return rounded.to(device)
    return t.to(getattr(torch, {"fp32": "float32", "int32": "int32"}[dtype])).to(device)


def raise_pending_launch_error(device):
    """Raise here the error of a kernel launch that failed without raising. A launch CUDA refuses (a 0-block grid:
    "invalid configuration argument") only sets the runtime's last error; the next launch checked in the process
    reports it as its own, and a device-to-host copy does not check it at all. One trivial launch, checked by torch,
    attributes the error to the call that caused it."""
    import torch

    if torch.device(device).type == "cuda":
        torch.empty(1, device=device).zero_()


def to_numpy(t):
    """torch -> numpy: bf16/fp16/fp32 -> float32 (exact), float8 -> uint8 codes, ints unchanged."""
    import torch

    t = t.detach().cpu()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8).numpy()
    if t.is_floating_point():
        return t.float().numpy()
    return t.numpy()


def prepared_inputs_problem(config):
    """None for a moe case in the form these adapters take (fp32 FP8 scales, prepared expert weights); else why
    not: UE8M0 scales (MoEConfig.scale_fmt) and unquantized expert weights (MoEConfig.expert_weights) are not
    adapted here."""
    if getattr(config, "scale_fmt", "fp32") != "fp32":
        return f"scale_fmt={config.scale_fmt!r}: this adapter takes fp32 scales"
    if getattr(config, "expert_weights", "prepared") != "prepared":
        return f"expert_weights={config.expert_weights!r}: this adapter takes prepared (quantized) expert weights"
    return None
