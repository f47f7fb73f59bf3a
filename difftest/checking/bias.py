"""The bias test: the statistical companion of the hard bound, for errors that push one way.

A worst-case bound charges every rounding at full size and in the worst direction, so an implementation whose
errors all push the same way (a truncating store or accumulator, scales consistently low) can stay below it,
the more easily the wider the layer. This test looks at the signs of the errors instead of their size.

Statistic. For a token t of a moe case and its compared output elements j (both values finite, the spec's
|value| ≥ TINY, the implementation's value differs from the recipe-exact spec's):

    d_t = Σ_j sign(out_tj − spec_tj)·sign(spec_tj)      (+1: moved away from zero, −1: toward zero).

The unit is the token, not the element: a single upstream rounding flip of one intermediate element moves every
output of its token through one column of W2, and when that element dominates the token (top-1, a spiky
activation, a small I) the whole row moves one way together (tests/test_bias.py builds such a token). Tokens
are independent: an implementation computes each token's row from that token's inputs (and shared weights).

Assumption (H0, a correct implementation of the recipe): given everything observed before it and its own
inputs, each token's d_t is symmetric (d_t and −d_t have the same distribution). This is the usual model of
round-to-nearest errors as symmetric random variables (Higham & Mary 2019), applied to what differs between
two implementations of one recipe: the summation order of fp32 accumulations and the roundings that follow.
It needs every declared rounding to be round-to-nearest or reproduced by the spec (the Hopper accumulator is
emulated), so it is not applied to recipes with declared approximations whose error may keep one sign
(``not_applicable``). tests/test_bias.py checks it on correct implementations (torch eager, the spec under
other summation orders): their evidence stays near 1 where a one-way bug's grows without bound.

Test (a mixture martingale, anytime valid). With S_n = Σ d_t, V_n = Σ d_t² over the first n tokens, conditional
symmetry gives E[exp(λ·d − λ²d²/2) | past] = E[cosh(λd)·exp(−λ²d²/2) | past] ≤ 1 (cosh y ≤ exp(y²/2)), so
exp(λS_n − λ²V_n/2) is a non-negative supermartingale from 1 for every λ; so is its average over λ ~ N(0, 1/ρ),

    M_n = √(ρ/(ρ + V_n))·exp(S_n²/(2(ρ + V_n))).

Ville's inequality: P(M_n ≥ 1/α for some n) ≤ α. A case, or a campaign cell (every token of its compared cases,
in any order), fails when ln M_n ≥ ln(1/α), α = ALPHA = 1e-9: a 10⁶-case campaign of a correct implementation
stays clean with probability ≥ 1 − 10⁻³, and a cell may be checked after every case (Hypothesis' adaptive choice
of the next case and stopping at the first rejection included). No bound on |d_t| and no variance is needed.
A one-way error with d_t ≈ −c·N_t over n tokens rejects once n ≳ 2·ln(1/α) + ln(V_n/ρ) ≈ 45-55; a single moe
case has at most a few dozen tokens, so the per-case test rarely decides and the cell (MoE cases of one quant
path of one implementation) does. A cell counts each token once: its key is (seed, distribution, shape, token
index), so the shrink steps and repeats of one example, which share their tokens, add nothing.
"""

import json
import math
from typing import NamedTuple

import numpy as np

ALPHA = 1e-9  # false-alarm rate per case and per campaign cell
RHO = 100.0  # prior precision of the mixture over λ (in squared sign counts; the boundary is flat in it)
TINY = 2.0**-100  # elements of smaller spec magnitude are not counted (flush-to-zero moves them toward zero)


class Evidence(NamedTuple):
    s: float = 0.0  # Σ d_t
    v: float = 0.0  # Σ d_t²
    tokens: int = 0  # tokens with d_t ≠ 0

    def plus(self, d):
        d = np.asarray(d, np.float64)
        d = d[d != 0]
        return Evidence(self.s + float(d.sum()), self.v + float((d * d).sum()), self.tokens + d.size)

    def log_m(self, rho=RHO):
        """ln M_n (module docstring)."""
        return self.s * self.s / (2 * (rho + self.v)) - 0.5 * math.log1p(self.v / rho)

    def rejects(self, alpha=ALPHA):
        return self.log_m() >= math.log(1 / alpha)

    def describe(self):
        way = "away from" if self.s > 0 else "toward"
        return (f"errors push {way} zero: Σ_t d_t = {self.s:+.0f} over {self.tokens} tokens (Σ d_t² = {self.v:.0f}), "
                f"evidence e^{self.log_m():.1f} ≥ 1/α = 1e9 against symmetric rounding "
                f"(bias test, difftest/checking/bias.py)")


def not_applicable(recipe):
    """Why H0 (symmetric errors) is not claimed for `recipe`, or None. A recipe-exact reference is needed, and
    declared approximations (sigmoid tanh.approx / expf, mono_moe's approximate reciprocal) may keep one sign."""
    if recipe is None:
        return "no recipe declared: the reference is the float64 ideal, whose distance is the recipe's own error"
    if recipe.sigmoid != "exact":
        return f"sigmoid {recipe.sigmoid!r} is an approximation whose error may keep one sign"
    if {"mul_448_div_amax", "mul_mufu_rcp_scale"} & {recipe.act_quant_variant, recipe.requant_variant}:
        return "the quantizer's approximate reciprocal may keep one sign"
    if recipe.gemm_acc == "tensor_core":
        return "the tensor core's fp32 accumulator may round toward zero, so its errors may keep one sign"
    return None


def token_signs(got, want, rows=None):
    """d_t [T] (module docstring) of outputs got, want [T, H]; rows [T] bool: the compared tokens (others 0)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(invalid="ignore"):
        counted = np.isfinite(got) & np.isfinite(want) & (np.abs(want) >= TINY) & (got != want)
        signs = np.where(counted, np.sign(got - want) * np.sign(want), 0.0)
    d = signs.sum(axis=1)
    return d if rows is None else np.where(rows, d, 0.0)


def case_evidence(d):
    return Evidence().plus(d)


def token_key(row, t):
    """The identity of token t of a cases.jsonl row for the cell's count: the cases that share it (shrink steps,
    repeats, another token count of one seed) compute the same token."""
    c = row["case"]["config"]
    r = c.get("routing", {})
    shape = (c.get("hidden_size"), c.get("intermediate_size"), r.get("num_experts"), c.get("quant"))
    return json.dumps([row["case"]["seed"], row["case"]["dist"], shape, t])


def cell_of(row):
    return (row.get("impl"), row["op"], row.get("quant"))


class Monitor:
    """Cells' evidence over cases.jsonl rows (campaign.case_row's "bias": [[t, d_t], ...]), each token once."""

    def __init__(self, alpha=ALPHA):
        self.alpha = alpha
        self.cells, self.seen, self.cases = {}, set(), {}

    def add(self, row):
        """Add a row's tokens; True when its cell's evidence now rejects."""
        pairs = row.get("bias")
        if not pairs:
            return False
        cell = cell_of(row)
        new = []
        for t, d in pairs:
            key = (cell, token_key(row, t))
            if key not in self.seen:
                self.seen.add(key)
                new.append(d)
        self.cells[cell] = self.cells.get(cell, Evidence()).plus(new)
        self.cases[cell] = self.cases.get(cell, 0) + 1
        return self.cells[cell].rejects(self.alpha)

    def cells_summary(self):
        """[{impl, op, quant, cases, tokens, log_evidence}] of every cell seen: how far each is from rejecting."""
        return [{"impl": cell[0], "op": cell[1], "quant": cell[2], "cases": self.cases[cell], "tokens": e.tokens,
                 "log_evidence": round(e.log_m(), 3)} for cell, e in self.cells.items()]

    def findings(self):
        """[{impl, op, quant, cases, evidence, message}] of the cells whose evidence rejects."""
        return [{"impl": cell[0], "op": cell[1], "quant": cell[2], "cases": self.cases[cell],
                 "evidence": list(e), "message": f"{e.describe()} [cell {cell[1]}/{cell[2]}, {cell[0]}]"}
                for cell, e in self.cells.items() if e.rejects(self.alpha)]
