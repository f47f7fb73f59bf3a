#!/bin/bash
# Eighth H200 call (device `run`, carry .carry .whl): bash campaigns/h200/eighth_call.sh $OUT
# `tox -e gpu` again after giving the env `deps =` (the seventh call tried PyPI for [testenv] deps) and
# HOST_SITE_PACKAGES (the image keeps torch and pytest in the virtualenv /opt/torch/.venv).
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
" && cd $R && cp .carry/apache_tvm_ffi-*.whl /tmp/wh/
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/tox .whl/*.whl 2>&1 | grep -v WARNING
export WHEELHOUSE=/tmp/wh HOST_SITE_PACKAGES=$(python3 -c "import site; print(site.getsitepackages()[0])")
echo "HOST_SITE_PACKAGES=$HOST_SITE_PACKAGES"; time PYTHONPATH=/tmp/tox timeout 400 python3 -m tox -e gpu 2>&1 | tail -30
