"""impls.adapters() is the one registry of kernel adapters: each adapter module declares itself (NAME =
"vendor.module" beside the adapter protocol), the registry reads the vendor folders, and every consumer — the
vendor packages' adapter(), difftest's interface.adapter_names(), the availability tests — takes its list from it."""

import importlib
from pathlib import Path

import pytest

import impls
from difftest.checking import interface
from impls import flashinfer, sglang

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = '''NAME = "{name}"
OP = "routing"
from ._env import problem as available  # bound by an import, as impls/sglang's adapters bind version


def unsupported(config):
    return None


def run(config, inputs, device="cuda"):
    return {{}}
'''


def test_the_registry_is_every_module_on_disk_that_imports_as_an_adapter():
    """Independently of the registry's reading of the sources: import every public module of every impls/
    subpackage, and those with the whole adapter protocol are exactly the registry, each under its NAME."""
    pytest.importorskip("torch")  # importing the adapters' helpers and impls/torch_eager needs it
    on_disk = set()
    for path in sorted((ROOT / "impls").glob("*/*.py")):
        if path.name.startswith("_"):
            continue
        module = importlib.import_module(f"impls.{path.parent.name}.{path.stem}")
        if all(hasattr(module, a) for a in impls.PROTOCOL):
            assert module.NAME == f"{path.parent.name}.{path.stem}", path
            on_disk.add(module.NAME)
    assert impls.adapters() == sorted(on_disk)
    assert {"flashinfer.trtllm_gen_nogemm", "sglang.topk_softmax"} <= on_disk  # both vendors, the one once missed


def test_consumers_read_the_registry():
    assert list(interface.adapter_names()) == impls.adapters()
    assert all(module == f"impls.{name}" for name, module in interface.adapter_names().items())
    assert flashinfer.adapter("mono_moe").NAME == "flashinfer.mono_moe"
    assert sglang.adapter("topk_softmax").NAME == "sglang.topk_softmax"
    with pytest.raises(ValueError, match="unknown adapter 'sglang.mono_moe'; known: flashinfer.cutlass_fused_moe"):
        sglang.adapter("mono_moe")


def vendor(root, name="acme"):
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "_env.py").write_text("def problem():\n    return None\n")
    return folder


def test_a_new_adapter_module_is_registered_by_being_written(tmp_path):
    folder = vendor(tmp_path)
    (folder / "helpers.py").write_text("OP = 'routing'\n\ndef run(config, inputs):\n    return {}\n")  # no NAME
    (folder / "_private.py").write_text(ADAPTER.format(name="acme._private"))
    assert impls.adapters(tmp_path) == []
    (folder / "fused_gate.py").write_text(ADAPTER.format(name="acme.fused_gate"))
    assert impls.adapters(tmp_path) == ["acme.fused_gate"]
    (vendor(tmp_path, "beta") / "a_quant.py").write_text(ADAPTER.format(name="beta.a_quant"))
    assert impls.adapters(tmp_path) == ["acme.fused_gate", "beta.a_quant"]


@pytest.mark.parametrize("source, message", [
    (ADAPTER.format(name="acme.other"), "acme/gate.py: an adapter module binds NAME = 'acme.gate'"),
    (ADAPTER.format(name="acme.gate").replace("def run(", "def _run("),
     "acme/gate.py: adapter acme.gate does not bind run at module level"),
])
def test_a_module_that_half_declares_itself_is_a_one_line_error(tmp_path, source, message):
    (vendor(tmp_path) / "gate.py").write_text(source)
    with pytest.raises(ValueError, match=message) as e:
        impls.adapters(tmp_path)
    assert "\n" not in str(e.value)
