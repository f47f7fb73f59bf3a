#!/bin/bash
# Second H200 call (device `run`, carry .carry): bash campaigns/h200/second_call.sh $OUT
# Probes (probe.py, tanh_probe.cu), GPU tests, torch-CUDA and FlashInfer through the tester.
# Back in $OUT: log.txt, tanh.tgz, probes.tgz (probe.py's npz), runs.tgz (the tester's run dirs).
O=$1; P=/tmp/probes; mkdir -p $P /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -2
python3 -c "import torch, flashinfer, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, flashinfer.__version__)"
R=$PWD; cd /tmp && for m in fast exact; do
  f=$([ $m = fast ] && echo -use_fast_math)
  nvcc -arch=sm_90 $f -o tanh_$m $R/campaigns/h200/tanh_probe.cu && ./tanh_$m /tmp/tanh_$m.f32
  echo "tanhf $m: $(cuobjdump -sass tanh_$m | grep -c MUFU.TANH) MUFU.TANH, $(cuobjdump -sass tanh_$m | grep -c MUFU.EX2) MUFU.EX2"
done; tar -czf $O/tanh.tgz tanh_fast.f32 tanh_exact.f32; cd $R
timeout 120 python3 campaigns/h200/probe.py $P 2>&1 | tail -5
echo "== pytest"; timeout 130 python3 -m pytest -p no:xdist -q tests/test_torch_eager.py tests/test_flashinfer_adapters.py 2>&1 | tail -8
echo "== fuzz torch-cuda"; timeout 150 python3 -m difftest fuzz --impl torch-cuda --time-budget 100 --workers 6 --out /tmp/cuda 2>&1 | tail -25
echo "== fuzz flashinfer"; timeout 170 python3 -m difftest fuzz --impl flashinfer.fused_topk_deepseek --impl flashinfer.mono_moe --time-budget 110 --workers 6 --out /tmp/fi 2>&1 | tail -25
tar -C $P -czf $O/probes.tgz .; tar -C /tmp -czf $O/runs.tgz cuda fi; ls -la $O
