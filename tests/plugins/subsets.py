"""Plug-ins that implement a subset of the case space and say so only by declining, in plain strings, as a user's
first plug-in does (no ``space``, no ``Decline``, no contract): torch eager behind an ``unsupported`` that takes one
routing method, or bf16 and fp8_block MoE layers with two routing methods. The campaign must learn what they decline
(difftest/model/learn.py) instead of drawing it again and again."""

from difftest.checking.impl_torch import TORCH


def _subset(name, ops, unsupported):
    def declines(case):
        return TORCH.unsupported(case) or unsupported(case)

    return TORCH._replace(name=name, ops=ops, unsupported=declines)


def _one_method(case):
    if case.config.method != "renormalize":
        return f"implements renormalize routing only, not {case.config.method}"
    return None


def _bf16_fp8_two_methods(case):
    c = case.config
    if c.quant not in ("bf16", "fp8_block"):
        return f"quant path {c.quant} is not implemented"
    if c.routing.method not in ("renormalize", "deepseek_v3"):
        return f"routing {c.routing.method} is not implemented"
    return None


ONE_METHOD = _subset("one-method-routing", ("routing",), _one_method)
BF16_FP8_MOE = _subset("bf16-fp8-moe", ("moe",), _bf16_fp8_two_methods)
