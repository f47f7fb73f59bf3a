"""The plug-in contract: everything a plug-in or a user's test imports from difftest, in one module (docs/plugins.md).

What is named here keeps its name and meaning from one release to the next; the rest of difftest is private and
may move. ``CONTRACT`` is the version of the case model a plug-in is written against: a plug-in states it
(``contract = 2``), and every field added to the case model after that version reaches it only at its neutral
value, and every field widened after it only within what was drawn before, unless it lists the capability
(``capabilities = ("permutation", "kernel_limits")``; ``CAPABILITIES``). A plug-in that states no contract is of
contract 1, the case model of 2026-11-29.

    from difftest import plugin

    class MyRouting:                       # the nine attributes of docs/plugins.md, plus optionally
        contract = plugin.CONTRACT         # the fields it was written for
        def unsupported(self, case):       # a str, or a Decline naming the values refused
            if case.config.method != "deepseek_v3":
                return plugin.Decline("deepseek_v3 only", method=case.config.method)

    def test_my_routing(tmp_path):         # in the user's own test suite
        found = plugin.fuzz("my_package.moe:ROUTING", "routing", max_examples=200, fixtures_root=tmp_path)
        assert found.compared and not found.findings, found.findings
"""

from typing import NamedTuple

from spec.recipes import NAMED as RECIPES  # the named recipes: where FlashInfer, SGLang, ... kernels round
from spec.recipes import Recipe

from .checking.interface import Impl, ImplError, SpacedImpl, load
from .model.case import (
    CAPABILITIES,
    CONTRACT,
    OPS,
    Case,
    CaseError,
    Decline,
    DevKernelConfig,
    MoEConfig,
    QuantConfig,
    RoutingConfig,
)
from .model.generate import weights

__all__ = [
    "CAPABILITIES", "CONTRACT", "OPS", "RECIPES", "Case", "CaseError", "Decline", "DevKernelConfig", "Found",
    "Impl", "ImplError", "MoEConfig", "QuantConfig", "Recipe", "RoutingConfig", "SpacedImpl", "fuzz", "load",
    "weights",
]


class Found(NamedTuple):
    """What ``fuzz`` found: the examples drawn and compared, and each finding's message (with its fixture's replay
    command when ``fixtures_root`` was given)."""

    drawn: int
    compared: int
    findings: list


def fuzz(ref, op, *, max_examples=100, fixtures_root=None, seed=0):
    """Fuzz implementation `ref` (a name, ``package.module:NAME`` or ``path/file.py:NAME``) on `op` as
    ``python -m difftest fuzz --max-examples`` does, in this process: every slice of the op (routing method, quant
    scheme, moe quant path) gets `max_examples` examples, inside the implementation's contract and space, drawing
    around what it declines; each failure is shrunk (and written under `fixtures_root`), and the slice is searched on
    for failures of other signatures, as the CLI does. Returns a Found."""
    from .running import campaign
    from .running.run import campaign_cells

    if op not in OPS:
        raise CaseError(f"op {op!r} is not one of {OPS}")
    drawn = compared = 0
    findings, known, learned = [], set(), {}

    def search(i, impl, impl_ref, cell_op, configs):  # one slice, on until no new finding (as the CLI)
        def run(j, k, n):
            return campaign.fuzz_cell(
                impl, impl_ref, cell_op, configs=configs, fixtures_root=fixtures_root, known=known,
                run_seed=seed * 1_000_003 + i * 7_919 + j * 101 + k, hypothesis_settings=campaign.cli_settings(n),
                refusals=campaign.refusals_of(learned, impl_ref, cell_op))

        return campaign.until_no_new_finding(lambda j: campaign.in_examples(lambda k, n: run(j, k, n), max_examples))

    for i, cell in enumerate(campaign_cells([ref], [op], None)):
        for res in search(i, *cell):
            drawn, compared = drawn + res.examples, compared + res.compared
            findings += [res.finding] if res.finding else []
    return Found(drawn, compared, findings)
