#!/bin/bash
# Seventh H200 call (device `run`, carry .carry .whl): bash campaigns/h200/seventh_call.sh $OUT
# `tox -e gpu` literally: tox from carried wheels (.whl), a local wheelhouse holding flashinfer-python (re-zipped
# from the carried package tree) and apache-tvm-ffi; then the fixtures replayed with the GPU implementations and
# short tester runs of fused_topk_deepseek and torch-cuda after this session's spec changes.
O=$1; mkdir -p /tmp/site /tmp/tox /tmp/wh
exec > >(tee $O/log.txt) 2>&1
R=$PWD
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
cd /tmp/site && python3 -c "
import os, zipfile
with zipfile.ZipFile('/tmp/wh/flashinfer_python-0.7.2.post1-py3-none-any.whl', 'w', zipfile.ZIP_DEFLATED, compresslevel=1) as z:
    for top in ('flashinfer', 'flashinfer_python-0.7.2.post1.dist-info'):
        for d, _, fs in os.walk(top):
            if '__pycache__' not in d:
                for f in fs: z.write(os.path.join(d, f))
" && cd $R && cp .carry/apache_tvm_ffi-*.whl /tmp/wh/ && ls -la /tmp/wh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/tox .whl/*.whl
echo "== tox -e gpu"; (export WHEELHOUSE=/tmp/wh; time PYTHONPATH=/tmp/tox timeout 300 python3 -m tox -e gpu 2>&1 | tail -25)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$R PYTHONUNBUFFERED=1
echo "== replay"; timeout 120 python3 -m difftest replay fixtures 2>&1 | tail -30
echo "== fuzz fused_topk"; timeout 100 python3 -m difftest fuzz --impl flashinfer.fused_topk_deepseek --time-budget 60 --workers 4 --out /tmp/fi 2>&1 | tail -4
echo "== fuzz torch-cuda"; timeout 100 python3 -m difftest fuzz --impl torch-cuda --time-budget 60 --workers 6 --out /tmp/cuda 2>&1 | tail -4
tar -C /tmp -czf $O/runs.tgz fi cuda; ls -la $O
