#!/bin/bash
# Issue 24 item 2: cases per device-minute, synchronous `difftest fuzz` against `difftest.running.pipeline` (device batches
# run ahead while host processes verify recorded outputs), for mono_moe, fused_topk_deepseek, trtllm-gen routing
# and torch-CUDA, in one device call of about 4 x (2 x S + 2) minutes' worth of seconds (S = 60: ~20 minutes).
#
# Device `run` on nvidia-h200, carrying .carry as for tools/device_verify.sh (flashinfer.tar.xz, apache_tvm_ffi wheel,
# cubin/, prebuilt/); optionally a copy of the tree before issue 24 as .carry/before (the spec's old 19 ns/product Hopper
# emulation), made here with `mkdir -p .carry/before && git archive 4e347c8 | tar -x -C .carry/before`:
#   bash campaigns/pipeline_bench.sh $OUT [S]
# $OUT gets log.txt and bench.json (one row per implementation: before = fuzz on .carry/before if present, sync =
# fuzz on this tree, pipelined = difftest.running.pipeline on this tree (difftest.pipeline before the regrouping,
# as the 2026-12-01 run did); each as cases, held seconds, cases per device-minute, and for the pipeline the
# verification drain after the device was released). The device is held for the whole of
# a fuzz run; a pipelined run holds it until its last kernel call.
# The rows of the 2026-12-01 run are committed as benchmarks/h200_pipeline.json (benchmarks/run.py renders them).
# On a CPU machine the same script measures a fake device: IMPLS=fake bash campaigns/pipeline_bench.sh OUT 30
# (tests/plugins/pipeline_impls.py:SLOW_DEVICE, torch on CPU with a 10 ms sleep per call).
O=$1; S=${2:-60}; mkdir -p $O /tmp/site
exec > >(tee $O/log.txt) 2>&1
if [ -f .carry/flashinfer.tar.xz ]; then
  tar -C /tmp/site -xJf .carry/flashinfer.tar.xz
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/apache_tvm_ffi-*.whl
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FLASHINFER_CUBIN_DIR=$PWD/.carry/cubin \
  DIFFTEST_TRTLLM_GEN_PREBUILT=$PWD/.carry/prebuilt FLASHINFER_WORKSPACE_BASE=/tmp/fiws
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
CORES=$(OMP_NUM_THREADS= nproc); W=$((CORES * 3 / 4)); V=$((CORES - 1))  # fuzz workers as earlier calls ran them (12 of 16)
[ $W -ge 1 ] || W=1; [ $V -ge 1 ] || V=1
PY=${PYTHON:-python3}
echo "cores $CORES, fuzz workers $W, pipeline verifiers $V, $S s each; $(date +%T)"

row() {  # name kind rundir -> one JSON row on stdout
  $PY - "$1" "$2" "$3" <<'EOF'
import json, sys
from pathlib import Path
name, kind, d = sys.argv[1], sys.argv[2], Path(sys.argv[3])
if kind == "pipelined":
    s = json.loads((d / "pipeline-summary.json").read_text())
    r = dict(cases=s["cases"], held_s=s["held_seconds"], per_device_minute=s["cases_per_device_minute"],
             drain_s=s["drain_seconds"], device_s=s["device_seconds"], idle_s=s["idle_seconds"],
             findings=len(s["findings"]), status=s["status"])
else:
    s = json.loads((d / "summary.json").read_text())
    r = dict(cases=s["cases"], held_s=s["seconds"], per_device_minute=round(s["cases"] / s["seconds"] * 60, 1),
             findings=len(s["findings"]), status=s["status"])
print(json.dumps({"impl": name, "kind": kind, **r}))
EOF
}

bench() {  # name impl [fuzz/pipeline options...]
  name=$1; impl=$2; shift 2
  rm -rf /tmp/before_$name /tmp/sync_$name /tmp/pipe_$name  # a run directory accumulates earlier runs' cases
  if [ -d .carry/before ] && [[ " ${KINDS:-before sync pipelined} " == *" before "* ]]; then
    # the tree before issue 24 has no AS_BUILT variant (it switched the adapter's recipe by an environment variable,
    # retired since): there the trtllm-gen row runs the adapter as declared, so its grouped-bias cases fail and shrink
    old=${impl#impls.}; old=${old%:AS_BUILT}
    (cd .carry/before && PYTHONPATH=/tmp/site:$PWD timeout $((S + 300)) $PY -m difftest fuzz --impl $old "$@" \
      --workers $W --time-budget $S --seed 1 --out /tmp/before_$name > /tmp/before_$name.log 2>&1)
    row $name before /tmp/before_$name | tee -a $O/bench.json
  fi
  if [[ " ${KINDS:-before sync pipelined} " == *" sync "* ]]; then
    timeout $((S + 300)) $PY -m difftest fuzz --impl $impl "$@" --workers $W --time-budget $S --seed 1 \
      --out /tmp/sync_$name > /tmp/sync_$name.log 2>&1
    row $name sync /tmp/sync_$name | tee -a $O/bench.json
  fi
  timeout $((S + 900)) $PY -m difftest.running.pipeline --impl $impl "$@" --verifiers $V --time-budget $S --seed 1 \
    --out /tmp/pipe_$name > /tmp/pipe_$name.log 2>&1
  row $name pipelined /tmp/pipe_$name | tee -a $O/bench.json
  tail -n 2 /tmp/sync_$name.log /tmp/pipe_$name.log
}

# KINDS picks the columns (default "before sync pipelined"). IMPLS picks which rows run (default all four; a device call is at most 10 minutes, so the 2026-12-01 run split
# them over calls: IMPLS=mono_moe, then the other three).
for name in ${IMPLS:-mono_moe fused_topk_deepseek trtllm_gen_routing torch_cuda}; do
  case $name in
    fake) bench fake_slow_device tests/plugins/pipeline_impls.py:SLOW_DEVICE --op routing ;;
    mono_moe) bench mono_moe flashinfer.mono_moe --model mono-moe ;;
    fused_topk_deepseek) bench fused_topk_deepseek flashinfer.fused_topk_deepseek --model deepseek-v3 --op routing ;;
    trtllm_gen_routing) bench trtllm_gen_routing impls.flashinfer.trtllm_gen_routing:AS_BUILT \
      --model trtllm-gen-routing ;;
    torch_cuda) bench torch_cuda torch-cuda --model deepseek-v3 --op routing --op quant --op moe ;;  # named ops: the
      # tree before (and main before b492db9) drew trtllm_ops around the preset and stopped
    *) echo "pipeline_bench: unknown IMPLS entry '$name'"; exit 2 ;;
  esac
done

$PY - $O/bench.json <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["impl"], {})[r["kind"]] = r
print("| impl | before /device-min | sync /device-min | pipelined /device-min | pipelined / before | pipelined / sync | drain s |")
print("|---|---|---|---|---|---|---|")
for impl, k in by.items():
    b, s, p = (k.get(x, {}).get("per_device_minute") for x in ("before", "sync", "pipelined"))
    ratio = lambda x, y: f"{x / y:.1f}x" if x and y else "-"
    print(f"| {impl} | {b or '-'} | {s} | {p} | {ratio(p, b)} | {ratio(p, s)} | {k.get('pipelined', {}).get('drain_s')} |")
EOF
date +%T
