"""The SGLang quantizers' H200 records (the case lines of three campaigns of 2026-12-01, tests/data/h200_sglang_*)
against the spec's models of the kernels: CPU tests of the spec on recorded device verdicts, kept out of the GPU tier.
The checks themselves are tests/helpers/rcp_recheck.py and tests/helpers/v1_ue8m0_model.py."""

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data"
HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def _module(name):
    loader = importlib.util.spec_from_file_location(name, HELPERS / f"{name}.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def test_the_h200s_one_code_quant_findings_match_the_full_rcp_table():
    """Every failing fp32-scale case of the last SGLang call of 2026-12-01 (115 v2, 98 v1; cases in
    tests/data/h200_sglang_q*.jsonl.gz) regenerated: the spec now differs from the old one at exactly as many codes
    as the kernel did, the first of them the kernel's (so bit-exact where one code differed), and a sample of the
    passing cases is unchanged. `python tests/helpers/rcp_recheck.py FILE...` runs the same over every case."""
    recheck = _module("rcp_recheck")
    counts = {}
    for name, fails in (("q", 115), ("q1", 98)):
        with gzip.open(DATA / f"h200_sglang_{name}.jsonl.gz", "rt") as f:
            lines = [json.loads(text) for text in f]
        failing = [line for line in lines if line["status"] == "fail"]
        passing = [line for line in lines if line["status"] == "pass" and line["case"]["config"]["num_tokens"]]
        assert len(failing) == fails
        for line in failing + passing[:300]:
            verdict = recheck.classify(line)
            counts[verdict] = counts.get(verdict, 0) + 1
    assert counts == {"fail, now bit-exact": 187, "fail, now matches count and first code": 26,
                      "pass, still passes": 600}, counts


def test_the_traced_v1_ue8m0_mechanism_reproduces_the_h200s_verdicts():
    """Fixture sglang-per_token_group_quant_8bit_v1-ue8m0_exponent_plus_one's mechanism (docs/sglang.md §8): v1's
    exp2f(ceilf(log2f(max(s, 1e-10)))) and byte (int)log2f(y_s) + 127 with fast-math MUFU.LG2
    (tests/helpers/v1_ue8m0_model.py) gives the H200's verdict and message on the first 600 v1 UE8M0 cases of
    that call (tests/data/h200_sglang_q1_ue8m0.jsonl.gz); a correctly rounded log2 would not."""
    model = _module("v1_ue8m0_model")
    with gzip.open(DATA / "h200_sglang_q1_ue8m0.jsonl.gz", "rt") as f:
        lines = [json.loads(next(f)) for _ in range(600)]
    verdicts = [model.predict(line) for line in lines]
    assert set(verdicts) == {"reproduced, fail", "reproduced, pass"}, set(verdicts)
    assert verdicts.count("reproduced, fail") == 486  # and 114 passes
    exact_lg2 = model.mufu_lg2
    model.mufu_lg2 = lambda s: np.log2(np.asarray(s, np.float64)).astype(np.float32)
    try:
        assert sum(model.predict(line).endswith("differs") for line in lines) > 100
    finally:
        model.mufu_lg2 = exact_lg2
