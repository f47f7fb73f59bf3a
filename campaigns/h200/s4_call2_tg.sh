#!/bin/bash
# Session 4, second H200 call, the trtllm-gen part (sourced by s4_call2.sh after flashinfer is unpacked; $O set):
# the MUFU probe with its sign fix; the dev kernels again with the measured (tighter) MUFU allowances; the
# composed layer at 1-4,096 tokens without the declared-limit skips.
nvcc -O3 -arch=sm_90a -o /tmp/mufu campaigns/h200/mufu_exhaustive.cu && timeout 60 /tmp/mufu > $O/mufu_exhaustive.json
tail -c 330 $O/mufu_exhaustive.json; echo
timeout 150 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_dev_ops --op trtllm_ops --time-budget 120 \
  --workers 5 --seed 51 --out /tmp/dev_ops2 > /tmp/dev_ops2.log 2>&1 &
TG_OPS=$!
LAYER_WHERE="--where rsf_placement=routing --where eps=1e-30..1 --where T=1..4096"
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 DIFFTEST_MAX_TOKENS=4096 timeout 150 python3 -m difftest fuzz \
  --impl flashinfer.trtllm_gen_nogemm --model nemotron-h --op moe $LAYER_WHERE --time-budget 120 --workers 3 \
  --seed 53 --out /tmp/nogemm_nemotron2 > /tmp/nogemm_nemotron2.log 2>&1 &
TG_NEMO=$!
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 DIFFTEST_MAX_TOKENS=4096 timeout 150 python3 -m difftest fuzz \
  --impl flashinfer.trtllm_gen_nogemm --model deepseek-v3 --op moe $LAYER_WHERE --time-budget 120 --workers 3 \
  --seed 54 --out /tmp/nogemm_dsv3_2 > /tmp/nogemm_dsv3_2.log 2>&1 &
TG_DSV3=$!
