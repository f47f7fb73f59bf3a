#!/bin/bash
# Session 3, fourth H200 call (device `run`, carry .carry): bash campaigns/h200/s3_call4.sh $OUT
# The routing campaigns again (the third call's results were too large to come back; the adapter now declares
# itself non-deterministic), the shard sweep, and the composed trtllm-gen no-GEMM layer's first cases.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
date +%T
timeout 230 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing --model trtllm-gen-routing --time-budget 200 \
  --workers 3 --seed 21 --out /tmp/tg_declared > /tmp/tg_declared.log 2>&1 &
DECLARED=$!
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 230 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
  --model trtllm-gen-routing --time-budget 200 --workers 6 --seed 22 --out /tmp/tg_asbuilt > /tmp/tg_asbuilt.log 2>&1 &
ASBUILT=$!
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 90 python3 campaigns/h200/trtllm_routing_paths.py /tmp > /tmp/paths.log 2>&1
tail -n 12 /tmp/paths.jsonl; cp /tmp/paths.jsonl $O/paths4.jsonl
if [ -f campaigns/h200/trtllm_gen_nogemm_smoke.py ]; then
  timeout 100 python3 campaigns/h200/trtllm_gen_nogemm_smoke.py /tmp/nogemm > /tmp/nogemm.log 2>&1; echo nogemm rc=$?
  tail -n 30 /tmp/nogemm.log
fi
export DIFFTEST_TRTLLM_GEN_AS_BUILT=1
timeout 100 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_nogemm --model nemotron-h --op moe --time-budget 70 \
  --workers 3 --seed 23 --out /tmp/nogemm_nemotron > /tmp/nogemm_nemotron.log 2>&1 &
NEMO=$!
timeout 100 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_nogemm --model deepseek-v3 --op moe --time-budget 70 \
  --workers 3 --seed 24 --out /tmp/nogemm_dsv3 > /tmp/nogemm_dsv3.log 2>&1
wait $NEMO; for f in /tmp/nogemm_nemotron.log /tmp/nogemm_dsv3.log; do tail -n 3 $f; done
wait $DECLARED $ASBUILT
for f in /tmp/tg_declared.log /tmp/tg_asbuilt.log; do tail -n 3 $f; done
date +%T
mkdir -p /tmp/logs && cp /tmp/*.log /tmp/logs/
cd /tmp && find tg_declared tg_asbuilt nogemm nogemm_nemotron nogemm_dsv3 logs -type f -size -2M ! -name cases.jsonl 2>/dev/null > /tmp/small.txt
tar -czf $O/runs.tgz -T /tmp/small.txt; gzip -c tg_asbuilt/cases.jsonl > $O/asbuilt_cases.jsonl.gz
ls -la $O
