#!/bin/bash
# Session 7, second H200 call (carry as s7_call.sh): bash campaigns/h200/s7_call2.sh $OUT
# After bounds.product's 0·∞ fix: the trtllm-gen no-GEMM layer again on nemotron-h and deepseek-v3 (the first call's
# 103 comparison errors on underflow / glm_bias inputs), and torch-CUDA with every other moe case of model width
# (DIFFTEST_MOE_MODEL_ODDS=2), a third of them sparse: the tighter nonzero-count bound against cuBLAS at H 512-2048.
O=$1; mkdir -p /tmp/site $O
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
date +%T
DIFFTEST_MOE_MODEL_ODDS=2 timeout 220 python3 -m difftest fuzz --impl torch-cuda --op moe --time-budget 170 \
  --workers 6 --seed 74 --out /tmp/tc > /tmp/tc.log 2>&1 &
TC=$!
export DIFFTEST_TRTLLM_GEN_AS_BUILT=1
timeout 220 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_nogemm --model nemotron-h --op moe --time-budget 170 \
  --workers 5 --seed 75 --out /tmp/nemo > /tmp/nemo.log 2>&1 &
NEMO=$!
timeout 220 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_nogemm --model deepseek-v3 --op moe --time-budget 170 \
  --workers 5 --seed 76 --out /tmp/dsv3 > /tmp/dsv3.log 2>&1
wait $NEMO $TC
date +%T
for r in tc nemo dsv3; do echo "== $r"; tail -n 4 /tmp/$r.log; cp /tmp/$r.log $O/$r.log; cp /tmp/$r/summary.json $O/${r}_summary.json; done
python3 campaigns/h200/s7_dists.py /tmp/tc /tmp/nemo /tmp/dsv3 > $O/dists.jsonl
python3 -c "
import json
for l in open('$O/dists.jsonl'):
    r = json.loads(l); print(r['run'], r['by_dist'], 'failures', r['n_failures'])"
(cd /tmp && tar -czf $O/fixtures.tgz */fixtures 2>/dev/null); ls -la $O
