"""`python -m difftest merge RUN_DIR... --out DIR`: run directories from many hosts as one run directory
(difftest/store/rundir.md), which `python -m difftest report DIR` renders with a per-host breakdown.

Each case row gains `host` (its run's host label); rows identical in content (host included: the same run
merged twice) are kept once. Fixtures are deduplicated by the digest of their files: the same fixture from two
hosts is one directory listing both; two fixtures of one name but different content (another device, another
observed message) both stay, the second named `<name>-<digest[:12]>`. DIR/merge.json keeps the provenance:
each run's source, host and summary, each fixture's digest and hosts. A run directory without case rows (a
summary and fixtures only) contributes its summary and fixtures. Case rows are read compressed
(cases.jsonl.gz) or plain (cases.jsonl, older runs) and written compressed.
"""

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

from ..store import rundir
from ..store.atomic import atomic_write_text
from .report import NO_CASES, ReportError, read_run

HOST_FILE = "host.json"  # beside summary.json, for runs recorded before summary.json had a "host"


def host_of(run_dir, summary):
    """The run's host record: summary.json's "host", else host.json, else what its fixtures recorded."""
    run_dir = Path(run_dir)
    if isinstance(summary.get("host"), dict):
        return summary["host"]
    for path in [run_dir / HOST_FILE] + sorted(run_dir.glob("fixtures/*/case.json")):
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text())
        except ValueError as e:
            raise ReportError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(record, dict):
            raise ReportError(f"{path}: must hold a JSON object")
        if path.name == HOST_FILE:
            return record
        return {"hostname": None, "device": record.get("device"), "gpus": [], "packages": record.get("packages", {})}
    return {"hostname": None, "gpus": [], "packages": {}}


def label(run_dir, host):
    """A host label: "<hostname>/<run directory name>", the name alone where no hostname was recorded."""
    name = Path(run_dir).resolve().name
    return f"{host['hostname']}/{name}" if host.get("hostname") else name


def digest_dir(path):
    """sha256 over the relative names and bytes of every file under path, in name order."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _rows(run_dir):
    try:
        rows, summary, notes = read_run(run_dir)
    except ReportError as e:
        if NO_CASES not in str(e):
            raise
        summary_path = Path(run_dir) / "summary.json"
        if not summary_path.is_file():
            raise ReportError(f"{run_dir}: neither case rows (cases.jsonl.gz) nor summary.json (not a run "
                              "directory)") from None
        try:
            summary = json.loads(summary_path.read_text())
        except ValueError as e:
            raise ReportError(f"{summary_path}: not valid JSON ({e})") from None
        rows, notes = [], [f"{NO_CASES}: summary only"]
    return rows, summary, notes


def merge(run_dirs, out):
    """Merge run_dirs into out (created; must not hold a run already). Returns the merged summary."""
    out = Path(out)
    if rundir.cases_file(out) is not None or (out / "summary.json").exists():
        raise ReportError(f"--out {out} holds a run directory already; merge into a new directory")
    loaded = []
    for run_dir in map(Path, run_dirs):  # every input read before anything is written: a bad one writes nothing
        if run_dir.resolve() == out.resolve():
            raise ReportError(f"{run_dir} is the --out directory")
        run_rows, summary, notes = _rows(run_dir)
        loaded.append((run_dir, run_rows, summary, notes, host_of(run_dir, summary)))
    runs, rows, seen_rows, fixture_index, findings = [], [], set(), {}, []
    for run_dir, run_rows, summary, notes, host in loaded:
        merged_before = summary.get("hosts")  # a merged directory merged again keeps its rows' hosts
        name = label(run_dir, host)
        kept = 0
        for r in run_rows:
            r = {**r, "host": r.get("host") or name}
            key = hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()
            if key not in seen_rows:
                seen_rows.add(key)
                rows.append(r)
                kept += 1
        names = _merge_fixtures(run_dir, out, name, fixture_index)
        for f in summary.get("findings") or []:
            fixture = Path(str(f.get("fixture") or "")).name
            target = names.get(fixture)
            entry = {**f, "host": f.get("host") or name, "fixture": str(out / "fixtures" / target) if target else None}
            if target and f.get("fixture") and isinstance(f.get("message"), str):  # replay from the merged copy
                entry["message"] = f["message"].replace(str(f["fixture"]), entry["fixture"])
            if target is None or all(g["fixture"] != entry["fixture"] for g in findings):
                findings.append(entry)
        runs.append({"host": name, "source": str(run_dir.resolve()), "host_info": host, "cases": len(run_rows),
                     "cases_kept": kept, "notes": notes, "merged_hosts": merged_before,
                     "summary": {k: summary.get(k) for k in ("cases", "status", "seconds", "workers", "impls",
                                                            "ops", "model", "seed", "interrupted")},
                     "findings": len(summary.get("findings") or [])})
    out.mkdir(parents=True, exist_ok=True)
    rundir.write_lines(out, [json.dumps(r, allow_nan=False) + "\n" for r in rows])
    merged = rundir.summarize(out)
    merged.update(_run_fields(runs, rows))
    merged["findings"] = findings
    atomic_write_text(out / "summary.json", json.dumps(merged, indent=1, sort_keys=True) + "\n")
    provenance = {"runs": runs, "fixtures": fixture_index}
    atomic_write_text(out / "merge.json", json.dumps(provenance, indent=1, sort_keys=True) + "\n")
    return merged


def _merge_fixtures(run_dir, out, host, index):
    """Copy run_dir's fixtures into out/fixtures, one directory per content digest; {source name: target}."""
    names = {}
    for src in sorted((Path(run_dir) / "fixtures").glob("*/case.json")):
        src = src.parent
        digest = digest_dir(src)
        target = next((n for n, v in index.items() if v["digest"] == digest), None)
        if target is None:
            target = src.name if src.name not in index else f"{src.name}-{digest[:12]}"
            shutil.copytree(src, out / "fixtures" / target)
            index[target] = {"digest": digest, "hosts": []}
        if host not in index[target]["hosts"]:
            index[target]["hosts"].append(host)
        names[src.name] = target
    return names


def _run_fields(runs, rows):
    """The summary keys describing how the merged runs were made, and the per-host table (report's "hosts")."""
    by_host = {}
    for r in rows:
        by_host.setdefault(r["host"], Counter())[r["status"]] += 1
    hosts = {}
    for run in runs:
        if isinstance(run["merged_hosts"], dict):  # a merged directory merged again: its hosts as they were
            hosts.update(run["merged_hosts"])
            continue
        s = run["summary"]
        hosts[run["host"]] = {"host": run["host"], "info": run["host_info"], "source": run["source"],
                              "seconds": s.get("seconds"), "impls": s.get("impls"), "model": s.get("model"),
                              "workers": s.get("workers"), "findings": run["findings"],
                              "status": s.get("status") or {}, "cases": s.get("cases") or 0}
    for name, h in hosts.items():
        if by_host.get(name):  # what the merged rows hold; a summary-only run keeps its summary's counts
            h["status"], h["cases"] = dict(by_host[name]), sum(by_host[name].values())
    hosts = list(hosts.values())
    seconds = [h["seconds"] for h in hosts if isinstance(h["seconds"], (int, float))]
    return {
        # hosts run side by side: the merged run's wall time is the longest host's
        "seconds": max(seconds) if seconds else None,
        "impls": sorted({i for run in runs for i in run["summary"].get("impls") or []}),
        "ops": sorted({o for run in runs for o in run["summary"].get("ops") or []}),
        "model": ", ".join(sorted({str(run["summary"]["model"]) for run in runs if run["summary"].get("model")}))
        or None,
        "seed": None,
        "workers": sum(run["summary"].get("workers") or 0 for run in runs) or None,
        "worker_errors": [],
        "interrupted": None,
        "compared": sum(1 for r in rows if r["status"] != "skip"),
        "hosts": {h["host"]: h for h in hosts},  # difftest/store/rundir.md
        "merged_from": [run["source"] for run in runs],
    }
