#!/bin/bash
# Sixth H200 call (device `run`, carry .carry runs/h200): bash campaigns/h200/sixth_call.sh $OUT
# All 1,000 recorded mono_moe cases re-verified against the spec with the measured Hopper arithmetic (13 host
# processes), while mono_moe runs through the tester with campaign-fixed weights (preset mono-moe, 2 workers).
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nproc; python3 -m difftest impls > $O/impls.txt 2>&1; cat $O/impls.txt
(timeout 540 python3 campaigns/h200/verify_mono.py runs/h200 1000 13 > $O/verify_mono_1000.txt 2>&1) & V=$!
timeout 420 python3 -m difftest fuzz --impl flashinfer.mono_moe --model mono-moe --time-budget 330 --workers 2 \
  --out /tmp/mono > $O/fuzz_mono.txt 2>&1; tail -25 $O/fuzz_mono.txt
wait $V; cat $O/verify_mono_1000.txt | tail -12
tar -C /tmp -czf $O/mono_run.tgz mono; ls -la $O
