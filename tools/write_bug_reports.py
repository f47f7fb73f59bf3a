"""Write the bug reports of the open kernel fixtures (FlashInfer, SGLang) beside them: fixtures/<id>/REPORT.md with
its reproducer repro.py and repro.npz (difftest/readers/bugreport.py; the same as
`python -m difftest show fixtures/<id> --report fixtures/<id>/REPORT.md`).

    python tools/write_bug_reports.py [--root fixtures] [--check]

Reports of fixtures that are no longer open kernel fixtures are removed. --check writes nothing under the root and
exits 1 with one line per report that differs from a fresh one (tests/difftest/readers/test_bug_reports.py runs the
same check).
"""

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from difftest.readers import bugreport  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=str(ROOT / "fixtures"))
    p.add_argument("--check", action="store_true", help="compare with fresh reports instead of writing them")
    args = p.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as scratch:
            problems = bugreport.stale_committed(args.root, scratch)
        for line in problems:
            print(line)
        return 1 if problems else 0
    for fid in bugreport.write_committed(args.root):
        print(f"{args.root}/{fid}/{bugreport.REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
