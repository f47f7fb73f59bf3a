"""The spec as a plug-in whose campaign runs on a virtual clock (``tests/plugins/fast_clock.py:SPEC``): importing this
module, as `fuzz` does in its parent and in each worker process, makes the campaign's clock (the ``time`` that
difftest/running/campaign.py and run.py read) advance STEP_S seconds at every reading on top of the real one.
A campaign with a time limit then sees it pass within a few examples, whatever the machine's load: a test that
the examples alone decide (``--max-examples``) fails at once if a time limit is applied, without waiting for one.
Readings from different processes stay comparable (each is at least the real monotonic clock)."""

import itertools
import time

from difftest.checking.impl_spec import SPEC as _SPEC
from difftest.running import campaign, run

STEP_S = 1000.0


class FastClock:
    """``time`` with a monotonic() that gains STEP_S at every call; everything else is the real module's."""

    def __init__(self):
        self._calls = itertools.count(1)

    def monotonic(self):
        return time.monotonic() + STEP_S * next(self._calls)

    def __getattr__(self, name):
        return getattr(time, name)


campaign.time = run.time = FastClock()
SPEC = _SPEC._replace(name="spec-on-a-fast-clock")
