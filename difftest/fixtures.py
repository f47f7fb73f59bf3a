"""Findings as self-contained fixture directories, and their strict loading.

fixtures/<id>/
  case.json      schema, op, case (configuration, dist, seed), recipe, implementation (reference, name,
                 version), package versions, device, observed error/bound ratio and message, status
                 ("open": must still fail as recorded; "fixed": must pass), provenance (free text, bug links)
  inputs.npz     the exact input bits (np.load(allow_pickle=False)); inputs over INLINE_LIMIT bytes are not
                 stored: case.json keeps their SHA-256 and replay regenerates and verifies them
  expected.npz   the spec's output at recording time under the recorded recipe (or only its SHA-256)
Expert weights (moe) are always regenerated from (seed, expert id) and verified against their SHA-256.

The implementation is named by reference (``torch``, ``package.module:NAME``, ``path/file.py:NAME``), so a
bug model (difftest/bug_models.py, a mutants catalogue) replays like any implementation. Every load error is
a FixtureError with one line naming the violated constraint.
"""

import io
import json
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import numpy as np

from spec.recipes import Recipe

from . import generate
from .case import Case, CaseError
from .isolation import atomic_write_bytes, atomic_write_text, create_dir_exclusive

SCHEMA = 1
INLINE_LIMIT = 4 << 20  # bytes of inputs stored in inputs.npz; larger inputs: generator + seed + SHA-256
STATUSES = ("open", "fixed")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
PACKAGES = ("numpy", "torch", "hypothesis", "ml_dtypes", "flashinfer-python")
KEYS = (
    "schema",
    "id",
    "case",
    "recipe",
    "impl",
    "packages",
    "device",
    "observed",
    "status",
    "provenance",
    "inputs",
    "weights",
    "expected",
)


class FixtureError(ValueError):
    """A fixture that cannot be loaded; the message names the file and the violated constraint."""


class Fixture(NamedTuple):
    path: Path
    id: str
    case: Case
    impl_ref: str
    status: str
    recipe: Recipe | None
    inputs: dict
    expected: dict | None  # stored spec output, or None when only its digest is stored
    meta: dict  # the whole case.json


def _versions():
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def device_name(impl_name):
    if "cuda" in impl_name or impl_name.startswith("flashinfer"):
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.get_device_name()
    return f"cpu ({platform.machine()}, {platform.processor() or platform.system()})"


def _npz_bytes(arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def fixture_id(case, impl_name):
    digest = generate.digest(
        {
            "case": np.frombuffer(case.to_json().encode(), np.uint8),
            "impl": np.frombuffer(impl_name.encode(), np.uint8),
        }
    )
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{case.op}-{impl_name}-{digest[:12]}")


def write(root, case, impl_ref, impl, recipe, observed, expected, *, status="open", provenance=""):
    """Write fixtures/<id>/ atomically (each file tmp + os.replace, the directory created exclusively); return
    its path. An existing fixture of the same (case, implementation) is kept, not overwritten."""
    if status not in STATUSES:
        raise FixtureError(f"status {status!r} is not one of {STATUSES}")
    fid = fixture_id(case, impl.name)
    path = Path(root) / fid
    if (path / "case.json").exists():
        return path
    inputs = generate.inputs(case)
    inline = sum(a.nbytes for a in inputs.values()) <= INLINE_LIMIT
    meta = {
        "schema": SCHEMA,
        "id": fid,
        "case": case.to_dict(),
        "recipe": None if recipe is None else recipe.to_dict(),
        "impl": {"ref": impl_ref, "name": impl.name, "version": impl.version},
        "packages": _versions(),
        "device": device_name(impl.name),
        "observed": {
            k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in observed.items()
        },
        "status": status,
        "provenance": provenance,
        "inputs": {
            "file": "inputs.npz" if inline else None,
            "generator": "difftest.generate.inputs",
            "sha256": generate.digest(inputs),
        },
        "weights": None
        if case.op != "moe"
        else {"generator": "difftest.generate.expert_weights", "sha256": weights_digest(case)},
        "expected": {"file": "expected.npz" if inline else None, "sha256": generate.digest(expected)},
    }
    tmp = path.with_name(path.name + ".partial")
    try:
        create_dir_exclusive(tmp)
    except FileExistsError:  # another worker is recording the same finding
        return path
    if inline:
        atomic_write_bytes(tmp / "inputs.npz", _npz_bytes(inputs))
        atomic_write_bytes(tmp / "expected.npz", _npz_bytes(expected))
    atomic_write_text(tmp / "case.json", json.dumps(meta, indent=1, sort_keys=True, allow_nan=False) + "\n")
    tmp.rename(path)  # the fixture appears complete or not at all
    return path


def weights_digest(case):
    w = generate.weights(case)
    return generate.digest(
        {f"{e}.{k}": np.asarray(v) for e in range(w.num_experts) for k, v in w.expert(e).items()}
    )


def status_of(path):
    """The recorded status of a fixture directory (for test collection), or None if unreadable."""
    try:
        return json.loads((Path(path) / "case.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def _fail(path, message):
    raise FixtureError(f"{path}: {message}")


def _load_npz(path, file, names, like):
    """Arrays of an npz file, exactly the names of `like`, each of its shape and dtype; no pickles."""
    try:
        with np.load(path / file, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as e:
        _fail(path, f"{file}: {str(e).splitlines()[0]} (object arrays / pickles are refused)")
    except (OSError, EOFError) as e:
        _fail(path, f"{file}: not a readable npz ({type(e).__name__}: {e})")
    missing, extra = set(names) - set(arrays), set(arrays) - set(names)
    if missing or extra:
        _fail(path, f"{file}: arrays {sorted(arrays)} but expected {sorted(names)}")
    for k, a in arrays.items():
        if a.dtype.hasobject or a.shape != like[k].shape or a.dtype != like[k].dtype:
            _fail(
                path, f"{file}: {k} is {a.dtype} {a.shape} but the case needs {like[k].dtype} {like[k].shape}"
            )
    return arrays


def load(path):
    """Load and validate a fixture directory (or its case.json)."""
    path = Path(path)
    if path.name == "case.json":
        path = path.parent
    if not (path / "case.json").is_file():
        _fail(path, "no case.json (not a fixture directory)")
    try:
        meta = json.loads((path / "case.json").read_text())
    except (ValueError, UnicodeDecodeError) as e:
        _fail(path, f"case.json is not valid JSON: {e}")
    if not isinstance(meta, dict):
        _fail(path, "case.json must hold a JSON object")
    if meta.get("schema") != SCHEMA:
        _fail(path, f"unknown schema version {meta.get('schema')!r} (this difftest reads {SCHEMA})")
    missing = [k for k in KEYS if k not in meta]
    if missing:
        _fail(path, f"case.json lacks {missing}")
    fid = meta["id"]
    if not isinstance(fid, str) or not ID_RE.match(fid) or fid != path.name:
        _fail(
            path, f"id {fid!r} must match {ID_RE.pattern} (no path separators) and equal the directory name"
        )
    if meta["status"] not in STATUSES:
        _fail(path, f"status {meta['status']!r} is not one of {STATUSES}")
    impl = meta["impl"]
    if not isinstance(impl, dict) or not isinstance(impl.get("ref"), str) or not impl["ref"]:
        _fail(path, "impl must be an object with a non-empty string ref")
    try:
        case = Case.from_dict(meta["case"])
        recipe = None if meta["recipe"] is None else Recipe.from_dict(meta["recipe"])
        generated = generate.inputs(case)
    except (CaseError, ValueError, TypeError) as e:
        _fail(path, f"case: {e}")
    spec_in = meta["inputs"]
    if spec_in.get("file"):
        inputs = _load_npz(path, spec_in["file"], generated, generated)
    else:
        inputs = generated
    if generate.digest(inputs) != spec_in.get("sha256"):
        _fail(path, "inputs do not match their recorded SHA-256")
    if case.op == "moe" and (meta["weights"] or {}).get("sha256") != weights_digest(case):
        _fail(path, "regenerated expert weights do not match their recorded SHA-256 (generator drift)")
    expected = None
    if meta["expected"].get("file"):
        with np.load(path / meta["expected"]["file"], allow_pickle=False) as z:
            expected = {k: z[k] for k in z.files}
    return Fixture(path, fid, case, impl["ref"], meta["status"], recipe, inputs, expected, meta)


def discover(root):
    """Fixture directories under root (each holding a case.json), sorted."""
    root = Path(root)
    return sorted(p.parent for p in root.glob("*/case.json")) if root.is_dir() else []
