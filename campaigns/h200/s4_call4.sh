#!/bin/bash
# Session 4, last H200 call (device `run`, carry .carry): bash campaigns/h200/s4_call4.sh $OUT
# The trtllm-gen tile check (s4_call4_tg.sh, flashinfer from .carry, in the background) beside SGLang's second call
# (sglang_call2.sh, writing under $OUT/sg).
O=$1; mkdir -p /tmp/site $O/sg
(
  tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
    DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
  source campaigns/h200/s4_call4_tg.sh
  wait $TG_R; wait $TG_O
  for f in /tmp/tiles_routing.log /tmp/tiles_ops.log; do echo "== $f"; tail -n 5 $f; done
  cd /tmp && find tiles_routing tiles_ops -type f -size -2M ! -path '*/db/*' ! -name report.html > /tmp/tiles.txt
  cp /tmp/tiles_*.log /tmp/tiles_routing/ 2>/dev/null
  tar -czf $O/tiles.tgz -T /tmp/tiles.txt tiles_routing.log tiles_ops.log
) > $O/tiles_log.txt 2>&1 &
TILES=$!
bash campaigns/h200/sglang_call2.sh $O/sg
wait $TILES
cat $O/tiles_log.txt
ls -la $O $O/sg
