"""Implementations for tests/difftest/running/test_pipeline.py: a fake slow device (torch with a sleep per call, the
kernel latency of a device the host waits on) and an always-wrong routing implementation."""

import time

from difftest.checking.impl_torch import TORCH

DEVICE_SECONDS = 0.01


def _slow(case, inputs):
    time.sleep(DEVICE_SECONDS)
    return TORCH.run(case, inputs)


def _doubled(case, inputs):
    out = TORCH.run(case, inputs)
    if out["weights"].size == 0:
        return out
    weights = out["weights"].copy()
    weights[0, 0] *= 2
    return {**out, "weights": weights}


SLOW_DEVICE = TORCH._replace(name="fake:slow_device", run=_slow)
DOUBLED = TORCH._replace(name="planted:doubled_first_weight", ops=("routing",), run=_doubled)
