"""Kill power across widths (issue 21 item 3, heavy tier): fixed-size numeric bugs (difftest/selftest/mutants.py
WIDTH) on moe layers of H = 64, 512, 2048 and 7168 (I = 64, 256, 768, 2048: Qwen3-30B-A3B's and DeepSeek-V3's I at
the two model widths; 8 experts, top-2, to keep a CPU run in minutes). A bug is detected at a width when a changed case
fails on its own or the campaign cell's bias test rejects. `python -m pytest -m heavy tests/test_width.py -s`
prints the table of README's measured section."""

import pytest

from difftest.selftest import mutants

CASES = {64: 8, 512: 8, 2048: 8, 7168: 6}
# Detected at every width: the one-way stores through the bias test, bf16 router weights through the exposed
# weights. Printed, not asserted: an unbiased narrower store, caught per case only at small widths (README, "Not
# done"). The truncating accumulator of a bf16 pipeline is measured apart (README): too slow for a sweep, and not
# caught within 40 cases at H = 512 or 2048.
KILLED_AT_EVERY_WIDTH = ("gemm1_out_truncated", "expert_out_truncated", "router_weights_bf16")
MEASURED = ("silu_stored_bf16",)


@pytest.mark.heavy
def test_detection_does_not_fall_with_width():
    rows = [mutants.detection(name, h, cases=CASES[h])
            for h in CASES for name in ("identity",) + KILLED_AT_EVERY_WIDTH + MEASURED]
    print("\n" + mutants.detection_table(rows))
    for d in rows:
        if d.mutant == "identity":
            assert d.changed == 0 and not d.detected, d
        elif d.mutant in KILLED_AT_EVERY_WIDTH:
            assert d.changed == d.cases and d.detected, d
