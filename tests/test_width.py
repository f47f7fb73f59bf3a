"""Kill power across widths (issue 21 item 3, heavy tier): fixed-size numeric bugs (difftest/selftest/mutants.py
WIDTH) on moe layers of H = 64, 512, 2048 and 7168 (I = 64, 256, 768, 2048: Qwen3-30B-A3B's and DeepSeek-V3's I at
the two model widths; 8 experts, top-2, to keep a CPU run in minutes). A bug is detected at a width when a changed case
fails on its own or the campaign cell's bias test rejects. `python -m pytest -m heavy tests/test_width.py -s`
prints the table of README's measured section."""

import pytest

from difftest.selftest import mutants

CASES = {64: 8, 512: 8, 2048: 8, 7168: 6}
# Detected at every width on dense inputs: the one-way stores through the bias test, bf16 router weights through the
# exposed weights. The unbiased narrower store hides under the dense layer's accumulation bound from H = 512 on
# (printed on "normal" inputs, where it is caught only at H = 64) and fails every case it changes on "sparse"
# inputs, whose bound counts 16 products per output at every width (docs/comparisons.md, "Width"). The truncating
# accumulator of a bf16 pipeline is measured apart (tests/test_bias.py, README): too slow for a sweep.
KILLED_AT_EVERY_WIDTH = (("gemm1_out_truncated", "normal"), ("expert_out_truncated", "normal"),
                         ("router_weights_bf16", "normal"), ("silu_stored_bf16", "sparse"))
PRINTED = (("silu_stored_bf16", "normal"),)
IDENTITY = (("identity", "normal"), ("identity", "sparse"))


@pytest.mark.heavy
def test_detection_does_not_fall_with_width():
    rows = [mutants.detection(name, h, cases=CASES[h], dist=dist)
            for h in CASES for name, dist in IDENTITY + KILLED_AT_EVERY_WIDTH + PRINTED]
    print("\n" + mutants.detection_table(rows))
    for d in rows:
        if d.mutant == "identity":  # the unpatched copy: never changed, never flagged
            assert d.changed == 0 and d.flagged == 0 and not d.detected, d
        elif (d.mutant, d.dist) in KILLED_AT_EVERY_WIDTH:
            assert d.changed == d.cases and d.caught == d.cases, d


def test_sparse_inputs_catch_an_unbiased_store_at_model_width():
    """The default suite's share of the sweep: at H = 2048 the bf16 silu store fails each case it changes on
    sparse inputs, passes on dense ones (the reason for the sparse distribution), and the unpatched copy passes
    both."""
    sparse = mutants.detection("silu_stored_bf16", 2048, cases=2, dist="sparse")
    dense = mutants.detection("silu_stored_bf16", 2048, cases=2, dist="normal")
    assert sparse.changed == sparse.caught == 2 and dense.changed == 2 and dense.caught == 0
    for dist in ("normal", "sparse"):
        assert mutants.detection("identity", 2048, cases=2, dist=dist).flagged == 0
