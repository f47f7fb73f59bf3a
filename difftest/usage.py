"""What the command line's modules share: a usage error (one line, exit 2), an argument parser whose errors are
one line, argument checks, and a column table."""

import argparse
import math
from pathlib import Path


class UsageError(Exception):
    """Bad arguments or input: printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block), so every exit-2 message is one line."""

    def error(self, message):
        one_line = message.replace("\r", "\\r").replace("\n", "\\n")  # an argument may hold a line break
        self.exit(2, f"difftest: error: {self.prog.split()[-1]}: {one_line}\n")


def finite(value, name, low, inclusive):
    if value is not None and not (math.isfinite(value) and (value >= low if inclusive else value > low)):
        raise UsageError(f"{name} must be a finite number {'>=' if inclusive else '>'} {low:g}, got {value}")


def free_dir(path, flag):
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise UsageError(f"{flag} {path} exists and is not a directory")


def table(rows):
    """Rows of strings as lines, every column but the last padded to its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)] if rows else []
    return ["  ".join([c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]).rstrip() for r in rows]
