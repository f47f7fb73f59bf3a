"""`show` and `show --script` (issue 22, item 3; issue 34, items 2 and 5): the inputs in compact form, the
implementation next to the spec at the worst elements in difftest's own terms (an invalid routing selection with the
groups' scores, the keys and the margin; codes and scales with the values they stand for), and a standalone
reproducer that runs without Hypothesis from any directory, exits 1 while the bug is there, 0 once it is fixed and 2
(one line) where it cannot run. A kernel fixture's script carries its adapter and needs neither this project nor its
spec.

Subprocesses are few (the default tier's cost): one plain `python repro.py`, and the other scripts run by RUN_ALL, one
interpreter per kind of implementation (the project's own or a plug-in, with the project on the path; a kernel
adapter, with neither the project nor its spec importable), each script in its own directory."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from difftest import cli
from difftest.checking import check, impl_spec, interface
from difftest.checking.impl_torch import TORCH
from difftest.model import generate, strategies
from difftest.model.case import DEV_KERNELS
from difftest.readers import embed, reproducer
from difftest.store import fixtures
from impls.torch_eager import trtllm_ops as te_ops

ROOT = Path(__file__).resolve().parents[3]
K1 = ROOT / "fixtures" / "routing-bug_deepseek_biased_weights-a601b764f199"
EXAMPLE = ROOT / "examples" / "plugin_example.py"
WEIGHTS_BUG = ("w = np.take_along_axis(s, ids, axis=-1)", "w = np.take_along_axis(keys, ids, axis=-1)")
FIXTURES = sorted(p.parent.name for p in (ROOT / "fixtures").glob("*/case.json"))
# Runs scripts with hypothesis and the named modules unimportable, and without an editable install's import hook
# (which would find this project's packages from anywhere): what a script imports must come from its path. Each
# script runs in its own directory with what it put on sys.path and the adapter packages it imported taken away
# after it; its exit status, stdout and stderr come back as one JSON line.
RUN_ALL = """import json, os, runpy, sys
sys.meta_path = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]
blocked, runs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for m in blocked:
    sys.modules[m] = None
path, stdout, stderr, results = list(sys.path), sys.stdout, sys.stderr, []
for script, args in runs:
    os.chdir(os.path.dirname(script))
    with open(script + '.out', 'w') as out, open(script + '.err', 'w') as err:
        sys.stdout, sys.stderr, sys.argv = out, err, [script, *args]
        try:
            runpy.run_path(script, run_name='__main__')
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        except BaseException as e:
            code = f'{type(e).__name__}: {e}'
        finally:
            sys.stdout, sys.stderr = stdout, stderr
    sys.path[:] = path
    for name in [m for m in sys.modules if m == 'impls' or m.startswith('impls.')]:
        del sys.modules[name]
    results.append([code, open(script + '.out').read(), open(script + '.err').read()])
print(json.dumps(results))
"""
ENV = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
SCRIPT_TIMEOUT_S = 600  # only to catch a hang: a script runs in seconds here


def run_scripts(runs, *blocked, project=True):
    """[(exit status, stdout, stderr)] of scripts (path, or (path, args)) run by RUN_ALL in one interpreter, with
    hypothesis and `blocked` unimportable; `project`: with this checkout on PYTHONPATH. Without it, PYTHONPATH keeps
    only its entries outside the checkout: where a kernel package was installed (a --target directory on a GPU box),
    as a maintainer's environment would have it."""
    runs = [(str(r), []) if isinstance(r, Path) else (str(r[0]), list(r[1])) for r in runs]
    elsewhere = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                 if p and not Path(p).resolve().is_relative_to(ROOT)]
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(ROOT)] if project else elsewhere)}
    r = subprocess.run([sys.executable, "-c", RUN_ALL, json.dumps(["hypothesis", *blocked]), json.dumps(runs)],
                       cwd="/", capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return [tuple(x) for x in json.loads(r.stdout.splitlines()[-1])]


def _one_line_refusal(code, out, err, ran=False):
    """Exit 2 with exactly one line on stderr (no traceback) saying why the script cannot run; nothing else unless
    it `ran` far enough to print its inputs."""
    lines = err.strip().splitlines()
    return code == 2 and (ran or not out) and len(lines) == 1 and lines[0].startswith("cannot run here: ")


def test_show_prints_inputs_and_the_worst_elements(capsys):
    assert cli.main(["show", str(K1)]) == 0
    out = capsys.readouterr().out
    assert "input logits: float32 (1, 1) in [1.434, 1.434]: [1.4344]" in out
    assert "input bias: float32 (1,)" in out
    assert "worst elements (implementation vs spec at the spec's ids; 1 outside the bound):" in out
    assert "  weights[0, 0]=1.08061 but spec=0.807579: |diff| 0.273 > bound 1.06e-06" in out


def _checked(case, out, recipe=None, inputs=None):
    """(rows, notes) of the reproducer's checks on `out`, with its reference as the npz would hold it."""
    inputs = generate.inputs(case) if inputs is None else inputs
    ref = reproducer.reference(case, inputs, recipe)
    return reproducer.violations(case.op, reproducer.config_dict(case.config), out, ref)


def test_an_invalid_selection_is_named_as_difftest_names_it():
    """A token whose spec selection is a near tie (not robust: another set may be valid) but whose set is not one of
    the valid ones: the reproducer (and show) once left it to difftest with "another set may be valid"; it applies
    difftest's validity rule and names the groups' scores, the keys and the margin, as difftest's message does. A
    valid other set at a near tie is no failure."""
    fx = fixtures.load(ROOT / "fixtures" / "R03_bf16_routing_arithmetic")
    out = {k: np.array(v) for k, v in impl_spec.expected(fx.case, fx.inputs, fx.recipe).items()}
    ref = reproducer.reference(fx.case, fx.inputs, fx.recipe)
    t = 3
    assert not ref["robust"]["ids"][t]  # a near tie
    E, G = fx.case.config.num_experts, fx.case.config.n_group
    group = out["ids"][t, -1] // (E // G)
    members = np.arange(group * (E // G), (group + 1) * (E // G))
    out["ids"][t, -1] = members[np.argmin(ref["validity"]["keys"][t, members])]  # the worst expert of a kept group
    rows, notes = _checked(fx.case, out, fx.recipe, fx.inputs)
    difftest = check.compared(fx.case, fx.inputs, out, fx.recipe, "t").message
    assert [reproducer.describe(r) for r in rows] == [difftest.removesuffix(" [t]")], (rows, difftest)
    assert "ids use groups [" in difftest and "rejected while expert" in difftest and "margin" in difftest
    assert not notes
    r02 = fixtures.load(ROOT / "fixtures" / "R02_deepseek_v2_zero_mask_ties")  # tie_order:reversed, valid sets
    out = interface.load(r02.impl_ref).run(r02.case, r02.inputs)
    rows, notes = _checked(r02.case, out, r02.recipe, r02.inputs)
    assert not rows and notes[0].startswith("ids of tokens [0, 1, 2, 3] (4 in all) are another valid selection"), notes


@pytest.mark.parametrize("fixture", [p.parent.name for p in sorted((ROOT / "fixtures").glob("*/repro.py"))])
def test_a_committed_kernel_scripts_checks_run_on_their_own(fixture):
    """The checks a committed kernel reproducer carries, run in the script's own namespace (nothing of this
    project's but what it copied) on what a fixed kernel would return, the spec's outputs: nothing outside; and on
    routing ids that are no valid selection, the row difftest's message states. (On CPU the scripts themselves stop
    at the kernel's availability, so their checks would otherwise first run on the GPU.)"""
    import runpy

    fx = fixtures.load(ROOT / "fixtures" / fixture)
    ns = runpy.run_path(str(ROOT / "fixtures" / fixture / "repro.py"), run_name="repro")
    with np.load(ROOT / "fixtures" / fixture / "repro.npz", allow_pickle=False) as data:
        ref = {p: {k.split(".", 1)[1]: data[k] for k in data.files if k.startswith(p + ".")} for p in reproducer.PARTS}
    out = {k: np.array(v) for k, v in impl_spec.expected(fx.case, fx.inputs, fx.recipe).items()}
    assert ns["violations"](ns["OP"], ns["CONFIG"], out, ref) == ([], [])
    if fx.case.op == "routing" and fx.case.config.num_tokens:
        keys = ref["validity"]["keys"][0]
        out["ids"][0, 0] = np.argmin(np.where(np.isin(np.arange(keys.size), out["ids"][0]), np.inf, keys))
        rows, _ = ns["violations"](ns["OP"], ns["CONFIG"], out, ref)
        difftest = check.compared(fx.case, fx.inputs, out, fx.recipe, "t").message.removesuffix(" [t]")
        assert ns["describe"](rows[0]) == difftest, (rows, difftest)


def test_codes_and_scales_are_shown_as_the_values_they_stand_for():
    """A quant finding's codes and scales: hex bits and the numbers (powers of two named), in show and in the
    script alike; a packed UE8M0 word byte by byte."""
    fx = fixtures.load(ROOT / "fixtures" / "K14_log2_ue8m0")
    rows, _ = _checked(fx.case, interface.load(fx.impl_ref).run(fx.case, fx.inputs))
    assert "q[2, 256]=0x7e (448) but spec=0x76 (224) (bit-exact required)" in [reproducer.describe(r) for r in rows]
    fx = fixtures.load(ROOT / "fixtures" / "K15_scale_floor_before_ue8m0")
    rows, _ = _checked(fx.case, interface.load(fx.impl_ref).run(fx.case, fx.inputs))
    assert "scales[0, 0]=1.16415322e-10 = 2^-33 but spec=2.27373675e-13 = 2^-42 (bit-exact required)" in [
        reproducer.describe(r) for r in rows]
    mx = fixtures.load(ROOT / "fixtures" / "quant-torch-a159abe648be")  # mxfp8: e8m0 scale codes
    out = impl_spec.expected(mx.case, mx.inputs, None)
    rows, _ = _checked(mx.case, {**out, "scales": out["scales"] + np.uint8(1)})
    assert any(reproducer.describe(r).startswith("scales[0, 0]=0x") and " = 2^" in reproducer.describe(r)
               for r in rows), rows


def test_show_script_writes_a_reproducer_that_fails_on_its_own(tmp_path, capsys):
    """The command writes the script and its npz; `python repro.py` in a fresh interpreter, from its own directory
    outside the repository, exits 1 (the one plain subprocess: the others share RUN_ALL's interpreters)."""
    assert cli.main(["show", str(K1), "--script", str(tmp_path / "repro.py")]) == 0
    assert f"reproducer: python {tmp_path / 'repro.py'}" in capsys.readouterr().out
    assert (tmp_path / "repro.npz").is_file()
    run = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=SCRIPT_TIMEOUT_S, env={**ENV, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 1 and "FAIL:" in run.stdout, run.stdout + run.stderr


RAISING = "    def run(self, case, inputs):"
PLUGINS = {  # plug-in file -> (what is changed in the worked example, the script's exit status, what it prints)
    "plugin_bug.py": (WEIGHTS_BUG, 1, "FAIL:"),
    "plugin_fixed.py": (None, 0, "PASS"),  # the bug fixed
    "plugin_raises.py": ((RAISING, f"{RAISING}\n        raise RuntimeError('launch failed')"), 1,
                         "raised RuntimeError: launch failed"),  # the bug may be the exception itself
    "plugin_needs.py": ((RAISING, f"{RAISING}\n        import no_such_kernel_package"), 2,
                        "no_such_kernel_package"),  # an ImportError inside run: a package is missing
    "plugin_gone.py": (WEIGHTS_BUG, 2, "plugin_gone.py"),  # deleted after the script was written
    # an exception of the tester's machinery (``difftest_harness``: a JIT build that failed): the kernel never ran
    "plugin_jit.py": ((RAISING, f"{RAISING}\n        raise type('JitError', (RuntimeError,), "
                                "{'difftest_harness': True})('building the module failed')"), 2,
                      "building the module failed"),
}


def test_the_script_of_a_plugin_needs_neither_hypothesis_nor_difftest(tmp_path):
    """A fixture of a plug-in file: its script names the file relative to itself (no absolute path), and runs
    with difftest and Hypothesis unimportable: 1 while the bug is there, 0 once fixed, 1 when run() raises, 2 with
    one line when the plug-in is gone or a package it imports is missing."""
    source = EXAMPLE.read_text()
    assert source.count(WEIGHTS_BUG[0]) == source.count(RAISING) == 1
    (tmp_path / "plugins").mkdir()
    scripts = []
    for name, (change, _, _) in PLUGINS.items():
        (tmp_path / "plugins" / name).write_text(source.replace(*change) if change else source)
        fx = fixtures.load(K1)._replace(impl_ref=f"{tmp_path / 'plugins' / name}:DEEPSEEK_V3")
        script, _ = reproducer.write_script(fx, tmp_path / "elsewhere" / name / "repro.py")
        text = script.read_text()
        assert f"../../plugins/{name}:DEEPSEEK_V3" in text and str(tmp_path) not in text
        scripts.append(script)
    (tmp_path / "plugins" / "plugin_gone.py").unlink()
    for (name, (_, status, words)), (code, out, err) in zip(PLUGINS.items(), run_scripts(scripts, "difftest"),
                                                            strict=True):
        assert code == status and words in out + err, (name, code, out, err)
        if status == 2:
            assert _one_line_refusal(code, out, err, ran=name in ("plugin_needs.py", "plugin_jit.py")), (name, out, err)


def test_script_of_every_committed_fixture_runs_outside_the_repository(tmp_path):
    """From a directory outside the repository: a kernel fixture's script with neither this project nor its spec
    importable (the adapter is embedded), any other with the project on PYTHONPATH (its implementation is the
    project's own, or a plug-in that imports the spec). Exit 1 for an open fixture, 0 for a fixed one, and where
    the implementation cannot run here (no CUDA device, no kernel package) 2 with one line."""
    kinds = {"adapter": [], "reference": []}
    for name in FIXTURES:
        fx = fixtures.load(ROOT / "fixtures" / name)
        script, _ = reproducer.write_script(fx, tmp_path / name / "repro.py")
        kinds[reproducer.kind_of_reference(fx.impl_ref)[0]].append((fx, script))
    assert kinds["adapter"] and kinds["reference"]
    for kind, found in kinds.items():
        adapter = kind == "adapter"
        ran = run_scripts([s for _, s in found], *(["difftest", "spec"] if adapter else []), project=not adapter)
        for (fx, _), (code, out, err) in zip(found, ran, strict=True):
            reason = interface.load(fx.impl_ref).available()
            if reason is not None:
                assert _one_line_refusal(code, out, err) and reason in err, (fx.id, code, out, err)
            else:
                assert code == {"open": 1, "fixed": 0}[fx.status], (fx.id, code, out, err)
                assert ("FAIL:" if fx.status == "open" else "PASS:") in out, (fx.id, out, err)


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
    ((code, out, err),) = run_scripts([script], "difftest", "spec", project=False)
    assert code == 0 and f"imported {len(names)}" in out, out + err


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
    bug), read through the layout's strides, each byte shown as the power of two it stands for."""
    fx = fixtures.load(ROOT / "fixtures" / "sglang-per_token_group_quant_8bit_v1-ue8m0_tail_unwritten")
    out = impl_spec.expected(fx.case, fx.inputs, None)
    assert _checked(fx.case, out) == ([], [])
    poisoned = np.ascontiguousarray(out["scale_buffer"]).view(np.uint8).copy()
    poisoned[1:4] = 0xA5
    rows, _ = _checked(fx.case, {**out, "scale_buffer": poisoned})
    assert [reproducer.describe(r) for r in rows] == [
        "scale_buffer[0, 0]=0xa5a5a584 (bytes 2^5, 2^38, 2^38, 2^38) but spec=0x84 (bytes 2^5, 2^-127, 2^-127, "
        "2^-127) (bit-exact required)"]
