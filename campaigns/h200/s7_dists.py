"""Per-distribution tally of a fuzz run directory (cases.jsonl.gz): cases and status counts, layers of H >= 512
counted apart ("<dist>/H>=512"), and the largest hidden sizes seen, for the sparse-weight check of session 7.
python3 campaigns/h200/s7_dists.py RUN_DIR [RUN_DIR ...]"""

import collections
import gzip
import json
import sys

for run in sys.argv[1:]:
    tally = collections.defaultdict(collections.Counter)
    widths = collections.defaultdict(set)
    failures = []
    for line in gzip.open(run + "/cases.jsonl.gz", "rt"):
        r = json.loads(line)
        dist, c = r["case"]["dist"], r["case"]["config"]
        tally[dist + ("/H>=512" if (c.get("hidden_size") or 0) >= 512 else "")][r["status"]] += 1
        widths[dist].add(c.get("hidden_size"))
        if r["status"] not in ("pass", "skip"):
            failures.append({k: r.get(k) for k in ("status", "message", "case", "recipe")})
    print(json.dumps({"run": run, "by_dist": {d: dict(t) for d, t in sorted(tally.items())},
                      "hidden_sizes": {d: sorted(w, key=lambda h: h or 0)[-3:] for d, w in widths.items()},
                      "failures": failures[:20], "n_failures": len(failures)}))
