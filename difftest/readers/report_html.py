"""The page of `python -m difftest report`: report.json's object (difftest/readers/report.py builds it from a run
directory and calls this) as one self-contained HTML page, with the plots as PNGs drawn with matplotlib's Agg canvas
(no pyplot state) and embedded as data: URIs. Everything here reads the report object only, never the run directory.
The plot's error/bound axis, the wording of a missing value and the order of the statuses live here, and report.py
bins and orders report.json on them, so the numbers and the page agree.
"""

import base64
import html
import io
import math
from collections import Counter

STATUS_ORDER = ("pass", "fail", "error", "crash", "hang", "skip")  # others (future statuses) follow
NOT_RECORDED = "not recorded"
MAX_RATIO = "max error/bound ratio (1.0 = exactly at the derived bound)"  # the headline's row
SKIP_ROWS = 100  # skip reasons listed on the page (report.json keeps them all)
BINS_PER_DECADE = 4
# The error/bound axis: below 1e-6 an element is as good as exact (a few ulps of a bound that is itself a few
# ulps), above 1e4 a failure is a failure; beyond, cases go to the end bins and are counted apart.
RATIO_AXIS = (1e-6, 1e4)
# same op colour in all plots
OP_COLORS = {"routing": "tab:blue", "quant": "tab:orange", "moe": "tab:green", "trtllm_ops": "tab:red"}
SECTIONS = (
    ("totals", "Run"), ("hosts", "Hosts"), ("findings", "Findings"),
    ("counts", "Cases per op, implementation and recipe"),
    ("skips", "Skip reasons"), ("coverage", "Coverage of the configuration space"),
    ("ratios", "Error/bound ratios"), ("worst", "Worst cases"), ("timing", "Timings and throughput"),
)


def ordered_statuses(counter):
    """The statuses of counter in the order the page and report.json list them: STATUS_ORDER, then others."""
    return [s for s in STATUS_ORDER if s in counter] + sorted(s for s in counter if s not in STATUS_ORDER)


# ---- plots (from report.json only)

def _png(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})  # no version stamp: same bytes
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plot_ratios(rep):
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, NullLocator
    impls = rep["ratios"]["impls"]
    edges = rep["ratios"]["edges"]
    fig = Figure(figsize=(9, 1.2 + 2.4 * len(impls)), layout="constrained")
    axes = fig.subplots(len(impls), 1, sharex=True, squeeze=False)[:, 0]
    # one more bin right of the axis: the failing cases without a finite ratio, so every op's failures show
    beyond = edges + [edges[-1] * 10 ** (4 / BINS_PER_DECADE)]
    for ax, (impl, st) in zip(axes, impls.items(), strict=True):
        for op, counts in st["hist"].items():
            ax.stairs(counts + [st.get("no_ratio", {}).get(op, 0)], beyond, label=op, linewidth=1.5,
                      color=OP_COLORS.get(op))
        ax.axvline(1.0, color="crimson", linestyle="--", label="1.0 = at the bound;\nabove it fails")
        ax.axvspan(edges[-1], beyond[-1], color="0.9", zorder=0)
        ax.set_xscale("log")
        ax.set_xlim(edges[0], beyond[-1])
        decades = range(round(math.log10(edges[0])), round(math.log10(edges[-1])) + 1)
        ax.set_xticks([10.0**d for d in decades] + [(edges[-1] * beyond[-1]) ** 0.5],
                      [f"$10^{{{d}}}$" for d in decades] + ["no ratio"])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylabel("cases")
        ax.set_title(f"{impl}: {st['cases']:,} cases ran; not plotted: exactly 0 (bit-exact) {st['zero']:,}\n"
                     f"grey bin: failing without a finite ratio (wrong ids or codes, an exception, a crash) "
                     f"{st['non_finite']:,}\nin the end bins of the axis: below {edges[0]:.0e} "
                     f"{st['below_axis']:,}, above {edges[-1]:.0e} {st['above_axis']:,}", fontsize=9, loc="left")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("largest |error| / derived bound per case (log scale)")
    return _png(fig)


def plot_timing(rep):
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator
    t = rep["timing"]
    ops = [(op, st) for op, st in t["per_op"].items() if st["hist"]]
    fig = Figure(figsize=(9, 0.6 + 1.7 * len(ops)), layout="constrained")
    axes = fig.subplots(len(ops), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (op, st) in zip(axes, ops, strict=True):  # one panel per op, each on its own count scale
        ax.stairs(st["hist"], t["edges"], fill=True, alpha=0.6, color=OP_COLORS.get(op))
        q = st["impl_case_seconds"]
        ax.set_title(f"{op}: {st['timed']:,} cases; median {q['p50']:.2g} s, p90 {q['p90']:.2g} s, "
                     f"max {q['max']:.2g} s", fontsize=9, loc="left")
        ax.set_xscale("log")
        ax.set_ylabel("cases")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
    ax.set_xlabel("implementation seconds per case (log scale)")
    return _png(fig)


# ---- HTML (from report.json only)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{border-bottom:2px solid #ccd;padding-bottom:.2em;margin-top:1.6em}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.4em 0 1em}
td,th{border:1px solid #ccd;padding:.2em .55em;text-align:left}
th{background:#eef}td.n{text-align:right;font-variant-numeric:tabular-nums}td.zero{background:#f9c9c9}
td.bad{background:#f9c9c9;font-weight:600}td.excluded{background:#e4e4e4;color:#888}
td.w,td.w pre.m{overflow-wrap:anywhere}pre.m{white-space:pre-wrap;margin:0}
code,.m{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.grid{display:flex;flex-wrap:wrap;gap:1.2em}.grid>div{flex:0 0 auto}
.note{background:#fff6d6;padding:.4em .8em}
.err{background:#fde2e2;padding:.4em .8em}nav a{margin-right:1em}img{max-width:100%}
"""


class _Raw(str):
    """Markup already escaped (a link); everything else put in a cell is escaped."""


def _fmt(x):
    if x is None:
        return NOT_RECORDED
    if isinstance(x, bool) or isinstance(x, str):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:.3g}"


def _cell(x, cls=""):
    num = isinstance(x, (int, float)) and not isinstance(x, bool)
    cls = " ".join(c for c in (cls, "n" if num else "") if c)
    body = x if isinstance(x, _Raw) else html.escape(_fmt(x))
    return f"<td class=\"{cls}\">{body}</td>" if cls else f"<td>{body}</td>"


def _table(header, rows, cls=None):
    """header None: a key/value table; cls(row index, column index, value) -> CSS class of a cell."""
    head = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(_cell(v, cls(i, j, v) if cls else "") for j, v in enumerate(r)) + "</tr>"
                   for i, r in enumerate(rows))
    return f"<table>{head}{body}</table>"


def _link(href, text):
    return _Raw(f"<a href=\"{html.escape(href)}\">{html.escape(text)}</a>") if href else text


def _defaults(op):
    """{field: default} of op's configuration dataclass (moe: its routing's too)."""
    from dataclasses import MISSING, fields

    from ..model.case import CONFIGS, RoutingConfig

    classes = [CONFIGS[op]] + ([RoutingConfig] if op == "moe" else []) if op in CONFIGS else []
    return {f.name: f.default for c in classes for f in fields(c) if f.default is not MISSING}


def _config_text(w):
    """The configuration's main fields, then every other field that differs from its default: two rows of
    the worst-case table never read the same."""
    c = dict(w["config"])
    c.update(c.pop("routing", None) or {})
    keys = ("kernel", "method", "activation", "quant", "scheme", "num_tokens", "num_experts", "top_k",
            "hidden_size", "intermediate_size", "logits_dtype", "input_dtype", "dtype")
    defaults = _defaults(w["op"])
    rest = [k for k in sorted(c) if k not in keys and (k not in defaults or str(c[k]) != str(defaults[k]))]
    return " ".join([f"{k}={c[k]}" for k in keys if c.get(k) is not None] + [f"{k}={c[k]}" for k in rest])


def _section_totals(rep):
    run, t = rep["run"], rep["totals"]
    ratio, reached = _max_ratio_text(t)
    rows = [("cases", t["cases"])] + [(f"status {s}", n) for s, n in t["status"].items()] + [
        (MAX_RATIO, ratio),
        ("reached by", reached), ("fixtures written", t["fixtures"]),
        ("pairwise coverage (pairs of field values compared, of those reachable)", _pairwise_text(t.get("pairwise"))),
        ("implementations", ", ".join(run["impls"] or []) or NOT_RECORDED),
        ("ops", ", ".join(run["ops"] or []) or NOT_RECORDED), ("model preset", run["model"] or "none"),
        ("seed", run["seed"]), ("workers", run["workers"]), ("wall seconds", run["seconds"])]
    failing = {f"status {s}" for s in t["status"] if s not in ("pass", "skip")}
    if t.get("no_ratio") or (t["max_ratio"] or 0) > 1:
        failing.add(MAX_RATIO)
    out = _table(None, rows, lambda i, j, v: "bad" if j == 1 and rows[i][0] in failing and v else "")
    out += "".join(f"<p class=\"note\">{html.escape(n)}</p>" for n in rep["notes"])
    out += "".join(f"<p class=\"err\">worker error: {html.escape(e)}</p>" for e in rep["worker_errors"])
    return out


def _max_ratio_text(t):
    """(the headline's max error/bound ratio, where it was reached): ∞ where failing cases have no finite ratio (a
    largest finite ratio of 0 next to hundreds of failures read as a clean run), with the largest finite one."""
    finite = "no case ran" if t["max_ratio"] is None else f"{t['max_ratio']:.6g}"
    where = f"{t['max_ratio_impl']} / {t['max_ratio_op']}" if t["max_ratio_impl"] else "no case ran"
    groups = t.get("no_ratio") or []
    if not groups:
        return finite, where
    n = sum(g["cases"] for g in groups)
    return (f"∞: {n:,} failing case{'s' * (n != 1)} without a finite ratio (wrong ids or codes, an exception, a "
            f"crash); the largest finite ratio is {finite}",
            "∞: " + ", ".join(f"{g['impl']} / {g['op']} ({g['cases']:,})" for g in groups)
            + (f"; largest finite: {where}" if t["max_ratio_impl"] else ""))


def _pairwise_text(p):
    if not isinstance(p, dict) or "percent" not in p:
        return NOT_RECORDED
    return f"{p['percent']:g} % of {p['reachable']:,} ({p['covered']:,} covered)"


def _section_hosts(rep):
    if not rep["hosts"]:
        return "<p>Host not recorded (a run from before summary.json recorded one).</p>"
    statuses = ordered_statuses(Counter({s: 1 for h in rep["hosts"] for s in h["status"]}))
    rows = [[h["host"], h["gpu"], h["cpu"], h["python"], h["torch"], h["flashinfer"], h["hypothesis"], h["cases"]]
            + [h["status"].get(s, 0) for s in statuses] + [h["findings"], h["seconds"]] for h in rep["hosts"]]
    failing = {8 + k for k, s in enumerate(statuses) if s not in ("pass", "skip")}
    return _table(["host", "GPU (driver)", "CPU", "python", "torch", "flashinfer", "hypothesis", "cases"]
                  + statuses + ["findings", "seconds"], rows, lambda i, j, v: "bad" if j in failing and v else "")


def _section_findings(rep):
    if not rep["findings"]:
        return "<p>No findings recorded.</p>"
    by_host = any(f.get("host") for f in rep["findings"])
    rows = [((f.get("host"),) if by_host else ()) + (
        f["impl"], f["op"], _link(f["fixture"], f["fixture"] or "no fixture"),
        _Raw(f"<pre class=\"m\">{html.escape(str(f['message']))}</pre>")) for f in rep["findings"]]
    wrap = {len(rows[0]) - 2, len(rows[0]) - 1}  # fixture paths and messages break anywhere, not off the page
    return _table((["host"] if by_host else []) + ["implementation", "op", "fixture", "message"], rows,
                  lambda i, j, v: "w" if j in wrap else "")


def _section_counts(rep):
    statuses = list(rep["totals"]["status"])
    rows = [[c["op"], c["impl"], c["recipe"]] + [c[s] for s in statuses] + [c["total"]]
            for c in rep["counts"]]
    failing = {3 + k for k, s in enumerate(statuses) if s not in ("pass", "skip")}  # column indices
    return _table(["op", "implementation", "recipe"] + statuses + ["total"], rows,
                  lambda i, j, v: "bad" if j in failing and v else "")


def _section_skips(rep):
    if not rep["skips"]:
        return "<p>No case was skipped.</p>"
    more = len(rep["skips"]) - SKIP_ROWS
    return _table(["implementation", "op", "reason", "cases"],
                  [(s["impl"], s["op"], s["reason"], s["count"]) for s in rep["skips"][:SKIP_ROWS]],
                  lambda i, j, v: "w" if j == 2 else "") + (
        f"<p>{more:,} rarer reasons are listed in report.json.</p>" if more > 0 else "")


def _section_coverage(rep):
    out = ["<p>Cases that ran (skips excluded) per value and implementation, for the values the strategies "
           "draw; <span style=\"background:#f9c9c9\">red cells</span> could have been drawn but were never hit, "
           "<span style=\"background:#e4e4e4\">grey cells</span> lie outside what this run drew from "
           "(--model, --where, an implementation's space, --special).</p>"]
    for op, axes in rep["coverage"].items():
        out.append(f"<h3>{html.escape(op)}</h3><div class=\"grid\">")
        for title, a in axes.items():
            rng = f" (observed {a['min']:,}–{a['max']:,})" if "min" in a else ""
            out.append(f"<div><b>{html.escape(title + rng)}</b>")
            excluded = {(v, i) for v, i in a.get("excluded", [])}
            out.append(_table([title] + a["impls"], a["rows"],
                              lambda i, j, v, a=a, x=excluded: "" if not j or v != 0 else
                              "excluded" if (a["rows"][i][0], a["impls"][j - 1]) in x else "zero"))
            out.append("</div>")
        out.append("</div>")
    return "".join(out)


def _section_ratios(rep, png):
    rows = [(impl, s["cases"], s["zero"], s["p50"], s["p99"], s["max"], s["above_1"], s["non_finite"],
             s["failing"]) for impl, s in rep["ratios"]["impls"].items()]
    table = _table(["implementation", "cases ran", "ratio 0", "median", "p99", "max", "ratio > 1", "no ratio",
                    "failing"], rows, lambda i, j, v: "bad" if j >= 6 and v else "")
    img = f"<img alt=\"histogram of error/bound ratios\" src=\"data:image/png;base64,{png}\">" if png else ""
    lo, hi = rep["ratios"]["edges"][0], rep["ratios"]["edges"][-1]
    return (f"<p>Per case, the largest |error| / derived bound over its compared elements: 0 = bit-exact, "
            f"1.0 = exactly at the derived bound, above 1 fails. The plot's axis spans "
            f"1e{round(math.log10(lo))}…1e{round(math.log10(hi))} (at most 1e{round(math.log10(RATIO_AXIS[0]))}…"
            f"1e{round(math.log10(RATIO_AXIS[1]))}: ratios beyond it are drawn in its end bins); exact zeros are "
            "counted in its titles, not drawn; failing cases without a finite ratio (wrong ids or codes, an "
            "exception, a crash) are drawn in the grey bin right of the axis.</p>" + table + img)


def _seed_text(w):
    """The case seed, and the weights' own seed where the campaign fixed them."""
    return str(w["seed"]) if w.get("weight_seed") is None else f"{w['seed']} (weights {w['weight_seed']})"


def _section_worst(rep):
    if not rep["worst"]:
        return "<p>No case ran.</p>"
    rows = [(i + 1, w["impl"], w["op"], w["status"], "∞ (no ratio)" if w["ratio"] is None else w["ratio"],
             _config_text(w), w.get("cases", 1), w["dist"], _seed_text(w),
             _link(w["fixture"], w["fixture"] or "none"), w["message"])
            for i, w in enumerate(rep["worst"])]
    return ("<p>One row per configuration, at its worst case; <i>cases</i> counts the cases drawn with that "
            "configuration (other inputs and seeds).</p>" + _table(
                ["#", "implementation", "op", "status", "ratio", "configuration", "cases", "dist", "seed",
                 "fixture", "message"], rows,
                lambda i, j, v: "bad" if j == 3 and v != "pass" else "w" if j in (5, 9, 10) else ""))


def _section_timing(rep, png):
    t = rep["timing"]
    head = (f"<p>{_fmt(rep['totals']['cases'])} cases in {_fmt(t['wall_seconds'])} wall seconds: "
            f"<b>{_fmt(t['rate'])} cases/s</b> overall. Per op, cases/s (wall) is the op's cases over that "
            "wall time (all workers, generation and Hypothesis included); cases/s (impl+spec) is the timed "
            "cases over the summed implementation and spec seconds.</p>")
    rows = []
    for op, s in t["per_op"].items():
        q = s["impl_case_seconds"] or {}
        rows.append((op, s["cases"], s["wall_rate"], s["timed"], s["impl_seconds"], s["spec_seconds"],
                     s["compute_rate"], q.get("p50"), q.get("p90"), q.get("max")))
    table = _table(["op", "cases", "cases/s (wall)", "cases timed", "impl s", "spec s", "cases/s (impl+spec)",
                    "impl s/case p50", "p90", "max"], rows)
    img = f"<img alt=\"histogram of per-case implementation seconds\" src=\"data:image/png;base64,{png}\">" \
        if png else ""
    return head + table + img


def to_html(rep, title, ratio_png, timing_png):
    bodies = {"totals": _section_totals(rep), "hosts": _section_hosts(rep), "findings": _section_findings(rep),
              "counts": _section_counts(rep), "skips": _section_skips(rep),
              "coverage": _section_coverage(rep), "ratios": _section_ratios(rep, ratio_png),
              "worst": _section_worst(rep), "timing": _section_timing(rep, timing_png)}
    nav = "".join(f"<a href=\"#{sid}\">{html.escape(name)}</a>" for sid, name in SECTIONS)
    sections = "".join(f"<section id=\"{sid}\"><h2>{html.escape(name)}</h2>{bodies[sid]}</section>"
                       for sid, name in SECTIONS)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body><h1>{html.escape(title)}</h1><nav>{nav}</nav>{sections}"
            "<p class=\"m\">Numbers from report.json; regenerate with python -m difftest report RUN_DIR.</p>"
            "</body></html>\n")
