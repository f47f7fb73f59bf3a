"""`python -m difftest report RUN_DIR`: a campaign's run directory (difftest/store/rundir.md) as one self-contained
page, RUN_DIR/report.html, and the numbers it shows, RUN_DIR/report.json.

Every number on the page, plots included, is read from report.json: this module reads the run directory and
builds report.json's object, difftest/readers/report_html.py draws the page from that object alone. Plots are PNGs
drawn with matplotlib's Agg canvas (no pyplot state) and embedded as data: URIs; the page loads nothing from
anywhere, so a run directory copied off a GPU machine renders and reads the same on a laptop. A campaign killed
before it merged its cases-*.jsonl into cases.jsonl.gz still renders from the parts; a run recorded before the rows
were compressed (a plain cases.jsonl) renders too.
"""

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from spec.recipes import QUANT_VARIANTS

from ..model.case import (
    ACTIVATIONS,
    BIAS_DTYPES,
    DEV_DTYPES,
    DEV_KERNELS,
    LOGIT_DTYPES,
    MOE_LATE_DEFAULTS,
    OPS,
    QUANT_INPUT_DTYPES,
    QUANT_PATHS,
    QUANT_SCHEMES,
    ROUTING_METHODS,
    SCALE_LAYOUTS,
)
from ..model.generate import DISTS
from ..model.strategies import REACHABLE
from ..store import rundir
from ..store.atomic import atomic_write_text
from .report_html import (
    BINS_PER_DECADE,
    NOT_RECORDED,
    RATIO_AXIS,
    ordered_statuses,
    plot_ratios,
    plot_timing,
    to_html,
)

SCHEMA = 1
TOP = 25  # worst cases listed
NO_CASES = "no cases.jsonl.gz (nor a plain cases.jsonl)"

# Coverage axes: (title, ops, configuration field, values difftest/model/strategies.py draws). Values seen but not
# listed here (a newer tester, a --where filter) are appended, so nothing hit is hidden; listed values never
# hit show as zero cells (red), or grey where the run's filters (--model, --where, a plug-in's space) excluded
# them. tests/difftest/readers/test_report.py draws from the strategies and fails if one draws a value outside these.
ENUM_AXES = (
    ("routing method", ("routing", "moe"), "method", ROUTING_METHODS),
    ("logits dtype", ("routing", "moe"), "logits_dtype", LOGIT_DTYPES),
    ("bias dtype", ("routing", "moe"), "bias_dtype", ("none",) + BIAS_DTYPES),
    ("activation", ("moe",), "activation", ACTIVATIONS),
    ("quant path", ("moe",), "quant", QUANT_PATHS),
    ("hidden dtype", ("moe",), "hidden_dtype", ("bf16", "fp16")),
    ("quant scheme", ("quant",), "scheme", QUANT_SCHEMES),
    ("input dtype", ("quant",), "input_dtype", QUANT_INPUT_DTYPES),
    ("scale format", ("quant", "moe"), "scale_fmt", ("fp32", "ue8m0")),
    ("expert weights", ("moe",), "expert_weights", ("prepared", "bf16", "fp32")),
    ("scale layout", ("quant",), "layout", SCALE_LAYOUTS),
    ("quant variant", ("quant",), "variant", QUANT_VARIANTS),
    ("dev kernel", ("trtllm_ops",), "kernel", DEV_KERNELS),
    ("element dtype", ("trtllm_ops",), "dtype", DEV_DTYPES),
)
SHAPE_AXES = (  # (title, ops, configuration field, smallest value the strategies draw, per op)
    ("tokens", OPS, "num_tokens", {"routing": 0, "quant": 0, "moe": 0, "trtllm_ops": 1}),
    ("experts", ("routing", "moe", "trtllm_ops"), "num_experts", 1),
    ("top_k", ("routing", "moe", "trtllm_ops"), "top_k", 1),
    # multiples of a quant group or block (>= 16) or of a dev kernel's vector width (>= 4)
    ("hidden size", ("quant", "moe", "trtllm_ops"), "hidden_size", {"quant": 16, "moe": 16, "trtllm_ops": 4}),
    ("intermediate size", ("moe",), "intermediate_size", 16),
)


class ReportError(ValueError):
    """A run directory that cannot be reported on; the message names the file and the problem."""


# ---- reading the run directory

def _read_jsonl(path, partial):
    """Rows of one jsonl file (gzipped or plain); in a part file of a killed worker the last line may be torn
    and is dropped."""
    lines = rundir.read_text(path).splitlines()
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if partial and n == len(lines):
                break
            raise ReportError(f"{path}:{n}: not a JSON line") from None
        if not (isinstance(row, dict) and all(isinstance(row.get(k), str) for k in ("op", "impl", "status"))):
            raise ReportError(f"{path}:{n}: a case row needs string fields op, impl and status")
        if not isinstance(row.get("case"), dict) or not isinstance(row["case"].get("config"), dict):
            raise ReportError(f"{path}:{n}: a case row needs the case object (op, config, dist, seed)")
        rows.append(row)
    return rows


def read_run(run_dir):
    """(rows of cases.jsonl.gz, or of a plain cases.jsonl of an older run; summary.json or {}; notes) of a run
    directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such run directory")
    notes = []
    if rundir.cases_file(run_dir) is not None:
        rows = _read_jsonl(rundir.cases_file(run_dir), partial=False)
    else:
        parts = sorted(run_dir.glob("cases-*.jsonl"))
        if not parts:
            raise ReportError(f"{run_dir}: {NO_CASES} (not a difftest run directory)")
        rows = [r for p in parts for r in _read_jsonl(p, partial=True)]
        notes.append(f"{NO_CASES}: read {len(parts)} worker part files (campaign unfinished or killed)")
    summary = {}
    if (run_dir / "summary.json").is_file():
        try:
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        except ValueError as e:
            raise ReportError(f"{run_dir / 'summary.json'}: not valid JSON ({e})") from None
        if not isinstance(summary, dict):
            raise ReportError(f"{run_dir / 'summary.json'}: must hold a JSON object")
    else:
        notes.append("no summary.json: wall-clock time, workers and findings are not recorded")
    return rows, summary, notes


def _case_key(impl_name, case):
    return impl_name, json.dumps(case, sort_keys=True)


def fixture_links(run_dir):
    """{(impl name, case JSON): relative link} for every fixture under RUN_DIR/fixtures."""
    links = {}
    for meta_path in sorted(Path(run_dir).glob("fixtures/*/case.json")):
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            links[_case_key(meta["impl"]["name"], meta["case"])] = f"fixtures/{meta_path.parent.name}/"
        except (ValueError, KeyError, TypeError):  # an unreadable fixture is replay's to report, not ours
            continue
    return links


# ---- the numbers (report.json)

def _field(row, name):
    """A configuration field of a row's case; moe cases keep the routing fields one level down, and a field left
    out at its default (case.py MOE_LATE_DEFAULTS) has that default."""
    config = row["case"]["config"]
    if name in config:
        return config[name]
    routing = config.get("routing") or {}
    if name in routing:
        return routing[name]
    return MOE_LATE_DEFAULTS.get(name) if "routing" in config else None


def _recipe(row):
    r = row.get("recipe")
    if isinstance(r, dict):
        r = r.get("name")
    return r if isinstance(r, str) and r else NOT_RECORDED


def _ran(row):
    return row["status"] != "skip"


def _ratio_key(row):
    """Ratio for ranking: a recorded ratio, or inf for a failure without one (an exception, a crash)."""
    r = row.get("ratio")
    if isinstance(r, (int, float)) and not isinstance(r, bool):
        return float(r)
    return math.inf if row["status"] != "pass" else 0.0


def _shape_bin(n):
    return str(n) if n < 2 else f"{2 ** int(math.log2(n))}–{2 ** (int(math.log2(n)) + 1) - 1}"


def _shape_bins(bottom, top):
    bins, n = [], bottom
    while n <= top:
        bins.append(_shape_bin(n))
        n = n + 1 if n < 2 else 2 * n
    return bins


def _axis(rows, impls, values, value_of, excluded, extra=None):
    """Counts per value and implementation; zero cells the run could have drawn ("zero", red) and zero cells
    its filters excluded ("excluded", grey: excluded(value, impl) is true)."""
    counts = {v: Counter() for v in values}
    for r in rows:
        v = value_of(r)
        counts.setdefault(v, Counter())[r["impl"]] += 1
    table = [[v] + [counts[v][i] for i in impls] for v in counts]
    empty = [[v, i] for v, *c in table for i, n in zip(impls, c, strict=True) if n == 0]
    out = {"impls": impls, "rows": table, "zero": [e for e in empty if not excluded(*e)],
           "excluded": [e for e in empty if excluded(*e)]}
    out.update(extra or {})
    return out


def run_filters(summary, op, impls):
    """{impl: {field: where.Constraint}}: what the run drew op's configurations from, for each implementation
    (--model's preset, --where, the implementation's declared space; summary.json, difftest/store/rundir.md)."""
    from ..model import presets, where

    def both(a, b):
        try:
            return where.merge(a, b)
        except where.WhereError:  # no run drew from an empty intersection: a hand-edited summary; grey nothing
            return a

    model = summary.get("model")
    common = both(presets.space(model, op) if model in presets.PRESETS else {}, where.from_json(summary.get("where")))
    spaces = summary.get("spaces") if isinstance(summary.get("spaces"), dict) else {}
    return {i: both(common, where.from_json(spaces.get(i))) for i in impls}


def _allows(constraint, value):
    """Whether a filter allows an axis value: a label ("none" for None), or a shape bin "lo–hi"."""
    if constraint is None:
        return True
    if isinstance(value, str) and "–" in value:
        lo, hi = map(int, value.split("–"))
        if constraint.values is not None:
            return any(isinstance(v, (int, float)) and lo <= v <= hi for v in constraint.values)
        return constraint.lo <= hi and lo <= constraint.hi
    if isinstance(value, str) and value.isdigit() and constraint.values is None:
        value = int(value)
    if constraint.values is not None:
        return value in {("none" if v is None else str(v)) for v in constraint.values} | set(constraint.values)
    return constraint.allows(value)


def _listed(filters, name):
    """Values a filter names for field `name` (drawn even where the strategies' own domain lacks them)."""
    return [("none" if v is None else str(v)) for f in filters.values() if name in f and f[name].values
            for v in f[name].values]


def coverage(rows, summary=None):
    """Per op, per axis: cases that ran (skips excluded) per value and implementation; the zero cells, split
    into those the run could have drawn (red on the page) and those its filters excluded (grey)."""
    from ..model.strategies import SPECIAL_DISTS

    summary = summary or {}
    special = bool(summary.get("special")) or any(r["case"].get("dist") in SPECIAL_DISTS for r in rows)
    out = {}
    for op in OPS:
        op_rows = [r for r in rows if r["op"] == op]
        if not op_rows:
            continue
        impls = sorted({r["impl"] for r in op_rows})
        filters = run_filters(summary, op, impls)
        ran = [r for r in op_rows if _ran(r)]
        axes = {"input distribution": _axis(ran, impls, DISTS.get(op, ()), lambda r: r["case"].get("dist"),
                                            lambda v, i: v in SPECIAL_DISTS and not special)}
        for title, ops, name, domain in ENUM_AXES:
            if op in ops:
                values = [str(v or "none") for v in REACHABLE[op].get(name, domain)]  # what a campaign can draw
                values = list(dict.fromkeys(values + _listed(filters, name)))
                axes[title] = _axis(ran, impls, values, lambda r, n=name: str(_field(r, n) or "none"),
                                    lambda v, i, n=name, f=filters: not _allows(f[i].get(n), v))
        for title, ops, name, bottom in SHAPE_AXES:
            sizes = [_field(r, name) for r in ran if isinstance(_field(r, name), int)]
            if op in ops and sizes:
                bottom = bottom[op] if isinstance(bottom, dict) else bottom
                axes[title] = _axis(ran, impls, _shape_bins(min([bottom] + sizes), max(sizes)),
                                    lambda r, n=name: _shape_bin(_field(r, n)),
                                    lambda v, i, n=name, f=filters: not _allows(f[i].get(n), _bin_range(v)),
                                    {"min": min(sizes), "max": max(sizes)})
        out[op] = axes
    return out


def _bin_range(label):
    """A shape bin as "lo–hi" (a single-value bin "1" as "1–1")."""
    return label if "–" in label else f"{label}–{label}"


def _log_edges(values, include=()):
    """Edges BINS_PER_DECADE per decade, covering the values and the points in include."""
    lo = math.floor(math.log10(min(list(values) + list(include))))
    hi = math.ceil(math.log10(max(list(values) + list(include))))
    return list(np.logspace(lo, hi, (hi - lo) * BINS_PER_DECADE + 1))


def ratios(rows):
    """Per implementation: error/bound ratios of the cases that ran, with a log histogram per op on an axis
    clipped to RATIO_AXIS (ratios beyond it counted in its end bins, and separately); exact zeros, which a
    log axis cannot show, counted apart; the failing cases without a finite ratio (wrong ids or codes, an
    exception, a crash) per op in ``no_ratio``, which the plot draws right of the axis."""
    ran = [r for r in rows if _ran(r)]
    positive = [_ratio_key(r) for r in ran if 0 < _ratio_key(r) < math.inf]
    lo, hi = RATIO_AXIS
    edges = _log_edges([min(max(v, lo), hi) for v in positive], include=(0.1, 10.0))  # 1 shows, with room
    out = {"edges": edges, "impls": {}}
    for impl in sorted({r["impl"] for r in ran}):
        mine = [r for r in ran if r["impl"] == impl]
        finite = [_ratio_key(r) for r in mine if _ratio_key(r) < math.inf]
        hist, no_ratio = {}, {}
        for op in sorted({r["op"] for r in mine}):
            vals = [_ratio_key(r) for r in mine if r["op"] == op and 0 < _ratio_key(r) < math.inf]
            # bins closed on the right, (a, b]: a ratio of exactly 1 (a pass) stays left of the failure line
            at = np.searchsorted(edges, np.clip(vals, edges[0], edges[-1]), side="left") - 1
            hist[op] = np.bincount(np.clip(at, 0, len(edges) - 2), minlength=len(edges) - 1).tolist()
            no_ratio[op] = sum(1 for r in mine if r["op"] == op and _ratio_key(r) == math.inf)
        out["impls"][impl] = {
            "cases": len(mine), "zero": sum(1 for v in finite if v == 0),
            "below_axis": sum(1 for v in finite if 0 < v < edges[0]),
            "above_axis": sum(1 for v in finite if v > edges[-1]),
            "non_finite": len(mine) - len(finite), "above_1": sum(1 for v in finite if v > 1),
            "failing": sum(1 for r in mine if r["status"] != "pass"),
            "max": max(finite) if finite else None,
            "p50": float(np.percentile(finite, 50)) if finite else None,
            "p99": float(np.percentile(finite, 99)) if finite else None,
            "hist": hist, "no_ratio": no_ratio,
        }
    return out


def _message(r):
    """A row's message; a passing case has none, so say how close it came and what was not compared."""
    text = str(r.get("message") or "").split("\n")[0][:400]
    if text or r["status"] != "pass":
        return text
    ratio = _ratio_key(r)
    text = ("bit-exact" if ratio == 0 else "exactly at the derived bound" if ratio == 1
            else f"within the derived bound: largest error {ratio:.3g} of it")
    extra = [f"{r[k]:,} {what}" for k, what in (("near_tie_tokens", "near-tie tokens accepted as valid selections"),
                                                ("excluded_tokens", "tokens not compared (routing within 2δ of a "
                                                                    "tie, ids not exposed)"))
             if isinstance(r.get(k), int) and r[k] > 0]
    return "; ".join([text] + extra)


def worst(rows, links, top):
    """The top cases by ratio (failures without a ratio first), one per (implementation, op, configuration):
    a configuration drawn again with other inputs or seeds (Hypothesis' shrinking and targeting do that) is
    listed once, at its worst, with how many cases it had. Each with its message and fixture link."""
    ranked = sorted((r for r in rows if _ran(r)), key=_ratio_key, reverse=True)
    seen, out = Counter(), []
    for r in ranked:
        key = (r["impl"], r["op"], json.dumps(r["case"]["config"], sort_keys=True))
        seen[key] += 1
        if seen[key] > 1 or len(out) == top:
            continue
        c = r["case"]
        out.append({"impl": r["impl"], "op": r["op"], "status": r["status"],
                    "ratio": None if _ratio_key(r) == math.inf else _ratio_key(r),
                    "dist": c.get("dist"), "seed": c.get("seed"), "weight_seed": c.get("weight_seed"),
                    "config": c["config"], "message": _message(r), "key": key,
                    "fixture": links.get(_case_key(r["impl"], c))})
    for w in out:
        w["cases"] = seen[w.pop("key")]
    return out


def _seconds_stats(secs):
    return {"p50": float(np.percentile(secs, 50)), "p90": float(np.percentile(secs, 90)), "max": max(secs)}


def timing(rows, wall):
    """Wall-clock throughput (needs summary.json) and per-case compute time (impl + spec) per op."""
    timed = [r for r in rows if _ran(r) and isinstance(r.get("seconds"), (int, float))]
    per_op = {}
    all_secs = [r["seconds"] for r in timed if r["seconds"] > 0]
    edges = _log_edges(all_secs) if all_secs else []
    for op in [o for o in OPS if any(r["op"] == o for r in rows)]:
        op_rows = [r for r in rows if r["op"] == op]
        mine = [r for r in timed if r["op"] == op]
        impl_s = sum(r["seconds"] for r in mine)
        spec_s = sum(r.get("spec_seconds") or 0.0 for r in mine)
        secs = [r["seconds"] for r in mine if r["seconds"] > 0]
        per_op[op] = {
            "cases": len(op_rows), "timed": len(mine), "impl_seconds": impl_s, "spec_seconds": spec_s,
            "wall_rate": len(op_rows) / wall if wall else None,
            "compute_rate": len(mine) / (impl_s + spec_s) if impl_s + spec_s > 0 else None,
            "impl_case_seconds": _seconds_stats(secs) if secs else None,
            "hist": np.histogram(secs, bins=edges)[0].tolist() if secs else [],
        }
    rate = len(rows) / wall if wall else None
    return {"wall_seconds": wall, "rate": rate, "edges": edges, "per_op": per_op}


def _gpus(info):
    gpus = info.get("gpus") or []
    text = ", ".join(f"{g.get('name')} (driver {g.get('driver')})" for g in gpus)
    return text or (info.get("device") if info.get("device") else "none")


def hosts(rows, summary):
    """Per host (a merged run's "hosts", a single run's "host"): what it ran on and what it found."""
    if isinstance(summary.get("hosts"), dict):
        recorded = summary["hosts"]
    elif isinstance(summary.get("host"), dict):
        recorded = {summary["host"].get("hostname") or "this host": {
            "info": summary["host"], "seconds": summary.get("seconds"),
            "findings": len(summary.get("findings") or [])}}
    else:
        return []
    by_host = defaultdict(Counter)
    for r in rows:
        by_host[r.get("host") or next(iter(recorded))][r["status"]] += 1
    out = []
    for name, h in recorded.items():
        info = h.get("info") or {}
        packages = info.get("packages") or {}
        status = dict(by_host[name]) or dict(h.get("status") or {})
        out.append({"host": name, "gpu": _gpus(info), "cpu": info.get("cpu") or info.get("device"),
                    **{k: packages.get(p) for k, p in (("python", "python"), ("torch", "torch"),
                                                        ("flashinfer", "flashinfer-python"),
                                                        ("hypothesis", "hypothesis"))},
                    "cases": sum(status.values()), "status": status, "findings": h.get("findings"),
                    "seconds": h.get("seconds")})
    return out


def build(rows, summary, links, notes=(), top=TOP):
    """The report.json object."""
    status = Counter(r["status"] for r in rows)
    counts = defaultdict(Counter)
    for r in rows:
        counts[(r["op"], r["impl"], _recipe(r))][r["status"]] += 1
    skips = Counter((r["impl"], r["op"], str(r.get("message") or "")) for r in rows if r["status"] == "skip")
    finite = [(_ratio_key(r), r) for r in rows if _ran(r) and _ratio_key(r) < math.inf]
    max_ratio, max_row = max(finite, key=lambda x: x[0]) if finite else (None, None)
    no_ratio = Counter((r["impl"], r["op"]) for r in rows if _ran(r) and _ratio_key(r) == math.inf)
    wall = summary.get("seconds") if isinstance(summary.get("seconds"), (int, float)) else None
    notes = list(notes)
    if summary.get("cases") is not None and summary["cases"] != len(rows):
        notes.append(f"summary.json counts {summary['cases']} cases but the case files hold {len(rows)}")
    missing = [name for name, present in (("recipe", all("recipe" in r for r in rows)),
                                          ("seconds", all("seconds" in r for r in rows))) if not present]
    if missing:
        notes.append(f"case rows lack {', '.join(missing)}: shown as {NOT_RECORDED!r}")
    findings = []
    for f in summary.get("findings") or []:
        name = Path(str(f.get("fixture") or "")).name
        link = f"fixtures/{name}/" if name and any(v == f"fixtures/{name}/" for v in links.values()) else None
        findings.append({"impl": f.get("impl"), "op": f.get("op"), "message": f.get("message"),
                         "fixture": link, "host": f.get("host")})
    return {
        "schema": SCHEMA,
        "run": {k: summary.get(k) for k in ("impls", "ops", "model", "seed", "workers", "seconds")},
        "totals": {"cases": len(rows), "status": {s: status[s] for s in ordered_statuses(status)},
                   "max_ratio": max_ratio, "max_ratio_impl": max_row and max_row["impl"],
                   "max_ratio_op": max_row and max_row["op"], "fixtures": len(links),
                   # failing cases without a finite ratio (max_ratio is the largest finite one), by impl / op
                   "no_ratio": [{"impl": i, "op": o, "cases": n} for (i, o), n in sorted(no_ratio.items())],
                   "pairwise": summary.get("pairwise")},  # difftest/model/pairs.py coverage
        "counts": [{"op": op, "impl": impl, "recipe": recipe, "total": sum(c.values()),
                    **{s: c[s] for s in ordered_statuses(status)}}
                   for (op, impl, recipe), c in sorted(counts.items())],
        "skips": [{"impl": i, "op": o, "reason": m, "count": n} for (i, o, m), n in skips.most_common()],
        "coverage": coverage(rows, summary),
        "ratios": ratios(rows),
        "worst": worst(rows, links, top),
        "timing": timing(rows, wall),
        "findings": findings,
        "hosts": hosts(rows, summary),
        "worker_errors": list(summary.get("worker_errors") or []),
        "notes": notes,
    }


# ---- entry points

def render(run_dir, top=TOP):
    """Write RUN_DIR/report.json and RUN_DIR/report.html; return the HTML path."""
    if top < 1:
        raise ReportError(f"--top={top} must be >= 1")
    run_dir = Path(run_dir)
    rows, summary, notes = read_run(run_dir)  # input errors first: they are the user's to fix here
    try:
        import matplotlib  # noqa: F401 (only checked here: the plots import their parts lazily)
    except ImportError:
        raise ReportError("matplotlib is not installed (pip install 'moe-difftest[report]')") from None
    rep = build(rows, summary, fixture_links(run_dir), notes, top)
    text = json.dumps(rep, indent=1, allow_nan=False) + "\n"
    atomic_write_text(run_dir / "report.json", text)
    rep = json.loads(text)  # the page shows exactly what report.json holds
    ratio_png = plot_ratios(rep) if rep["ratios"]["impls"] else None
    timing_png = plot_timing(rep) if any(s["hist"] for s in rep["timing"]["per_op"].values()) else None
    title = f"difftest campaign report: {run_dir.resolve().name}"
    atomic_write_text(run_dir / "report.html", to_html(rep, title, ratio_png, timing_png))
    return run_dir / "report.html"


def maybe_render(run_dir):
    """Render if matplotlib is installed; never fails a campaign. Returns the line to print."""
    later = f"python -m difftest report {run_dir}"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ("report not rendered (matplotlib is not installed); on any machine with matplotlib, from "
                f"this run directory or a copy of it: {later}")
    try:
        return f"report: {render(run_dir)}"
    except (ReportError, OSError) as e:
        return f"report not rendered ({e}); retry with: {later}"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m difftest report", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", help="a run directory written by python -m difftest fuzz --out DIR")
    p.add_argument("--top", type=int, default=TOP, help=f"worst cases listed (default {TOP})")
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # argparse printed its one-line usage error
        return 2 if e.code else 0
    try:
        print(f"report: {render(args.run_dir, args.top)}")
    except (ReportError, OSError) as e:  # OSError: an unreadable or unwritable run directory
        print(f"difftest: error: {e}", file=sys.stderr)
        return 2
    return 0
