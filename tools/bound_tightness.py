"""How tight the hard bound is, per recipe: docs/measured.md, "The bound's tightness by recipe" (issue 21).

    python tools/bound_tightness.py

Non-vacuity: the setup of tests/spec/test_bounds.py::test_hard_bound_is_not_vacuous (128 tokens, 4 experts, top-2,
swiglu, expert and layer outputs in fp32 so that a bf16 output rounding does not decide), the spec summed in
another legitimate order (reversed K in fp32, with additions that round toward zero for a tensor_core recipe;
Hopper recipes: whole K blocks reversed, their block sums emulated) against the recipe-exact spec: max
|error|/bound on non-negative inputs (the test's) and on signed ones, and the median bound/|out| on signed inputs.
Then the Hopper recipes' bound against exact sums
(accumulate="exact", tests/spec/test_bounds.py::test_hopper_bound_against_exact_sums_is_not_of_the_order_of_out)
and against their emulated sums: median bound/|out|.
"""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spec import bounds, recipes  # noqa: E402
from spec.layer import moe_layer  # noqa: E402
from spec.numerics import round_to  # noqa: E402
from tests.spec import test_bounds as tb  # noqa: E402
from tests.spec.test_layer import problem, quantized_weights  # noqa: E402


def reordered(path, recipe, H, I, signed):
    """(max error/bound, median bound/|out|) of the spec in another summation order."""
    recipe = recipe.but(expert_out="fp32", out="fp32")
    x, logits, w13, w2 = problem(21, T=128, H=H, I=I, E=4)
    if not signed:
        x, logits, w13, w2 = (np.abs(a) for a in (x, logits, w13, w2))
    x = round_to(x, "bf16").astype(np.float32)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant=path, recipe=recipe)
    h_order, i_order, acc = tb.another_order(recipe, H, I)
    xp, w13p, w2p = tb.permuted(x, (w13, w2), h_order, i_order, True)
    exact = moe_layer(x, logits, None, quantized_weights(w13, w2, path)[0], **kw)
    got = moe_layer(xp, logits, None, quantized_weights(w13p, w2p, path)[0], **kw, accumulate=acc)
    hard, _ = bounds.bound_vs_recipe(exact, recipe)
    d = np.abs(got.out - exact.out)
    return np.max(d / np.where(d > 0, hard, 1)), np.median(hard / np.maximum(np.abs(exact.out), 1e-30))


def hopper(recipe, accumulate):
    x, logits, w13, w2 = problem(21, T=32, H=512, I=384, E=4)
    kw = dict(routing=dict(method="renormalize", top_k=2), activation="swiglu", quant="fp8_block", recipe=recipe)
    result = moe_layer(x, logits, None, quantized_weights(w13, w2, "fp8_block")[0], **kw, accumulate=accumulate)
    hard, _ = bounds.bound_vs_recipe(result, recipe)
    return np.median(hard / np.maximum(np.abs(result.out), 1e-30))


def main():
    print("| recipe | path | H/I | non-negative: max error/bound | signed: max error/bound "
          "| signed: median bound/|out| |")
    print("|---|---|---|---|---|---|")
    for path, recipe, H, I in tb.VACUITY:
        (pos, _), (signed, median) = reordered(path, recipe, H, I, False), reordered(path, recipe, H, I, True)
        print(f"| {recipe.name} | {path} | {H}/{I} | {pos:.3g} | {signed:.3g} | {median:.3g} |", flush=True)
    print("\n| Hopper recipe | median bound/|out|, exact sums | emulated sums |\n|---|---|---|")
    for recipe in (recipes.SGLANG_TRITON_FP8_BLOCK, recipes.MONO_MOE):
        print(f"| {recipe.name} | {hopper(recipe, 'exact'):.3g} | {hopper(recipe, None):.3g} |", flush=True)


if __name__ == "__main__":
    main()
