"""The text of `show --script`'s reproducer (difftest/readers/reproducer.py fills it in): the script's skeleton
(SCRIPT: its docstring, constants, main and exit statuses) and the loaders that give main its implementation, an
embedded adapter (ADAPTER_LOADER; MOE_ADAPTER_LOADER regenerates the expert weights too) or an imported reference
(REFERENCE_LOADER). Text only: the checks the script runs are reproducer.py's STANDALONE functions, copied by their
source.
"""

from string import Template

SCRIPT = Template('''"""Reproducer of moe-difftest fixture $id ($status, $kind).

$about

Runs it on the inputs stored in $npz and checks every output against the spec's values and element-wise bounds
stored there (expected.* within bound.*: 0 = bit-exact, inf = not bounded; or within [low.*, high.*]), computed
by moe-difftest's numpy spec when the script was written. Exit status: 1 while the bug is there, 0 once it is fixed,
2 when it cannot run here (one line on stderr says why). --force runs even where the implementation's own
availability check refuses (another package version, say).

Recorded (case.json, observed.message):
$message
"""

$imports

import numpy as np

FIXTURE = $fixture
OP = $op
IMPLEMENTATION = $impl_name
CASE = json.loads($case_json)  # as difftest records it
CONFIG = json.loads($config_json)  # every field, and the derived values an implementation may read
DATA = Path(__file__).resolve().with_name($npz_literal)
TIMEOUT_S = $timeout  # a run past it is a hang: faulthandler prints where, and the exit status is 1
$loader_constants

$checks


def namespace(d):
    """A configuration dict as an object with attributes (nested dicts too)."""
    return SimpleNamespace(**{k: namespace(v) if isinstance(v, dict) else v for k, v in d.items()})


$loader

def first_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def main(argv):
    try:
        available, run = implementation()
        why = None if "--force" in argv else available()
    except Exception as e:  # ImportError: a package is missing; anything else: it does not load here
        why = first_line(e)
    if why:
        print(f"cannot run here: {why} [{FIXTURE}]", file=sys.stderr)
        return 2
    with np.load(DATA, allow_pickle=False) as data:
        ref = {p: {k.split(".", 1)[1]: data[k] for k in data.files if k.startswith(p + ".")}
               for p in $parts}
    inputs = {k: v.copy() for k, v in ref.pop("input").items()}  # writable copies
    for k, a in inputs.items():
        print(f"input {k}: {compact(a)}")
    faulthandler.dump_traceback_later(TIMEOUT_S, exit=True)
    try:
        out = run(inputs)
    except ImportError as e:
        print(f"cannot run here: {first_line(e)} [{FIXTURE}]", file=sys.stderr)
        return 2
    except Exception as e:  # the bug may be the exception itself, unless the machinery around the kernel raised it
        if getattr(type(e), "difftest_harness", False) is True:  # the embedded JIT helper's JitError, say
            print(f"cannot run here: {first_line(e)} [{FIXTURE}]", file=sys.stderr)
            return 2
        print(f"FAIL: {IMPLEMENTATION} raised {first_line(e)} [{OP}]")
        return 1
    finally:
        faulthandler.cancel_dump_traceback_later()
    bad, notes = violations(OP, CONFIG, out, ref)
    for row in bad[:$shown]:
        print(describe(row))
    for note in notes:
        print(f"note: {note}")
    if bad:
        print(f"FAIL: {len(bad)} elements outside the bound [{OP}, {IMPLEMENTATION}]")
        return 1
    print("PASS: every checked element is within its bound (fixed?)")
    return 0

$files
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
''')

ADAPTER_LOADER = '''def implementation():
    """(available, run) of the embedded adapter (FILES, at the end), installed in a private directory."""
    root = Path(tempfile.gettempdir()) / f"difftest-repro-{FILES_DIGEST}"
    for rel, text in FILES.items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
    sys.path.insert(0, str(root))
    module = importlib.import_module(ADAPTER)
    config = namespace(CONFIG)
    return module.available, lambda inputs: module.run(config, inputs)
'''

# A moe adapter's loader: the stored inputs plus the expert weights, regenerated (stacked_weights, at the end)
MOE_ADAPTER_LOADER = ADAPTER_LOADER.replace("module.run(config, inputs)",
                                            "module.run(config, {**inputs, **stacked_weights(**WEIGHTS)})")

REFERENCE_LOADER = '''def make_case():
    """difftest's Case where difftest is importable, else a namespace of the same attributes."""
    try:
        from difftest.model.case import Case
    except ImportError:
        return SimpleNamespace(op=CASE["op"], config=namespace(CONFIG), dist=CASE["dist"], seed=CASE["seed"],
                               weight_seed=CASE.get("weight_seed"))
    return Case.from_dict(CASE)


def implementation():
    """(available, run) of IMPL: path/file.py:NAME (relative to this script's directory or absolute) or
    module:NAME."""
    where, name = IMPL.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            path = Path(where) if Path(where).is_absolute() else Path(__file__).resolve().parent / where
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except (ImportError, FileNotFoundError) as e:
        raise ImportError(f"{NEEDS} ({first_line(e)})") from None
    impl, case = getattr(module, name), make_case()
    return impl.available, lambda inputs: impl.run(case, inputs)
'''
