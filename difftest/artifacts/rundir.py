"""The case rows of a run directory (format: difftest/artifacts/rundir.md): written compressed as cases.jsonl.gz; a
cases.jsonl of a run recorded before the rows were compressed is read the same way, and replaced by the .gz
the next time rows are merged into that directory."""

import gzip
from pathlib import Path

from ..running.isolation import atomic_write_bytes

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
