#!/bin/bash
# Session 4, second H200 call (device `run`, carry .carry's flashinfer, tvm-ffi wheel, cubin headers, prebuilt,
# sglang): bash campaigns/h200/s4_call2.sh $OUT
# The trtllm-gen re-runs (s4_call2_tg.sh, in the background) and SGLang's kernels (sglang_call.sh) side by side.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
date +%T
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
source campaigns/h200/s4_call2_tg.sh
#SGLANG#
wait $TG_OPS; wait $TG_NEMO; wait $TG_DSV3
for f in /tmp/dev_ops2.log /tmp/nogemm_nemotron2.log /tmp/nogemm_dsv3_2.log; do echo "== $f"; tail -n 4 $f; done
date +%T
mkdir -p /tmp/logs && cp /tmp/*.log /tmp/logs/
cd /tmp && find dev_ops2 nogemm_nemotron2 nogemm_dsv3_2 logs -type f -size -2M ! -name 'cases.jsonl*' \
  ! -path '*/db/*' ! -name report.html 2>/dev/null > /tmp/small.txt
tar -czf $O/tg_runs.tgz -T /tmp/small.txt
tar -cf $O/tg_cases.tar dev_ops2/cases.jsonl.gz nogemm_nemotron2/cases.jsonl.gz nogemm_dsv3_2/cases.jsonl.gz
ls -la $O; date +%T
