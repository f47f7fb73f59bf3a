"""Routing implementations that fail on purpose, for tests of crash and hang isolation.

Each object follows the Implementation protocol (difftest/checking/interface.py). ``HEALTHY`` returns softmax
top-k routing; the others fail in ``run`` as named. ``BY_SEED`` does ``cycle[case.seed % len(cycle)]``
(seed 0 healthy), so one worker can meet several faults in a row. The ``cuda`` ones pass the logits
through the GPU (torch, imported only there) and poison the CUDA context or hang a kernel. Load them
in a worker as ``tests/plugins/faulty_impls.py:ABORTS`` etc.
"""

import ctypes
import os
import time

import numpy as np


def _raise():
    raise RuntimeError("injected failure")


def _hang():
    while True:
        time.sleep(3600)


def _cuda_assert():
    """An out-of-range index inside a CUDA kernel: a device-side assert, sticky for the whole process."""
    import torch

    x = torch.zeros(4, device="cuda")
    x[torch.tensor([1 << 20], device="cuda")] = 1.0
    torch.cuda.synchronize()


def _cuda_hang():
    """A kernel that spins for ~10 minutes, and a host that waits for it."""
    import torch

    torch.cuda._sleep(1 << 40)
    torch.cuda.synchronize()


def _cuda_round_trip(x):
    import torch

    return (torch.from_numpy(x).cuda() * 1.0).cpu().numpy()


CPU_FAULTS = {
    "none": lambda: None,
    "raise": _raise,
    "abort": os.abort,
    "segfault": lambda: ctypes.string_at(0),  # reads address 0: SIGSEGV inside a C call
    "exit": lambda: os._exit(3),  # a C library calling exit() mid-kernel
    "hang": _hang,
}
CUDA_FAULTS = {"none": lambda: None, "cuda_assert": _cuda_assert, "cuda_hang": _cuda_hang}
# Two seconds in every case: more than a per-case limit of 1 s allows, far less than a worker's first-case limit
FAULTS = {**CPU_FAULTS, **CUDA_FAULTS, "slow": lambda: time.sleep(2.0)}


def softmax_top_k(logits, k):
    """ids: top-k by logit, ties to the lower id; weights: their softmax probabilities renormalized."""
    ids = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    w = np.take_along_axis(p, ids, axis=-1)
    return {"ids": ids.astype(np.int32), "weights": (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)}


class Faulty:
    version = "0"
    ops = ("routing",)
    deterministic = True
    may_crash = True

    def __init__(self, fault=None, device="cpu"):
        """fault: a key of FAULTS, "bad_output" (returns a list, not an array), or None (by seed);
        device "cuda" sends the logits through the GPU first."""
        self.fault, self.device = fault, device
        self.cycle = tuple(CUDA_FAULTS if device == "cuda" else CPU_FAULTS)
        self.name = f"faulty_{fault or 'by_seed'}_{device}"

    def available(self):
        return None

    def unsupported(self, case):
        return None

    def recipe(self, case):
        return None

    def run(self, case, inputs):
        fault = self.fault or self.cycle[case.seed % len(self.cycle)]
        logits = _cuda_round_trip(inputs["logits"]) if self.device == "cuda" else inputs["logits"]
        out = softmax_top_k(logits, case.config.top_k)
        if fault == "bad_output":
            return {"ids": out["ids"].tolist(), "weights": out["weights"]}
        FAULTS[fault]()
        return out


HEALTHY = Faulty("none")
RAISES = Faulty("raise")
ABORTS = Faulty("abort")
SEGFAULTS = Faulty("segfault")
EXITS = Faulty("exit")
HANGS = Faulty("hang")
BAD_OUTPUT = Faulty("bad_output")
SLOW = Faulty("slow")
BY_SEED = Faulty()
BY_SEED_CUDA = Faulty(device="cuda")
