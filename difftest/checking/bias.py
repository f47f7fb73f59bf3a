"""The bias test: the statistical companion of the hard bound, for errors that push one way.

A worst-case bound charges every rounding at full size and in the worst direction, so an implementation whose
errors all push the same way (a truncating store or accumulator, scales consistently low) can stay below it,
the more easily the wider the layer. This test looks at the signs of the errors instead of their size.

Statistic. For a token t of a moe case and its compared output elements j (both values finite, the spec's
|value| ≥ TINY, the implementation's value differs from the recipe-exact spec's):

    d_t = Σ_j sign(out_tj − spec_tj)·sign(spec_tj)      (+1: moved away from zero, −1: toward zero).

The unit is the token, not the element: a single upstream rounding flip of one intermediate element moves every
output of its token through one column of W2, and when that element dominates the token (top-1, a spiky
activation, a small I) the whole row moves one way together (tests/difftest/checking/test_bias.py builds such a token).
Tokens are independent: an implementation computes each token's row from that token's inputs (and shared weights).

Assumption (H0, a correct implementation of the recipe): given everything observed before it and its own
inputs, each token's d_t is symmetric (d_t and −d_t have the same distribution). This is the usual model of
round-to-nearest errors as symmetric random variables (Higham & Mary 2019), applied to what differs between
two implementations of one recipe: the summation order of fp32 accumulations and the roundings that follow.
tests/difftest/checking/test_bias.py checks it on correct implementations (torch eager, the spec under other summation
orders): their evidence stays near 1 where a one-way bug's grows without bound.

What H0 needs, and where it holds (``not_applicable``, the one statement of this rule). The tested quantity is
out_t − spec_t, spec the recipe-exact layer at the implementation's ids (or, without them, at tokens whose
selection is robust). A step that the spec reproduces bit for bit from the same operands adds no freedom of its
own, whatever its rounding direction: the stores' roundings to nearest, the quantizers (MUFU.RCP too, in
mul_448_div_amax and mul_mufu_rcp_scale: spec.hopper.hopper_rcp reads the whole measured table, bit-exact on the
H200), the Hopper FP8 accumulator's emulation. It only carries differences that arise upstream. Differences arise
where the recipe leaves the implementation a choice, and H0 needs each such choice to err symmetrically:
  - the order of fp32 additions (gemm_acc "fp32", combine, routing sums): symmetric, each addition rounds to
    nearest. gemm_acc "tensor_core" declares additions that may round toward zero: not applicable.
  - the functions the recipe declares rounded once (the activation, σ "exact", exp "rn"): reproduced by a
    correct implementation. torch's are within an ulp but not all correctly rounded (its fp32 gelu with tanh
    errs toward zero more often than away on negative inputs); the correct implementations of
    tests/difftest/checking/test_bias.py and their fuzz campaigns (docs/comparisons.md) measure what that leaves at the
    outputs: no evidence.
  - constants are applied as the spec applies them: rsf at the combine is a double (spec.layer._combine); an
    implementation that rounds it to fp32 moves every output by fl(rsf)/rsf − 1, one way, and is rejected where
    the outputs keep fp32 precision (docs/comparisons.md: the convention is open).
  - the approximations a recipe declares in the router's scores are not (every value outside NEAREST_SIGMOIDS
    and NEAREST_EXPS: sigmoid "expf" or "tanh", exp "ex2", and any added later): the spec evaluates one point of
    an admitted error of several ulps (an expf of a few ulps, ex2's 2|x|·u, tanh.approx's 2^-11 relative,
    spec/bounds.py), and an implementation's can err one way over a range of logits. They reach the outputs only
    through the router weights of the methods whose scores they make (spec.routing METHODS .scores: σ for the
    sigmoid methods, exp for the softmax ones, neither for ``topk``'s raw logits). Where the implementation
    exposes its ids and router weights, compare.compare_moe takes d_t against the spec layer at those weights
    (spec.layer.moe_layer ``router_weights``; the weights themselves are held to the hard bound as the routing
    op's), so no routing arithmetic reaches the statistic and the test applies whatever the sigmoid, exp or
    routing formats; without them it is not applied to cases whose router weights carry such an approximation.
Subnormal flushing (subnormals "flush") moves toward zero, but only values below 2^-126: TINY keeps the outputs it
could dominate out of the count.

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

from spec.routing import METHODS

ALPHA = 1e-9  # false-alarm rate per case and per campaign cell
RHO = 100.0  # prior precision of the mixture over λ (in squared sign counts; the boundary is flat in it)
TINY = 2.0**-100  # elements of smaller spec magnitude are not counted (flush-to-zero moves them toward zero)
# The recipe values whose scores a correct implementation reproduces up to rounding to nearest: σ and exp rounded
# once. Any other value (expf, tanh, ex2, and values added later) is a declared approximation (What H0 needs).
NEAREST_SIGMOIDS = ("exact",)
NEAREST_EXPS = ("rn",)


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


def approximate_scores(recipe, method):
    """The approximation `recipe` declares in the scores routing `method` makes its router weights of ("sigmoid
    'expf'", "exp 'ex2'"), or None where those scores are rounded to nearest (module docstring, What H0 needs)."""
    scores = METHODS[method].scores
    if scores == "sigmoid" and recipe.sigmoid not in NEAREST_SIGMOIDS:
        return f"sigmoid {recipe.sigmoid!r}"
    if scores in ("softmax", "softmax_of_selected") and recipe.exp not in NEAREST_EXPS:
        return f"exp {recipe.exp!r}"
    return None


def not_applicable(recipe, config, weights_given=False):
    """Why H0 (symmetric errors) is not claimed for the outputs of moe case `config` (case.MoEConfig) under
    `recipe`, or None (module docstring, What H0 needs). weights_given: d_t is taken at the implementation's own
    ids and router weights (compare.compare_moe), so approximations in the router's scores do not reach it."""
    if recipe is None:
        return "no recipe declared: the reference is the float64 ideal, whose distance is the recipe's own error"
    scores = approximate_scores(recipe, config.routing.method)
    if scores and not weights_given:
        return (f"the router weights of {config.routing.method} carry {scores}, an approximation whose error may "
                f"keep one sign, and the implementation exposes no ids and weights to condition on")
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
