#!/bin/bash
# Issue 26, session 5 (device `run` on nvidia-h200, carry [".carry"], timeout_s 330):
#   bash campaigns/h200/s5_sglang_requant.sh $OUT
# Confirms on the H200 what was shown offline: with spec.hopper.hopper_rcp reading the whole measured MUFU.RCP table
# and v1 quantizing with x·MUFU.RCP(s) (variant mul_mufu_rcp_scale), SGLang's per-token-group quantizers are
# bit-exact, fp16 inputs included (session 4: 115 v2 + 98 v1 one-code failures, all reproduced offline by
# campaigns/h200/s5_rcp_recheck.py). Three campaigns beside each other, num_tokens 1..40, 90 s each:
#   q      sglang.per_token_group_quant_8bit (wrapper: v2 for group sizes 16..128), fp32 scales, 5 workers
#   q1     sglang.per_token_group_quant_8bit_v1, fp32 scales (bf16 / fp16 / fp32 inputs), 5 workers
#   q_ue8m0 the wrapper with UE8M0-packed scales (group 128 -> v2), 4 workers
# Expected: 0 failures in all three, >= 10,000 cases each (session 4 ran 37,707 / 21,342 / 21,213 in 80 s).
# Before them (10 s) mufu_lg2_probe.cu: MUFU.LG2 at every power of two and ceil(lg2.approx(s)) over every normal s
# (the v1 UE8M0 fixture's mechanism, docs/sglang.md §8), and rcp.approx.ftz outside the normal range (hopper_rcp's
# FTZ rules). About 3.5 min; packing starts by 250 s.
# $OUT: log.txt, lg2_probe.json, runs.tgz (summaries, reports, fixtures, logs), cases.tgz (every case line).
O=$1; S=/tmp/sgl; W=/tmp/sg5; mkdir -p $S $W; T0=$(date +%s)
exec > >(tee $O/log.txt) 2>&1
left() { echo $((T0 + 250 - $(date +%s))); }  # seconds until packing must start
tar -C $S -xJf .carry/sglang/sglang_kernel-0.4.4-sm90.tar.xz
export PYTHONPATH=$S:$PWD PYTHONUNBUFFERED=1
date +%T
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
timeout 40 python3 -m difftest impls | grep sglang
(nvcc -O3 -arch=sm_90a -o /tmp/lg2 campaigns/h200/mufu_lg2_probe.cu && timeout 40 /tmp/lg2 > $O/lg2_probe.json;
 echo "lg2 probe rc=$?"; tail -c 400 $O/lg2_probe.json) &
PROBE=$!

PIDS=""
fz() {  # name budget workers seed args...: one campaign in the background, its log in $W/name.log
  local name=$1 budget=$2 workers=$3 seed=$4; shift 4
  timeout $((budget + 25)) python3 -m difftest fuzz "$@" --where num_tokens=1..40 --time-budget $budget \
    --workers $workers --seed $seed --out $W/$name > $W/$name.log 2>&1 &
  PIDS="$PIDS $!"
}
Q="--op quant"
B=$(( $(left) - 60 )); B=$(( B > 90 ? 90 : B )); echo "budget ${B} s"
fz q $B 5 501 --impl sglang.per_token_group_quant_8bit $Q --where scale_fmt=fp32
fz q1 $B 5 502 --impl sglang.per_token_group_quant_8bit_v1 $Q --where scale_fmt=fp32
fz q_ue8m0 $B 4 503 --impl sglang.per_token_group_quant_8bit $Q --where scale_fmt=ue8m0 \
  --where layout=ue8m0_packed --where group_size=128
wait $PIDS $PROBE  # not a bare wait: it would also wait for the tee of this script's own output
for n in q q1 q_ue8m0; do echo "== $n"; tail -n 6 $W/$n.log; done
date +%T
RUNS="q q1 q_ue8m0"
for n in $RUNS; do [ -d $W/$n ] && [ $(left) -gt -20 ] && timeout 10 python3 -m difftest report $W/$n > /dev/null 2>&1; done
cd $W && find $RUNS *.log -type f -size -2M ! -path '*/db/*' ! -name 'cases*.jsonl*' 2>/dev/null > small.txt
tar -czf $O/runs.tgz -T small.txt
find $RUNS -name 'cases*.jsonl*' 2>/dev/null > cases.txt; tar -czf $O/cases.tgz -T cases.txt
ls -la $O; date +%T
