#!/bin/bash
# Session 6, one H200 call (device `run`, nvidia-h200; carry .carry/flashinfer.tar.xz, the apache_tvm_ffi wheel,
# .carry/cubin, .carry/prebuilt; timeout_s 590):  bash campaigns/h200/s6_call.sh $OUT
# 1. the GPU tests of the trtllm-gen routing stage, its recipe and the FlashInfer adapters (first run since the
#    recipes' shared_weight "one", session 5), in the background -> $OUT/gpu_tests.txt
# 2. do the H200's GEMMs round symmetrically? (campaigns/h200/s6_bf16_gemm_bias.py) -> $OUT/gemm_bias.jsonl
# 3. torch-CUDA moe campaign with the layers of model width (H 512-2048, nonneg inputs): does the bias test stay quiet
#    on a correct GPU implementation? 150 s, 10 workers -> $OUT/torch_cuda_moe/
# 4. trtllm-gen routing (as built) campaign, 90 s, 3 workers, beside 3 -> $OUT/trtllm_gen_routing/
O=$1; mkdir -p /tmp/site $O
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "start $(date +%T), $(OMP_NUM_THREADS= nproc) cores"
(timeout 300 python3 -m pytest -q -p no:xdist tests/test_trtllm_gen_routing.py tests/test_trtllm_gen_routing_recipe.py \
  tests/test_recipes_gpu.py tests/test_flashinfer_adapters.py > $O/gpu_tests.txt 2>&1; echo "rc $?" >> $O/gpu_tests.txt) &
T=$!
timeout 120 python3 campaigns/h200/s6_bf16_gemm_bias.py > $O/gemm_bias.jsonl 2>&1
echo "gemm probe done $(date +%T)"
DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 200 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
  --model trtllm-gen-routing --time-budget 90 --workers 3 --seed 61 --out /tmp/tg > /tmp/tg.log 2>&1 &
G=$!
timeout 300 python3 -m difftest fuzz --impl torch-cuda --op moe --time-budget 150 --workers 10 --seed 62 \
  --out /tmp/tc > /tmp/tc.log 2>&1
echo "torch-cuda done $(date +%T)"
wait $G; wait $T
python3 - > $O/tc_widths.json <<'PY'
import collections, gzip, json
from difftest.model.case import Case
from difftest.model.strategies import model_width
n, t = collections.Counter(), collections.Counter()
for line in gzip.open("/tmp/tc/cases.jsonl.gz", "rt"):
    r = json.loads(line)
    c = Case.from_dict(r["case"])
    key = f"{'model width' if model_width('moe', c.config) else 'narrow/wide'} {r['quant']} {r['case']['dist']} {r['status']}"
    n[key] += 1
    t[key] += r.get("seconds") or 0
print(json.dumps({k: [n[k], round(t[k], 1)] for k in sorted(n)}, indent=1))
PY
for d in tc tg; do
  mkdir -p $O/$d; cp /tmp/$d/summary.json /tmp/$d.log $O/$d/ 2>/dev/null
  (cd /tmp/$d && find . -maxdepth 2 -path ./db -prune -o -type f -name 'case.json' -print | head -20 | tar -czf $O/$d/fixtures.tgz -T - 2>/dev/null)
  tail -n 3 /tmp/$d.log
done
tail -n 5 $O/gpu_tests.txt
echo "end $(date +%T)"
