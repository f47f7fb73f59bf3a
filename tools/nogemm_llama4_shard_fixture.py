"""The open Llama4 shard bug of the trtllm-gen routing kernel (fixtures/flashinfer-trtllm_gen_routing-
llama4_warp_path_shard) as it meets the no-GEMM layer, from a case made on the CPU, and on the GPU host its fixture:
python tools/nogemm_llama4_shard_fixture.py [OUT]

The layer (impls/flashinfer/trtllm_gen_nogemm.py) checks the routing kernel's shard launch before it indexes any
weight by it and stops with ShardIndexError, whose signature is ("permutation", "shard expert index"): the fixture
gives --known that signature for the moe op, so a campaign of the layer stops reporting the routing bug as new.

Case: Llama4 routing (top-1 of 128 experts, the compiled tier) on one token (the single-warp path, fewer than 4), an
8-expert shard at offset 8, a layer at H 256, I 128, once for each quant path of the layer (bf16, fp8_block: a
signature names its slice); the first seed (from 0) whose token picks an expert on the shard, where the kernel
writes its global index instead of its local one (a layer that trusted it would run another expert's weights).
Printed: the case and its spec ids. With OUT, where the adapter is available: the adapter runs the case and a
failure is written as a fixture under OUT with its REPORT.md, repro.py and repro.npz. Exit 0 when both are written
(or, without OUT, when the cases were found), 1 when the kernel passed a case, 2 when it cannot run here.
"""

import sys
from pathlib import Path

from nogemm_bias_fixture import record

from difftest.checking import impl_spec
from difftest.model import generate
from difftest.model.case import Case, MoEConfig, RoutingConfig
from impls.flashinfer.trtllm_gen_nogemm import QUANTS
from spec.recipes import NAMED

OFFSET, LOCAL = 8, 8
RECIPE = NAMED["flashinfer_trtllm_gen_nogemm_bf16"]


def find(quant):
    config = MoEConfig(routing=RoutingConfig("llama4", 1, 128, 1), hidden_size=256, intermediate_size=128,
                       local_expert_offset=OFFSET, local_num_experts=LOCAL, quant=quant)
    for seed in range(10_000):
        case = Case("moe", config, "normal", seed)
        ids = impl_spec.route(config.routing, generate.inputs(case), RECIPE).ids
        if OFFSET <= ids[0, 0] < OFFSET + LOCAL:
            return case, ids
    raise SystemExit("no seed below 10000 routes the token onto the shard")


def main(argv):
    codes = []
    for quant in QUANTS:  # a signature names the slice (the quant path): one fixture per path
        case, ids = find(quant)
        print(f"case: {case.to_dict()}")
        print(f"spec ids {ids.tolist()}: on the shard, local expert {int(ids[0, 0]) - OFFSET}")
        if argv:
            codes.append(record(case, Path(argv[0]), "flashinfer-trtllm_gen_nogemm-llama4_warp_path_shard"
                                + ("" if quant == "bf16" else f"_{quant}"),
                                "tools/nogemm_llama4_shard_fixture.py (the routing kernel's open Llama4 shard bug "
                                "through the layer)"))
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
