"""Building FlashInfer's trtllm-gen non-GEMM kernels for the device in hand, Hopper included.

FlashInfer 0.7.2.post1 compiles the trtllm-gen routing stage only for SM100/SM120
(``gen_trtllm_gen_routing_module`` asks its compilation context for majors 10 and 12), although the
routing sources guard their cluster kernels with ``__CUDA_ARCH__ >= 900`` and build for ``sm_90a``.
This module builds the same source list through FlashInfer's own JIT (``flashinfer.jit.core.gen_jit_spec``)
for the arch of the device in hand, under its own module name so an SM90 build never shadows FlashInfer's.

Two things the build needs that FlashInfer normally fetches:

- the ``trtllmGen_bmm_export`` headers (``DtypeDecl.h``, ``SfLayoutDecl.h``, …). The registry's
  ``flashinfer-cubin`` wheel ships them under ``cubins/<hash>/batched_gemm-<…>/include/``; a GPU host needs
  either that package or just this folder (70 KB) at
  ``$FLASHINFER_CUBIN_DIR/flashinfer/trtllm/batched_gemm/trtllmGen_bmm_export``;
- ``-DTLLM_RUBIN_FEATURES``: ``batched_gemm/KernelRunner.h`` static-asserts an ``ActType::SiTuGlu``
  member that the published headers (flashinfer-cubin 0.6.13) lack; nothing else in these builds reads
  the macro.

The build is paid once per FlashInfer version and arch: FlashInfer's workspace
(``FLASHINFER_WORKSPACE_BASE``) keeps the built library, and ``prebuilt_dir`` lets a copied one be reused
on another host of the same arch without compiling (``DIFFTEST_TRTLLM_GEN_PREBUILT``).

Whatever goes wrong while preparing, building or loading a module (``spec``, ``load``) is raised as ``JitError``:
the tester's own machinery failed, not the kernel under test, and difftest counts such a case as a tester error,
never as a finding against the adapter (docs/plugins.md, "Tester errors").
"""

import functools
import os
import secrets
import shutil
import sys
from pathlib import Path

EXPORT_REL = Path("flashinfer/trtllm/batched_gemm/trtllmGen_bmm_export")
EXPORT_HEADERS = ("trtllm/gen/DtypeDecl.h", "trtllm/gen/SfLayoutDecl.h", "trtllm/gen/CudaArchDecl.h")

# flashinfer/jit/fused_moe.py: gen_trtllm_gen_routing_module's source list (file names under data/csrc).
ROUTING_SOURCES = (
    "trtllm_fused_moe_routing_binding.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_runner.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_deepseek.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_llama4.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_custom_block.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_custom_cluster.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_custom_cluster_large.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_custom_entry.cu",
    "fused_moe/trtllm_backend/trtllm_fused_moe_routing_common.cu",
)
# The project's binding, then FlashInfer's kernel definitions for DevKernel.h.
DEV_KERNEL_SOURCES = (
    str(Path(__file__).resolve().parent / "csrc" / "trtllm_gen_dev_kernels.cu"),
    "fused_moe/trtllm_backend/trtllm_fused_moe_dev_kernel.cu",
)
# The same defines FlashInfer passes to that build, plus the one the published headers need.
DEFINES = ("-DTLLM_GEN_EXPORT_INTERFACE", "-DTLLM_ENABLE_CUDA", "-DENABLE_BF16", "-DENABLE_FP8", "-DENABLE_FP4",
           "-DTLLM_RUBIN_FEATURES")


class JitError(RuntimeError):
    """Preparing, building or loading a module failed (a file race, a compiler error, a library that does not
    load). ``difftest_harness`` marks it as the tester's failure for difftest, which impls/ does not import
    (difftest/checking/interface.py ``is_harness_error``): the case is a tester error, not the kernel's finding."""

    difftest_harness = True


def _jit_step(what):
    """Decorator: an exception out of the function becomes a JitError naming ``what`` and the original exception."""

    def decorate(f):
        @functools.wraps(f)
        def wrapped(*args, **kwargs):
            try:
                return f(*args, **kwargs)
            except JitError:
                raise
            except Exception as e:
                line = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise JitError(f"{what}: {type(e).__name__}: {line}") from e

        return wrapped

    return decorate


def _header_root_candidates():
    """Directories that may hold ``trtllmGen_bmm_export``: FLASHINFER_CUBIN_DIR, then flashinfer-cubin."""
    env = os.environ.get("FLASHINFER_CUBIN_DIR")
    if env:
        yield Path(env) / EXPORT_REL
    try:
        import flashinfer_cubin
    except ImportError:
        return
    cubins = Path(flashinfer_cubin.__file__).parent / "cubins"
    yield from sorted(cubins.glob("*/batched_gemm-*/include/trtllmGen_bmm_export"))


def export_headers():
    """(path, None) for the first complete ``trtllmGen_bmm_export`` folder, or (None, why none was found)."""
    looked = []
    for root in _header_root_candidates():
        if all((root / h).is_file() for h in EXPORT_HEADERS):
            return root, None
        looked.append(str(root))
    where = ", ".join(looked) if looked else "FLASHINFER_CUBIN_DIR unset, flashinfer-cubin not installed"
    return None, (f"trtllmGen_bmm_export headers not found ({where}): install flashinfer-cubin or copy its "
                  f"include/trtllmGen_bmm_export folder to $FLASHINFER_CUBIN_DIR/{EXPORT_REL}")


def arch_of_device():
    """The device's arch as nvcc names it ('90a', '100a', …), from torch."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}{minor}a" if major >= 9 else f"{major}{minor}"


def gencode(arch):
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def _include_root(headers, module):
    """A folder under FlashInfer's workspace in which ``flashinfer/trtllm/batched_gemm/…`` resolves to ``headers``."""
    from flashinfer.jit import env

    return include_root(env.FLASHINFER_GEN_SRC_DIR, headers, module)


def include_root(gen_src_dir, headers, module):
    """``gen_src_dir/difftest_export/<module>``, in which ``EXPORT_REL`` is a link to ``headers``.

    Safe for processes that run it at once (a campaign's workers each build or load the module): the link is made
    under a name of this process's own and renamed onto ``EXPORT_REL`` (``rename`` replaces a link or file in one
    step), so a process never sees a half-made link and none fails because another got there first. A real folder
    in the link's place (a copied ``trtllmGen_bmm_export``) is renamed aside and removed first."""
    root = Path(gen_src_dir) / "difftest_export" / module
    link, target = root / EXPORT_REL, Path(headers).resolve()
    if _links_to(link, target):
        return root
    link.parent.mkdir(parents=True, exist_ok=True)
    own = link.with_name(f".{link.name}.{os.getpid()}-{secrets.token_hex(4)}")
    os.symlink(target, own, target_is_directory=True)
    try:
        if link.is_dir() and not link.is_symlink():
            _remove_aside(link)
        os.replace(own, link)
    except BaseException:
        own.unlink(missing_ok=True)
        raise
    return root


def _links_to(link, target):
    try:
        return Path(os.readlink(link)) == target
    except OSError:  # absent (or removed by another process just now), or not a link
        return False


def _remove_aside(path):
    """Rename ``path`` to a name of this process's own, then remove it; another process that renamed it first
    (or put its link there meanwhile, which this removes and the caller's rename puts back) is no error."""
    aside = path.with_name(f".{path.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if aside.is_symlink():
        aside.unlink()
    else:
        shutil.rmtree(aside)


@_jit_step("preparing the trtllm-gen JIT build")
def spec(name, sources, arch, headers, extra_flags=(), extra_includes=()):
    """A FlashInfer JitSpec for ``sources`` (paths, or names under FlashInfer's csrc) built for ``arch``."""
    from flashinfer.jit import env
    from flashinfer.jit.core import current_compilation_context, gen_jit_spec

    if not current_compilation_context.TARGET_CUDA_ARCHS:  # no device here: the arch is given, not probed
        minor = arch[-2:] if arch.endswith("a") else arch[-1:]
        current_compilation_context.TARGET_CUDA_ARCHS.add((int(arch[: -len(minor)]), minor))
    module = f"difftest_{name}_sm{arch}"
    csrc = Path(env.FLASHINFER_CSRC_DIR)
    paths = [s if Path(s).is_absolute() else csrc / s for s in sources]
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"FlashInfer source(s) not in this flashinfer-python: {', '.join(missing)}")
    includes = [csrc, csrc / "nv_internal", csrc / "nv_internal/include", _include_root(headers, module),
                *extra_includes]
    return gen_jit_spec(module, paths, extra_cuda_cflags=[gencode(arch), *DEFINES, *extra_flags],
                        extra_include_paths=[str(p) for p in includes])


def routing_spec(arch, headers):
    return spec("trtllm_gen_routing", ROUTING_SOURCES, arch, headers)


def dev_kernels_spec(arch, headers):
    """permute / activation / convertsf / finalize (DevKernel.h) behind the project's own tvm-ffi binding.

    The kernel source needs nothing else at link time: its host code only launches kernels and reads
    the device's SM count, and DevKernel.h's logging and checks are header-only.
    """
    return spec("trtllm_gen_dev_kernels", DEV_KERNEL_SOURCES, arch, headers)


@_jit_step("building or loading the trtllm-gen JIT module")
def load(jit_spec):
    """The module: a library copied from another host of the same arch (DIFFTEST_TRTLLM_GEN_PREBUILT, a folder
    holding ``<module>.so``) when one is there and loads, else FlashInfer's cached build, else a fresh build."""
    prebuilt = os.environ.get("DIFFTEST_TRTLLM_GEN_PREBUILT")
    so = Path(prebuilt or ".") / f"{jit_spec.name}.so"
    if prebuilt and so.is_file():
        try:
            return jit_spec.load(so)
        except Exception as e:  # e.g. a host whose C library is older than the builder's: build here instead
            print(f"difftest: prebuilt {so} does not load here ({type(e).__name__}: {str(e).splitlines()[0]}); "
                  "building", file=sys.stderr)
    return jit_spec.build_and_load()
