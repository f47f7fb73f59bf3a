"""The plug-in contract: which outputs run() returns for a case, of which dtype and shape (docs/plugins.md "Inputs
and outputs per op"), and the finding of an implementation that breaks it."""

from typing import NamedTuple

import numpy as np

from spec.numerics import SCALE_BLOCKS

from .verdict import failed

CONTRACT_DOC = "docs/plugins.md"
INTEGERS = tuple(np.dtype(t) for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))
# float64 holds every float32 value exactly; a narrower float (fp16, bf16) has lost the bits the bound is made of
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))  # one-byte codes: the same bits either way
# the padded permutation's outputs (docs/trtllm_gen_routing.md), returned where tile_tokens_dim is set
PERMUTATION_KEYS = ("total_num_padded_tokens", "expanded_idx_to_permuted_idx", "permuted_idx_to_token_idx",
                    "cta_idx_xy_to_batch_idx", "cta_idx_xy_to_mn_limit", "num_non_exiting_ctas")


class Output(NamedTuple):
    """One output of the plug-in contract for a case: required or optional, the dtypes and shapes accepted (()
    any), and the contract in the words of CONTRACT_DOC with the case's sizes."""

    required: bool
    dtypes: tuple
    shapes: tuple
    contract: str


def contract(case, expected=None):
    """{output name: Output} of what run() returns for this case: routing, quant and moe from the case; a trtllm_ops
    dev kernel's from the spec's outputs (``expected``, impl_spec.dev_kernel: compare_trtllm_ops has them), each of
    its shape as float32 values, uint8 codes or integers (narrow floats as float32, fp8 as uint8 codes)."""
    if case.op == "trtllm_ops":
        return {} if expected is None else {name: _dev_output(np.asarray(a)) for name, a in expected.items()}
    c = case.config
    if case.op == "routing":
        T, n = c.num_tokens, c.top_k + c.num_fused_shared_experts
        sizes = f"[T, k + S] = [{T}, {n}]"
        out = {"ids": Output(True, INTEGERS, ((T, n),), f"int32 {sizes}"),
               "weights": Output(True, FLOATS, ((T, n),), f"float32 {sizes}")}
        if c.tile_tokens_dim is not None:  # the padded permutation (docs/trtllm_gen_routing.md)
            out.update({k: Output(True, INTEGERS, (), "int32 (tile_tokens_dim is set)") for k in PERMUTATION_KEYS})
        return out
    if case.op == "quant":
        T, H = c.num_tokens, c.hidden_size
        G = H // (c.group_size if c.scheme == "fp8_group" else SCALE_BLOCKS[c.scheme])
        q = (T, H // 2) if c.scheme == "nvfp4" else (T, H)
        codes = c.scheme != "fp8_group"
        return {"q": Output(True, BYTES, (q,), f"uint8 codes {list(q)}"),
                "scales": Output(True, BYTES if codes else FLOATS, ((T, G),),
                                 f"{'uint8 codes' if codes else 'float32'} [T, H/g] = [{T}, {G}]"),
                "scale_buffer": Output(True, (), (), f"the scales' memory in the {c.layout} layout")}
    if case.op == "moe":
        T, H, k = c.routing.num_tokens, c.hidden_size, c.routing.top_k
        return {"out": Output(True, FLOATS, ((T, H),), f"float32 [T, H] = [{T}, {H}]"),
                "ids": Output(False, INTEGERS, ((T, k),), f"int32 [T, k] = [{T}, {k}], if returned"),
                "weights": Output(False, FLOATS, ((T, k),), f"float32 [T, k] = [{T}, {k}], if returned")}
    return {}


def _dev_output(a):
    """The contract of one output of a trtllm_ops dev kernel whose spec output is `a`."""
    if a.dtype == np.uint8:
        return Output(True, BYTES, (a.shape,), f"uint8 codes {list(a.shape)}")
    if a.dtype.kind == "f":
        return Output(True, FLOATS, (a.shape,), f"float32 {list(a.shape)}")
    return Output(True, INTEGERS, (a.shape,), f"int32 {list(a.shape)}")


def contract_violation(case, outputs, impl_name="the implementation", tag=None, expected=None):
    """None, or the failing Verdict of the first output of `outputs` that breaks the plug-in contract (missing,
    dtype, shape): the implementation's finding, stated with the contract it broke (``expected``: contract's)."""
    tag = tag or case.op
    for name, want in contract(case, expected).items():
        field = "permutation" if name in PERMUTATION_KEYS else name
        if name not in outputs:
            if want.required:
                return failed(field, "missing", f"{impl_name} returned no {name} (outputs {sorted(outputs)}); the "
                                               f"contract is {want.contract} ({CONTRACT_DOC}) [{tag}]")
            continue
        a = np.asarray(outputs[name])
        if want.dtypes and a.dtype not in want.dtypes:
            return failed(field, "dtype", f"{impl_name} returned {name} {a.dtype}; the contract is {want.contract} "
                                         f"({CONTRACT_DOC}) [{tag}]")
        if want.shapes and a.shape not in want.shapes:
            return failed(field, "shape", f"{impl_name} returned {name} of shape {list(a.shape)}; the contract is "
                                         f"{want.contract} ({CONTRACT_DOC}) [{tag}]")
    return None
