"""The trtllm-gen JIT helper's include-root step (impls/flashinfer/_trtllm_gen_jit.py ``include_root``) from many
processes at once, as a campaign's workers run it (``fuzz --workers 7``): each round releases 8 processes through
a barrier onto the same not-yet-made link (absent, a stale link to other headers, or a real folder in its place),
and every process must return the folder with the link to the headers, none raising, no temporary name left.

No flashinfer import: ``include_root`` takes FlashInfer's generated-source folder as an argument."""

import multiprocessing
import os
import traceback
from pathlib import Path

import pytest

from impls.flashinfer import _trtllm_gen_jit as jit

pytestmark = pytest.mark.gpu  # the GPU tier's: the trtllm-gen JIT helper (runs on any host)
PROCESSES = 8
ROUNDS = 24  # per start of the processes (a spawn costs more than a round); each round has its own link
STATES = ("absent", "stale link", "folder")  # what sits at the link's place before round r: STATES[r % 3]
JOIN_S = 120  # only to catch a hang (a process stuck at the barrier): a run takes about a second


def _race(barrier, gen, headers, results):
    """One process: every round, wait for the others, then make round r's include root; report what raised."""
    errors = []
    for r in range(ROUNDS):
        barrier.wait(JOIN_S)
        try:
            root = jit.include_root(gen, headers, f"m{r}")
            if root != Path(gen) / "difftest_export" / f"m{r}":
                errors.append(f"round {r}: returned {root}")
        except Exception:
            errors.append(f"round {r} ({STATES[r % 3]}): {traceback.format_exc().strip().splitlines()[-1]}")
    results.put(errors)


def _prepare(gen, other):
    """Round r's link place in state STATES[r % 3]."""
    for r in range(ROUNDS):
        link = gen / "difftest_export" / f"m{r}" / jit.EXPORT_REL
        link.parent.mkdir(parents=True)
        if STATES[r % 3] == "stale link":
            link.symlink_to(other, target_is_directory=True)
        elif STATES[r % 3] == "folder":
            link.mkdir()
            (link / "DtypeDecl.h").write_text("// a copied folder, not the link\n")


def test_processes_racing_on_the_include_root_all_get_the_link(tmp_path):
    headers, other, gen = tmp_path / "headers", tmp_path / "other", tmp_path / "gen"
    for d in (headers, other):
        (d / "trtllm/gen").mkdir(parents=True)
        (d / "trtllm/gen/DtypeDecl.h").write_text(f"// {d.name}\n")
    _prepare(gen, other)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(barrier, str(gen), str(headers), results)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    errors = [e for _ in procs for e in results.get(timeout=JOIN_S)]
    for p in procs:
        p.join(JOIN_S)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    assert errors == [], f"{len(errors)} of {PROCESSES * ROUNDS} calls raised, e.g. {errors[:3]}"
    for r in range(ROUNDS):
        link = gen / "difftest_export" / f"m{r}" / jit.EXPORT_REL
        assert link.is_symlink() and link.resolve() == headers.resolve(), f"round {r} ({STATES[r % 3]})"
        assert os.listdir(link.parent) == [link.name], f"round {r}: left {sorted(os.listdir(link.parent))}"


def test_the_adapters_include_root_is_under_flashinfers_generated_sources(tmp_path, monkeypatch):
    """``_include_root`` (what ``spec`` calls) hands FlashInfer's FLASHINFER_GEN_SRC_DIR to ``include_root``."""
    env = pytest.importorskip("flashinfer.jit.env")
    monkeypatch.setattr(env, "FLASHINFER_GEN_SRC_DIR", tmp_path / "gen")
    headers = tmp_path / "headers"
    headers.mkdir()
    root = jit._include_root(headers, "m")
    assert root == tmp_path / "gen" / "difftest_export" / "m"
    assert (root / jit.EXPORT_REL).resolve() == headers.resolve()
