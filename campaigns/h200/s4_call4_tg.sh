#!/bin/bash
# Session 4, last H200 call, the trtllm-gen part (sourced by s4_call4.sh after flashinfer is unpacked; $O set): the
# tile sizes the default strategies draw since issue 21's coverage work and no GPU had run (1, 2, 4, 256; 8-128 ran
# in the earlier calls), for the routing stage (as built) and the dev kernels, 60 s each in the background.
TILES="--where tile_tokens_dim=1,2,4,256"
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 90 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing --op routing \
  $TILES --time-budget 60 --workers 3 --seed 71 --out /tmp/tiles_routing > /tmp/tiles_routing.log 2>&1 &
TG_R=$!
timeout 90 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_dev_ops --op trtllm_ops $TILES --time-budget 60 \
  --workers 3 --seed 72 --out /tmp/tiles_ops > /tmp/tiles_ops.log 2>&1 &
TG_O=$!
