"""Comparison of an implementation's outputs with the spec: tie-aware routing, bit-exact quantization, bounded
layer outputs. Every verdict carries the largest error/bound ratio (fed to hypothesis.target) and, on failure,
one message naming the element, both values, the bound and the ratio.

One module per op, on the shared parts:

    verdict     Verdict, Failure, the element-wise checks (elementwise, bounded_rows, _bit_exact) and worst
    contract    the plug-in contract: which outputs, of which dtype and shape
    keys        routing's float64 ideal and its error analysis: the keys' δ, the router weights' bounds
    validity    which routing ids are valid up to the decision margins (its docstring is the definition)
    ties        the declared tie rule among bit-identical keys
    routing     op routing (check_ids: the ids of routing and of moe)
    quant       op quant
    moe         op moe
    trtllm_ops  op trtllm_ops, trtllm-gen's dev kernels

COMPARE maps an op to its comparison. The names below are this package's interface (check.py, the reproducer, the
tests): each is the object of the module that defines it, so `compare.X` and `compare.<module>.X` are the same.
"""

from .contract import BYTES, CONTRACT_DOC, FLOATS, INTEGERS, PERMUTATION_KEYS, Output, contract, contract_violation
from .keys import (
    FTZ_EDGE,
    RAW_KEYS,
    SIGMOID_KEYS,
    SOFTMAX_KEYS,
    flushed_to_nan,
    group_rule,
    ideal_weights,
    keys64,
    robust,
    shared_flushed,
    underflow_term,
    ungrouped,
    weight_bound,
)
from .moe import compare_moe, layer_at, moe_routing, open_weights, recipe_vs_ideal, weighted_at
from .quant import code_value, compare_quant, nan_sign_free, scale_value
from .routing import check_ids, compare_permutation, compare_routing
from .ties import key_classes, tie_violation
from .trtllm_ops import U32, compare_trtllm_ops, deepseek_fp8_scales, deepseek_fp8_values, dev_allowance, stored_bound
from .validity import above, kept_group_sets, mask_value
from .verdict import (
    CHECKS,
    OUTPUT_ORDER,
    PASS,
    SPEC_FIELD,
    Failure,
    Verdict,
    bounded_rows,
    elementwise,
    failed,
    fmt_index,
    in_output_order,
    worst,
)

COMPARE = {"routing": compare_routing, "quant": compare_quant, "moe": compare_moe, "trtllm_ops": compare_trtllm_ops}

__all__ = [
    "BYTES", "CHECKS", "COMPARE", "CONTRACT_DOC", "FLOATS", "FTZ_EDGE", "INTEGERS", "OUTPUT_ORDER", "PASS",
    "PERMUTATION_KEYS", "RAW_KEYS", "SIGMOID_KEYS", "SOFTMAX_KEYS", "SPEC_FIELD", "U32", "Failure", "Output",
    "Verdict", "above", "bounded_rows", "check_ids", "code_value", "compare_moe", "compare_permutation",
    "compare_quant", "compare_routing", "compare_trtllm_ops", "contract", "contract_violation", "deepseek_fp8_scales",
    "deepseek_fp8_values", "dev_allowance", "elementwise", "failed", "flushed_to_nan", "fmt_index", "group_rule",
    "ideal_weights", "in_output_order", "kept_group_sets", "key_classes", "keys64", "layer_at", "mask_value",
    "moe_routing", "nan_sign_free", "open_weights", "recipe_vs_ideal", "robust", "scale_value", "shared_flushed",
    "stored_bound", "tie_violation", "underflow_term", "ungrouped", "weight_bound", "weighted_at", "worst",
]
