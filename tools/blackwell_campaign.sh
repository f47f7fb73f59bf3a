#!/bin/bash
# The SM100-only trtllm-gen fused-MoE adapters on a Blackwell host (SM100/SM103), in one call (issue 36 item 3):
#   bash tools/blackwell_campaign.sh OUT [SEED]
# Run from the repository root. Needs torch with CUDA, flashinfer-python 0.7.2.post1 (with apache-tvm-ffi)
# importable, and the trtllm-gen batched-GEMM cubins for SM100: flashinfer-cubin of the same version installed, or
# FLASHINFER_CUBIN_DIR holding them (offline the adapters refuse up front instead, docs/semantics.md §5.4).
# Steps, each under its own timeout (BUDGET seconds a campaign, default 120; WORKERS, default 4):
#   1. the CPU contract tests of the three adapters (tests/impls/test_sm100_contract.py)   -> OUT/contract.log
#   2. `python -m difftest impls`: each adapter available, or the reason              -> OUT/impls.txt
#   3. a fresh-seed campaign per adapter with --known fixtures/                       -> OUT/NAME/{log.txt,summary.json}
# flashinfer.trtllm_fp4_block_scale_moe declines every case until the case model carries NVFP4 activation global
# scales (impls/flashinfer/trtllm_fp4_block_scale_moe.py CALIBRATION): its campaign reports that reason, not a result.
set -u
O=$(realpath -m "${1:?usage: bash tools/blackwell_campaign.sh OUT [SEED]}"); SEED=${2:-$(($(date +%s) % 100000))}
BUDGET=${BUDGET:-120} WORKERS=${WORKERS:-4}
mkdir -p "$O"
exec > >(tee "$O/log.txt") 2>&1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader; git log --oneline -1 2> /dev/null

echo "== 1. contract tests (CPU)"
timeout -k 10 300 python3 -m pytest tests/impls/test_sm100_contract.py -p no:cacheprovider -q -n 0 > "$O/contract.log" 2>&1
echo "contract tests exit $?"; tail -n 3 "$O/contract.log"

echo "== 2. availability"
timeout -k 10 120 python3 -m difftest impls > "$O/impls.txt" 2>&1; grep -E "trtllm_(bf16|fp8_block|fp4_block)" "$O/impls.txt"

echo "== 3. campaigns (seed $SEED, ${BUDGET} s each, $WORKERS workers)"
for impl in flashinfer.trtllm_bf16_moe flashinfer.trtllm_fp8_block_scale_moe flashinfer.trtllm_fp4_block_scale_moe; do
  d=$O/${impl#flashinfer.}
  timeout -k 15 $((BUDGET + 240)) python3 -m difftest fuzz --impl "$impl" --op moe --time-budget "$BUDGET" \
    --workers "$WORKERS" --seed "$SEED" --known fixtures/ --out "$d/run" > "$d.log" 2>&1
  echo "$impl: exit $?"; mkdir -p "$d"; mv "$d.log" "$d/log.txt"; cp "$d/run/summary.json" "$d/" 2> /dev/null
  tail -n 6 "$d/log.txt"
done
