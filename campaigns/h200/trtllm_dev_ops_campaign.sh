#!/bin/bash
# Next H200 session (device `run`, carry .carry, as s3_call4.sh): bash campaigns/h200/trtllm_dev_ops_campaign.sh $OUT
# Issue 20 item 4, the op part: the trtllm-gen dev kernels (op trtllm_ops: permute, activation,
# activation_deepseek_fp8, convertsf, finalize) through flashinfer.trtllm_gen_dev_ops against the spec, >= 5,000
# cases. Not run yet. Run 1: the default sizes (tokens 1..40 weighted to tile edges, tiles 8..128, widths up to
# 512) for 240 s on 12 workers (the CPU suite does 26 cases/s on 2 workers: expect > 20,000; the summary line
# says how many). Run 2: tokens up to 4,096 (finalize's small-batch / in-order switch at ceil(H/256)·T >= 1184,
# the activation's 1/2/4 tokens per CTA) at widths up to 256, 150 s.
# Needs .carry as s3_call4.sh left it; without the dev-kernel library in .carry/prebuilt the first case JIT-builds
# it (about 50 s, docs/trtllm_gen_dev_kernels.md).
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
date +%T
python3 -m difftest impls | grep -E "trtllm_gen_dev_ops|torch-cuda"
# build (or load the prebuilt) dev-kernel module once, before 12 workers would each try
timeout 200 python3 -c "from impls.flashinfer import _trtllm_gen_ops as o; print(o._module())"
timeout 280 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_dev_ops --op trtllm_ops --time-budget 240 \
  --workers 12 --seed 31 --out /tmp/dev_ops > /tmp/dev_ops.log 2>&1
tail -n 5 /tmp/dev_ops.log
DIFFTEST_MAX_TOKENS=4096 DIFFTEST_MAX_HIDDEN=256 timeout 190 python3 -m difftest fuzz \
  --impl flashinfer.trtllm_gen_dev_ops --op trtllm_ops --time-budget 150 --workers 12 --seed 32 \
  --out /tmp/dev_ops_large > /tmp/dev_ops_large.log 2>&1
tail -n 5 /tmp/dev_ops_large.log
date +%T
for d in /tmp/dev_ops /tmp/dev_ops_large; do python3 -m difftest report $d; done
mkdir -p /tmp/logs && cp /tmp/*.log /tmp/logs/
cd /tmp && find dev_ops dev_ops_large logs -type f -size -2M ! -name 'cases.jsonl*' 2>/dev/null > /tmp/small.txt
tar -czf $O/runs.tgz -T /tmp/small.txt
for d in dev_ops dev_ops_large; do cp $d/cases.jsonl.gz $O/${d}_cases.jsonl.gz; done  # compressed by fuzz
ls -la $O
