#!/bin/bash
# Session 7, third H200 call (no carry needed: torch only): bash campaigns/h200/s7_call3.sh $OUT
# After the combine's flush-to-zero term (bounds.flushed_reduction): replay the three torch-CUDA fixtures of the second
# call (campaigns/h200/s7/fixtures) and run its campaign again (same seed, every other moe case of model width).
O=$1; mkdir -p $O
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for f in campaigns/h200/s7/fixtures/*/; do python3 -m difftest replay $f 2>&1 | tail -n 2; done
DIFFTEST_MOE_MODEL_ODDS=2 timeout 220 python3 -m difftest fuzz --impl torch-cuda --op moe --time-budget 170 \
  --workers 12 --seed 74 --out /tmp/tc > /tmp/tc.log 2>&1
tail -n 4 /tmp/tc.log; cp /tmp/tc.log $O/call3_tc.log; cp /tmp/tc/summary.json $O/call3_tc_summary.json
python3 campaigns/h200/s7_dists.py /tmp/tc > $O/call3_dists.jsonl
python3 -c "
import json
for l in open('$O/call3_dists.jsonl'):
    r = json.loads(l); print(r['run'], r['by_dist'], 'failures', r['n_failures'])"
