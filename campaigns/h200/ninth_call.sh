#!/bin/bash
# Ninth H200 call (device `run`, carry .carry): bash campaigns/h200/ninth_call.sh $OUT
# mono_moe through the tester at campaign scale: preset mono-moe (weights from the campaign weight seed 0), 12 workers.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "from flashinfer.fused_moe.monomoe import _get_monomoe_module as m; m()"  # JIT once, before the workers
timeout 470 python3 -m difftest fuzz --impl flashinfer.mono_moe --model mono-moe --time-budget 380 --workers 12 \
  --out /tmp/mono 2>&1 | grep -v "cases, 12 workers"
tar -C /tmp -czf $O/mono_run.tgz mono; ls -la $O
