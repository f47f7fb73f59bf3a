"""What every SGLang adapter needs: the package and device checks, and a launch check after each kernel.

The checks return ``None`` or one line saying exactly why the kernels cannot run here, cheapest first: the
package's metadata (no import), then the CUDA device, then the import itself (which loads the 20 MB extension).
Only sglang-kernel EXPECTED_VERSION is accepted, and only on compute capability 9.0: sgl_kernel loads its SM90 build
(``sgl_kernel/sm90/common_ops.abi3.so``, compiled with -use_fast_math) on 9.0 and its precise-math SM100 build
everywhere else, and the recipes here describe the SM90 one.
"""

import ctypes
import importlib.metadata
import importlib.util

from impls.flashinfer._env import cuda_problem, first_problem, to_numpy, to_torch  # noqa: F401 (re-exported)

DIST = "sglang-kernel"
EXPECTED_VERSION = "0.4.4"
CAPABILITIES = ((9, 0),)
INSTALL = "tools/device_verify.sh unpacks it from .carry/sglang onto PYTHONPATH"


def version():
    try:
        return f"{DIST} {importlib.metadata.version(DIST)}"
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def package_problem():
    """None when sglang-kernel EXPECTED_VERSION and its sgl_kernel package are on the path; else the reason."""
    try:
        found = importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return f"sgl_kernel is not installed (expected {DIST} {EXPECTED_VERSION}; {INSTALL})"
    if found != EXPECTED_VERSION:
        return (f"{DIST} {found} is installed, expected {EXPECTED_VERSION} (the last release with moe_fused_gate "
                "whose SM90 library links against torch 2.11, docs/sglang.md)")
    if importlib.util.find_spec("sgl_kernel") is None:
        return f"{DIST} {found} metadata is present but the sgl_kernel package is not importable"
    return None


def import_problem():
    try:
        import sgl_kernel  # noqa: F401
    except Exception as e:  # an import that fails for any reason makes every adapter unusable
        return f"import sgl_kernel failed: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"
    return None


def problem():
    return first_problem(package_problem, lambda: cuda_problem(CAPABILITIES), import_problem)


def _cudart():
    import torch

    return ctypes.CDLL(f"libcudart.so.{torch.version.cuda.split('.')[0]}")  # already loaded by torch: by soname


def launch_check(kernel):
    """Raise with the CUDA error of the last launch (and clear it), so that a refused launch (a grid of zero
    blocks: cudaErrorInvalidConfiguration) fails this case, not whichever torch call checks next."""
    import torch

    torch.cuda.synchronize()
    lib = _cudart()
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    err = lib.cudaGetLastError()
    if err:
        raise RuntimeError(f"{kernel}: CUDA error {err} {lib.cudaGetErrorName(err).decode()} after the launch")
