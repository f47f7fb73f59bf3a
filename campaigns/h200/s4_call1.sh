#!/bin/bash
# Session 4, first H200 call (device `run`, carry .carry's flashinfer, tvm-ffi wheel, cubin headers, prebuilt):
#   bash campaigns/h200/s4_call1.sh $OUT
# Issue 20 on the device: MUFU.EX2 / MUFU.RCP measured on every fp32 input (mufu_exhaustive.cu); the trtllm-gen dev
# kernels through the tester (op trtllm_ops: default sizes, then tokens to 4,096), concurrently with the composed
# no-GEMM layer under --model nemotron-h (bf16, relu2) and --model deepseek-v3 (block FP8, SwiGLU), as built.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
date +%T
nvcc -O3 -arch=sm_90a -o /tmp/mufu campaigns/h200/mufu_exhaustive.cu && timeout 120 /tmp/mufu > $O/mufu_exhaustive.json
tail -c 420 $O/mufu_exhaustive.json; echo
date +%T
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
python3 -m difftest impls | grep -E "trtllm_gen|torch-cuda"
timeout 200 python3 -c "from impls.flashinfer import _trtllm_gen_ops as o; print(o._module())"
timeout 250 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_dev_ops --op trtllm_ops --time-budget 215 \
  --workers 8 --seed 41 --out /tmp/dev_ops > /tmp/dev_ops.log 2>&1 &
OPS=$!
export DIFFTEST_TRTLLM_GEN_AS_BUILT=1
timeout 240 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_nogemm --model nemotron-h --op moe \
  --time-budget 200 --workers 3 --seed 43 --out /tmp/nogemm_nemotron > /tmp/nogemm_nemotron.log 2>&1 &
NEMO=$!
timeout 240 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_nogemm --model deepseek-v3 --op moe \
  --time-budget 200 --workers 3 --seed 44 --out /tmp/nogemm_dsv3 > /tmp/nogemm_dsv3.log 2>&1 &
DSV3=$!
wait $OPS; wait $NEMO; wait $DSV3
for f in /tmp/dev_ops.log /tmp/nogemm_nemotron.log /tmp/nogemm_dsv3.log; do echo "== $f"; tail -n 4 $f; done
date +%T
DIFFTEST_MAX_TOKENS=4096 DIFFTEST_MAX_HIDDEN=256 timeout 170 python3 -m difftest fuzz \
  --impl flashinfer.trtllm_gen_dev_ops --op trtllm_ops --time-budget 135 --workers 14 --seed 42 \
  --out /tmp/dev_ops_large > /tmp/dev_ops_large.log 2>&1
echo "== large"; tail -n 4 /tmp/dev_ops_large.log
date +%T
for d in /tmp/dev_ops /tmp/dev_ops_large /tmp/nogemm_nemotron /tmp/nogemm_dsv3; do
  timeout 40 python3 -m difftest report $d > /dev/null 2>&1; done
mkdir -p /tmp/logs && cp /tmp/*.log /tmp/logs/
cd /tmp && find dev_ops dev_ops_large nogemm_nemotron nogemm_dsv3 logs -type f -size -2M ! -name 'cases.jsonl*' \
  ! -path '*/db/*' 2>/dev/null > /tmp/small.txt
tar -czf $O/runs.tgz -T /tmp/small.txt
for d in dev_ops dev_ops_large nogemm_nemotron nogemm_dsv3; do gzip -c $d/cases.jsonl > $O/${d}_cases.jsonl.gz; done
ls -la $O; date +%T
