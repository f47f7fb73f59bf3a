#!/bin/bash
# Fourth H200 call (device `run`, carry .carry): bash campaigns/h200/fourth_call.sh $OUT
# probe_acc.py: mono_moe's own intermediate (scratchpad) and cuBLASLt FP8 per-block sums, to explain the residual.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, flashinfer, sys; print(sys.version.split()[0], torch.__version__, flashinfer.__version__, torch.cuda.get_device_name())"
timeout 300 python3 campaigns/h200/probe_acc.py $O 300
ls -la $O
