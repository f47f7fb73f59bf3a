"""Kill power across widths (issue 21 item 3, heavy tier): fixed-size numeric bugs (difftest/selftest/mutants.py
WIDTH) on moe layers of H = 64, 512, 2048 and 7168 (I = 64, 256, 768, 2048: Qwen3-30B-A3B's and DeepSeek-V3's I at
the two model widths; 8 experts, top-2, to keep a CPU run in minutes). A bug is detected at a width when a changed case
fails on its own or the campaign cell's bias test rejects. `python -m pytest -m heavy
tests/difftest/selftest/test_mutant_kill_by_width.py -s` prints the tables of docs/measured.md, "Detection across
widths"."""

import pytest

from difftest.selftest import mutants

CASES = {64: 8, 512: 8, 2048: 8, 7168: 6}
# Detected at every width on dense inputs (a case fails, or the cell's bias test rejects): the one-way stores through
# the bias test, bf16 router weights through the exposed weights.
DETECTED_AT_EVERY_WIDTH = (("gemm1_out_truncated", "normal"), ("expert_out_truncated", "normal"),
                           ("router_weights_bf16", "normal"))
# Every case it changes fails on its own, at every width: the unbiased narrower store on "sparse" inputs, whose
# bound counts 16 products per output (docs/comparisons.md, "Width"). On "normal" inputs it hides under the dense
# layer's accumulation bound from H = 512 on: printed, not asserted. The truncating accumulator of a bf16 pipeline is
# measured apart (tests/difftest/checking/test_bias.py, docs/measured.md): too slow for a sweep.
FAILS_EVERY_CHANGED_CASE = (("silu_stored_bf16", "sparse"),)
PRINTED = (("silu_stored_bf16", "normal"),)
IDENTITY = (("identity", "normal"), ("identity", "sparse"))


@pytest.mark.heavy
@pytest.mark.parametrize("quant", ["bf16", "fp8_block"])
def test_detection_does_not_fall_with_width(quant):
    widths = [h for h in CASES if quant == "bf16" or h % 128 == 0]  # fp8_block: K blocks of 128
    rows = [mutants.detection(name, h, cases=CASES[h], quant=quant, dist=dist) for h in widths
            for name, dist in IDENTITY + DETECTED_AT_EVERY_WIDTH + FAILS_EVERY_CHANGED_CASE + PRINTED]
    print(f"\n{quant}:\n" + mutants.detection_table(rows))
    for d in rows:
        if d.mutant == "identity":  # the unpatched copy: never changed, never flagged
            assert d.changed == 0 and d.flagged == 0 and not d.detected, d
        elif (d.mutant, d.dist) in DETECTED_AT_EVERY_WIDTH:
            assert d.changed == d.cases and d.detected, d
        elif (d.mutant, d.dist) in FAILS_EVERY_CHANGED_CASE:
            assert d.changed == d.caught == d.cases, d


def test_sparse_inputs_catch_an_unbiased_store_at_model_width():
    """The default suite's share of the sweep: at H = 2048 the bf16 silu store fails each case it changes on
    sparse inputs, passes on dense ones (the reason for the sparse distribution), and the unpatched copy passes
    both."""
    sparse = mutants.detection("silu_stored_bf16", 2048, cases=2, dist="sparse")
    dense = mutants.detection("silu_stored_bf16", 2048, cases=2, dist="normal")
    assert sparse.changed == sparse.caught == 2 and dense.changed == 2 and dense.caught == 0
    for dist in ("normal", "sparse"):
        assert mutants.detection("identity", 2048, cases=2, dist=dist).flagged == 0
