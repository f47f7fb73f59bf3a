"""Bug reports for kernel maintainers (issue 34, item 3): `show FIXTURE --report OUT.md` writes every section and the
reproducer beside it, and the reports committed beside the open FlashInfer and SGLang fixtures are exactly what the
command writes now (tools/write_bug_reports.py regenerates them), so they cannot drift from their fixtures, the
spec or the adapters they embed."""

import subprocess
import sys
from pathlib import Path

from difftest.readers import bugreport

ROOT = Path(__file__).resolve().parents[3]
K1 = ROOT / "fixtures" / "routing-bug_deepseek_biased_weights-a601b764f199"
SECTIONS = ("# bug:deepseek_biased_weights torch", "## Versions and device", "## The case", "## Expected vs observed",
            "### Why the bound holds", "## Root cause (traced)", "## Reproducer")


def test_report_of_a_cpu_fixture_has_every_section_and_a_reproducer_that_fails(tmp_path):
    out = tmp_path / "report" / "REPORT.md"
    r = subprocess.run([sys.executable, "-m", "difftest", "show", str(K1), "--report", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and f"bug report: {out}" in r.stdout, r.stdout + r.stderr
    text = out.read_text()
    positions = [text.find(s) for s in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), list(zip(SECTIONS, positions, strict=True))
    for fact in ("| method | \"deepseek_v3\" |",  # the configuration
                 "- `logits`: float32 (1, 1): [1.43",  # the inputs
                 "- `weights`: float32 (1, 1): [0.807",  # the spec's value, with its bound
                 "bound (|observed − expected| at most): float64 (1, 1): [1.05898",
                 "Bug model of K1 (vllm-project/vllm PR #12002",  # how it was found (provenance)
                 "weights(by id)[0, 0]=1.08061 but spec=0.807579",  # the recorded observation and cause
                 "interval rule",  # why the bound holds, in docs/comparisons.md's terms
                 "[`repro.py`](repro.py)", "python repro.py"):
        assert fact in text, fact
    run = subprocess.run([sys.executable, "repro.py"], cwd=out.parent, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 1 and "FAIL:" in run.stdout, run.stdout + run.stderr


def test_committed_reports_are_what_the_command_writes(tmp_path):
    """Every open kernel fixture has REPORT.md, repro.py and repro.npz beside it, each equal to a fresh one; no
    report outlives its fixture. Regenerate with `python tools/write_bug_reports.py`."""
    upstream = bugreport.upstream_fixtures(ROOT / "fixtures")
    assert {fx.impl_ref.split(".")[0] for fx in upstream} == {"flashinfer", "sglang"}, [fx.id for fx in upstream]
    assert bugreport.stale_committed(ROOT / "fixtures", tmp_path) == []


def test_a_kernel_finding_names_the_gpu_it_was_found_on(monkeypatch):
    """A kernel fixture's device is the GPU of the run that found it (the committed ones once said "cpu (x86_64)",
    the machine that wrote the file), and a campaign of an SGLang adapter records its CUDA device too."""
    import sys
    from types import SimpleNamespace

    from difftest.store import fixtures

    for fx in bugreport.upstream_fixtures(ROOT / "fixtures"):
        assert fx.meta["device"] == "NVIDIA H200", (fx.id, fx.meta["device"])
        assert "- device (case.json, where the finding was recorded): NVIDIA H200" in bugreport.versions(fx)
    cuda = SimpleNamespace(is_available=lambda: True, get_device_name=lambda: "NVIDIA H200")
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    for name, gpu in (("sglang.per_token_group_quant_8bit_v1", True), ("flashinfer.mono_moe", True),
                      ("torch-cuda", True), ("torch", False), ("bug:K14_log2_ue8m0", False)):
        assert (fixtures.device_name(name) == "NVIDIA H200") == gpu, name


def test_a_human_note_is_the_root_cause_and_the_message_the_observation():
    meta = {"observed": {"message": "ids[0]=[42] but spec=[185] [routing, k]"}}
    assert bugreport.observed_and_cause(meta)[1] == "ids[0]=[42] but spec=[185] [routing, k]"
    note = "The kernel reads the bias as bf16 (deepseek.cu:159-162)."
    assert bugreport.observed_and_cause({**meta, "notes": note}) == (meta["observed"]["message"], note)


def test_every_dev_kernel_has_its_allowance_in_the_docs():
    """The report quotes docs/comparisons.md's row for a trtllm_ops kernel (the one home of those rules)."""
    from difftest.model.case import DEV_KERNELS

    for kernel in DEV_KERNELS:
        compared, allowance = bugreport.dev_kernel_row(kernel)
        assert compared and allowance, kernel
