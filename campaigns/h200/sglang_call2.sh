#!/bin/bash
# Issue 26, second SGLang call (device `run` on nvidia-h200, carry [".carry"], timeout_s 300):
#   bash campaigns/h200/sglang_call2.sh $OUT
# Confirms the adapter fixes after the first call (campaigns/h200/results.md, "SGLang kernels (session 4, third
# call)"): T = 0 refused by moe_fused_gate / topk_softmax (0-block grid, null workspace), tile_tokens_dim never drawn
# (no permutation outputs), bf16 moe_fused_gate with one expert refused (misaligned reads), FTZ-flushed weights
# accepted only where the scores underflow. No smoke/probes of the first call (answered). Adds two measurements:
#   mufu_rcp_table.cu: MUFU.RCP's deviation from RN for all 2^23 significands (2 MiB; the fp16 findings' mechanism);
#   sglang_v1_ue8m0_probe.py: the v1 UE8M0 exponent over a sweep of amax (fixture ..._ue8m0_exponent_plus_one).
# Fuzz phases of 80 s (routing, then quant), num_tokens 1..40 (T = 0 compares nothing). Expected about 3.7 min;
# packing starts by 215 s. $OUT: log.txt, rcp_table.bin, v1_ue8m0.jsonl, runs.tgz (summaries, reports, fixtures,
# logs), cases.tgz (every case line, cases.jsonl.gz per run).
O=$1; S=/tmp/sgl; W=/tmp/sg2; mkdir -p $S $W; T0=$(date +%s)
exec > >(tee $O/log.txt) 2>&1
left() { echo $((T0 + 215 - $(date +%s))); }  # seconds until packing must start
tar -C $S -xJf .carry/sglang/sglang_kernel-0.4.4-sm90.tar.xz
export PYTHONPATH=$S:$PWD PYTHONUNBUFFERED=1
date +%T
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
timeout 40 python3 -m difftest impls | grep sglang
(nvcc -O3 -arch=sm_90a -o /tmp/rcp_table campaigns/h200/mufu_rcp_table.cu && timeout 30 /tmp/rcp_table $O/rcp_table.bin;
 echo "rcp_table rc=$?"; sha256sum $O/rcp_table.bin) &
RCP=$!
timeout 40 python3 campaigns/h200/sglang_v1_ue8m0_probe.py > $O/v1_ue8m0.jsonl; echo "v1 probe rc=$?"
python3 - $O/v1_ue8m0.jsonl <<'PY'
import json, sys, collections
rows = [json.loads(line) for line in open(sys.argv[1])]
c = collections.Counter((r["dtype"], k, r[f"{k}_e"] - r["spec_e"] if r.get(f"{k}_e") is not None else None)
                        for r in rows for k in ("v1", "v2") if f"{k}_e" in r)
print("exponent - spec's, per (dtype, kernel):", dict(sorted(c.items(), key=str)))
PY
wait $RCP
date +%T

PIDS=""
fz() {  # name budget workers seed args...: one campaign in the background, its log in $W/name.log
  local name=$1 budget=$2 workers=$3 seed=$4; shift 4
  timeout $((budget + 25)) python3 -m difftest fuzz "$@" --where num_tokens=1..40 --time-budget $budget \
    --workers $workers --seed $seed --out $W/$name > $W/$name.log 2>&1 &
  PIDS="$PIDS $!"
}
R="--op routing"; Q="--op quant"
B=$(( ($(left) - 40) / 2 )); B=$(( B > 80 ? 80 : B )); echo "phase budget ${B} s"
fz mfg $B 5 271 --impl sglang.moe_fused_gate $R
fz mfg_dsv3 $B 2 272 --impl sglang.moe_fused_gate --model deepseek-v3 $R
fz mfg_bf16 $B 3 273 --impl sglang.moe_fused_gate_bf16 $R
fz topk $B 4 274 --impl sglang.topk_softmax $R
wait $PIDS; PIDS=""  # not a bare wait: it would also wait for the tee of this script's own output
for n in mfg mfg_dsv3 mfg_bf16 topk; do echo "== $n"; tail -n 5 $W/$n.log; done
date +%T
UE="--where scale_fmt=ue8m0 --where layout=ue8m0_packed --where group_size=128"
B=$(( $(left) - 20 )); B=$(( B > 80 ? 80 : B )); echo "phase budget ${B} s"
fz q $B 5 275 --impl sglang.per_token_group_quant_8bit $Q --where scale_fmt=fp32
fz q_ue8m0 $B 3 276 --impl sglang.per_token_group_quant_8bit $Q $UE
fz q1 $B 3 277 --impl sglang.per_token_group_quant_8bit_v1 $Q --where scale_fmt=fp32
fz q1_ue8m0 $B 3 278 --impl sglang.per_token_group_quant_8bit_v1 $Q $UE
wait $PIDS
for n in q q_ue8m0 q1 q1_ue8m0; do echo "== $n"; tail -n 5 $W/$n.log; done
date +%T
RUNS="mfg mfg_dsv3 mfg_bf16 topk q q_ue8m0 q1 q1_ue8m0"
for n in $RUNS; do [ -d $W/$n ] && [ $(left) -gt -15 ] && timeout 8 python3 -m difftest report $W/$n > /dev/null 2>&1; done
cd $W && find $RUNS *.log -type f -size -2M ! -path '*/db/*' ! -name 'cases*.jsonl*' 2>/dev/null > small.txt
tar -czf $O/runs.tgz -T small.txt
find $RUNS -name 'cases*.jsonl*' 2>/dev/null > cases.txt; tar -czf $O/cases.tgz -T cases.txt
ls -la $O; date +%T
