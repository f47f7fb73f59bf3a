"""`show` and `show --script` (issue 22, item 3; issue 34, item 2): the inputs in compact form, the implementation
next to the spec at the worst elements, and a standalone reproducer that runs without Hypothesis from any
directory, exits 1 while the bug is there, 0 once it is fixed and 2 (one line) where it cannot run. A kernel
fixture's script carries its adapter and needs neither this project nor its spec."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest.artifacts import embed, fixtures, reproducer
from difftest.checking import check, impl_spec, interface
from difftest.checking.impl_torch import TORCH
from difftest.model import generate, strategies
from difftest.model.case import DEV_KERNELS
from impls.torch_eager import trtllm_ops as te_ops

ROOT = Path(__file__).resolve().parents[1]
K1 = ROOT / "fixtures" / "routing-bug_deepseek_biased_weights-a601b764f199"
EXAMPLE = ROOT / "examples" / "plugin_example.py"
WEIGHTS_BUG = ("w = np.take_along_axis(s, ids, axis=-1)", "w = np.take_along_axis(keys, ids, axis=-1)")
FIXTURES = sorted(p.parent.name for p in (ROOT / "fixtures").glob("*/case.json"))
DEVICE_IMPLS = ("flashinfer.", "sglang.", "torch-cuda")  # implementations that need a GPU (and a kernel package)


def _needs_device(fixture):
    ref = json.loads((ROOT / "fixtures" / fixture / "case.json").read_text())["impl"]["ref"]
    return ref.startswith(DEVICE_IMPLS)


# Without a device, a device fixture's script can only refuse, and it refuses the same way for every fixture of an
# implementation kind: the default tier checks one per kind; the others run where they can (the GPU tier, exit 1).
REFUSAL_SAMPLES = {next(f for f in FIXTURES if _needs_device(f) and
                        json.loads((ROOT / "fixtures" / f / "case.json").read_text())["impl"]["ref"].startswith(k))
                   for k in DEVICE_IMPLS}
SCRIPT_FIXTURES = [f if not _needs_device(f) or f in REFUSAL_SAMPLES else pytest.param(f, marks=pytest.mark.gpu)
                   for f in FIXTURES]
# Runs the script with hypothesis and the named modules unimportable, and without an editable install's import hook
# (which would find this project's packages from anywhere): what the script imports must come from its path.
BLOCKED = ("import runpy, sys\n"
           "sys.meta_path = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]\n"
           "end = sys.argv.index('--')\n"
           "for m in sys.argv[2:end]:\n    sys.modules[m] = None\n"
           "sys.argv = [sys.argv[1], *sys.argv[end + 1:]]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
ENV = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
SCRIPT_TIMEOUT_S = 600  # only to catch a hang: a script runs in seconds here


def difftest(*args):
    return subprocess.run([sys.executable, "-m", "difftest", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def run_script(script, *blocked, project=True, args=()):
    """Run a reproducer in its own directory; `project`: with this checkout on PYTHONPATH. Without it, PYTHONPATH
    keeps only its entries outside the checkout: where a kernel package was installed (a --target directory on a
    GPU box), as a maintainer's environment would have it."""
    elsewhere = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                 if p and not Path(p).resolve().is_relative_to(ROOT)]
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT)] if project else elsewhere)}
    return subprocess.run([sys.executable, "-c", BLOCKED, str(script), "hypothesis", *blocked, "--", *args],
                          cwd=script.parent, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, env=env)


def test_show_prints_inputs_and_the_worst_elements():
    r = difftest("show", str(K1))
    assert r.returncode == 0, r.stderr
    assert "input logits: float32 (1, 1) in [1.434, 1.434]: [1.4344]" in r.stdout
    assert "input bias: float32 (1,)" in r.stdout
    assert "worst elements (implementation vs spec at the spec's ids; 1 outside the bound):" in r.stdout
    assert "  weights[0, 0]=1.08061 but spec=0.807579: |diff| 0.273 > bound 1.06e-06" in r.stdout


def test_script_of_an_open_bug_model_fixture_fails_on_its_own(tmp_path):
    """Through the command line (every fixture's script: below, in process)."""
    fixture = "K14_log2_ue8m0"
    r = difftest("show", str(ROOT / "fixtures" / fixture), "--script", str(tmp_path / "repro.py"))
    assert r.returncode == 0 and (tmp_path / "repro.npz").is_file(), r.stderr
    run = run_script(tmp_path / "repro.py")
    assert run.returncode == 1 and "FAIL:" in run.stdout, run.stdout + run.stderr


def test_script_of_a_plugin_needs_neither_hypothesis_nor_difftest(tmp_path):
    plugin = tmp_path / "plugin.py"
    source = EXAMPLE.read_text()
    plugin.write_text(source.replace(*WEIGHTS_BUG))
    r = difftest("fuzz", "--impl", f"{plugin}:DEEPSEEK_V3", "--op", "routing", "--model", "deepseek-v3",
                 "--max-examples", "40", "--workers", "1", "--out", str(tmp_path / "run"))
    assert r.returncode == 1, r.stdout + r.stderr
    (fixture,) = (tmp_path / "run" / "fixtures").iterdir()
    script = tmp_path / "elsewhere" / "repro.py"
    assert difftest("show", str(fixture), "--script", str(script)).returncode == 0
    assert "plugin.py:DEEPSEEK_V3" in script.read_text() and str(tmp_path) not in script.read_text()
    run = run_script(script, "difftest")
    assert run.returncode == 1 and "weights[" in run.stdout and "FAIL:" in run.stdout, run.stdout + run.stderr
    plugin.write_text(source)  # the fix
    run = run_script(script, "difftest")
    assert run.returncode == 0 and "PASS" in run.stdout, run.stdout + run.stderr


def _one_line_refusal(run, ran=False):
    """Exit 2 with exactly one line on stderr (no traceback) saying why the script cannot run; nothing else unless
    it `ran` far enough to print its inputs."""
    lines = run.stderr.strip().splitlines()
    return run.returncode == 2 and (ran or not run.stdout) and len(lines) == 1 and \
        lines[0].startswith("cannot run here: ")


@pytest.mark.parametrize("fixture", SCRIPT_FIXTURES)
def test_script_of_every_committed_fixture_runs_outside_the_repository(tmp_path, fixture):
    """From a directory outside the repository: a kernel fixture's script with neither this project nor its spec
    importable (the adapter is embedded), any other with the project on PYTHONPATH (its implementation is the
    project's own, or a plug-in that imports the spec). Exit 1 for an open fixture, 0 for a fixed one, and where
    the implementation cannot run here (no CUDA device, no kernel package) 2 with one line."""
    fx = fixtures.load(ROOT / "fixtures" / fixture)
    reason = interface.load(fx.impl_ref).available()
    if reason is not None and fixture not in REFUSAL_SAMPLES and _needs_device(fixture):
        pytest.skip(f"{fx.impl_ref}: {reason} (the refusal is checked on {sorted(REFUSAL_SAMPLES)})")
    script, _ = reproducer.write_script(fx, tmp_path / "elsewhere" / "repro.py")
    kind, _ = reproducer.kind_of_reference(fx.impl_ref)
    adapter = kind == "adapter"
    run = run_script(script, *(["difftest", "spec"] if adapter else []), project=not adapter)
    if reason is not None:
        assert _one_line_refusal(run), run.stdout + run.stderr
        assert reason in run.stderr
    else:
        assert run.returncode == {"open": 1, "fixed": 0}[fx.status], run.stdout + run.stderr
        assert ("FAIL:" if fx.status == "open" else "PASS:") in run.stdout, run.stdout + run.stderr


def test_a_missing_plugin_is_one_line_and_exit_2(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXAMPLE.read_text().replace(*WEIGHTS_BUG))
    fx = fixtures.load(K1)._replace(impl_ref=f"{plugin}:DEEPSEEK_V3")
    script, _ = reproducer.write_script(fx, tmp_path / "repro" / "repro.py")
    assert run_script(script, "difftest").returncode == 1
    plugin.unlink()
    run = run_script(script, "difftest")
    assert _one_line_refusal(run) and "plugin.py" in run.stderr, run.stdout + run.stderr


def test_an_exception_of_the_implementation_is_a_failure_an_import_error_a_refusal(tmp_path):
    """The bug may be the exception itself (exit 1, its line); an ImportError inside run means a package is
    missing, and an exception of the tester's machinery (``difftest_harness``: a JIT build that failed) means the
    kernel never ran (exit 2, one line each)."""
    plugin = tmp_path / "plugin.py"
    source = EXAMPLE.read_text()
    fx = fixtures.load(K1)._replace(impl_ref=f"{plugin}:DEEPSEEK_V3")
    script, _ = reproducer.write_script(fx, tmp_path / "repro.py")
    raising = "    def run(self, case, inputs):"
    assert raising in source
    jit_error = "raise type('JitError', (RuntimeError,), {'difftest_harness': True})('building the module failed')"
    for statement, status, words in (("raise RuntimeError('launch failed')", 1, "raised RuntimeError: launch failed"),
                                     ("import no_such_kernel_package", 2, "no_such_kernel_package"),
                                     (jit_error, 2, "building the module failed")):
        plugin.write_text(source.replace(raising, f"{raising}\n        {statement}"))
        run = run_script(script, "difftest")
        assert run.returncode == status, run.stdout + run.stderr
        assert (words in run.stdout if status == 1 else _one_line_refusal(run, ran=True) and words in run.stderr), \
            run.stdout + run.stderr


IMPORT_EACH = """import importlib, sys
for module, root in ADAPTERS:
    for name in [m for m in sys.modules if m == "impls" or m.startswith("impls.")]:
        del sys.modules[name]
    sys.path.insert(0, root)
    m = importlib.import_module(module)
    assert m.__file__.startswith(root) and callable(m.run) and callable(m.available), (module, m.__file__)
    sys.path.remove(root)
print("imported", len(ADAPTERS))
"""


def test_every_adapter_imports_from_its_embedded_copy_alone(tmp_path):
    """Each adapter's embedded files (the module and what it imports) are enough to import it, with this project,
    its spec and difftest unimportable; and they are the repository's files verbatim."""
    names = sorted(interface.adapter_names().values())
    assert len(names) >= 10, names
    # imports made inside functions and from another package, and a source file the JIT build reads: carried too
    assert {"impls/flashinfer/_trtllm_gen_ops.py", "impls/flashinfer/csrc/trtllm_gen_dev_kernels.cu"} <= set(
        embed.files("impls.flashinfer.trtllm_gen_dev_ops"))
    assert "impls/flashinfer/_env.py" in embed.files("impls.sglang.per_token_group_quant_8bit_v1")
    for module in names:
        for rel, text in embed.files(module).items():
            assert eval(embed.literal(text)) == text == (ROOT / rel).read_text(encoding="utf-8")  # noqa: S307
            (tmp_path / module / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / module / rel).write_text(text, encoding="utf-8")
    script = tmp_path / "import_each.py"
    script.write_text(f"ADAPTERS = {[(m, str(tmp_path / m)) for m in names]!r}\n" + IMPORT_EACH)
    run = run_script(script, "difftest", "spec", project=False)
    assert run.returncode == 0 and f"imported {len(names)}" in run.stdout, run.stdout + run.stderr


def _checked(case, out, recipe=None):
    """(rows, notes) of the reproducer's checks on `out`, with its reference as the npz would hold it."""
    inputs = generate.inputs(case)
    ref = reproducer.reference(case, inputs, recipe)
    return reproducer.violations(case.op, reproducer.config_dict(case.config), out, ref)


@pytest.mark.parametrize("kernel", DEV_KERNELS)
@settings(max_examples=8, derandomize=True, database=None)
@given(data=st.data())
def test_the_dev_kernel_checks_pass_what_difftest_passes(kernel, data):
    """The reproducer's trtllm_ops checks are difftest's rules (or looser): torch eager, which passes difftest,
    passes them."""
    case = data.draw(strategies.cases("trtllm_ops", configs=strategies.dev_kernel_configs(kernel)), label="case")
    assert check.run_case(TORCH, case).status == "pass"
    out = TORCH.run(case, generate.inputs(case))
    rows, _ = _checked(case, out)
    assert not rows, [reproducer.describe(r) for r in rows[:3]]


def test_the_zero_block_finalize_fails_the_reproducer_as_it_fails_difftest(monkeypatch):
    """The 0.7.2.post1 kernel's bug (no scale floor) in torch eager: scale 0 outside [2^-126, 2^-126]."""
    fx = fixtures.load(ROOT / "fixtures" / "flashinfer-trtllm_gen_dev_ops-finalize_deepseek_fp8_zero_block")
    assert not _checked(fx.case, TORCH.run(fx.case, fx.inputs))[0]
    monkeypatch.setattr(te_ops, "FLT_MIN", 0.0)
    rows, _ = _checked(fx.case, TORCH.run(fx.case, fx.inputs))
    assert check.run_case(TORCH, fx.case).status == "fail"
    shown = [reproducer.describe(r) for r in rows]
    assert "out_scale[0, 0]=0 outside [1.17549435e-38, 1.17549435e-38]" in shown, shown


@pytest.mark.parametrize("fixture", ["flashinfer-trtllm_gen_routing-llama4_warp_path_shard",
                                     "flashinfer-trtllm_gen_routing-shared_experts_off_last_shard"])
def test_the_permutation_is_checked_at_the_implementations_ids(fixture):
    """The spec's own permutation passes; one whose padded total is off fails, as the kernel's did."""
    fx = fixtures.load(ROOT / "fixtures" / fixture)
    out = impl_spec.expected(fx.case, fx.inputs, fx.recipe)
    assert _checked(fx.case, out, fx.recipe) == ([], [])
    bad = {**out, "total_num_padded_tokens": out["total_num_padded_tokens"] + 8}
    rows, _ = _checked(fx.case, bad, fx.recipe)
    assert [reproducer.describe(r) for r in rows][0].startswith("permutation: total_num_padded_tokens="), rows


def test_the_scale_buffer_is_read_through_the_layout():
    """Packed UE8M0 words: the spec's pass; the tail bytes left as the allocator's poison fail (the v1 kernel's
    bug), read through the layout's strides."""
    fx = fixtures.load(ROOT / "fixtures" / "sglang-per_token_group_quant_8bit_v1-ue8m0_tail_unwritten")
    out = impl_spec.expected(fx.case, fx.inputs, None)
    assert _checked(fx.case, out) == ([], [])
    poisoned = np.ascontiguousarray(out["scale_buffer"]).view(np.uint8).copy()
    poisoned[1:4] = 0xA5
    rows, _ = _checked(fx.case, {**out, "scale_buffer": poisoned})
    assert [reproducer.describe(r) for r in rows] == [
        "scale_buffer[0, 0]=0xa5a5a584 but spec=0x84 (bit-exact required)"]
