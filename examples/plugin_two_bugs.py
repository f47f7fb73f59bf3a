"""examples/plugin_example.py with two different planted bugs, to watch known findings work:

    python -m difftest fuzz --impl examples/plugin_two_bugs.py:TWO_BUGS --op routing --max-examples 100

reports both in one run (docs/plugins.md, "A kernel author's loop"): the weights of a token's first expert 1 %
high (a mismatch in ``weights``) and a ValueError for more than two tokens (an ``error``).
"""

import importlib.util
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location("plugin_example", Path(__file__).with_name("plugin_example.py"))
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)


class TwoBugs(_example.DeepSeekV3Routing):
    name = "example:two_bugs"

    def run(self, case, inputs):
        if case.config.num_tokens > 2:
            raise ValueError("planted: more than two tokens")
        out = super().run(case, inputs)
        w = out["weights"].copy()
        w[:, 0] *= np.float32(1.01)
        return {**out, "weights": w}


TWO_BUGS = TwoBugs()
