"""Findings as self-contained fixture directories, and their strict loading.

fixtures/<id>/
  case.json      schema, op, case (configuration, dist, seed), recipe, implementation (reference, name,
                 version), package versions, device, observed error/bound ratio and message, status
                 ("open": must still fail as recorded; "fixed": must pass), kind ("mismatch": outside the
                 bound or wrong ids; "error": run() raised; "crash": the worker process died, observed
                 holds the signal or exit status and the worker's last output; "hang": no answer within the
                 timeout), provenance (free text, bug links), signatures ([op, implementation, kind, field,
                 slice] for every output the failure named, the finding's own first: made by the machine when
                 recorded, what ``fuzz --known`` matches), notes (free text by people; nothing parses it)
  inputs.npz     the exact input bits (np.load(allow_pickle=False)); inputs over INLINE_LIMIT bytes are not
                 stored: case.json keeps their SHA-256 and replay regenerates and verifies them
  expected.npz   the spec's output at recording time under the recorded recipe (or only its SHA-256)
Expert weights (moe) are always regenerated from (seed, expert id) and verified against their SHA-256.

The implementation is named by reference (``torch``, ``package.module:NAME``, ``path/file.py:NAME``), so a
bug model (difftest/selftest/bug_models.py, a mutants catalogue) replays like any implementation. A plug-in file is
stored relative to the fixture directory and resolved from it (portable_ref, resolve_ref), so a fixture replays
from any working directory. A fixture is known by its directory name: a renamed fixture directory still loads
(case.json's id is the name it was written under). Every load error is a FixtureError with one line naming the
violated constraint.
"""

import io
import json
import os
import platform
import re
import secrets
import zipfile
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import numpy as np

from spec.recipes import Recipe

from ..model import generate
from ..model.case import Case, CaseError
from .atomic import atomic_write_bytes, atomic_write_text, create_dir_exclusive

SCHEMA = 1
# bytes of inputs stored in inputs.npz; larger inputs: generator + seed + SHA-256 (so a fixture's files, inputs and
# the spec's output beside them, stay under the 1 MB a committed file may have; fixtures written with 4 MB load)
INLINE_LIMIT = 512 << 10
MAX_NPZ_BYTES = 16 << 20  # what load() reads of an npz without a declared shape (4 × the old 4 MB INLINE_LIMIT)
STATUSES = ("open", "fixed")
KINDS = ("mismatch", "error", "crash", "hang")
MAX_JSON_BYTES = 1 << 20  # case.json of a real fixture is a few KB
MAX_INPUT_ELEMENTS = 1 << 28  # declared inputs (1 GiB of float32): far above any fuzzed or preset case
MAX_WEIGHT_ELEMENTS = 1 << 34  # regenerated one expert at a time; full DeepSeek-V3 is 1.1e10
OUTPUT_TAIL_CHARS = 4000  # of a crashed worker's output kept in case.json
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
PARTIAL = ".partial-"  # a fixture directory being written
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
    id: str  # the directory name (case.json's "id": the name it was written under)
    case: Case
    impl_ref: str  # resolved from the fixture directory (resolve_ref); case.json's impl.ref as stored
    status: str
    kind: str  # mismatch | error | crash | hang
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
    """The device a finding of `impl_name` was recorded on: the CUDA device for torch-cuda and the kernel adapters
    (FlashInfer, SGLang), else this CPU."""
    if "cuda" in impl_name or impl_name.startswith(("flashinfer", "sglang")):
        # imported here if need be: a campaign worker runs kernels in an isolated child and may hold no torch
        # (the H200 fixtures of 2026-12-02 said "cpu" that way)
        try:
            import torch
        except ImportError:
            torch = None
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


def kind_of(observed):
    """The kind when none is given: a bound violation or an exception (crashes and hangs are named)."""
    return "mismatch" if observed.get("status") == "fail" else "error"


def _file_ref(ref):
    """(path, NAME) of a ``path/file.py:NAME`` reference; None for names and ``module:NAME``."""
    where, sep, name = ref.rpartition(":")
    return (where, name) if sep and where.endswith(".py") else None


def portable_ref(ref, fixture_dir):
    """The reference as the fixture at fixture_dir stores it. A ``path/file.py:NAME`` (relative to the working
    directory, or absolute) becomes relative to the fixture directory, so the fixture replays from any working
    directory and from another checkout of the same tree (resolve_ref); absolute where the file and the fixture
    share no directory but the filesystem root (a plug-in in a checkout, a run under /tmp: they do not travel
    together, and ``../`` up to the root would only hide that). Names and ``module:NAME`` are kept as given."""
    part = _file_ref(ref)
    if part is None:
        return ref
    target, base = Path(part[0]).resolve(), Path(fixture_dir).resolve()
    try:
        shared = Path(os.path.commonpath([target, base]))
    except ValueError:  # another drive
        shared = Path(base.anchor)
    where = target if shared == Path(base.anchor) else Path(os.path.relpath(target, base))
    return f"{where.as_posix()}:{part[1]}"


def resolve_ref(fixture_dir, ref):
    """The reference to load for the fixture at fixture_dir. A ``path/file.py:NAME`` resolves to the first file
    found, in this order:
      1. an absolute path: as it is;
      2. relative to the fixture directory (how write() stores it, portable_ref);
      3. without its leading ``../`` parts, relative to the fixture directory and then each directory above it,
         nearest first: a fixture copied to another depth of the same tree (RUN/fixtures/<id> into the
         repository's fixtures/), and fixtures written before references were fixture-relative, whose paths are
         relative to the directory their campaign ran in (normally above the run directory);
      4. relative to the working directory (how those older fixtures were read).
    Returns that file's absolute path with NAME, or the reference as stored when no file is found (missing_file
    says so in one line). Names and ``module:NAME`` are returned as stored."""
    part = _file_ref(ref)
    if part is None or Path(part[0]).is_absolute():
        return ref
    where, base = Path(part[0]), Path(fixture_dir).resolve()
    parts = list(where.parts)
    while parts and parts[0] in ("..", "."):
        parts.pop(0)
    tail = [d / Path(*parts) for d in (base, *base.parents)] if parts else []
    for candidate in (base / where, *tail, Path.cwd() / where):
        if candidate.is_file():
            return f"{candidate.resolve()}:{part[1]}"
    return ref


def missing_file(fx):
    """One line when the fixture names a plug-in file that resolve_ref found nowhere, else None."""
    part = _file_ref(fx.impl_ref)
    if part is None or Path(part[0]).is_file():
        return None
    if Path(part[0]).is_absolute():
        return f"no such file {part[0]}"
    return (f"no such file {part[0]} relative to the fixture directory, a directory above it or the working "
            f"directory")


def set_status(path, status):
    """Rewrite a fixture's case.json with another status (atomically); returns the previous one."""
    if status not in STATUSES:
        raise FixtureError(f"status {status!r} is not one of {STATUSES}")
    case_json = Path(path) / "case.json"
    meta = json.loads(case_json.read_text())
    before, meta["status"] = meta["status"], status
    atomic_write_text(case_json, json.dumps(meta, indent=1, sort_keys=True, allow_nan=False) + "\n")
    return before


def write(root, case, impl_ref, impl, recipe, observed, expected, *, status="open", provenance="", kind=None,
          id=None, notes=""):
    """Write fixtures/<id>/ atomically (each file tmp + os.replace, in a private directory renamed into
    place); return its path. ``id`` names a curated fixture (default: op-impl-digest). An existing fixture
    of the same id is kept, not overwritten. The signatures are made here from ``observed["failures"]`` (the
    failing fields the result named: campaign.observed); ``notes`` is for people."""
    if status not in STATUSES:
        raise FixtureError(f"status {status!r} is not one of {STATUSES}")
    kind = kind or kind_of(observed)
    if kind not in KINDS:
        raise FixtureError(f"kind {kind!r} is not one of {KINDS}")
    fid = fixture_id(case, impl.name) if id is None else id
    if not isinstance(fid, str) or not ID_RE.match(fid) or PARTIAL in fid:
        raise FixtureError(f"id {fid!r} must match {ID_RE.pattern} (no path separators)")
    path = Path(root) / fid
    if (path / "case.json").exists():
        return path
    inputs = generate.inputs(case)
    inline = sum(a.nbytes for a in inputs.values()) <= INLINE_LIMIT
    meta = {
        "schema": SCHEMA,
        "id": fid,
        "kind": kind,
        "case": case.to_dict(),
        "recipe": None if recipe is None else recipe.to_dict(),
        "impl": {"ref": portable_ref(impl_ref, path), "name": impl.name, "version": impl.version},
        "packages": _versions(),
        "device": device_name(impl.name),
        "observed": {
            k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in observed.items()
        },
        "status": status,
        "provenance": provenance,
        "signatures": recorded_signatures(case, impl.name, kind, observed),
        "notes": notes,
        "inputs": {
            "file": "inputs.npz" if inline else None,
            "generator": generate.GENERATORS["inputs"],  # a name, not an import path (model/generate.py)
            "sha256": generate.digest(inputs),
        },
        "weights": None
        if case.op != "moe"
        else {"generator": generate.GENERATORS["weights"], "sha256": weights_digest(case)},
        "expected": {"file": "expected.npz" if inline else None, "sha256": generate.digest(expected)},
    }
    # A private directory per writer: a writer killed half-way leaves only its own *.partial-* directory
    # (ignored by discover), never one that blocks the next campaign from recording the same finding.
    tmp = create_dir_exclusive(path.with_name(f"{fid}{PARTIAL}{os.getpid()}-{secrets.token_hex(3)}"))
    if inline:
        atomic_write_bytes(tmp / "inputs.npz", _npz_bytes(inputs))
        atomic_write_bytes(tmp / "expected.npz", _npz_bytes(expected))
    atomic_write_text(tmp / "case.json", json.dumps(meta, indent=1, sort_keys=True, allow_nan=False) + "\n")
    try:
        tmp.rename(path)  # the fixture appears complete or not at all
    except OSError:  # another writer recorded the same finding first (the target is a non-empty directory)
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return path


def recorded_signatures(case, impl_name, kind, observed):
    """[[op, implementation, kind, field, slice], ...] of a failure, one per failing field of
    ``observed["failures"]``, the finding's own first (difftest/store/signatures.py)."""
    from .signatures import row_fields, signatures

    fields = row_fields({**observed, "kind": kind, "impl": impl_name})
    return [list(s) for s in signatures(case.op, impl_name, kind, fields, case.config)]


def _check_signatures(path, meta, case, kind):
    """A fixture's stored signatures, where it has them: a non-empty list of five strings each, whose op, kind and
    slice are the case's and the fixture's (what ``fuzz --known`` matches must be this fixture's cell)."""
    from .signatures import slice_of

    sigs = meta.get("signatures")
    if sigs is None:  # written before fixtures stored signatures: campaign.fixture_signatures derives one
        return
    if not isinstance(sigs, list) or not sigs or not all(
            isinstance(x, list) and len(x) == 5 and all(isinstance(f, str) for f in x) for x in sigs):
        _fail(path, "signatures must be a non-empty list of [op, implementation, kind, field, slice] strings")
    cell = (case.op, kind, slice_of(case.op, case.config))
    for sig in sigs:
        if (sig[0], sig[2], sig[4]) != cell:
            _fail(path, f"signature {sig} is not of this fixture's case and kind (op, kind, slice {list(cell)})")


def weights_digest(case):
    w = generate.weights(case)
    return generate.digest(
        {f"{e}.{k}": np.asarray(v) for e in range(w.num_experts) for k, v in w.expert(e).items()}
    )


def _fail(path, message):
    raise FixtureError(f"{path}: {message}")


def _regular_file(path, name):
    """path/name, refused unless a regular file inside the fixture (a symlink could point anywhere)."""
    f = path / name
    if f.is_symlink():
        _fail(path, f"{name} is a symlink (refused: fixtures are copied between machines)")
    if not f.is_file():
        _fail(path, f"no {name}")
    return f


READ_HEADER = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _unreadable(path, file, e):
    line = str(e).splitlines()[0] if str(e) else ""
    _fail(path, f"{file}: not a readable npz ({type(e).__name__}: {line})")


def _npz_header(path, file, z, member):
    """(name, dtype, shape) of one npz member, read from its .npy header without reading the data."""
    name = member.filename[:-4] if member.filename.endswith(".npy") else None
    if not name:
        _fail(path, f"{file}: member {member.filename!r} is not an .npy array")
    with z.open(member) as f:
        version = np.lib.format.read_magic(f)
        if version not in READ_HEADER:
            _fail(path, f"{file}: {name} has .npy format version {version}")
        shape, _, dtype = READ_HEADER[version](f)
    if dtype.hasobject:
        _fail(path, f"{file}: {name} is an object array (object arrays / pickles are refused)")
    if np.prod(shape, dtype=np.float64) * dtype.itemsize > member.file_size:
        _fail(path, f"{file}: {name} declares {dtype} {shape}, more than its {member.file_size} bytes")
    return name, dtype, shape


def _load_npz(path, file, like):
    """Arrays of an npz file; with ``like``, exactly its names, each of its shape and dtype. Headers are
    checked before any data is read, so a hostile header cannot make us allocate or unpickle anything."""
    npz = _regular_file(path, file)
    # savez stores each array raw plus a header; expected outputs (float64) may be twice the inputs' size
    limit = (MAX_NPZ_BYTES if like is None else sum(a.nbytes for a in like.values())) + (1 << 16)
    try:
        if npz.stat().st_size > limit:
            _fail(path, f"{file}: {npz.stat().st_size} bytes, more than the {limit} its arrays can take")
        with zipfile.ZipFile(npz) as z:
            members = z.infolist()
            if sum(m.file_size for m in members) > limit:
                _fail(path, f"{file}: members expand beyond {limit} bytes")
            headers = [_npz_header(path, file, z, m) for m in members]
    except FixtureError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, RuntimeError) as e:
        _unreadable(path, file, e)
    names = [n for n, _, _ in headers]
    if len(set(names)) != len(names):
        _fail(path, f"{file}: duplicate arrays in {sorted(names)}")
    if like is not None:
        if set(names) != set(like):
            _fail(path, f"{file}: arrays {sorted(names)} but expected {sorted(like)}")
        for k, dtype, shape in headers:
            if shape != like[k].shape or dtype != like[k].dtype:
                _fail(path, f"{file}: {k} is {dtype} {shape} but the case needs {like[k].dtype} "
                            f"{like[k].shape}")
    try:
        with np.load(npz, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as e:  # a corrupt body
        _unreadable(path, file, e)


def declared_elements(case):
    """(input elements, expert weight elements) the case makes generate.py produce (upper bounds)."""
    c = case.config
    if case.op == "quant":
        return c.num_tokens * c.hidden_size + 1, 0
    if case.op == "trtllm_ops":  # permuted rows <= T·K + E·tile; convertsf: T + 128 padded rows
        rows = c.num_tokens * c.top_k + c.num_experts * c.tile_tokens_dim + 128
        return 4 * rows * (c.hidden_size + c.hidden_padding + 1) + 2 * c.num_tokens * c.top_k + 3 * c.num_experts + 1, 0
    r = c.routing if case.op == "moe" else c
    routing = r.num_tokens * r.num_experts + r.num_experts
    if case.op == "routing":
        return routing, 0
    n1 = 2 * c.intermediate_size if c.gated else c.intermediate_size
    per_expert = n1 * c.hidden_size + c.hidden_size * c.intermediate_size
    # 2: the scales never outnumber the weights they scale
    return routing + r.num_tokens * c.hidden_size, 2 * r.num_experts * per_expert


def _file_entry(path, meta, key, name):
    """meta[key]: an object whose "file" is None or exactly ``name`` (never a path), with a sha256 string."""
    entry = meta[key]
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        _fail(path, f"{key} must be an object with a sha256 string")
    if entry.get("file") not in (None, name):
        _fail(path, f"{key}.file {entry.get('file')!r} must be {name!r} or null (no other paths)")
    return entry


def _generator(path, entry, what):
    """The generator an inputs / weights entry names must be this difftest's (or its legacy label): another name
    means the recorded bits came from a generator this version cannot regenerate."""
    name = entry.get("generator")
    if not isinstance(name, str) or generate.LEGACY_GENERATORS.get(name, name) != generate.GENERATORS[what]:
        _fail(path, f"{what}.generator {name!r} is not {generate.GENERATORS[what]!r}, the generator of this difftest")


def load(path):
    """Load and validate a fixture directory (or its case.json)."""
    path = Path(path)
    if path.name == "case.json":
        path = path.parent
    if not (path / "case.json").is_file() and not (path / "case.json").is_symlink():
        _fail(path, "no case.json (not a fixture directory)")
    case_json = _regular_file(path, "case.json")
    if case_json.stat().st_size > MAX_JSON_BYTES:
        _fail(path, f"case.json is {case_json.stat().st_size} bytes (more than {MAX_JSON_BYTES})")
    try:
        meta = json.loads(case_json.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        _fail(path, f"case.json is not valid JSON: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if not isinstance(meta, dict):
        _fail(path, "case.json must hold a JSON object")
    if meta.get("schema") != SCHEMA:
        _fail(path, f"unknown schema version {meta.get('schema')!r} (this difftest reads {SCHEMA})")
    missing = [k for k in KEYS if k not in meta]
    if missing:
        _fail(path, f"case.json lacks {missing}")
    if not isinstance(meta["id"], str) or not ID_RE.match(meta["id"]):  # the name it was written under
        _fail(path, f"id {meta['id']!r} must match {ID_RE.pattern} (no path separators)")
    if not isinstance(meta["status"], str) or meta["status"] not in STATUSES:
        _fail(path, f"status {meta['status']!r} is not one of {STATUSES}")
    observed = meta["observed"]
    if not isinstance(observed, dict) or observed.get("status") not in ("fail", "error"):
        _fail(path, "observed must be an object whose status is fail or error")
    try:  # what write() can store again: strict JSON (a non-finite ratio is stored as null)
        json.dumps(observed, allow_nan=False)
    except ValueError:
        _fail(path, "observed holds a non-finite number (NaN or Infinity)")
    if not isinstance(observed.get("message", ""), (str, type(None))):
        _fail(path, f"observed.message must be a string, not {type(observed['message']).__name__}")
    kind = meta.get("kind", kind_of(observed))  # fixtures written before kinds existed: derived
    if not isinstance(kind, str) or kind not in KINDS:
        _fail(path, f"kind {kind!r} is not one of {KINDS}")
    impl = meta["impl"]
    if not isinstance(impl, dict) or not isinstance(impl.get("ref"), str) or not impl["ref"] \
            or not isinstance(impl.get("name"), str):
        _fail(path, "impl must be an object with non-empty string ref and a string name")
    spec_in = _file_entry(path, meta, "inputs", "inputs.npz")
    spec_out = _file_entry(path, meta, "expected", "expected.npz")
    _generator(path, spec_in, "inputs")
    try:
        case = Case.from_dict(meta["case"])
        n_inputs, n_weights = declared_elements(case)
        if n_inputs > MAX_INPUT_ELEMENTS or n_weights > MAX_WEIGHT_ELEMENTS:
            _fail(path, f"case declares {n_inputs} input and {n_weights} weight elements "
                        f"(limits {MAX_INPUT_ELEMENTS}, {MAX_WEIGHT_ELEMENTS})")
        recipe = None if meta["recipe"] is None else Recipe.from_dict(meta["recipe"])
        generated = generate.inputs(case)
    except FixtureError:
        raise
    except (CaseError, ValueError, TypeError, KeyError, AttributeError) as e:
        _fail(path, f"case: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    _check_signatures(path, meta, case, kind)
    inputs = _load_npz(path, "inputs.npz", generated) if spec_in.get("file") else generated
    if generate.digest(inputs) != spec_in["sha256"]:
        _fail(path, "inputs do not match their recorded SHA-256")
    if inputs is not generated and generate.digest(generated) != spec_in["sha256"]:
        _fail(path, "the case does not regenerate its recorded inputs (seed or configuration edited, or generator "
                    "drift)")
    if case.op == "moe":
        if not isinstance(meta["weights"], dict) or meta["weights"].get("sha256") != weights_digest(case):
            _fail(path, "regenerated expert weights do not match their recorded SHA-256 (generator drift)")
        _generator(path, meta["weights"], "weights")
    expected = _load_npz(path, "expected.npz", None) if spec_out.get("file") else None
    if expected is not None and generate.digest(expected) != spec_out["sha256"]:
        _fail(path, "expected.npz does not match its recorded SHA-256")
    # known by its directory name (a renamed fixture is the same fixture); its implementation resolved from it
    return Fixture(path, path.resolve().name, case, resolve_ref(path, impl["ref"]), meta["status"], kind, recipe,
                   inputs, expected, meta)


def discover(root):
    """Fixture directories under root (each holding a case.json), sorted; directories still being written
    (or left half-written by a killed writer) are not fixtures."""
    root = Path(root)
    found = root.glob("*/case.json") if root.is_dir() else []
    return sorted(p.parent for p in found if PARTIAL not in p.parent.name)
