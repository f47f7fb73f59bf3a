#!/bin/bash
# Session 3, second H200 call (device `run`, carry .carry): bash campaigns/h200/s3_call2.sh $OUT
# The routing probe and the trtllm-gen routing campaigns that the first call never reached (it hung on a bare
# `wait`), after the n_group fix for ungrouped DeepSeekV3 and with the measured tanh.approx bound.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
date +%T; timeout 60 python3 -m pytest -q -p no:xdist tests/test_trtllm_gen_routing.py 2>&1 | tail -2
date +%T
timeout 200 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing --model trtllm-gen-routing --time-budget 150 \
  --workers 6 --seed 1 --out /tmp/tg_declared > /tmp/tg_declared.log 2>&1 &
DECLARED=$!
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 200 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
  --model trtllm-gen-routing --time-budget 150 --workers 6 --seed 2 --out /tmp/tg_asbuilt > /tmp/tg_asbuilt.log 2>&1 &
ASBUILT=$!
timeout 180 python3 campaigns/h200/trtllm_routing_probe.py $O > /tmp/probe.log 2>&1; echo probe rc=$?; tail -2 /tmp/probe.log
wait $DECLARED $ASBUILT; tail -3 /tmp/tg_declared.log /tmp/tg_asbuilt.log
date +%T; DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 100 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
  --impl flashinfer.fused_topk_deepseek --impl torch-cuda --model deepseek-v3 --op routing --time-budget 60 \
  --workers 14 --seed 3 --out /tmp/dsv3_three > /tmp/dsv3_three.log 2>&1; tail -3 /tmp/dsv3_three.log
date +%T
mkdir -p /tmp/logs && cp /tmp/*.log /tmp/logs/
tar -C /tmp -czf $O/runs.tgz tg_declared tg_asbuilt dsv3_three logs
ls -la $O
