#!/bin/bash
# The GPU side of the project in one call of at most 600 s (issues 38 and 34): bash tools/device_verify.sh OUT [SEED]
#
# Run from the repository root of a CUDA host with torch, pytest, pytest-xdist, hypothesis and numpy. What it needs
# beyond the tree lies in .carry/ (ignored; `bash tools/make_carry.sh` makes it: docs/gpu.md, "One-call verification"):
#   flashinfer.tar.xz   flashinfer-python 0.7.2.post1 unpacked, less __pycache__ and the csrc these kernels do not build
#   apache_tvm_ffi-*.whl, cubin/ (the trtllmGen_bmm_export headers), prebuilt/ (the sm_90a trtllm-gen modules),
#   sglang/sglang_kernel-0.4.4-sm90.tar.xz (docs/sglang.md §2: sgl-kernel's Python files and SM90 library, 14 MB)
# Steps, most valuable first, each under its own timeout so that the later ones still run (DEVICE_VERIFY_STEPS
# picks some: tier bare repro replay bias exp presets adapters sglang rest mono; everything but log.txt and digest.txt
# comes back in OUT/results.tgz):
#   1. the GPU tier (python -m pytest -m "gpu and not heavy", the command of tox -e gpu)  -> OUT/gpu_tier.{log,xml};
#      bare: the same without flashinfer, and without sgl-kernel, side by side  -> OUT/gpu_tier_no_*.{log,xml}
#   2. every GPU fixture's `show --script` reproducer, run from outside the tree: the FlashInfer and SGLang ones with
#      only numpy, torch and the kernel's package on the path (exit 1: the bug is there; SGLang 2 without sgl-kernel),
#      the torch-CUDA ones (fixed; the project's own implementation) with the project on it (exit 0)  -> OUT/repro.tsv
#   2b. `replay` of every GPU fixture: each fails as recorded (its stored signatures)  -> OUT/replay.txt
#   2c. tools/nogemm_{bias,llama4_shard}_fixture.py: the no-GEMM layer's bf16-bias finding and the routing kernel's
#      Llama4 shard bug through the layer, on cases made on the CPU, written as fixtures with their reports where the
#      kernel fails them (a new one joins this copy's fixtures/, known to step 3)  -> OUT/{bias,llama4_shard}_fixture.txt,
#      OUT/nogemm_fixtures.tgz
#   2d. exp: tools/measure_exp.py on the device (torch's fp32 exp and the exp inside torch.softmax)  -> OUT/exp/
#   3. fresh-seed campaigns with --known fixtures/, in waves side by side (about 14 workers a wave; 21 in the first):
#      presets: the no-GEMM presets for 170 s; adapters: the routing preset for 170 s beside the routing and no-GEMM
#      adapters without one; sglang: every SGLang adapter, 60 s; rest: the other FlashInfer adapters, torch-cuda and a
#      shorter no-GEMM campaign, 60 s; mono: the mono-moe preset  -> OUT/campaigns.tgz (NAME/), OUT/digest.txt
#   3a. the first new fixtures of the no-GEMM preset campaigns, each with its REPORT.md, repro.py and repro.npz
#      (`show --report`), ready to commit under fixtures/  -> OUT/new_fixtures.tgz (CAMPAIGN/ID/)
# A step that no longer fits in the time left is skipped, and the log says so. Not in this call: cutlass_fused_moe
# (opt-in, an hour of JIT), the SM100-only trtllm_* MoE entry points, and the heavy tier.
set -u
O=$(realpath -m "${1:?usage: bash tools/device_verify.sh OUT [SEED]}"); SEED=${2:-$(($(date +%s) % 100000))}
R=$PWD C=$PWD/.carry W=/tmp/device_verify LIMIT=${DEVICE_VERIFY_LIMIT:-585}
rm -rf $W; mkdir -p "$O/campaigns" $W/site $W/sgl $W/scripts $W/runs
exec > >(tee "$O/log.txt") 2>&1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 FLASHINFER_WORKSPACE_BASE=$W/ws
step() { echo "== +${SECONDS}s $*"; }
want() {  # STEP: whether DEVICE_VERIFY_STEPS (a space-separated list of tier bare repro replay bias exp presets adapters rest
  # mono; default all) names it, for a second call that runs what the first had no time for
  [ -z "${DEVICE_VERIFY_STEPS:-}" ] || [[ " $DEVICE_VERIFY_STEPS " == *" $1 "* ]] || { echo "not asked for: $1"; false; }
}
fits() {  # SECONDS WHAT: whether a step of SECONDS still fits; if not, say it is skipped
  [ $((LIMIT - SECONDS)) -ge "$1" ] || { echo "SKIPPED for time (${SECONDS}s used, needs $1 s): ${*:2}"; false; }
}

step "install (seed $SEED)"
if [ -f "$C/flashinfer.tar.xz" ]; then
  tar -C $W/site -xJf "$C/flashinfer.tar.xz" && python3 -m pip install -q --no-index --no-deps --target $W/site \
    "$C"/apache_tvm_ffi-*.whl || echo "install failed: the FlashInfer tests skip"
else echo "no .carry/flashinfer.tar.xz: the FlashInfer tests skip"; fi
if [ -f "$C/sglang/sglang_kernel-0.4.4-sm90.tar.xz" ]; then  # docs/sglang.md §2: the package and its SM90 library
  tar -C $W/sgl -xJf "$C/sglang/sglang_kernel-0.4.4-sm90.tar.xz" || echo "sgl-kernel unpack failed: SGLang skips"
else echo "no .carry/sglang: the SGLang tests skip and their scripts exit 2"; fi
if ls "$C"/prebuilt/*.so > /dev/null 2>&1; then
  export FLASHINFER_CUBIN_DIR=$C/cubin DIFFTEST_TRTLLM_GEN_PREBUILT=$C/prebuilt
else echo "no .carry/prebuilt: the trtllm-gen adapters stay unavailable (their JIT build takes ~6 min)"; fi
export PYTHONPATH=$W/site:$W/sgl:$R  # flashinfer (site) and sgl-kernel (sgl) apart, for the tier without one
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2> /dev/null
python3 -m difftest impls

step "1. GPU tier"
tier() {  # NAME PYTHONPATH: the tier's command with only those packages beside the tree
  PYTHONPATH=$2 timeout -k 10 220 python3 -m pytest -m "gpu and not heavy" -p no:cacheprovider \
    -n "${DEVICE_VERIFY_XDIST:-4}" -q -rs --junitxml="$O/$1.xml" > "$O/$1.log" 2>&1
  echo "$1 exit $?"; tail -n 30 "$O/$1.log"
}
# side by side (the tests are light on the GPU): with both packages, and without flashinfer or without sgl-kernel
# (issue 38: each absent package's tests skip with its reason, nothing else changes)
pids=()
want tier && { tier gpu_tier "$PYTHONPATH" > $W/tier.txt 2>&1 & pids+=($!); }
want bare && { tier gpu_tier_no_flashinfer "$W/sgl:$R" > $W/bare1.txt 2>&1 & pids+=($!); }
want bare && { tier gpu_tier_no_sgl_kernel "$W/site:$R" > $W/bare2.txt 2>&1 & pids+=($!); }
[ ${#pids[@]} = 0 ] || wait "${pids[@]}"; cat $W/tier.txt $W/bare1.txt $W/bare2.txt 2> /dev/null

step "2. fixture reproducers"
repro() {  # FIXTURE EXPECTED PATH: write the script with the project, run it from outside the tree without it
  local id d rc; id=$(basename "$1"); d=$W/scripts/$id; mkdir -p "$d"
  timeout -k 5 120 python3 -m difftest show "$1" --script "$d/repro.py" > "$d/show.txt" 2>&1
  (cd "$d" && PYTHONPATH=$3 timeout -k 5 100 python3 repro.py > out.txt 2> err.txt); rc=$?
  echo -e "$id\t$([ $rc = "$2" ] && echo ok || echo UNEXPECTED) (expected $2, exit $rc)\t$(tail -n 1 "$d/out.txt" |
    cut -c1-160) $(tail -n 1 "$d/err.txt" | cut -c1-160)"
}
export -f repro; export W
SG=$(python3 -c "import sgl_kernel" 2> /dev/null && echo 1 || echo 2)
if want repro && fits 150 "fixture reproducers"; then
  { for f in fixtures/flashinfer-*; do echo "$f 1 $W/site"; done
    for f in fixtures/sglang-*; do echo "$f $SG $W/sgl"; done
    for f in fixtures/*torch-cuda-*; do echo "$f 0 $W/site:$R"; done
  } | timeout -k 5 200 xargs -P 6 -L 1 bash -c 'repro "$@"' _ | sort | tee "$O/repro.tsv"
  for f in fixtures/flashinfer-* fixtures/sglang-* fixtures/*torch-cuda-*; do
    grep -q "^${f#fixtures/}	" "$O/repro.tsv" ||
      echo -e "${f#fixtures/}\tNOT RUN (the step's 200 s ran out)" | tee -a "$O/repro.tsv"
  done
  tar -C $W -czf "$O/repro_scripts.tgz" scripts
fi

step "2b. replay of every GPU fixture (each must fail as recorded: its stored signatures)"
if want replay && fits 190 "GPU fixture replay"; then  # 100 s ran out before the SGLang fixtures (16 GPU fixtures)
  timeout -k 5 170 python3 -m difftest replay -v fixtures/flashinfer-* fixtures/sglang-* fixtures/*torch-cuda-* \
    --skip-unavailable > "$O/replay.txt" 2>&1
  echo "replay exit $?"; tail -n 25 "$O/replay.txt"
fi

step "2c. the no-GEMM layer's findings as fixtures from their CPU-made cases (issue 34)"
if want bias && fits 150 "no-GEMM fixtures"; then
  for t in bias llama4_shard; do
    timeout -k 5 120 python3 tools/nogemm_${t}_fixture.py $W/nogemm_fixtures > "$O/${t}_fixture.txt" 2>&1
    echo "$t fixture exit $?"; tail -n 4 "$O/${t}_fixture.txt"
  done
  [ -d $W/nogemm_fixtures ] && tar -C $W -czf "$O/nogemm_fixtures.tgz" nogemm_fixtures &&
    cp -rn $W/nogemm_fixtures/* fixtures/  # a new one is known to the campaigns below (this copy of the tree only)
fi

step "2d. torch's fp32 exp on this device (issue 36: the softmax key allowance, docs/semantics.md §1.9)"
if want exp && fits 150 "exp measurement"; then
  timeout -k 5 140 python3 tools/measure_exp.py --out "$O/exp" --devices cuda > "$O/exp.txt" 2>&1
  echo "exp measurement exit $?"; tail -n 12 "$O/exp.txt"
fi

step "3. campaigns (seed $SEED, --known fixtures/)"
campaign() {  # NAME SECONDS WORKERS IMPL [ARGS...]
  local name=$1 s=$2 n=$3 impl=$4 d=$W/runs/$1 o=$O/campaigns/$1; shift 4
  timeout -k 15 $((s + 60)) python3 -m difftest fuzz --impl "$impl" "$@" --time-budget "$s" --workers "$n" \
    --seed "$SEED" --known fixtures/ --out "$d" > "$d.log" 2>&1
  echo "$name: exit $?"; mkdir -p "$o"; cp "$d.log" "$o/log.txt"; cp "$d/summary.json" "$o/" 2> /dev/null
  [ -d "$d/fixtures" ] && tar -C "$d" -czf "$o/fixtures.tgz" fixtures
  tail -n 6 "$d.log"
}
wave() {  # SECONDS DESCRIPTION then "NAME WORKERS IMPL [ARGS...]" per campaign, run side by side (`wait` alone
  local s=$1 what=$2 pids=(); shift 2  # would also wait for the log's tee)
  fits $((s + 40)) "$what" || return
  step "wave: $what"
  for c in "$@"; do read -r -a a <<< "$c"; campaign "${a[0]}" "$s" "${a[@]:1}" & pids+=($!); done
  wait "${pids[@]}"
}
# most valuable first; ~14 workers a wave on the 16 cores
want presets && wave 170 "trtllm-gen presets, 170 s and 7 workers each (issues 38, 36: deepseek-v3 is fp8_block, the DeepSeek-FP8 \
activation kernel's re-quantization)" \
  "nogemm_deepseek-v3 7 flashinfer.trtllm_gen_nogemm --model deepseek-v3" \
  "nogemm_nemotron-h 7 flashinfer.trtllm_gen_nogemm --model nemotron-h" \
  "nogemm_deepseek-v3-mtp 7 flashinfer.trtllm_gen_nogemm --model deepseek-v3-mtp"

step "3a. reports of the no-GEMM campaigns' new fixtures (issue 34: small, their weights regenerated from the seed)"
if want presets && fits 60 "reports of new fixtures"; then
  for f in $(ls -d $W/runs/nogemm_*/fixtures/*/ 2> /dev/null | head -n 4); do
    d=$O/new_fixtures/$(basename "$(dirname "$(dirname "$f")")")/$(basename "$f"); mkdir -p "$d"; cp -r "$f". "$d"
    timeout -k 5 60 python3 -m difftest show "$d" --report "$d/REPORT.md" > "$d.show.txt" 2>&1
    echo "$(basename "$f"): show exit $?, $(du -sb "$d" | cut -f1) bytes, largest file $(ls -S "$d" | head -n 1)"
  done
  [ -d "$O/new_fixtures" ] && tar -C "$O" -czf "$O/new_fixtures.tgz" new_fixtures && rm -rf "$O/new_fixtures"
fi
want adapters && wave 170 "the routing preset (issue 38: 7 workers, 170 s) and the routing and no-GEMM adapters without \
a preset (issues 33, 34: the compared share, no known bug reported)" \
  "routing_preset 7 flashinfer.trtllm_gen_routing --model trtllm-gen-routing" \
  "routing 4 flashinfer.trtllm_gen_routing" "nogemm 4 flashinfer.trtllm_gen_nogemm"
want sglang && wave 60 "every SGLang adapter (sgl-kernel from .carry/sglang)" \
  "sglang_gate 4 sglang.moe_fused_gate" "sglang_gate_bf16 3 sglang.moe_fused_gate_bf16" \
  "sglang_topk_softmax 2 sglang.topk_softmax" "sglang_quant 3 sglang.per_token_group_quant_8bit" \
  "sglang_quant_v1 2 sglang.per_token_group_quant_8bit_v1"
want rest && wave 60 "the other FlashInfer adapters without a preset, torch-cuda, and no-GEMM again (60 s)" \
  "mono_moe 3 flashinfer.mono_moe" "fused_topk 3 flashinfer.fused_topk_deepseek" \
  "dev_ops 3 flashinfer.trtllm_gen_dev_ops" "torch_cuda 4 torch-cuda" "nogemm_60s 3 flashinfer.trtllm_gen_nogemm"
want mono && wave 75 "mono_moe preset" "mono_moe_preset 7 flashinfer.mono_moe --model mono-moe"

step "digest"
python3 - "$O/campaigns" << 'EOF' | tee "$O/digest.txt"
import json, pathlib, sys
for d in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    f = d / "summary.json"
    s = json.loads(f.read_text()) if f.is_file() else None
    if s is None:
        print(f"{d.name}: no summary (see its log.txt)")
        continue
    cells = "; ".join(f"{k} {c['compared']}/{c['drawn']}" for k, c in s["cells"].items())
    print(f"{d.name}: {s['cases']} cases, compared/drawn {cells}; new findings {len(s['findings'])}, "
          f"known failures {len(s['known_failures'])}, worker errors {len(s['worker_errors'])}")
    for label, rows in (("NEW", s["findings"]), ("known", s["known_failures"]), ("worker error", s["worker_errors"])):
        for row in rows[:5]:
            print(f"   {label}: {str(row.get('message', row) if isinstance(row, dict) else row)[:300]}")
    for reason, n in sorted(s["skips"].items(), key=lambda kv: -kv[1])[:3]:
        print(f"   skipped {n}: {reason[:200]}")
EOF
step "done"
# one archive beside log.txt and digest.txt: a device call returns at most 8 files
(cd "$O" && tar -czf results.tgz --exclude=log.txt --exclude=digest.txt --exclude=results.tgz ./* &&
  find . -mindepth 1 -maxdepth 1 ! -name log.txt ! -name digest.txt ! -name results.tgz -exec rm -rf {} +)
