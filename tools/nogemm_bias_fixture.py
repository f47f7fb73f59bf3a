"""The no-GEMM layer's bf16-bias finding (docs/gpu.md, H200 2026-12-02, `--model deepseek-v3-mtp`) as a case made on
the CPU, and on the GPU host its fixture: python tools/nogemm_bias_fixture.py [OUT]

Case: the deepseek-v3-mtp preset's routing (DeepSeekV3, E = 256, top-8, n_group 8, topk_group 4, rsf 2.5, the
trtllm-gen eps 1e-20) with an fp32 correction bias, at the preset's scaled sizes (H 256, I 128, bf16), the first seed
(from 0) whose spec ids under the adapter's recipe differ from those under its as-built row (the bias rounded to bf16,
as the routing kernel reads it). Printed: the case, both id sets where they differ, and what difftest says of the
as-built row's output under the adapter's recipe (the failure the kernel should show). With OUT, where the adapter
is available: the adapter runs the case, and a failure is written as a fixture under OUT with its REPORT.md,
repro.py and repro.npz (the expert weights regenerated from the seed, not stored). Exit 0 when written (or, without
OUT, when a case was found), 1 when the kernel passed the case, 2 when it cannot run here.
"""

import sys
from pathlib import Path

import numpy as np

from difftest.checking import check, impl_spec, interface
from difftest.model import generate
from difftest.model.case import Case, MoEConfig, RoutingConfig
from difftest.readers import bugreport
from difftest.running.campaign import observed
from difftest.store import fixtures
from spec.recipes import NAMED

ADAPTER = "flashinfer.trtllm_gen_nogemm"
RECIPE = NAMED["flashinfer_trtllm_gen_nogemm_bf16"]
AS_BUILT = NAMED["flashinfer_trtllm_gen_nogemm_bf16_grouped_as_built"]
SEEDS = 2000  # seeds tried; a differing one comes within the first few hundred
TOKENS = 4


def config():
    routing = RoutingConfig("deepseek_v3", TOKENS, 256, 8, 8, 4, 2.5, eps=1e-20, bias_dtype="fp32")
    return MoEConfig(routing=routing, hidden_size=256, intermediate_size=128)


def ids(case, recipe):
    """The spec's routed ids of the layer case under `recipe` (its rsf is applied in the routing)."""
    return impl_spec.route(case.config.routing, generate.inputs(case), recipe).ids


def find():
    for seed in range(SEEDS):
        case = Case("moe", config(), "normal", seed)
        want, as_built = ids(case, RECIPE), ids(case, AS_BUILT)
        if not np.array_equal(np.sort(want, axis=1), np.sort(as_built, axis=1)):
            return case, want, as_built
    raise SystemExit(f"no seed below {SEEDS} moves the ids")


def main(argv):
    case, want, as_built = find()
    print(f"case: {case.to_dict()}")
    for t in np.flatnonzero((np.sort(want, axis=1) != np.sort(as_built, axis=1)).any(axis=1)):
        print(f"token {t}: spec ids {sorted(want[t].tolist())}, with the bias in bf16 {sorted(as_built[t].tolist())}")
    inputs = generate.inputs(case)
    emulated = check.compared(case, inputs, impl_spec.expected(case, inputs, AS_BUILT), RECIPE, "as built")
    verdict = "pass" if emulated.ok else "fail"
    print(f"the spec's as-built row against the adapter's recipe: {verdict}: {emulated.message}")
    if not argv:
        return 0
    return record(case, Path(argv[0]), "flashinfer-trtllm_gen_nogemm-grouped_bias_bf16",
                  "tools/nogemm_bias_fixture.py (the H200 finding of 2026-12-02, deepseek-v3-mtp)")


def record(case, root, fixture_id, provenance):
    """Run `case` on the no-GEMM adapter; a failure becomes fixture `fixture_id` under `root` with its REPORT.md.
    Exit code: 0 written, 1 the kernel passed the case, 2 the adapter cannot run here."""
    impl = interface.load(ADAPTER)
    why = impl.available()
    if why:
        print(f"cannot run here: {why}", file=sys.stderr)
        return 2
    result = check.run_case(impl, case)
    print(f"{ADAPTER}: {result.status}: {result.message}")
    if result.status == "pass":
        return 1
    expected = impl_spec.expected(case, generate.inputs(case), impl.recipe(case))
    path = fixtures.write(root, case, ADAPTER, impl, impl.recipe(case), observed(result), expected,
                          provenance=provenance, id=fixture_id)
    bugreport.write(fixtures.load(path), path / bugreport.REPORT)
    print(f"fixture: {path} ({sum(f.stat().st_size for f in path.iterdir())} bytes)")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
