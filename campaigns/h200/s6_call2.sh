#!/bin/bash
# Session 6, second H200 call (carry as s6_call.sh): bash campaigns/h200/s6_call2.sh $OUT
# The trtllm-gen routing campaign of s6_call.sh (as built, seed 61, 90 s, 3 workers) reported two permutation
# mismatches, "total_num_padded_tokens=0 but Σ padded counts=8" and "=3872 but Σ padded counts=5672"; its fixtures did
# not come back. Again, with every failing row's configuration and message and the fixtures written -> $OUT/tg/.
O=$1; mkdir -p /tmp/site $O/tg
tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for seed in 61 63; do
  DIFFTEST_TRTLLM_GEN_AS_BUILT=1 timeout 200 python3 -m difftest fuzz --impl flashinfer.trtllm_gen_routing \
    --model trtllm-gen-routing --time-budget 90 --workers 7 --seed $seed --out /tmp/tg$seed > /tmp/tg$seed.log 2>&1 &
done
wait
for seed in 61 63; do
  tail -n 4 /tmp/tg$seed.log
  python3 - /tmp/tg$seed > $O/tg/fail_$seed.jsonl <<'PY'
import gzip, json, sys
for line in gzip.open(sys.argv[1] + "/cases.jsonl.gz", "rt"):
    r = json.loads(line)
    if r["status"] != "pass":
        print(json.dumps({k: r[k] for k in ("status", "message", "case", "recipe")}))
PY
  (cd /tmp/tg$seed && tar -czf $O/tg/fixtures_$seed.tgz fixtures summary.json 2>/dev/null)
  for f in /tmp/tg$seed/fixtures/*/; do python3 -m difftest replay $f 2>&1 | tail -n 3; done
done
wc -l $O/tg/*.jsonl; ls -la $O/tg
