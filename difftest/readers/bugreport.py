"""`show FIXTURE --report OUT.md`: a bug report a kernel maintainer can act on, with its reproducer beside it.

Sections: the title (implementation, version, the fixture's name), versions and device as recorded, the minimal
case (every configuration field, the inputs compactly; the exact bits are in the reproducer's npz), expected vs
observed (the spec's values and element-wise bounds as the reproducer checks them, the recorded observation), why
the bound holds (from the recipe, in docs/comparisons.md's terms), the traced root cause (the fixture's human-written
note, NOTES_FIELDS, else its recorded message, which holds the trace in fixtures written before notes had a field of
their own), and how to run the reproducer. Everything comes from the fixture, the spec and the docs, nothing from the
machine the report is written on, so a committed report can be compared with a fresh one
(tests/difftest/readers/test_bug_reports.py).
"""

import json
import math
import re
from pathlib import Path

import numpy as np

from ..checking import interface
from ..store import fixtures
from . import reproducer

NOTES_FIELDS = ("notes", "root_cause")  # case.json fields a person writes the traced cause in (first one present)
SCRIPT, REPORT = "repro.py", "REPORT.md"  # the names the committed reports use, beside their fixture's case.json
DOCS = Path(__file__).resolve().parents[2] / "docs"
SHOWN_VALUES = 64  # an array with at most this many elements is listed whole, a larger one compactly
ROUTING_FIELDS = ("logits", "bias", "sigmoid", "routing_scores", "routing_bias_add", "routing_group_scores",
                  "group_score", "routing_renorm", "renorm_order", "routing_weights", "tie_rule", "subnormals")


def upstream_fixtures(root):
    """The open fixtures under `root` whose implementation is a FlashInfer or SGLang kernel (an adapter name):
    the ones with a report for the kernel's maintainers."""
    adapters = interface.adapter_names()
    found = []
    for case_json in sorted(Path(root).glob("*/case.json")):
        fx = fixtures.load(case_json.parent)
        if fx.status == "open" and fx.impl_ref in adapters:
            found.append(fx)
    return found


def write(fx, report_path, script_path=None):
    """OUT.md and its reproducer (default: repro.py beside it, with repro.npz); returns the three paths."""
    report_path = Path(report_path)
    script_path = Path(script_path) if script_path else report_path.with_name(SCRIPT)
    script, npz = reproducer.write_script(fx, script_path)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    relative = Path(reproducer._relative(script.resolve(), report_path.resolve().parent))
    report_path.write_text(render(fx, relative.as_posix()), encoding="utf-8")
    return report_path, script, npz


def render(fx, script="repro.py"):
    """The report's Markdown; `script` is the reproducer's path relative to the report."""
    ref = reproducer.reference(fx.case, fx.inputs, fx.recipe)
    observed, cause = observed_and_cause(fx.meta)
    sections = [header(fx), versions(fx), the_case(fx), expected_vs_observed(fx, ref, observed),
                why_the_bound_holds(fx, ref), f"## Root cause (traced)\n\n{cause}\n", how_to_run(fx, script)]
    return "\n".join(sections)


def title(fx):
    """The implementation, its version and what the fixture's id names (its last part, a digest left out)."""
    impl = fx.meta["impl"]
    name = fx.id.rsplit("-", 1)[-1]
    what = f"{fx.kind} on {fx.case.op}" if re.fullmatch(r"[0-9a-f]{12}", name) else name.replace("_", " ")
    return f"{impl['name']} {impl['version']}: {what}"


def observed_and_cause(meta):
    """(what the tester observed, the traced cause): a human-written note when the fixture has one (NOTES_FIELDS),
    else the recorded message holds both, and the observation points at it."""
    message = (meta["observed"].get("message") or "").strip()
    note = next((meta[f].strip() for f in NOTES_FIELDS if isinstance(meta.get(f), str) and meta[f].strip()), None)
    if note:
        return message, note
    return "as recorded under Root cause below (the fixture keeps the observation and its trace in one message)", \
        message


def header(fx):
    return (f"# {title(fx)}\n\n"
            f"Found by moe-difftest, a differential tester of MoE kernels against an executable numpy specification: "
            f"fixture `{fx.id}` ({fx.status}, {fx.kind}). Written by "
            f"`python -m difftest show fixtures/{fx.id} --report {REPORT}` from the fixture; regenerate it rather than "
            f"edit it.\n")


def versions(fx):
    m = fx.meta
    packages = ", ".join(f"{k} {v}" for k, v in sorted(m["packages"].items()))
    return ("## Versions and device\n\n"
            f"- implementation: `{m['impl']['name']}` {m['impl']['version']} (tester reference `{m['impl']['ref']}`)\n"
            f"- packages when recorded: {packages}\n"
            f"- device (case.json, where the finding was recorded): {m['device']}\n"
            f"- found by: {m['provenance'] or 'not recorded'}\n")


def the_case(fx):
    c = fx.case
    rows = [f"| {k} | {_value(v)} |" for k, v in _flat(reproducer.config_dict(c.config))]
    weights = "" if c.weight_seed is None else f", expert weight seed {c.weight_seed}"
    inputs = [f"- `{k}`: {_array(a)}" for k, a in fx.inputs.items()]
    generated = ("\nThe expert weights are generated from the seed (difftest/model/generate.py); the reproducer's npz "
                 "holds them where the kernel takes them.\n" if c.op == "moe" else "")
    return (f"## The case\n\nop `{c.op}`, input distribution `{c.dist}`, seed {c.seed}{weights}. Configuration, every "
            f"field:\n\n| field | value |\n|---|---|\n" + "\n".join(rows) +
            "\n\nInputs (the exact bits are in the reproducer's npz, `input.*`):\n\n" + "\n".join(inputs) + "\n"
            + generated)


def expected_vs_observed(fx, ref, observed):
    recipe = fx.meta["recipe"]
    under = (f"recipe `{recipe['name']}`" if recipe else "the configuration's formulation" if fx.case.op == "quant"
             else "no recipe (the allowances of spec/bounds.py)")
    lines = [f"## Expected vs observed\n\nExpected: the spec under {under}, as the reproducer checks it.\n"]
    for name, want in ref["expected"].items():
        words = name in ref["index"]  # a buffer's words, shown in hex like codes
        lines.append(f"- `{name}`: {_array(want, hex_ints=words)}")
        bound = ref["bound"].get(name)
        if bound is not None:
            shown = "0 (bit-exact)" if np.all(bound == 0) else _array(bound)
            lines.append(f"  - bound (|observed − expected| at most): {shown}")
        if words:
            lines.append(f"  - read through the layout's strides: the buffer's elements {_array(ref['index'][name])}")
    for name, low in ref["low"].items():
        lines.append(f"- `{name}` within [low, high]: low {_array(low)}; high {_array(ref['high'][name])}")
    for name, robust in ref["robust"].items():
        lines.append(f"- tokens whose spec selection (`{name}`) wins by more than 4δ, so that no other set is valid: "
                     f"{np.flatnonzero(robust).tolist()} of {robust.size}")
    return "\n".join(lines) + f"\n\nObserved when found: {observed}\n"


def why_the_bound_holds(fx, ref):
    c, recipe = fx.case, fx.meta["recipe"]
    if c.op == "routing":
        text = _routing_why(c.config, recipe)
    elif c.op == "quant":
        text = _quant_why(c.config)
    elif c.op == "moe":
        text = _moe_why(recipe) + " " + _routing_why(c.config.routing, recipe, exposed=True)
    else:
        text = _dev_why(c.config)
    return f"### Why the bound holds\n\n{text}\n"


def _rounding_points(recipe, names):
    if not recipe:
        return "none declared: compared against the float64 ideal, with spec.bounds' bound of an fp32 evaluation"
    return ", ".join(f"{k} {recipe[k]}" for k in names if k in recipe)


def _routing_why(c, recipe, exposed=False):
    grouped = f" within the best {c.topk_group} of {c.n_group} groups" if c.n_group > 1 else ""
    which = "Where the layer exposes its router's ids and weights they" if exposed else "Ids and weights"
    text = (f"{which} are checked as the routing op's. The spec selects the top {c.top_k} of {c.num_experts} experts "
            f"by key ({c.method}){grouped}. The kernel computes each key in finite precision (rounding points of the "
            f"recipe: {_rounding_points(recipe, ROUTING_FIELDS)}); δ, spec.bounds.routing_key_delta, bounds its "
            "distance from the float64 key, so a selection is valid iff it is a top-k under some resolution of the "
            "keys within 2δ of each other, groups included (difftest/checking/compare/validity.py). A token whose "
            "spec selection wins by more than 4δ has no other valid set: another set there is a bug. The reproducer "
            "applies the same rule to every token whose set differs from the spec's, on the float64 keys, group scores "
            "and δ stored in its npz (`validity.*`), and names an invalid set with the scores and the margin. The "
            "weights are compared by expert id with the spec's within the recipe's relative bound and the interval "
            f"rule at their {recipe.get('routing_weights', 'fp32') if recipe else 'fp32'} store "
            "(docs/comparisons.md, 'Router weights' and 'the interval rule'), plus fp32's underflow allowance.")
    if getattr(c, "tile_tokens_dim", None) is not None:
        text += (f" The permutation (tile_tokens_dim {c.tile_tokens_dim}) is fixed exactly by the ids "
                 "(spec/permutation.py): per-expert counts, padded offsets, the CTA tables and -1 for remote slots and "
                 "padding rows; only the order of an expert's rows is free.")
    return text


def _quant_why(c):
    return (f"Codes and scales must match bit for bit: a quantizer is a deterministic function of its input under the "
            f"formulation the configuration declares (scheme {c.scheme}, variant {c.variant}, scale formula "
            f"{c.scale_formula}, scale format {c.scale_fmt}, MX rule {c.mx_rule}; docs/semantics.md §2), so there is "
            f"no rounding freedom to bound. The scale buffer is compared as memory: every element of the {c.layout} "
            "layout, read through its strides as a consumer reads it (spec/layouts.py).")


def _moe_why(recipe):
    return ("out is compared within bound_vs_recipe's hard bound (docs/comparisons.md, 'Implementation vs "
            "recipe-exact'): an error shadow δ starts at 0 and grows at each rounding point the recipe declares ("
            f"{_rounding_points(recipe, [k for k in (recipe or {}) if k != 'name'])}) by the GEMM, product, "
            "nonlinearity and combine rules and the interval rule at each store; an element above it comes from no "
            "implementation that rounds where the recipe says. Tokens within 2δ of a routing tie are left out at the "
            "spec's ids.")


def _dev_why(c):
    row = dev_kernel_row(c.kernel)
    return (f"The trtllm-gen dev kernel `{c.kernel}` has no recipe: its allowance is docs/comparisons.md's row for it "
            f"('trtllm-gen dev kernels'). Compared: {row[0]}. Allowance: {row[1]}. The reproducer checks a "
            "requantization's values over every scale the interval allows, which is looser than difftest's check at "
            "the kernel's own scale.")


def dev_kernel_row(kernel):
    """(compared, allowance) of docs/comparisons.md's trtllm-gen dev kernels table row for `kernel` (the one home
    of those rules)."""
    for line in (DOCS / "comparisons.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if line.startswith(f"| `{kernel}`") and len(cells) == 3:
            return cells[1], cells[2]
    raise ValueError(f"docs/comparisons.md has no trtllm-gen dev kernels row for {kernel!r}")


def how_to_run(fx, script):
    kind, target = reproducer.kind_of_reference(fx.impl_ref)
    lines = [f"## Reproducer\n\n[`{Path(script).name}`]({script}), with its inputs, expected values and bounds in "
             f"`{Path(script).with_suffix('.npz').name}` beside it; it needs {reproducer.needs(kind, target)}.\n",
             "```\n"
             f"python {Path(script).name}          # exit 1 while the bug is there, 0 once it is fixed, 2 when it "
             "cannot run here\n"
             f"python {Path(script).name} --force  # also where the implementation's own availability check refuses "
             "(another version)\n```\n"]
    if kind == "adapter":
        lines.append(f"It runs the tester's adapter `{target}` (embedded verbatim): "
                     f"{reproducer.adapter_summary(target)}\n")
    return "\n".join(lines)


def _flat(d, prefix=""):
    for k, v in sorted(d.items()):
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _value(v):
    if isinstance(v, float) and math.isinf(v):
        return "-inf" if v < 0 else "inf"
    return json.dumps(v) if isinstance(v, str) else str(v)


def _array(a, hex_ints=False):
    """An array whole when small (its dtype and shape first; codes and words in hex), else reproducer.compact's
    line."""
    a = np.asarray(a)
    if 0 < a.size <= SHOWN_VALUES:
        hexed = a.dtype == np.uint8 or hex_ints and a.dtype.kind in "iu"
        body = np.array2string(a.ravel(), precision=9, separator=", ", max_line_width=10**6,
                               formatter={"int": lambda i: f"{i:#x}"} if hexed else None)
        return f"{a.dtype} {a.shape}: {body}"
    return reproducer.compact(a)


# ---- the committed reports (fixtures/<id>/REPORT.md, repro.py, repro.npz)


def write_committed(root):
    """Write the report and reproducer of every open kernel fixture under `root` beside its case.json; remove those
    of fixtures that are no longer open kernel fixtures. Returns the fixture ids written."""
    wanted = {fx.id: fx for fx in upstream_fixtures(root)}
    for path in sorted(Path(root).glob(f"*/{REPORT}")):
        if path.parent.name not in wanted:
            for name in (REPORT, SCRIPT, Path(SCRIPT).with_suffix(".npz").name):
                (path.parent / name).unlink(missing_ok=True)
    for fid, fx in wanted.items():
        write(fx, Path(root) / fid / REPORT)
    return sorted(wanted)


def stale_committed(root, scratch):
    """One line per difference between the committed reports under `root` and fresh ones written under `scratch`:
    a report or reproducer that differs or is missing, or one beside a fixture that is no longer an open kernel
    fixture ([] when all are up to date)."""
    wanted = {fx.id: fx for fx in upstream_fixtures(root)}
    problems = [f"{p.parent.name}: a {REPORT} but no open kernel fixture"
                for p in sorted(Path(root).glob(f"*/{REPORT}")) if p.parent.name not in wanted]
    for fid, fx in wanted.items():
        fresh = Path(scratch) / fid
        write(fx, fresh / REPORT)
        for name in (REPORT, SCRIPT, Path(SCRIPT).with_suffix(".npz").name):
            committed = Path(root) / fid / name
            if not committed.is_file():
                problems.append(f"{fid}: no {name}")
            elif not _same_file(committed, fresh / name):
                problems.append(f"{fid}: {name} differs from what the command writes now")
    return problems


def _same_file(a, b):
    if a.suffix != ".npz":
        return a.read_text(encoding="utf-8") == b.read_text(encoding="utf-8")
    with np.load(a, allow_pickle=False) as x, np.load(b, allow_pickle=False) as y:
        return sorted(x.files) == sorted(y.files) and all(
            x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and x[k].tobytes() == y[k].tobytes()
            for k in x.files)
