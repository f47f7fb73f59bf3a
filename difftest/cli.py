"""`python -m difftest`: fuzz, replay, report, merge, impls, show, mutants. Exit codes: 0 clean, 1 findings, 2 usage
or bad input (one line on stderr, no traceback; nothing run, nothing written)."""

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from .model import OPS
from .running import run
from .usage import Parser, UsageError, finite, table

SUBPROGRAMS = {"mutants": "selftest.mutants"}  # commands with their own parser: module under difftest/, loaded on use
SET_COMMANDS = ("fuzz", "mutants")  # the commands that draw cases: --set NAME=VALUE (difftest/model/settings.py)


def cmd_impls(args):
    from .checking import interface

    rows = [(name, version, ",".join(ops), "available" if reason is None else f"unavailable: {reason}")
            for name, version, ops, reason in interface.listing()]
    for line in table(rows):
        print(line)
    return 0


def cmd_show(args):
    from .store import fixtures

    fx = fixtures.load(args.fixture)
    m = fx.meta
    print(f"fixture {fx.id}  status {fx.status}")
    print(f"implementation {m['impl']['ref']} ({m['impl']['name']} {m['impl']['version']}) on {m['device']}")
    weights = "" if fx.case.weight_seed is None else f" weight_seed={fx.case.weight_seed}"
    print(f"case: op={fx.case.op} dist={fx.case.dist} seed={fx.case.seed}{weights}")
    print(json.dumps(m["case"]["config"], indent=1))
    print(f"recipe: {json.dumps(m['recipe'])}")
    print(f"observed: {json.dumps(m['observed'])}")
    print(f"provenance: {m['provenance']}")
    from .readers import replay, reproducer

    for line in reproducer.show_lines(fx):
        print(line)
    for name, outcome, detail in replay.replay_fixture(fx, [fx.impl_ref]):
        print(f"now: {name} {outcome} {detail}")
    if args.report:
        from .readers import bugreport

        report, script, npz = bugreport.write(fx, args.report, args.script)
        print(f"bug report: {report}; reproducer: python {script} (inputs, expected values and bounds in {npz})")
    elif args.script:
        script, npz = reproducer.write_script(fx, args.script)
        print(f"reproducer: python {script} (inputs, expected values and bounds in {npz})")
    return 0


def cmd_report(args):
    from .readers import report

    return report.main([args.run_dir] + ([] if args.top is None else ["--top", str(args.top)]))


def cmd_merge(args):
    from .readers import merge, report

    summary = merge.merge(args.run_dirs, args.out)
    hosts = summary["hosts"]
    print(f"merged {len(args.run_dirs)} run directories from {len(hosts)} hosts into {args.out}: "
          f"{summary['cases']} cases, {len(summary['findings'])} findings, "
          f"{len(list(Path(args.out).glob('fixtures/*/case.json')))} fixtures")
    for name, h in hosts.items():
        print(f"  {name}: {h['cases']} cases {h['status']}")
    print(report.maybe_render(args.out))
    return 0


def cmd_fuzz(args):
    return run.fuzz(args, after=_render_report)


def _render_report(out):  # after a campaign's summary lines, before its exit status is decided
    from .readers import report

    print(report.maybe_render(out))


def _timeouts(p):
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="per-case limit for implementations that may crash or hang (default: the setting "
                        "case_timeout, 120); past it the case is a hang finding")
    p.add_argument("--first-timeout", type=float, metavar="SECONDS",
                   help="limit for the first case of each fresh worker, which may JIT-build its kernel "
                        "(default: the setting first_case_timeout, 900)")


def _settings(p):
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a setting for this run (repeatable): odds, sizes, steering, weight seed, timeouts, example "
                        "database; "
                        "the table, defaults and [tool.difftest] in pyproject.toml: docs/settings.md")


def _apply_settings(argv):
    """Apply --set NAME=VALUE (or --set=NAME=VALUE) of argv before the command imports what reads the settings."""
    pre = Parser(prog="python -m difftest", add_help=False)
    pre.add_argument("--set", action="append")
    known, _ = pre.parse_known_args(argv)
    from .model import settings

    settings.apply(known.set)


def parser():
    p = Parser(prog="python -m difftest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog=f"The main job: python -m difftest fuzz ({run.DEFAULT_BUDGET_S} s, spec vs torch on CPU and any "
                      "available GPU implementation;\nrun directory runs/<timestamp>). Each command's options: "
                      "python -m difftest COMMAND --help")
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser(
        "fuzz", help="fuzz implementations against the spec (default: torch CPU + available GPUs)"
    )
    f.add_argument(
        "--impl", action="append", help="name, package.module:NAME or path/file.py:NAME (repeatable)"
    )
    f.add_argument("--op", action="append", choices=OPS, help="op to fuzz (repeatable; default all)")
    f.add_argument("--model", help="fuzz around a model preset (difftest/model/presets.py)")
    f.add_argument("--where", action="append", metavar="FIELD=V|LO..HI|A,B,C",
                   help="draw only configurations with FIELD (method, quant, activation, logits_dtype, "
                        "num_experts or E, top_k, ...) in the value, range or set (repeatable; with --model too)")
    f.add_argument("--max-examples", type=int, metavar="N",
                   help="examples per (implementation, op) cell, however long they take: no time limit "
                        "unless --time-budget is given too, then the campaign stops at whichever comes first")
    f.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help=f"seconds for the whole campaign (default {run.DEFAULT_BUDGET_S} without "
                        "--max-examples; with it, no default: the examples alone decide)")
    f.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    f.add_argument("--seed", type=int, default=0, help="campaign seed (workers and chunks derive theirs)")
    f.add_argument("--out", help="run directory (default runs/<timestamp>); one that holds a run already is refused "
                                 "unless --resume; format in difftest/store/rundir.md")
    f.add_argument("--resume", action="store_true",
                   help="continue the run in --out (a killed campaign: its crash log is recorded first; rows are "
                        "added, its fixtures reported again as earlier findings)")
    f.add_argument("--special", action="store_true", help="also draw NaN/Inf input distributions")
    f.add_argument("--known", metavar="DIR",
                   help="fixtures whose signatures (op, implementation, kind, field, slice) are known: failures "
                        "matching an open one are counted, not reported; the search goes on for others")
    f.add_argument(
        "--db", help="Hypothesis example database: a directory, or redis://HOST:PORT[/N] shared by many machines "
                     "and multiplexed with OUT/db (default: the setting db, else OUT/db)"
    )
    _timeouts(f)
    _settings(f)
    r = sub.add_parser("replay", help="replay fixtures against every available implementation")
    r.add_argument("paths", nargs="+", help="fixture directories, directories of fixtures, or run directories "
                                            "(their fixtures/)")
    r.add_argument(
        "--impl", action="append", help="restrict to these implementations (plus the recorded one)"
    )
    r.add_argument("-v", "--verbose", action="store_true",
                   help="one line per implementation and fixture (default: one line per fixture, with the "
                        "details of unexpected outcomes)")
    r.add_argument("--update", action="store_true",
                   help="mark an open fixture fixed when its recorded implementation now passes (one line each)")
    r.add_argument("--skip-unavailable", action="store_true",
                   help="skip (one line each, counted) fixtures whose recorded implementation is unavailable here "
                        "(no GPU, kernel package missing) instead of exiting 2; one that cannot run at all (a "
                        "missing plug-in file, an import error) still exits 2")
    _timeouts(r)
    rp = sub.add_parser("report", help="render RUN_DIR/report.html and report.json from a run directory")
    rp.add_argument("run_dir", help="a run directory written by python -m difftest fuzz --out DIR")
    rp.add_argument("--top", type=int, help="worst cases listed")
    m = sub.add_parser("merge", help="merge run directories from many hosts into one (per-host provenance kept)")
    m.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (fuzz --out, or merged)")
    m.add_argument("--out", required=True, help="the merged run directory (new)")
    sub.add_parser("impls", help="list implementations and why any is unavailable")
    s = sub.add_parser("show", help="a fixture's case, recipe and current diff")
    sub.add_parser("mutants", help="mutation self-test: is every seeded bug found? "
                                   "(python -m difftest mutants --help)", add_help=False)
    s.add_argument("fixture")
    s.add_argument("--script", metavar="OUT.py",
                   help="also write a standalone reproducer (numpy inputs in OUT.npz, the call, the expected "
                        "values and bounds) that runs without Hypothesis and exits 1 while the bug is there, 0 once "
                        "fixed, 2 where it cannot run")
    s.add_argument("--report", metavar="OUT.md",
                   help="also write a bug report for the kernel's maintainers, with its reproducer (--script, default "
                        "repro.py beside it)")
    return p


def cmd_replay(args):
    from .readers import replay

    return replay.main(args)


COMMANDS = {
    "fuzz": cmd_fuzz, "replay": cmd_replay, "report": cmd_report, "impls": cmd_impls, "show": cmd_show,
    "merge": cmd_merge,
}


# The exceptions that mean bad input: one line on stderr, exit 2. Looked up among the modules a command has loaded
# (an exception of a module that was never imported cannot have been raised), so that a usage error costs no import
# of Hypothesis, torch or matplotlib. OSError: an unreadable input or an unwritable run directory, named by its message.
BAD_INPUT = {"difftest.usage": "UsageError", "difftest.store.fixtures": "FixtureError",
             "difftest.checking.interface": "ImplError", "difftest.model.case": "CaseError",
             "difftest.readers.report": "ReportError"}


def bad_input_errors():
    return (OSError, *(getattr(sys.modules[m], name) for m, name in BAD_INPUT.items() if m in sys.modules))


def main(argv=None):
    p = parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # the main job is `fuzz`, asked for by name: a bare call starts no 120 s campaign
        p.print_help()
        return 0
    if argv[0] in SET_COMMANDS:  # before anything reads them (a subprogram's module does, at import)
        try:
            _apply_settings(argv[1:])
        except UsageError as e:
            print(f"difftest: error: {e}", file=sys.stderr)
            return 2
    if argv[0] in SUBPROGRAMS:  # its own parser (the mutation self-test: difftest/selftest/mutants.py)
        return importlib.import_module(f".{SUBPROGRAMS[argv[0]]}", __package__).main(argv[1:])
    try:
        args = p.parse_args(argv)
    except SystemExit as e:  # argparse printed its one-line error (or the help, code 0)
        return 2 if e.code else 0
    try:
        if args.command in ("fuzz", "replay"):  # replay reads them too
            finite(args.timeout, "--timeout", 0, False)
            finite(args.first_timeout, "--first-timeout", 0, False)
        return COMMANDS[args.command](args)
    except Exception as e:
        if not isinstance(e, bad_input_errors()):
            raise
        print(f"difftest: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
