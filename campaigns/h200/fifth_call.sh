#!/bin/bash
# Fifth H200 call (device `run`, carry .carry): bash campaigns/h200/fifth_call.sh $OUT
# How mono_moe divides: div_probe.cu built as the JIT builds (sm_90a, -use_fast_math) and without fast math, its
# SASS, and the SASS of the monomoe module itself around its reciprocals.
O=$1; mkdir -p /tmp/site
exec > >(tee $O/log.txt) 2>&1
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cd /tmp && nvcc --version | tail -2
for m in fast ieee; do
  f=""; [ $m = fast ] && f="-use_fast_math"
  nvcc -arch=sm_90a $f -o div_$m $OLDPWD/campaigns/h200/div_probe.cu && ./div_$m $O/div_$m.f32
  cuobjdump -sass div_$m > $O/div_sass_$m.txt
done
cd $OLDPWD
python3 -c "
import torch, flashinfer
from impls.flashinfer import adapter
print(adapter('mono_moe').available())
from flashinfer.fused_moe.monomoe import _get_monomoe_module; _get_monomoe_module()
"
so=$(find / -xdev -name 'monomoe*.so' 2>/dev/null | head -1); echo "module: $so"
cuobjdump -sass $so > /tmp/mono.sass 2>&1; wc -l /tmp/mono.sass
grep -c MUFU.RCP /tmp/mono.sass; grep -B3 -A3 "MUFU.RCP" /tmp/mono.sass | head -150 > $O/mono_rcp_context.txt
gzip -c /tmp/mono.sass > $O/mono_sass.gz
ls -la $O
