#!/usr/bin/env bash
# Make .carry/ — what tools/device_verify.sh needs on an offline GPU host — on a machine with PyPI access and
# nvcc 13.0 but no GPU.  Usage: bash tools/make_carry.sh [CARRY_DIR] [JOBS]   (docs/gpu.md, "One-call verification")
#
#   flashinfer.tar.xz            flashinfer-python 0.7.2.post1 unpacked, without __pycache__ and the csrc folders
#                                the kernels under test do not build (≈ 15 MB)
#   apache_tvm_ffi-*.whl         its runtime for CPython 3.12 (3.3 MB)
#   cubin/flashinfer/trtllm/batched_gemm/trtllmGen_bmm_export/   headers from flashinfer-cubin (70 KB of 458 MB)
#   prebuilt/*.so                the sm_90a trtllm-gen routing and dev-kernel modules (≈ 10 MB; minutes per module)
#   sglang/sglang_kernel-0.4.4-sm90.tar.xz   sgl-kernel's Python files and SM90 library (14 MB; docs/sglang.md §2)
#
# Each step is skipped when its output exists, so a second run finishes what a first did not.  Downloads go to a
# scratch folder that is removed at the end.  The prebuild links against a stub libcuda.so and takes cuBLASLt's
# headers from the nvidia-cublas wheel, so no driver or full toolkit is needed on this machine.
set -euo pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
C=$(mkdir -p "${1:-$R/.carry}" && cd "${1:-$R/.carry}" && pwd)
JOBS=${2:-2}
PY=${PYTHON:-python3}
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
dl() { "$PY" -m pip download -q --no-deps -d "$S/dl" "$@"; }

if [ ! -f "$C/flashinfer.tar.xz" ]; then
  dl flashinfer-python==0.7.2.post1
  mkdir -p "$S/fi" && (cd "$S/fi" && unzip -q "$S"/dl/flashinfer_python-*.whl)
  find "$S/fi" -name __pycache__ -prune -exec rm -rf {} +
  for d in kda gdn fused_moe/cake_mxfp4_situ_moe cake_kimi_k3_situ; do rm -rf "$S/fi/flashinfer/data/csrc/$d"; done
  find "$S/fi/flashinfer/data/csrc" -maxdepth 1 -name 'cake_*' -exec rm -rf {} +
  tar -C "$S/fi" -cJf "$C/flashinfer.tar.xz" flashinfer flashinfer_python-0.7.2.post1.dist-info
fi
ls "$C"/apache_tvm_ffi-*.whl > /dev/null 2>&1 || "$PY" -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d "$C" apache-tvm-ffi==0.1.15.post2

H=$C/cubin/flashinfer/trtllm/batched_gemm/trtllmGen_bmm_export
if [ ! -d "$H" ]; then
  dl flashinfer-cubin==0.6.13                      # no 0.7.2.post1 is published; the headers did not change
  mkdir -p "$S/cubin" "$(dirname "$H")"
  (cd "$S/cubin" && unzip -q "$S"/dl/flashinfer_cubin-*.whl '*/batched_gemm-*/include/trtllmGen_bmm_export/*')
  src=$(find "$S/cubin" -type d -name trtllmGen_bmm_export | head -1)
  cp -r "$src" "$H"
fi

if ! ls "$C"/prebuilt/*.so > /dev/null 2>&1; then
  "$PY" -c "import flashinfer" 2> /dev/null || { echo "make_carry: the prebuild needs flashinfer-python installed" \
    "in $PY (pip install --no-deps flashinfer-python==0.7.2.post1 apache-tvm-ffi)" >&2; exit 2; }
  mkdir -p "$S/stub" "$S/cublas" "$C/prebuilt"
  echo | gcc -shared -Wl,-soname,libcuda.so.1 -o "$S/stub/libcuda.so" -x c -
  "$PY" -m pip download -q --no-deps -d "$S/cublas" "nvidia-cublas>=13.0,<13.1"
  (cd "$S/cublas" && unzip -q ./*.whl '*/include/*')
  inc=$(dirname "$(find "$S/cublas" -name cublasLt.h | head -1)")
  (cd "$R" && FLASHINFER_CUDA_ARCH_LIST=9.0a CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} FLASHINFER_CUBIN_DIR="$C/cubin" \
    FLASHINFER_WORKSPACE_BASE="$S/ws" MAX_JOBS=$JOBS LIBRARY_PATH="$S/stub" CPATH="$inc" "$PY" -c "
from impls.flashinfer import _trtllm_gen_jit as j
h, _ = j.export_headers()
j.dev_kernels_spec('90a', h).build()
j.routing_spec('90a', h).build()")
  find "$S/ws" -path '*cached_ops*' -name '*.so' -exec cp {} "$C/prebuilt/" \;
fi

if [ ! -f "$C/sglang/sglang_kernel-0.4.4-sm90.tar.xz" ]; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    -d "$S/dl" sglang-kernel==0.4.4
  mkdir -p "$S/sgl" "$C/sglang"
  (cd "$S/sgl" && unzip -q "$S"/dl/sglang_kernel-0.4.4-*.whl 'sgl_kernel/*.py' \
     'sgl_kernel/sm90/common_ops.abi3.so' 'sglang_kernel-0.4.4.dist-info/METADATA' \
     'sglang_kernel-0.4.4.dist-info/WHEEL' 'sglang_kernel-0.4.4.dist-info/licenses/LICENSE')
  tar -C "$S/sgl" -cJf "$C/sglang/sglang_kernel-0.4.4-sm90.tar.xz" sgl_kernel sglang_kernel-0.4.4.dist-info
fi
du -sh "$C"; find "$C" -maxdepth 2 -type f -printf '%s\t%p\n'
