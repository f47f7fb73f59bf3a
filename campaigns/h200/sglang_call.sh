#!/bin/bash
# Issue 26 (device `run` on nvidia-h200, carry [".carry"], timeout_s 600): bash campaigns/h200/sglang_call.sh $OUT
# SGLang's own kernels (sglang-kernel 0.4.4, its SM90 library; docs/sglang.md says why that version) under the tester:
# the package is unpacked from .carry/sglang (no pip, the box is offline), `difftest impls` must list the five
# sglang.* adapters as available, campaigns/h200/sglang_smoke.py runs hand-picked cases and the probes of what the
# adapters refuse, then two phases of fuzz campaigns, up to 130 s each, 14 workers per phase on the 16 cores:
#   routing: moe_fused_gate (random shapes; the DeepSeek-V3 preset), its bf16 instantiation, topk_softmax;
#   quant: the v1/v2 dispatch and v1 alone, fp32 scales (row, col, col_tma) and UE8M0-packed scales apart.
# The phases shrink when earlier steps ran long, so that packing starts by 500 s: under 9.5 min even if every
# timeout is hit (expected about 6.5 min). $OUT: log.txt, impls.txt, smoke.jsonl, runs.tgz (summaries, reports,
# fixtures, logs), cases.tgz (every case line). Rehearsed on CPU with a stand-in kernel (docs/sglang.md §6).
O=$1; S=/tmp/sgl; W=/tmp/sg; mkdir -p $S $W; T0=$(date +%s)
exec > >(tee $O/log.txt) 2>&1
left() { echo $((T0 + 500 - $(date +%s))); }  # seconds until packing must start
tar -C $S -xJf .carry/sglang/sglang_kernel-0.4.4-sm90.tar.xz
export PYTHONPATH=$S:$PWD PYTHONUNBUFFERED=1
date +%T
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
python3 -c "import torch, sgl_kernel; print('torch', torch.__version__, '| sgl_kernel', sgl_kernel.__version__, \
sgl_kernel.common_ops.__file__)" 2>&1 | tail -n 3
timeout 40 python3 -m difftest impls | tee $O/impls.txt
timeout 120 python3 campaigns/h200/sglang_smoke.py $W/smoke > $W/smoke.log 2>&1; echo "smoke rc=$?"
grep -v '"kind": "case"' $W/smoke/smoke.jsonl | cut -c1-400; grep -c '"status": "pass"' $W/smoke/smoke.jsonl
grep '"kind": "case"' $W/smoke/smoke.jsonl | grep -v '"status": "pass"' | cut -c1-400
cp $W/smoke/smoke.jsonl $O/ 2>/dev/null
date +%T

PIDS=""
fz() {  # name budget workers seed args...: one campaign in the background, its log in $W/name.log
  local name=$1 budget=$2 workers=$3 seed=$4; shift 4
  timeout $((budget + 30)) python3 -m difftest fuzz "$@" --time-budget $budget --workers $workers --seed $seed \
    --out $W/$name > $W/$name.log 2>&1 &
  PIDS="$PIDS $!"
}
R="--op routing"; Q="--op quant"
B=$(( ($(left) - 60) / 2 )); B=$(( B > 130 ? 130 : B )); echo "phase budget ${B} s"
fz mfg $B 5 261 --impl sglang.moe_fused_gate $R
fz mfg_dsv3 $B 2 262 --impl sglang.moe_fused_gate --model deepseek-v3 $R
fz mfg_bf16 $B 3 263 --impl sglang.moe_fused_gate_bf16 $R
fz topk $B 4 264 --impl sglang.topk_softmax $R
wait $PIDS; PIDS=""  # not a bare wait: it would also wait for the tee of this script's own output
for n in mfg mfg_dsv3 mfg_bf16 topk; do echo "== $n"; tail -n 4 $W/$n.log; done
date +%T
UE="--where scale_fmt=ue8m0 --where layout=ue8m0_packed --where group_size=128"
B=$(( $(left) - 30 )); B=$(( B > 130 ? 130 : B )); echo "phase budget ${B} s"
fz q $B 5 265 --impl sglang.per_token_group_quant_8bit $Q --where scale_fmt=fp32
fz q_ue8m0 $B 3 266 --impl sglang.per_token_group_quant_8bit $Q $UE
fz q1 $B 3 267 --impl sglang.per_token_group_quant_8bit_v1 $Q --where scale_fmt=fp32
fz q1_ue8m0 $B 3 268 --impl sglang.per_token_group_quant_8bit_v1 $Q $UE
wait $PIDS
for n in q q_ue8m0 q1 q1_ue8m0; do echo "== $n"; tail -n 4 $W/$n.log; done
date +%T
RUNS="mfg mfg_dsv3 mfg_bf16 topk q q_ue8m0 q1 q1_ue8m0"
for n in $RUNS; do [ -d $W/$n ] && [ $(left) -gt -40 ] && timeout 10 python3 -m difftest report $W/$n > /dev/null 2>&1; done
cd $W && find $RUNS smoke *.log -type f -size -2M ! -path '*/db/*' ! -name 'cases*.jsonl*' 2>/dev/null > small.txt
tar -czf $O/runs.tgz -T small.txt
find $RUNS -name 'cases*.jsonl*' 2>/dev/null > cases.txt; tar -czf $O/cases.tgz -T cases.txt
ls -la $O; date +%T
