#!/bin/bash
# Session 5, last device call (nvidia-h200; carry .carry's flashinfer.tar.xz, the apache_tvm_ffi wheel, cubin/,
# before/ (git archive 4e347c8), sglang/, and wt26/ (git archive of branch wt26 without tests/ and campaigns/ but
# the two files it runs: the carry is 64 MiB; issue 26's full-table
# MUFU.RCP spec, not yet on main when this ran); timeout_s 590):
#   bash campaigns/h200/s5_call_final.sh $OUT
# 1. the SGLang quantizer check of issue 26 (campaigns/h200/s5_sglang_requant.sh, on the wt26 tree) -> $OUT/sgl/
# 2. pipeline_bench.sh's torch-CUDA row (before, sync, pipelined; 30 s each) -> $OUT/bench.json
# 3. mono_moe pipelined again (55 s), after 4739c41 (no verifier wait after the last batch) -> $OUT/bench.json
O=$1; mkdir -p $O/sgl
ln -sfn $PWD/.carry .carry/wt26/.carry
(cd .carry/wt26 && bash campaigns/h200/s5_sglang_requant.sh $O/sgl)
IMPLS=torch_cuda bash campaigns/h200/pipeline_bench.sh $O/b1 30
KINDS=pipelined IMPLS=mono_moe bash campaigns/h200/pipeline_bench.sh $O/b2 55
cat $O/b1/bench.json $O/b2/bench.json > $O/bench.json; cat $O/b1/log.txt $O/b2/log.txt > $O/bench_log.txt; rm -rf $O/b1 $O/b2
(cd /tmp && tar -czf $O/summaries.tgz sync_torch_cuda/summary.json pipe_torch_cuda/pipeline-summary.json \
  before_torch_cuda/summary.json pipe_mono_moe/pipeline-summary.json 2>/dev/null)
ls -la $O $O/sgl
