"""The case rows of a run directory (format: difftest/store/rundir.md): written compressed as cases.jsonl.gz; a
cases.jsonl of a run recorded before the rows were compressed is read the same way, and replaced by the .gz
the next time rows are merged into that directory. summarize merges the workers' cases-*.jsonl into it and counts
the rows for summary.json (`fuzz`, `merge`); this_run and cell_shares count this run's rows before that merge."""

import gzip
import json
from collections import Counter
from pathlib import Path

from .atomic import atomic_write_bytes

CASES = "cases.jsonl.gz"
PLAIN = "cases.jsonl"  # runs recorded before the rows were compressed
USED = (CASES, PLAIN, "summary.json", "fixtures", "difftest-workers")  # what a run leaves (besides cases-*.jsonl)


def used_by_a_run(run_dir):
    """The names in run_dir that show a fuzz run used it (merged rows, a killed run's cases-<worker>.jsonl, the
    summary, fixtures, worker logs and write-ahead logs); [] for a fresh or missing directory."""
    d = Path(run_dir)
    if not d.is_dir():
        return []
    return [n for n in USED if (d / n).exists()] + sorted(p.name for p in d.glob("cases-*.jsonl"))


def cases_file(run_dir):
    """The run directory's merged case rows, compressed or plain; None if it has neither."""
    for name in (CASES, PLAIN):
        if (Path(run_dir) / name).is_file():
            return Path(run_dir) / name
    return None


def read_text(path):
    """The text of a cases file, gunzipped where its name ends in .gz."""
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError; a cut-off file is an EOFError
            raise OSError(f"{path}: not a complete gzip file ({e})") from None
    return data.decode("utf-8", errors="replace")


def read_lines(run_dir):
    """The lines of the run directory's merged case rows; FileNotFoundError if it has none."""
    path = cases_file(run_dir)
    if path is None:
        raise FileNotFoundError(f"{run_dir}: no {CASES} (nor a plain {PLAIN})")
    return read_text(path).splitlines()


def write_lines(run_dir, lines):
    """Replace the merged case rows by lines (each ending in a newline), compressed, atomically; a plain
    cases.jsonl left by an older run goes once its rows are in the .gz (the caller read them first)."""
    data = gzip.compress("".join(lines).encode("utf-8"), compresslevel=6, mtime=0)  # mtime 0: same bytes
    atomic_write_bytes(Path(run_dir) / CASES, data)
    (Path(run_dir) / PLAIN).unlink(missing_ok=True)
    return Path(run_dir) / CASES


def parse_row(line):
    """A case row (cases.jsonl.gz, cases-*.jsonl), or None for a line torn by a killed worker."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) and {"op", "status", "message", "ratio", "case"} <= set(row) else None


def worker_rows(out):
    """This run's case rows, from the workers' cases-*.jsonl before the merge (in file order; torn lines dropped):
    whatever earlier runs left in cases.jsonl.gz is not among them."""
    for p in sorted(Path(out).glob("cases-*.jsonl")):
        yield from filter(None, map(parse_row, p.read_text(errors="replace").splitlines()))


def _tokens(row):
    config = row["case"]["config"]
    return config.get("num_tokens", config.get("routing", {}).get("num_tokens", 1))


def this_run(out):
    """(cases, compared, Counter of skip reasons, compared cases with tokens) of the rows in the workers'
    cases-*.jsonl, before the merge: this run's alone, whatever earlier runs left in cases.jsonl.gz."""
    cases, skips, with_tokens = 0, Counter(), 0
    for row in worker_rows(out):
        cases += 1
        skips.update([row["message"]] if row["status"] == "skip" else [])
        with_tokens += row["status"] != "skip" and _tokens(row) > 0
    return cases, cases - sum(skips.values()), skips, with_tokens


def cell_shares(out):
    """{"implementation op": {"drawn", "compared", "share", "empty", "declined": [[reason, n], ...3]}} over this
    run's rows: how much of what was drawn for each implementation and op was compared, how much of that had no
    tokens (T = 0), and why the rest was not."""
    cells = {}
    for row in worker_rows(out):
        c = cells.setdefault(f"{row.get('impl', '?')} {row['op']}", {"drawn": 0, "compared": 0, "empty": 0,
                                                                     "declined": Counter()})
        c["drawn"] += 1
        if row["status"] == "skip":
            c["declined"][row["message"]] += 1
        else:
            c["compared"] += 1
            c["empty"] += _tokens(row) == 0
    return {cell: {**c, "share": round(c["compared"] / c["drawn"], 4), "declined": c["declined"].most_common(3)}
            for cell, c in sorted(cells.items())}


def summarize(out):
    """Merge cases-*.jsonl into cases.jsonl.gz (after the rows of earlier runs into the same directory, from
    a plain cases.jsonl too; torn lines dropped and counted) and count (format: difftest/store/rundir.md). The
    merged file replaces the old one atomically before the parts are removed: a kill in between can
    duplicate rows, never lose them."""
    parts = sorted(out.glob("cases-*.jsonl"))
    lines = read_lines(out) if cases_file(out) else []
    for p in parts:
        lines += p.read_text(errors="replace").splitlines()
    rows, kept, torn = [], [], 0
    for line in filter(str.strip, lines):
        row = parse_row(line)
        if row is None:
            torn += 1
            continue
        rows.append(row)
        kept.append(line + "\n")
    write_lines(out, kept)
    for p in parts:
        p.unlink()
    counts = {k: Counter() for k in ("op", "method", "activation", "quant", "dist", "impl")}
    status, skips = Counter(), Counter()
    ratio_max, worst = 0.0, None
    for r in rows:
        status[r["status"]] += 1
        if r["status"] == "skip":
            skips[r["message"]] += 1
            continue
        for k in counts:
            if r.get(k) is not None:
                counts[k][f"{r['op']}:{r[k]}" if k not in ("op", "impl") else r[k]] += 1
        if r["status"] == "pass" and r["ratio"] is not None and r["ratio"] > ratio_max:
            ratio_max, worst = r["ratio"], r["case"]
    return {
        "cases": len(rows),
        "torn_lines": torn,
        "status": dict(status),
        "max_ratio_passing": ratio_max,
        "max_ratio_case": worst,
        "by": {k: dict(sorted(v.items())) for k, v in counts.items()},
        "skips": dict(skips.most_common()),
    }
