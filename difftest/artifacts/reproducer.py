"""`show`'s view of a fixture and `show --script`'s standalone reproducer.

The spec's output and an element-wise bound, at the spec's own ids, for each output the reproducer checks:
routing ids (as sets per token) and weights (by id, within the recipe's bound), quant codes and scales
(bit-exact), the moe layer's out (within the recipe's bound; tokens within 2δ of a routing tie are not
bounded, +inf). The checks a reproducer runs are the functions below marked STANDALONE, copied into the
script by their source: numpy only, so the script runs without Hypothesis (and, for routing and quant,
without difftest: the case is then a namespace of its configuration).

The difftest comparison is the judge (it accepts another valid selection within 2δ of a routing tie); a
reproducer at the spec's ids is stricter there, and says so when ids differ.
"""

import inspect
import json
from pathlib import Path

import numpy as np

from spec.recipes import DEFAULT

from ..checking import compare, impl_spec, interface
from ..checking.check import read_only
from ..model.case import CaseError

SHOWN = 5  # elements listed per output
SHOWN_OPS = ("routing", "quant", "moe")


def reference(case, inputs, recipe):
    """{name: (expected, bound)}: bound +inf where nothing is bounded, 0 where bits must match."""
    c = case.config
    if case.op == "quant":
        q = impl_spec.quantize(c, inputs)
        return {k: (np.asarray(q[k]), np.zeros(np.shape(q[k]))) for k in ("q", "scales")}
    if case.op == "routing":
        k = c.top_k
        spec = impl_spec.route(c, inputs, recipe)
        order = np.argsort(spec.ids[:, :k], axis=1)
        ids = np.take_along_axis(spec.ids[:, :k], order, axis=1).astype(np.int64)
        w = np.take_along_axis(spec.weights[:, :k], order, axis=1)
        absolute, degenerate = compare.underflow_term(c, inputs, ids, recipe)
        bound = compare.weight_bound(c, recipe, w, inputs=inputs, ids=ids) + np.where(
            degenerate[:, None], 0.0, 2 * absolute)
        shared = compare.weight_bound(c, recipe, spec.weights[:, k:])
        return {"ids": (spec.ids, np.zeros(spec.ids.shape)),
                "weights": (np.concatenate([w, spec.weights[:, k:]], axis=1),
                            np.concatenate([bound, shared], axis=1))}
    used = recipe or DEFAULT
    spec = impl_spec.layer(case, inputs, used)
    hard, _ = compare.bounds.bound_vs_recipe(spec, used)
    if recipe is None:
        hard = hard + compare.bounds.bound_vs_ideal(spec, used)
    _, _, delta, gdelta = compare.keys64(c.routing, inputs, used)
    keep = compare.robust(spec, delta, gdelta)
    return {"out": (spec.out, np.where(keep[:, None], hard, np.inf))}


# ---- STANDALONE: copied into the reproducer script (numpy only)


def compact(a, edge=3):
    """One line: dtype, shape, range and the first and last elements."""
    a = np.asarray(a)
    if a.size == 0:
        return f"{a.dtype} {a.shape} (empty)"
    flat = a.ravel()
    finite = flat[np.isfinite(flat)] if flat.dtype.kind == "f" else flat
    rng = f" in [{finite.min():.4g}, {finite.max():.4g}]" if finite.size else " (no finite value)"
    show = np.array2string(flat[:edge], precision=4, separator=", ")[1:-1]
    if flat.size > 2 * edge:
        show += ", ..., " + np.array2string(flat[-edge:], precision=4, separator=", ")[1:-1]
    elif flat.size > edge:
        show += ", " + np.array2string(flat[edge:], precision=4, separator=", ")[1:-1]
    return f"{a.dtype} {a.shape}{rng}: [{show}]"


def violations(op, top_k, out, expected, bound):
    """[(ratio, name, index, got, want, bound)] of every element outside its bound, worst first. Routing:
    ids compared as sets per token, weights by id on the tokens whose sets agree."""
    rows = []
    if op == "routing":
        ids, w = np.asarray(out["ids"]), np.asarray(out["weights"], np.float64)
        want_ids = np.asarray(expected["ids"])
        same = (np.sort(ids[:, :top_k], axis=1) == np.sort(want_ids[:, :top_k], axis=1)).all(axis=1)
        same &= (ids[:, top_k:] == want_ids[:, top_k:]).all(axis=1)
        for t in np.flatnonzero(~same):
            rows.append((np.inf, "ids", (int(t),), sorted(ids[t].tolist()), sorted(want_ids[t].tolist()), 0.0))
        order = np.argsort(ids[:, :top_k], axis=1)
        by_id = np.concatenate([np.take_along_axis(w[:, :top_k], order, axis=1), w[:, top_k:]], axis=1)
        checked = {"weights": (by_id[same], np.asarray(expected["weights"])[same], bound["weights"][same],
                               np.flatnonzero(same))}
    else:
        checked = {k: (np.asarray(out[k]), np.asarray(expected[k]), bound[k], None) for k in expected}
    for name, (got, want, b, rows_at) in checked.items():
        if got.shape != want.shape:
            rows.append((np.inf, name, (), f"shape {got.shape}", f"shape {want.shape}", 0.0))
            continue
        if want.dtype.kind in "ui" or np.all(b == 0):  # bit-exact (NaN codes 0x7f / 0xff are one NaN)
            g, e = got.astype(want.dtype), want
            if want.dtype == np.uint8:
                g, e = np.where((g & 0x7F) == 0x7F, 0x7F, g), np.where((e & 0x7F) == 0x7F, 0x7F, e)
            differ = ~((g == e) | (np.isnan(g) & np.isnan(e))) if want.dtype.kind == "f" else g != e
            ratio = np.where(differ, np.inf, 0.0)
        else:
            g, e = got.astype(np.float64), want.astype(np.float64)
            same = (g == e) | (np.isnan(g) & np.isnan(e))
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(same | np.isposinf(b), 0.0, np.abs(g - e) / b)
            ratio = np.where(np.isnan(ratio), np.inf, ratio)
        for at in np.argwhere(ratio > 1.0):
            at = tuple(int(i) for i in at)
            index = at if rows_at is None else (int(rows_at[at[0]]), *at[1:])
            rows.append((float(ratio[at]), name, index, got[at].item(), want[at].item(), float(b[at])))
    return sorted(rows, key=lambda r: -r[0])


def describe(row):
    ratio, name, index, got, want, bound = row
    at = "[" + ", ".join(map(str, index)) + "]"
    if name == "ids":
        return f"ids{at}={got} but spec={want} (a near tie may allow another set; difftest decides)"
    if not isinstance(got, float):
        return f"{name}{at}={got} but spec={want} (bit-exact required)"
    return f"{name}{at}={got:.6g} but spec={want:.6g}: |diff| {abs(got - want):.3g} > bound {bound:.3g} ({ratio:.3g}x)"


# ---- show


def outputs(fx):
    """(implementation outputs or the exception line, {name: (expected, bound)})."""
    impl = interface.load(fx.impl_ref)
    ref = reference(fx.case, fx.inputs, fx.recipe)
    try:
        return impl.run(fx.case, read_only(fx.inputs)), ref
    except Exception as e:  # the finding may be the exception itself
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", ref


def show_lines(fx):
    """Compact inputs, then the implementation next to the spec at its worst elements."""
    lines = [f"input {k}: {compact(a)}" for k, a in fx.inputs.items()]
    impl = interface.load(fx.impl_ref)
    reason = (f"show compares routing, quant and moe, not {fx.case.op}" if fx.case.op not in SHOWN_OPS
              else None) or impl.available() or (f"a {fx.kind} fixture is run isolated only (replay)"
                                  if fx.kind in ("crash", "hang") else None)
    if reason:
        return lines + [f"outputs not shown: {reason}"]
    try:
        out, ref = outputs(fx)
    except CaseError as e:
        return lines + [f"outputs not shown: the spec refuses the case: {e}"]
    except ValueError as e:  # not one of the spec's preconditions: the spec broke (impl_spec.refusals)
        return lines + [f"outputs not shown: the spec raised ValueError: {str(e).splitlines()[0]}"]
    if isinstance(out, str):
        return lines + [f"now: {fx.meta['impl']['name']} raised {out}"]
    for k, a in out.items():
        lines.append(f"output {k}: {compact(a)}")
    expected = {k: e for k, (e, _) in ref.items()}
    bad = violations(fx.case.op, _top_k(fx.case), out, expected, {k: b for k, (_, b) in ref.items()})
    lines.append(f"worst elements (implementation vs spec at the spec's ids; {len(bad)} outside the bound):")
    lines += [f"  {describe(r)}" for r in bad[:SHOWN]] or ["  none: every checked element is within its bound"]
    return lines


def _top_k(case):
    return case.config.top_k if case.op == "routing" else case.config.routing.top_k if case.op == "moe" else 0


# ---- show --script

SCRIPT = '''"""Reproducer of difftest fixture {id} ({status} {kind}), written by `python -m difftest show --script`.

Recorded: {message}
Runs {impl_name} on the case below with the inputs of {npz} and checks its outputs against the spec's
(expected.*) within the element-wise bounds (bound.*: 0 = bit-exact, inf = not bounded). Needs numpy and the
implementation, not Hypothesis. Exit status 1 while the bug is there, 0 once it is fixed.
"""

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

IMPL = {impl_ref!r}  # path/file.py:NAME (relative to this script's directory or absolute) or module:NAME
CASE = json.loads({case_json!r})
DATA = Path(__file__).resolve().with_name({npz!r})


def load_impl(ref):
    if ":" not in ref:  # a difftest name (torch, a FlashInfer adapter)
        from difftest import interface

        return interface.load(ref)
    where, name = ref.rsplit(":", 1)
    if where.endswith(".py"):
        path = Path(where) if Path(where).is_absolute() else Path(__file__).resolve().parent / where
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def make_case(d):
    """difftest's Case where difftest is installed, else a namespace of the same attributes."""
    try:
        from difftest.model.case import Case

        return Case.from_dict(d)
    except ImportError:
        config = dict(d["config"])
        if "routing" in config:
            config["routing"] = SimpleNamespace(**config["routing"])
        return SimpleNamespace(op=d["op"], config=SimpleNamespace(**config), dist=d["dist"], seed=d["seed"],
                               weight_seed=d.get("weight_seed"))


{functions}

def main():
    data = np.load(DATA, allow_pickle=False)
    part = {{p: {{k.split(".", 1)[1]: data[k] for k in data.files if k.startswith(p + ".")}}
            for p in ("input", "expected", "bound")}}
    inputs = {{k: v.copy() for k, v in part["input"].items()}}  # writable copies
    for k, a in inputs.items():
        print(f"input {{k}}: {{compact(a)}}")
    out = load_impl(IMPL).run(make_case(CASE), inputs)
    bad = violations(CASE["op"], {top_k}, out, part["expected"], part["bound"])
    for row in bad[:{shown}]:
        print(describe(row))
    if bad:
        print(f"FAIL: {{len(bad)}} elements outside the bound [{op}, {impl_name}]")
        return 1
    print("PASS: every checked element is within its bound (fixed?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def write_script(fx, path):
    """OUT.py and OUT.npz (inputs, expected, bound); returns both paths."""
    if fx.case.op not in SHOWN_OPS:
        raise CaseError(f"show --script writes reproducers of routing, quant and moe fixtures, not {fx.case.op}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    npz = path.with_suffix(".npz")
    ref = reference(fx.case, fx.inputs, fx.recipe)
    arrays = {f"input.{k}": np.asarray(a) for k, a in fx.inputs.items()}
    arrays.update({f"expected.{k}": np.asarray(e) for k, (e, _) in ref.items()})
    arrays.update({f"bound.{k}": np.asarray(b, np.float64) for k, (_, b) in ref.items()})
    np.savez(npz, **arrays)
    impl_ref = interface.self_test_ref(fx.impl_ref) or fx.impl_ref  # the script imports module:NAME itself
    where, _, name = impl_ref.rpartition(":")
    if where.endswith(".py"):  # a file reference: as seen from the script's directory
        target = (Path.cwd() / where).resolve() if not Path(where).is_absolute() else Path(where)
        impl_ref = f"{_relative(target, path.resolve().parent)}:{name}"
    functions = "\n\n".join(inspect.getsource(f) for f in (compact, violations, describe))
    text = SCRIPT.format(
        id=fx.id, status=fx.status, kind=fx.kind, message=(fx.meta["observed"].get("message") or "").replace('"', "'"),
        impl_name=fx.meta["impl"]["name"], npz=npz.name, impl_ref=impl_ref,
        case_json=json.dumps(fx.case.to_dict(), sort_keys=True), functions=functions, top_k=_top_k(fx.case),
        shown=SHOWN, op=fx.case.op)
    path.write_text(text)
    return path, npz


def _relative(target, start):
    import os

    return Path(os.path.relpath(target, start)).as_posix()

