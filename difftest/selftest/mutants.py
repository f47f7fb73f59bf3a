"""A mutation self-test: seeded bugs in copies of impls/torch_eager, and `python -m difftest mutants`, which
hunts each with the tester's own search and reports whether, how fast and how small it was caught.

A mutant is one exact text replacement (old -> new) in one module of impls/torch_eager. ``build(name)`` reads
that module's source, asserts ``old`` occurs exactly once (a refactor of the torch code breaks the mutant
loudly instead of silently making it equivalent), executes the patched copy as a fresh package whose other
modules load unpatched from disk, and wraps it exactly as difftest/checking/impl_torch.py wraps the original (that
file's own source, run with the copy bound to ``te``), as the implementation "mutant:<name>". Mutants are
named by reference, ``difftest.selftest.mutants:<name>``, so a fixture recorded from one replays like any plug-in.
The mutants themselves, data only, are difftest/selftest/catalogue.py's (CATALOGUE, EQUIVALENT, WIDTH, MUTANTS).

``hunt`` fuzzes the ops that reach the mutated module round-robin, in chunks of Hypothesis examples (each
chunk its own seed and one slice of its op, per method / scheme / quant path, as `difftest fuzz` does; a
chunk of the slow layer is cut to about TURN_S seconds), with no example database, until the first finding or the
example / time budget; the finding is shrunk as in any campaign. ``EQUIVALENT`` mutants change behaviour
only where the comparison allows any choice (exact ties), so the tester must NOT flag them.
"""

import argparse
import importlib.util
import json
import multiprocessing
import statistics
import sys
import time
import types
from pathlib import Path
from typing import NamedTuple

import numpy as np
from hypothesis import settings

from ..checking import bias
from ..model import generate, strategies
from ..model import settings as difftest_settings
from ..model.case import OPS, Case
from ..running import campaign
from .catalogue import CATALOGUE, CLASSES, EQUIVALENT, MUTANTS
from .catalogue import WIDTH as WIDTH  # width sweep mutants: tests/difftest/selftest/test_mutant_kill_by_width.py

ROOT = Path(__file__).resolve().parents[2]
TORCH_EAGER = ROOT / "impls" / "torch_eager"
ADAPTER = Path(__file__).resolve().parents[1] / "checking" / "impl_torch.py"
MODULE_OPS = {
    "routing": ("routing", "moe"),
    "quant": ("quant", "moe"),
    "layouts": ("quant", "moe"),
    "layer": ("moe",),
    None: OPS,
}  # the ops whose torch code path runs the module; None: identity
FOCUS_KEYWORDS = {"routing": ("method",), "quant": ("scheme",), "moe": ("method", "activation", "quant"),
                  "trtllm_ops": ("kernel",)}
CHUNK = 25  # examples per Hypothesis run at most; the ops of a mutant alternate chunk by chunk
TURN_S = 1.0  # a chunk of a slow op (the layer) is cut to about this many seconds, so it does not starve
SECONDS_PER_EXAMPLE = {"routing": 0.01, "quant": 0.01, "moe": 0.2, "trtllm_ops": 0.01}  # until measured in the hunt
MAX_EXAMPLES = 600
TIME_BUDGET_S = 120.0


class MutantError(ValueError):
    """A patch that does not apply exactly once, or an unknown mutant name."""


_BUILT = {}


def patch(source, old, new, where="source"):
    """source with the one occurrence of old replaced by new; MutantError unless old occurs exactly once."""
    n = source.count(old)
    if n != 1:
        raise MutantError(
            f"{where}: the patch text occurs {n} times, not once (torch_eager changed?): {old!r}"
        )
    return source.replace(old, new)


def _exec_module(name, path, source):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def torch_eager_copy(mutant):
    """A fresh package `difftest_mutant_<name>`: torch_eager, mutant.module patched, the rest from disk."""
    pkg = f"difftest_mutant_{mutant.name}"
    init = TORCH_EAGER / "__init__.py"
    spec = importlib.util.spec_from_file_location(pkg, init, submodule_search_locations=[str(TORCH_EAGER)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[pkg] = package
    edits = {}
    for module, old, new in ((mutant.module, mutant.old, mutant.new), *mutant.also):
        if module is not None:
            path = TORCH_EAGER / f"{module}.py"
            source = edits.get(module, path.read_text())
            edits[module] = patch(source, old, new, f"{mutant.name}: {path.name}")
    for module, patched in edits.items():
        setattr(package, module, _exec_module(f"{pkg}.{module}", TORCH_EAGER / f"{module}.py", patched))
    spec.loader.exec_module(package)  # the other modules import from disk as pkg.<module>
    return package


def build(name):
    """The Impl "mutant:<name>": difftest/checking/impl_torch.py's wrapping around the patched copy (cached)."""
    if name not in MUTANTS:
        raise MutantError(f"unknown mutant {name!r}; known: {', '.join(MUTANTS)}")
    if name not in _BUILT:
        te = torch_eager_copy(MUTANTS[name])
        adapter = types.ModuleType(f"difftest.mutant_adapter_{name}")
        adapter.__package__ = "difftest.checking"
        adapter.__file__ = str(ADAPTER)
        exec(compile(ADAPTER.read_text(), str(ADAPTER), "exec"), adapter.__dict__)
        adapter.te = te  # every adapter function reads the global te at call time
        _BUILT[name] = adapter._impl(f"mutant:{name}", "cpu", lambda: None)
    return _BUILT[name]


def __getattr__(name):
    """`difftest.selftest.mutants:<name>` as an implementation reference (interface.load, fixtures, replay)."""
    if name in MUTANTS:
        return build(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- hunting


class Kill(NamedTuple):
    mutant: str
    killed: bool
    op: str | None  # the op whose cell found it
    examples: int  # generated cases up to and including the first failing one (all of them if survived)
    seconds: float  # wall time from the start of the hunt to the first failing case
    total_seconds: float  # including shrinking
    case: dict | None  # the shrunk reproducer (Case.to_dict())
    message: str | None
    fixture: str | None


def reproducer_size(case_dict):
    """(tokens, experts, hidden, input elements) of a case; None where the op has no such dimension."""
    case = Case.from_dict(case_dict)
    c = case.config
    r = c.routing if case.op == "moe" else c
    experts = None if case.op == "quant" else r.num_experts
    hidden = None if case.op == "routing" else c.hidden_size
    elements = sum(a.size for a in generate.inputs(case).values())
    return {"tokens": r.num_tokens, "experts": experts, "hidden": hidden, "input_elements": int(elements)}


def slices(op, focus=()):
    """[(label, configs strategy)] of `op`, as the CLI's strategies.slices (routing per method, quant per
    scheme, moe per quant path) within the focus: a method, scheme or path the focus fixes is one slice."""
    return strategies.slices(op, {k: v for k, v in focus if k in FOCUS_KEYWORDS[op]})


def plan(mutant):
    """The chunk order of a hunt: [(op, slice label, configs)], ops alternating, each op's slices in turn."""
    per_op = {op: slices(op, mutant.focus) for op in MODULE_OPS[mutant.module]}
    n = max(len(v) for v in per_op.values())
    return [(op, *per_op[op][j % len(per_op[op])]) for j in range(n) for op in per_op]


def hunt(
    name, *, max_examples=MAX_EXAMPLES, time_budget=TIME_BUDGET_S, seed=0, chunk=CHUNK, fixtures_root=None
):
    """Fuzz mutant `name` on the ops reaching its module, chunk by chunk, until a finding or a budget ends."""
    impl = build(name)
    mutant = MUTANTS[name]
    state = {"n": 0, "first": None, "last_case": None, "biased": None}
    monitor = bias.Monitor()  # the cells' bias test (difftest/checking/bias.py): a finding of the cell, not of one case
    t0 = time.perf_counter()

    def record(row):
        state["n"] += 1
        if row["status"] in ("fail", "error"):
            state["last_case"] = row["case"]  # Hypothesis replays the shrunk example last
            if state["first"] is None:
                state["first"] = (state["n"], time.perf_counter() - t0)
        if monitor.add(row) and state["biased"] is None:
            state["biased"] = (state["n"], time.perf_counter() - t0, row)

    chunks = plan(mutant)
    per_example = dict(SECONDS_PER_EXAMPLE)
    generated, i = 0, 0
    while generated < max_examples and time.perf_counter() - t0 < time_budget:
        op, _, configs = chunks[i % len(chunks)]
        n = min(chunk, max(2, int(TURN_S / per_example[op])), max_examples - generated)
        t_chunk = time.perf_counter()
        # no example database: a mutant must be found by search, never by replaying an earlier failure
        chunk_settings = settings(campaign.cli_settings(n), database=None)
        res = campaign.fuzz_cell(
            impl,
            f"difftest.selftest.mutants:{name}",
            op,
            hypothesis_settings=chunk_settings,
            configs=configs,
            record=record,
            fixtures_root=fixtures_root,
            run_seed=seed * 1_000_003 + i,
            provenance=f"difftest mutants: {mutant.models}",
        )
        if res.finding:
            n_first, s_first = state["first"]
            return Kill(
                name,
                True,
                op,
                n_first,
                s_first,
                time.perf_counter() - t0,
                state["last_case"],
                res.finding,
                res.fixture,
            )
        generated += res.examples
        per_example[op] = (time.perf_counter() - t_chunk) / max(1, res.examples)
        i += 1
        if state["biased"] is not None:
            n_first, s_first, at = state["biased"]
            return Kill(name, True, at["op"], n_first, s_first, time.perf_counter() - t0, at["case"],
                        monitor.findings()[0]["message"], None)
    return Kill(
        name, False, None, generated, time.perf_counter() - t0, time.perf_counter() - t0, None, None, None
    )


# ---- detection across widths (issue 21 item 3)

WIDTHS = {64: 64, 512: 256, 2048: 768, 7168: 2048}  # H -> I: Qwen3-30B-A3B's I at 2048, DeepSeek-V3's at 7168


class Detection(NamedTuple):
    mutant: str
    hidden: int
    intermediate: int
    dist: str  # the moe input distribution
    cases: int
    changed: int  # cases whose output the mutant changed (against the unpatched copy)
    caught: int  # changed cases that failed on their own (bound, exposed weights, per-case bias test)
    flagged: int  # cases that failed, changed or not: on the identity, false alarms
    cell_cases: int | None  # cases after which the cell's bias test rejected (difftest/checking/bias.py), None: never
    seconds: float

    @property
    def detected(self):
        return self.caught > 0 or self.cell_cases is not None


def detection(name, hidden, cases=8, tokens=16, quant="bf16", dist="normal"):
    """Detection of mutant `name` on `cases` moe cases of width `hidden` (intermediate WIDTHS[hidden]; 8 experts,
    top-2 renormalize, swiglu, one set of expert weights; input distribution `dist`), as a campaign cell sees it:
    each case on its own, and the cell's bias test over all of them."""
    from ..checking.check import read_only, run_case
    from ..model.case import MoEConfig, RoutingConfig

    impl, ref, monitor = build(name), build("identity"), bias.Monitor()
    changed = caught = flagged = 0
    cell_cases = None
    t0 = time.perf_counter()
    for seed in range(cases):
        config = MoEConfig(RoutingConfig("renormalize", tokens, 8, 2), hidden, WIDTHS[hidden], quant=quant)
        case = Case("moe", config, dist, seed, weight_seed=0)
        inputs = generate.inputs(case)
        differs = bool(np.any(impl.run(case, read_only(inputs))["out"] != ref.run(case, read_only(inputs))["out"]))
        result = run_case(impl, case, inputs)
        changed += differs
        flagged += result.status in ("fail", "error")
        caught += differs and result.status in ("fail", "error")
        if monitor.add(campaign.case_row(impl.name, case, result)) and cell_cases is None:
            cell_cases = seed + 1
    return Detection(name, hidden, WIDTHS[hidden], dist, cases, changed, caught, flagged, cell_cases,
                     time.perf_counter() - t0)


def detection_table(rows):
    """Markdown: one line per mutant and input distribution, one column per width: caught / changed cases, and the
    cell's bias test (the identity: cases flagged, which must be none)."""
    widths = sorted({d.hidden for d in rows})
    head = ["| mutant | inputs | " + " | ".join(f"H = {h} (I = {WIDTHS[h]})" for h in widths) + " |",
            "|---|---|" + "---|" * len(widths)]
    lines = []
    for name, dist in dict.fromkeys((d.mutant, d.dist) for d in rows):
        cells = []
        for h in widths:
            d = next((x for x in rows if (x.mutant, x.dist, x.hidden) == (name, dist, h)), None)
            if d is None:
                cells.append("")
            elif name == "identity":
                cells.append(f"{d.flagged} flagged of {d.cases}")
            else:
                cell = f"bias test after {d.cell_cases}" if d.cell_cases else "bias test: no"
                cells.append(f"{d.caught}/{d.changed} of {d.cases}; {cell}")
        lines.append(f"| {name} | {dist} | " + " | ".join(cells) + " |")
    return "\n".join(head + lines)


def _hunt_star(args):
    name, kwargs = args
    return hunt(name, **kwargs)


# ---- report


def kind(m):
    """A mutant's class, or what it is outside the catalogue (an equivalent, the identity)."""
    return m.cls if m in CATALOGUE else "equivalent" if m in EQUIVALENT else m.name


def row(k):
    """One table row of a Kill (a markdown line)."""
    m = MUTANTS[k.mutant]
    if not k.killed:
        return f"| {k.mutant} | {kind(m)} | {m.models} | survived | {k.examples} | {k.seconds:.1f} | | |"
    size = reproducer_size(k.case)
    dims = " ".join(
        f"{d[0].upper()}={size[d]}" for d in ("tokens", "experts", "hidden") if size[d] is not None
    )
    cells = (k.mutant, kind(m), m.models, k.op, k.examples, f"{k.seconds:.1f}", dims, size["input_elements"])
    return "| " + " | ".join(map(str, cells)) + " |"


def _kill_stats(killed):
    """Time-to-kill and reproducer size statistics of killed mutants ({} for none)."""
    if not killed:
        return {}
    secs, exs = [k.seconds for k in killed], [k.examples for k in killed]
    sizes = [reproducer_size(k.case) for k in killed]
    return {
        "median_seconds": statistics.median(secs),
        "max_seconds": max(secs),
        "median_examples": statistics.median(exs),
        "max_examples": max(exs),
        "median_input_elements": statistics.median(s["input_elements"] for s in sizes),
        "median_tokens": statistics.median(s["tokens"] for s in sizes),
    }


def summary(kills):
    """Kill rate over the catalogue, time-to-kill and reproducer size statistics (overall and per class), the
    equivalents' outcome."""
    names = {m.name for m in CATALOGUE}
    cat = [k for k in kills if k.mutant in names]
    killed = [k for k in cat if k.killed]
    out = {
        "catalogue": len(cat),
        "killed": len(killed),
        "survivors": [k.mutant for k in cat if not k.killed],
        "equivalent_flagged": [k.mutant for k in kills if k.mutant not in names and k.killed],
        **_kill_stats(killed),
        "classes": {},
    }
    for cls in CLASSES:
        mine = [k for k in cat if MUTANTS[k.mutant].cls == cls]
        if mine:
            done = [k for k in mine if k.killed]
            out["classes"][cls] = {"catalogue": len(mine), "killed": len(done), **_kill_stats(done)}
    return out


def class_table(s):
    """Kill rate and time to kill per class (markdown)."""
    head = ["| class | killed | median s to kill | max s to kill | median examples | max examples |",
            "|---|---|---|---|---|---|"]
    rows = [f"| {cls} | {c['killed']} of {c['catalogue']} | {c.get('median_seconds', float('nan')):.2f} | "
            f"{c.get('max_seconds', float('nan')):.1f} | {c.get('median_examples', float('nan')):g} | "
            f"{c.get('max_examples', float('nan')):g} |" for cls, c in s["classes"].items()]
    return "\n".join(head + rows)


def table(kills):
    head = [
        "| mutant | class | models | killed by | examples to kill | seconds to kill | shrunk reproducer"
        " | input elements |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + [row(k) for k in kills])


def main(argv=None):
    """`python -m difftest mutants`: exit 0 when every catalogue mutant is killed and no equivalent one is
    flagged, 1 otherwise, 2 on bad arguments."""
    p = argparse.ArgumentParser(prog="python -m difftest mutants", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--mutant", action="append", help=f"mutant name (repeatable; default all): {', '.join(MUTANTS)}"
    )
    p.add_argument("--max-examples", type=int, default=MAX_EXAMPLES, help="generated cases per mutant")
    p.add_argument("--time-budget", type=float, default=TIME_BUDGET_S, help="seconds per mutant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="mutants hunted in parallel (1: unloaded timings)")
    p.add_argument("--out", help="directory for mutants.json and the shrunk reproducers as fixtures")
    p.add_argument("--list", action="store_true", help="list the catalogue and exit")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a setting of the case space (repeatable; docs/settings.md); python -m difftest mutants "
                        "applies it before this module loads")
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        difftest_settings.apply(args.set)  # a no-op when python -m difftest mutants applied them already
    except difftest_settings.SettingsError as e:
        print(f"difftest: error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for m in CATALOGUE + EQUIVALENT:
            print(f"{m.name:34s} {m.module:8s} {kind(m):10s} {m.models}\n{'':54s} {m.doc}")
        return 0
    names = args.mutant or [m.name for m in CATALOGUE + EQUIVALENT]
    unknown = [n for n in names if n not in MUTANTS]
    if unknown or args.workers < 1 or args.max_examples < 1:
        print(
            f"difftest: error: unknown mutants {unknown}"
            if unknown
            else "difftest: error: --workers and --max-examples must be >= 1",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out) if args.out else None
    kwargs = {
        "max_examples": args.max_examples,
        "time_budget": args.time_budget,
        "seed": args.seed,
        "fixtures_root": None if out is None else out / "fixtures",
    }
    jobs = [(n, kwargs) for n in names]
    if args.workers == 1:
        kills = []
        for job in jobs:
            kills.append(_hunt_star(job))
            print(row(kills[-1]), flush=True)
    else:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            kills = []
            for k in pool.imap(_hunt_star, jobs):
                kills.append(k)
                print(row(k), flush=True)
    s = summary(kills)
    print("\n" + table(kills) + "\n")
    print(class_table(s) + "\n")
    print(json.dumps(s, indent=1))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "mutants.json").write_text(
            json.dumps(
                {
                    "summary": s,
                    "kills": [k._asdict() for k in kills],
                    "budget": {k: v for k, v in kwargs.items() if k != "fixtures_root"},
                },
                indent=1,
                default=str,
            )
            + "\n"
        )
    return 0 if not s["survivors"] and not s["equivalent_flagged"] else 1
