#!/bin/bash
# Session 3, first H200 call (device `run`, carry .carry): bash campaigns/h200/s3_call1.sh $OUT
# The trtllm-gen routing module and dev-kernel binding were built for sm_90a on the CPU machine (nvcc 13.0,
# impls/flashinfer/_trtllm_gen_jit.py) and travel in .carry/prebuilt. This call: availability, the dev-kernel
# smoke cases, the routing probe (which arithmetic explains the grouped DeepSeekV3 sets), tanh.approx on every
# fp32 input, two trtllm-gen routing campaigns (declared and as-built recipe) and the DeepSeek-V3 three-way.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
nvidia-smi -L; ldd --version | head -1; python3 -c "import torch; print(torch.__version__)"
date +%T; python3 -m difftest impls | tee $O/impls.txt
(nvcc -O3 -arch=sm_90a -o /tmp/tanh_exhaustive campaigns/h200/tanh_exhaustive.cu && /tmp/tanh_exhaustive > $O/tanh_exhaustive.json; echo tanh rc=$?) &
TANH=$!
date +%T; timeout 150 python3 campaigns/h200/trtllm_gen_ops_smoke.py /tmp/ops_smoke; echo smoke rc=$?
date +%T; timeout 90 python3 -m pytest -q -p no:xdist tests/test_trtllm_gen_ops.py tests/test_trtllm_gen_routing.py 2>&1 | tail -5
date +%T; timeout 200 python3 campaigns/h200/trtllm_routing_probe.py $O | tail -3; echo probe rc=$?
wait $TANH  # a bare `wait` also waits for the tee above, forever (bash >= 5.1): this hung the first run
date +%T
timeout 200 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing --model trtllm-gen-routing --time-budget 150 \
  --workers 7 --seed 1 --out /tmp/tg_declared > /tmp/tg_declared.log 2>&1 &
DECLARED=$!
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 200 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
  --model trtllm-gen-routing --time-budget 150 --workers 7 --seed 2 --out /tmp/tg_asbuilt > /tmp/tg_asbuilt.log 2>&1
wait $DECLARED; tail -3 /tmp/tg_declared.log /tmp/tg_asbuilt.log
date +%T; DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 100 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
  --impl flashinfer.fused_topk_deepseek --impl torch-cuda --model deepseek-v3 --op routing --time-budget 60 \
  --workers 14 --seed 3 --out /tmp/dsv3_three > /tmp/dsv3_three.log 2>&1; tail -3 /tmp/dsv3_three.log
date +%T
mkdir -p /tmp/logs && cp /tmp/*.log /tmp/logs/
tar -C /tmp -czf $O/runs.tgz tg_declared tg_asbuilt dsv3_three ops_smoke logs
ls -la $O
