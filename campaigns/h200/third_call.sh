#!/bin/bash
# Third H200 call (device `run`, carry .carry runs/h200 runs/cuda_findings): bash campaigns/h200/third_call.sh $OUT
# torch-CUDA through the tester and replay of the second call's 15 torch-CUDA findings, fused_topk_deepseek and
# mono_moe (preset mono-moe) through the tester, GPU tests, verify_mono.py on 64 cases with hopper_fp8 emulation.
# Back in $OUT: log.txt, mono.txt, runs.tgz (the tester's run dirs).
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, flashinfer, sys; print(sys.version.split()[0], torch.__version__, flashinfer.__version__, torch.cuda.get_device_name())"
(timeout 400 python3 campaigns/h200/verify_mono.py runs/h200 64 5 hopper_fp8 > $O/mono.txt 2>&1) & MONO=$!
echo "== replay torch-CUDA findings"; timeout 90 python3 -m difftest replay --impl torch-cuda runs/cuda_findings 2>&1 | grep -E "recorded|^  torch" | head -60
echo "== pytest"; timeout 120 python3 -m pytest -p no:xdist -q tests/test_torch_eager.py tests/test_flashinfer_adapters.py tests/test_recipes_gpu.py 2>&1 | tail -8
echo "== fuzz torch-cuda"; timeout 110 python3 -m difftest fuzz --impl torch-cuda --time-budget 80 --workers 6 --out /tmp/cuda 2>&1 | tail -20
echo "== fuzz fused_topk"; timeout 75 python3 -m difftest fuzz --impl flashinfer.fused_topk_deepseek --time-budget 45 --workers 4 --out /tmp/fi 2>&1 | tail -15
echo "== fuzz mono_moe"; timeout 95 python3 -m difftest fuzz --impl flashinfer.mono_moe --model mono-moe --time-budget 70 --workers 5 --out /tmp/mono 2>&1 | tail -15
wait $MONO; tail -5 $O/mono.txt  # a bare wait also waits for tee (the 3rd call hit its limit so)
tar -C /tmp -czf $O/runs.tgz cuda fi mono; ls -la $O
