#!/bin/bash
# Session 3, third H200 call (device `run`, carry .carry): bash campaigns/h200/s3_call3.sh $OUT
# After the second call's launch failures became declared limits and an open fixture: the trtllm-gen routing
# campaigns (declared recipe, 4 workers; as-built recipe, 9 workers) and the kernel-path sweep beside them.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
date +%T
timeout 230 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing --model trtllm-gen-routing --time-budget 200 \
  --workers 4 --seed 11 --out /tmp/tg_declared > /tmp/tg_declared.log 2>&1 &
DECLARED=$!
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 230 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
  --model trtllm-gen-routing --time-budget 200 --workers 9 --seed 12 --out /tmp/tg_asbuilt > /tmp/tg_asbuilt.log 2>&1 &
ASBUILT=$!
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 220 python3 campaigns/h200/trtllm_routing_paths.py $O > /tmp/paths.log 2>&1
echo paths rc=$?
wait $DECLARED $ASBUILT
for f in /tmp/tg_declared.log /tmp/tg_asbuilt.log; do tail -n 3 $f; done
date +%T
mkdir -p /tmp/logs && cp /tmp/*.log /tmp/logs/
tar -C /tmp -czf $O/runs.tgz tg_declared tg_asbuilt logs
ls -la $O
