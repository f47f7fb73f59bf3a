"""`python -m difftest`: see difftest/cli.py."""

import sys

from .cli import main

sys.exit(main())
