"""`show`'s view of a fixture and `show --script`'s standalone reproducer.

What a reproducer checks each output against comes from the spec at writing time (reference(), stored in the npz
beside the script), so the script compares without the spec: the spec's value and an element-wise bound (0:
bit-exact, +inf: not bounded) or an interval [low, high]. Routing ids: every token whose set differs from the spec's
must be a valid selection by difftest's own rule (compare/validity.py's functions, copied, on the float64 keys, group
scores and δ stored as validity.*); an invalid one is named with the groups' scores, the keys and the margin, as
difftest names it. Routing weights are compared by id where the sets agree, within the recipe's bound;
the trtllm-gen permutation by its layout rules at the implementation's own ids (spec/permutation.py's checker);
quant codes, scales and the scale buffer (read through the layout's strides) bit-exact, a differing code shown with
the value it stands for (shown.*: the format's table); the moe layer's out within
the recipe's bound (tokens within 2δ of a routing tie unbounded); a trtllm_ops kernel by compare_trtllm_ops' rules,
an interval over the allowed scales where it requantizes. The checks are the functions below marked STANDALONE,
copied into the script by their source: numpy only.

The implementation: a FlashInfer or SGLang adapter is embedded in the script (difftest/readers/embed.py: the
adapter and the project modules it imports, verbatim), so the script needs numpy, torch and the kernel's package,
not this project. The expert weights a moe adapter takes are not stored: the script regenerates them from the
case's weight seed with difftest's own generator (GENERATOR, numpy only, copied by its source; WEIGHTS holds its
arguments), bit for bit the arrays difftest gave the kernel, so a DeepSeek-V3-size case stays a small npz. Any other
reference is imported by the script: this project's own implementations (torch,
torch-cuda: impls/torch_eager; the self-test's bug:/tie_order: models) need moe-difftest on the path, a plug-in its
file (relative to the script) or module. Exit status 1 while the bug is there, 0 once fixed, 2 when it cannot run.

The difftest comparison stays the judge (`python -m difftest replay`); a reproducer's checks are the same rules or,
where a requantization may pick another scale or a token is a near tie, looser. The script's own text (its skeleton
and the loaders of its implementation) is difftest/readers/reproducer_templates.py's; this module fills it in.
"""

import ast
import dataclasses
import inspect
import json
import os
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from spec import bounds, layouts, permutation
from spec.numerics import E4M3FN, E8M0, decode
from spec.permutation import check_permutation, local_expert_ids  # in the script: copied (PERMUTATION)
from spec.recipes import DEFAULT

from ..checking import compare, impl_spec, interface
from ..checking.check import read_only
from ..checking.compare import validity
from ..model import generate
from ..model.case import CaseError
from . import embed
from .reproducer_templates import ADAPTER_LOADER, MOE_ADAPTER_LOADER, REFERENCE_LOADER, SCRIPT

SHOWN = 5  # elements listed per output
PARTS = ("input", "expected", "bound", "low", "high", "decode", "index", "robust", "validity", "shown")
TIMEOUT_S = 1800  # a reproducer's run past it is a hang; generous: a first run may JIT-build the kernel for minutes
KERNEL_PACKAGES = {"impls.flashinfer": "flashinfer-python (and apache-tvm-ffi)",
                   "impls.sglang": "sglang-kernel (its sgl_kernel package)"}


def reference(case, inputs, recipe):
    """{part: {output name: array}} of what each output is checked against (module docstring; PARTS but input)."""
    parts = {p: {} for p in PARTS[1:]}
    c = case.config
    if case.op == "quant":
        _quant_reference(c, inputs, parts)
    elif case.op == "routing":
        _routing_reference(c, inputs, recipe, parts)
    elif case.op == "trtllm_ops":
        _dev_reference(c, inputs, parts)
    else:
        used = recipe or DEFAULT
        spec = impl_spec.layer(case, inputs, used)
        hard, _ = bounds.bound_vs_recipe(spec, used)
        if recipe is None:
            hard = hard + bounds.bound_vs_ideal(spec, used)
        _, _, delta, gdelta = compare.keys64(c.routing, inputs, used)
        keep = compare.robust(spec, delta, gdelta)
        _routing_reference(compare.moe_routing(c), inputs, recipe, parts)  # for exposed ids and weights
        parts["expected"]["out"], parts["bound"]["out"] = spec.out, np.where(keep[:, None], hard, np.inf)
    return parts


def _quant_reference(c, inputs, parts):
    """Codes and logical scales bit-exact; the scale buffer's logical elements, read through the layout's strides
    (index: each element's offset in the buffer, in elements of the layout's dtype), bit-exact."""
    q = impl_spec.quantize(c, inputs)
    layout = q["layout"]
    for k in ("q", "scales"):
        parts["expected"][k], parts["bound"][k] = np.asarray(q[k]), np.zeros(np.shape(q[k]))
    parts["expected"]["scale_buffer"] = layouts.view(layout).copy()
    parts["bound"]["scale_buffer"] = np.zeros(parts["expected"]["scale_buffer"].shape)
    parts["index"]["scale_buffer"] = layouts.view(layout._replace(data=np.arange(layout.data.size))).copy()
    codes = np.arange(256, dtype=np.uint8)
    scale_codes = {"mxfp8": E8M0, "nvfp4": E4M3FN}.get(c.scheme, E8M0 if c.layout == "ue8m0_packed" else None)
    if c.scheme != "nvfp4":  # nvfp4's q bytes hold two e2m1 codes each
        parts["shown"]["q"] = decode(codes, E4M3FN).astype(np.float64)
    if scale_codes is not None:  # one-byte codes, or (ue8m0_packed) the bytes of int32 words
        parts["shown"]["scale_buffer"] = decode(codes, scale_codes).astype(np.float64)
        if c.scheme != "fp8_group":
            parts["shown"]["scales"] = parts["shown"]["scale_buffer"]


def _routing_reference(c, inputs, recipe, parts):
    """The spec's ids, its weights by id (routed, then shared) within the recipe's bound, and which tokens' ids
    are robust (no other selection is valid)."""
    k = c.top_k
    spec = impl_spec.route(c, inputs, recipe)
    order = np.argsort(spec.ids[:, :k], axis=1)
    ids = np.take_along_axis(spec.ids[:, :k], order, axis=1).astype(np.int64)
    w = np.take_along_axis(spec.weights[:, :k], order, axis=1)
    absolute, degenerate = compare.underflow_term(c, inputs, ids, recipe)
    bound = compare.weight_bound(c, recipe, w, inputs=inputs, ids=ids) + np.where(
        degenerate[:, None], 0.0, 2 * absolute)
    shared = compare.weight_bound(c, recipe, spec.weights[:, k:])
    keys, gkeys, delta, gdelta = compare.keys64(c, inputs, recipe)
    parts["expected"].update(ids=spec.ids, weights=np.concatenate([w, spec.weights[:, k:]], axis=1))
    parts["bound"]["weights"] = np.concatenate([bound, shared], axis=1)
    parts["robust"]["ids"] = compare.robust(spec, delta, gdelta)
    parts["validity"].update(keys=keys, delta=delta, group_delta=gdelta)
    if gkeys is not None:
        parts["validity"]["group_keys"] = gkeys


def _dev_reference(c, inputs, parts):
    """A trtllm-gen dev kernel: copies bit-exact; a store by the rounding rule (unmapped rows exactly 0); a DeepSeek
    FP8 requantization's scales in their interval and its values in the union of the intervals the allowed scales
    give (unbounded where the scale may flush to 0). e4m3 codes are compared as the values they decode to."""
    want = impl_spec.dev_kernel(c, inputs)
    if c.kernel in ("permute", "convertsf"):
        parts["expected"].update(want)
        parts["bound"].update({k: np.zeros(np.shape(v)) for k, v in want.items()})
        return
    v, delta, rows = compare.dev_allowance(c, inputs)
    dtype = "e4m3" if c.kernel == "activation_deepseek_fp8" else c.dtype
    if dtype == "e4m3":
        parts["decode"]["out"] = impl_spec.dev_values(np.arange(256, dtype=np.uint8), "e4m3")
    r = rows[:, None]
    if c.kernel in ("activation", "finalize"):
        stored, hard = compare.stored_bound(v, delta, dtype)
        parts["expected"]["out"], parts["bound"]["out"] = np.where(r, stored, 0), np.where(r, hard, 0)
        return
    s_lo, s_hi = compare.deepseek_fp8_scales(v, delta)
    parts["low"]["out_scale"], parts["high"]["out_scale"] = np.where(rows, s_lo, 0), np.where(rows, s_hi, 0)
    ends = [compare.deepseek_fp8_values(v, delta, np.where(s > 0, s, 1.0), dtype) for s in (s_lo, s_hi)]
    free = np.repeat(s_lo.T == 0, 128, axis=1)
    lo = np.where(free, -np.inf, np.minimum(ends[0][0], ends[1][0]))
    hi = np.where(free, np.inf, np.maximum(ends[0][1], ends[1][1]))
    parts["low"]["out"], parts["high"]["out"] = np.where(r, lo, 0), np.where(r, hi, 0)


def config_dict(config):
    """A configuration's fields (the moe config's routing nested) and its derived properties, as plain values: what
    the script's configuration namespace holds, so an adapter reads the attributes it reads from the dataclass."""
    d = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    d = {k: config_dict(v) if dataclasses.is_dataclass(v) else v for k, v in d.items()}
    return {**d, **{name: getattr(config, name) for name, attr in vars(type(config)).items()
                    if isinstance(attr, property)}}


# ---- STANDALONE: copied into the reproducer script (numpy only)


def compact(a, edge=3):
    """One line: dtype, shape, range and the first and last elements."""
    a = np.asarray(a)
    if a.size == 0:
        return f"{a.dtype} {a.shape} (empty)"
    flat = a.ravel()
    finite = flat[np.isfinite(flat)] if flat.dtype.kind == "f" else flat
    rng = f" in [{finite.min():.4g}, {finite.max():.4g}]" if finite.size else " (no finite value)"
    show = np.array2string(flat[:edge], precision=4, separator=", ")[1:-1]
    if flat.size > 2 * edge:
        show += ", ..., " + np.array2string(flat[-edge:], precision=4, separator=", ")[1:-1]
    elif flat.size > edge:
        show += ", " + np.array2string(flat[edge:], precision=4, separator=", ")[1:-1]
    return f"{a.dtype} {a.shape}{rng}: [{show}]"


def violations(op, config, out, ref):
    """(rows, notes): a row (ratio, kind, name, index, got, want, bound) for every checked element outside what ref
    allows, worst first; notes say what was left unchecked and why. ref: the reference's parts by name."""
    rows, notes, names = [], [], sorted(set(ref["expected"]) | set(ref["low"]))
    if op == "routing":
        rows, notes = routing_rows(config, out, ref)
        names = []
    elif op == "moe":  # the router's ids and weights where the layer exposes them, as the routing op's
        names = ["out"]
        if "ids" in out and "weights" in out:
            rows, notes = routing_rows({**config["routing"], "tile_tokens_dim": None}, out, ref)
        free = np.flatnonzero(np.isposinf(ref["bound"]["out"]).all(axis=1))
        if free.size:
            notes.append(f"out of tokens {free[:8].tolist()} ({free.size} in all) not checked: a routing tie "
                         "within 2δ leaves their selection open (python -m difftest replay decides)")
    for name in names:
        if name not in out:
            rows.append((np.inf, "shape", name, (), "missing", "an output", 0.0))
        else:
            rows += element_rows(name, output_values(name, out, ref), ref)
    return sorted(rows, key=lambda r: -r[0]), notes


def routing_rows(config, out, ref):
    """Ids: every token whose set differs from the spec's a valid selection (difftest's rule: _valid_selection on
    the float64 keys and δ in ref["validity"]), the shared slots the spec's; weights by id where the sets agree;
    then the permutation if any."""
    k = config["top_k"]
    ids, w = np.asarray(out["ids"]), np.asarray(out["weights"], np.float64)
    want = np.asarray(ref["expected"]["ids"])
    if ids.shape != want.shape or w.shape != want.shape:
        return [(np.inf, "shape", "ids, weights", (), f"shapes {ids.shape}, {w.shape}", f"{want.shape}", 0.0)], []
    same = (np.sort(ids[:, :k], axis=1) == np.sort(want[:, :k], axis=1)).all(axis=1)
    shared = (ids[:, k:] == want[:, k:]).all(axis=1)
    v, cfg = ref["validity"], SimpleNamespace(**config)
    rows, valid = [], []
    for t in np.flatnonzero(~(same & shared)):
        reason = (None if same[t] else _valid_selection(t, ids[t, :k].astype(np.int64), v["keys"], v.get("group_keys"),
                                                         v["delta"], v["group_delta"], cfg))
        if reason is None and not shared[t]:
            reason = ("shared", f"shared expert ids {ids[t, k:].tolist()} but spec={want[t, k:].tolist()}")
        if reason is None:
            valid.append(int(t))
        else:
            rows.append((np.inf, "ids", "ids", (int(t),), sorted(ids[t, :k].tolist()), sorted(want[t, :k].tolist()),
                         reason[1]))  # the routed ids, as difftest's message names them
    notes = [f"ids of tokens {valid[:8]} ({len(valid)} in all) are another valid selection (within 2δ of a tie); "
             "python -m difftest replay checks their weights, against the ideal at their own ids"] if valid else []
    same &= shared
    order = np.argsort(ids[:, :k], axis=1)
    by_id = np.concatenate([np.take_along_axis(w[:, :k], order, axis=1), w[:, k:]], axis=1)
    rows += element_rows("weights", by_id[same], ref, rows_at=np.flatnonzero(same), keep=same)
    if config.get("tile_tokens_dim") is not None:
        if rows:
            notes.append("the permutation is checked once ids and weights agree")
        else:
            rows += permutation_rows(config, out)
    return rows, notes


def permutation_rows(config, out):
    """The padded per-expert layout at the implementation's own ids (spec/permutation.py's rules)."""
    missing = [k for k in PERMUTATION_KEYS if k not in out]
    if missing:
        return [(np.inf, "permutation", "permutation", (), f"no {missing}", "", 0.0)]
    L, S = config["num_local_experts"], config["num_fused_shared_experts"]
    local = local_expert_ids(out["ids"], config["num_experts"], config["local_expert_offset"], L, S)
    try:
        problems = check_permutation(local, L + S, config["tile_tokens_dim"],
                                     **{k: np.asarray(out[k]) for k in PERMUTATION_KEYS})
    except ValueError as e:
        problems = [str(e)]
    return [(np.inf, "permutation", "permutation", (), p, "", 0.0) for p in problems]


def output_values(name, out, ref):
    """Output `name` as the reference holds it: a raw buffer read at its elements' offsets (index), uint8 codes
    as the values they decode to (decode)."""
    got = np.asarray(out[name])
    if name in ref["index"]:
        dtype, at = ref["expected"][name].dtype, ref["index"][name]
        raw = np.ascontiguousarray(got).view(np.uint8).ravel()
        if raw.size % dtype.itemsize or (at.size and raw.size // dtype.itemsize <= at.max()):
            return f"a buffer of {raw.size} bytes"
        got = raw.view(dtype)[at]
    if name in ref["decode"]:
        got = ref["decode"][name][got.astype(np.int64)]
    return got


def element_rows(name, got, ref, rows_at=None, keep=None):
    """Rows of the elements of `got` outside ref's interval (low, high: both infinite = unchecked) or outside
    expected ± bound (0: bit-exact; NaN matches NaN; e4m3 NaN codes 0x7f / 0xff are one NaN). rows_at maps got's
    first index to the output's; keep selects the reference's rows."""
    sel = (lambda a: np.asarray(a)) if keep is None else (lambda a: np.asarray(a)[keep])
    interval = name in ref["low"]
    want = sel(ref["low"][name] if interval else ref["expected"][name])
    if isinstance(got, str) or np.shape(got) != want.shape:
        shown = got if isinstance(got, str) else f"shape {np.shape(got)}"
        return [(np.inf, "shape", name, (), shown, f"shape {want.shape}", 0.0)]
    if interval:
        lo, hi, g = want.astype(np.float64), sel(ref["high"][name]).astype(np.float64), got.astype(np.float64)
        with np.errstate(invalid="ignore"):
            ratio = np.where((np.isneginf(lo) & np.isposinf(hi)) | ((lo <= g) & (g <= hi)), 0.0, np.inf)
        bound = None
    else:
        bound = sel(ref["bound"][name])
        if want.dtype.kind in "ui" or np.all(bound == 0):  # bit-exact
            g, e = got.astype(want.dtype), want
            if want.dtype == np.uint8:
                g, e = np.where((g & 0x7F) == 0x7F, 0x7F, g), np.where((e & 0x7F) == 0x7F, 0x7F, e)
            differ = ~((g == e) | (np.isnan(g) & np.isnan(e))) if want.dtype.kind == "f" else g != e
            ratio = np.where(differ, np.inf, 0.0)
        else:
            g, e = got.astype(np.float64), want.astype(np.float64)
            same = (g == e) | (np.isnan(g) & np.isnan(e))
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(same | np.isposinf(bound), 0.0, np.abs(g - e) / bound)
            ratio = np.where(np.isnan(ratio), np.inf, ratio)
    rows = []
    for at in np.argwhere(ratio > 1.0):
        at = tuple(int(i) for i in at)
        index = at if rows_at is None else (int(rows_at[at[0]]), *at[1:])
        if interval:
            rows.append((np.inf, "interval", name, index, float(g[at]), (float(lo[at]), float(hi[at])), None))
        elif want.dtype.kind in "iu":  # codes and words: their unsigned bits in hex, and the values they stand for
            bits = want.dtype.str.replace("i", "u")
            got_bits, want_bits = np.asarray(got[at], want.dtype).view(bits), np.asarray(want[at]).view(bits)
            table, width = ref["shown"].get(name), want.dtype.itemsize
            rows.append((np.inf, "exact", name, index, code_text(int(got_bits), width, table),
                         code_text(int(want_bits), width, table), 0.0))
        else:
            kind = "exact" if np.all(bound == 0) else "bounded"
            rows.append((float(ratio[at]), kind, name, index, got[at].item(), want[at].item(), float(bound[at])))
    return rows


def number(v):
    """A value as text, with 2^e where it is a power of two (a scale)."""
    mantissa, e = np.frexp(v)
    return f"{v:.9g} = 2^{e - 1}" if np.isfinite(v) and mantissa == 0.5 else f"{v:.9g}"


def code_text(bits, width, table=None):
    """Integer bits in hex, with what they stand for where `table` decodes a byte: a one-byte code's value, or
    the `width` bytes of a packed word, low byte first."""
    if table is None:
        return f"{bits:#x}"
    values = [number(float(table[(bits >> 8 * b) & 0xFF])) for b in range(width)]
    if width == 1:
        return f"{bits:#x} ({values[0]})"
    return f"{bits:#x} (bytes {', '.join(v.rpartition(' = ')[2] for v in values)})"  # 2^e alone, where it is one


def describe(row):
    """One line per row of violations()."""
    ratio, kind, name, index, got, want, bound = row
    at = "[" + ", ".join(map(str, index)) + "]"
    if kind == "ids":  # bound: why the set is no valid selection
        return f"ids{at}={got} but spec={want}: {bound}"
    if kind == "permutation":
        return f"permutation: {got}"
    if kind == "shape":
        return f"{name}: {got} but the spec has {want}"
    if kind == "interval":
        return f"{name}{at}={got:.9g} outside [{want[0]:.9g}, {want[1]:.9g}]"
    if kind == "exact":  # codes and words as code_text made them, values as numbers
        shown = f"{got} but spec={want}" if isinstance(got, str) else f"{number(got)} but spec={number(want)}"
        return f"{name}{at}={shown} (bit-exact required)"
    return f"{name}{at}={got:.6g} but spec={want:.6g}: |diff| {abs(got - want):.3g} > bound {bound:.3g} ({ratio:.3g}x)"


STANDALONE = (compact, violations, routing_rows, permutation_rows, output_values, element_rows, number, code_text,
              describe)
# difftest's validity rule for routing ids (difftest/checking/compare/validity.py), copied into the script by its
# source
VALIDITY = (validity.above, validity._beaten, validity.kept_group_sets, validity.mask_value, validity._margin,
            validity._groups, validity._best_groups, validity._valid_selection, validity._masked,
            validity._group_reason)
_valid_selection = validity._valid_selection  # what routing_rows calls, here as in the script
PERMUTATION = (permutation.Layout, permutation._require, permutation._check_ids, permutation.local_expert_ids,
               permutation.counts, permutation.padded_counts, permutation.offsets, permutation.cta_idx_xy_to_batch_idx,
               permutation.cta_idx_xy_to_mn_limit, permutation.layout, permutation.check_permutation)
PERMUTATION_KEYS = compare.PERMUTATION_KEYS
# difftest's expert-weight generator, copied into a moe adapter's script by its source (generator_source)
GENERATOR = (generate.raw, generate.uniform, generate.normal, generate.integers, generate.round_bf16,
             generate.round_to_dtype, generate._fp8_codes, generate._unquantized_weight, generate._sparse_rows,
             generate._expert_weights, generate._magnitude, generate._signed_expert_weights, generate.stacked_weights)
GENERATOR_CONSTANTS = ("SQRT3", "FP8_BLOCK", "MX_BLOCK", "NVFP4_BLOCK", "SPARSE_ROW_TERMS", "WEIGHT_DISTS")


# ---- show


def parts_of(arrays):
    """{part: {name: array}} of the npz's "part.name" arrays."""
    return {p: {k.split(".", 1)[1]: arrays[k] for k in arrays if k.startswith(p + ".")} for p in PARTS}


def outputs(fx):
    """(implementation outputs or the exception line, the reference's parts)."""
    impl = interface.load(fx.impl_ref)
    ref = reference(fx.case, fx.inputs, fx.recipe)
    try:
        return impl.run(fx.case, read_only(fx.inputs)), ref
    except Exception as e:  # the finding may be the exception itself
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", ref


def show_lines(fx):
    """Compact inputs, then the implementation next to the spec at its worst elements."""
    lines = [f"input {k}: {compact(a)}" for k, a in fx.inputs.items()]
    impl = interface.load(fx.impl_ref)
    reason = impl.available() or (f"a {fx.kind} fixture is run isolated only (replay)"
                                  if fx.kind in ("crash", "hang") else None)
    if reason:
        return lines + [f"outputs not shown: {reason}"]
    try:
        out, ref = outputs(fx)
    except CaseError as e:
        return lines + [f"outputs not shown: the spec refuses the case: {e}"]
    except ValueError as e:  # not one of the spec's preconditions: the spec broke (impl_spec.refusals)
        return lines + [f"outputs not shown: the spec raised ValueError: {str(e).splitlines()[0]}"]
    if isinstance(out, str):
        return lines + [f"now: {fx.meta['impl']['name']} raised {out}"]
    for k, a in out.items():
        lines.append(f"output {k}: {compact(a)}")
    bad, notes = violations(fx.case.op, config_dict(fx.case.config), out, ref)
    lines.append(f"worst elements (implementation vs spec at the spec's ids; {len(bad)} outside the bound):")
    lines += [f"  {describe(r)}" for r in bad[:SHOWN]] or ["  none: every checked element is within its bound"]
    return lines + [f"  note: {n}" for n in notes]


# ---- show --script (the script's text: reproducer_templates.py)


def kind_of_reference(ref):
    """("adapter", module) for a FlashInfer / SGLang adapter name or an adapter's variant (``impls.<vendor>.<module>:
    AS_BUILT``: the module's run under another recipe, which the script takes from the fixture), else ("reference",
    module:NAME or file.py:NAME)."""
    adapters = interface.adapter_names()
    if ref in adapters:
        return "adapter", adapters[ref]
    module, sep, _ = ref.partition(":")
    if sep and module in adapters.values():
        return "adapter", module
    return "reference", interface.REGISTRY.get(ref) or interface.self_test_ref(ref) or ref


def adapter_summary(module):
    """The adapter module's docstring's first paragraph, on one line: what it runs and through which call."""
    doc = ast.get_docstring(ast.parse(embed.module_file(module).read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split())


def needs(kind, target):
    """What the script needs besides numpy: one line."""
    if kind == "adapter":
        package = KERNEL_PACKAGES[target.rpartition(".")[0]]
        return f"numpy, torch and {package}, not moe-difftest (the adapter is embedded)"
    where = target.rpartition(":")[0]
    if where.split(".")[0] != "difftest":
        return f"the plug-in ({where}) and what it imports"
    what = ("its torch eager implementation (impls/torch_eager), the reference the kernels are tested against"
            if where == "difftest.checking.impl_torch" else "a model of a known bug in its self-test"
            if where.startswith("difftest.selftest") else "its own implementation")
    return f"moe-difftest on the path (a checkout, or installed): this is {what} ({where})"


def script_arrays(fx):
    """The npz's arrays: input.* (the case's inputs; a moe adapter's expert weights are regenerated by the script,
    script_weights) and the reference."""
    arrays = {f"input.{k}": np.asarray(a) for k, a in fx.inputs.items()}
    for part, named in reference(fx.case, fx.inputs, fx.recipe).items():
        arrays.update({f"{part}.{k}": np.asarray(a) for k, a in named.items()})
    return arrays


def script_weights(fx):
    """generate.stacked_weights' keyword arguments for a moe adapter's script (WEIGHTS), else None."""
    if fx.case.op != "moe" or kind_of_reference(fx.impl_ref)[0] != "adapter":
        return None
    w = generate.weights(fx.case)._asdict()
    return {"E" if k == "num_experts" else k: v for k, v in w.items()}


def generator_source():
    """difftest's expert-weight generator as the script carries it: its constants and functions by their source
    (stacked_weights without its cache), numpy and zlib only."""
    constants = "".join(f"{name} = {getattr(generate, name)!r}\n" for name in GENERATOR_CONSTANTS)
    functions = [inspect.getsource(f) for f in GENERATOR]
    functions[-1] = "".join(line for line in functions[-1].splitlines(keepends=True) if not line.startswith("@"))
    return (f"# difftest's expert-weight generator ({generate.GENERATORS['weights']}), verbatim from "
            f"difftest/model/generate.py\nCaseError = ValueError\n{constants}\n\n" + "\n\n".join(functions))


def script_text(fx, npz_name, script_dir):
    """The reproducer's source for a fixture whose inputs it reads from `npz_name` beside it."""
    kind, target = kind_of_reference(fx.impl_ref)
    weights = script_weights(fx)
    checks = [f"PERMUTATION_KEYS = {PERMUTATION_KEYS!r}\n"] + [inspect.getsource(f)
                                                              for f in PERMUTATION + VALIDITY + STANDALONE]
    if kind == "adapter":
        embedded = embed.files(target)
        loader, about = ADAPTER_LOADER, (
            f"Runs {fx.meta['impl']['name']} through the tester's adapter {target}, embedded verbatim with the "
            f"project modules it imports (FILES, at the end): {adapter_summary(target)}")
        constants = (f"ADAPTER = {target!r}  # in FILES\nFILES_DIGEST = {embed.digest(embedded)!r}  "
                     "# names the directory FILES are installed in")
        files = "\n# The adapter and what it imports, verbatim from moe-difftest (impls/).\nFILES = {\n" + "".join(
            f"    {rel!r}: {embed.literal(text)},\n" for rel, text in embedded.items()) + "}\n\n"
        if weights is not None:  # regenerated, not stored (module docstring)
            loader = MOE_ADAPTER_LOADER
            constants += (f"\nWEIGHTS = {weights!r}  # stacked_weights' arguments: the expert weights difftest "
                          "generated")
            files = f"\n{generator_source()}\n{files}"
    else:
        where, _, name = target.rpartition(":")
        if where.endswith(".py"):  # a file reference: as seen from the script's directory
            target = f"{_relative(_plugin_file(where, fx.path), Path(script_dir).resolve())}:{name}"
        loader, files = REFERENCE_LOADER, ""
        about = f"Runs {fx.meta['impl']['name']} ({target})."
        constants = (f"IMPL = {target!r}  # path/file.py:NAME (relative to this script) or module:NAME\n"
                     f"NEEDS = {'needs ' + needs(kind, target)!r}")
    about = f"Written by `python -m difftest show FIXTURE --script`. {about}\nNeeds {needs(kind, target)}."
    return SCRIPT.substitute(
        id=fx.id, status=fx.status, kind=fx.kind, about=_wrap(about), npz=npz_name, npz_literal=repr(npz_name),
        fixture=repr(fx.id),
        message=_wrap(_docstring_safe(fx.meta["observed"].get("message") or "")), op=repr(fx.case.op),
        impl_name=repr(fx.meta["impl"]["name"]),
        case_json=embed.literal(json.dumps(fx.case.to_dict(), indent=1, sort_keys=True)),
        config_json=embed.literal(json.dumps(config_dict(fx.case.config), indent=1, sort_keys=True)),
        timeout=TIMEOUT_S, imports=_imports(kind, weights is not None), loader_constants=constants,
        checks="\n\n".join(checks), loader=loader, shown=SHOWN, files=files, parts=repr(PARTS))


def write_script(fx, path):
    """OUT.py and OUT.npz (inputs, expected values, bounds); returns both paths."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    npz = path.with_suffix(".npz")
    np.savez(npz, **script_arrays(fx))
    path.write_text(script_text(fx, npz.name, path.parent), encoding="utf-8")
    return path, npz


def _plugin_file(where, fixture_dir):
    """A plug-in file reference as an absolute path: relative to the working directory (as campaigns record it),
    else to the fixture's directory where only that one exists."""
    if Path(where).is_absolute():
        return Path(where)
    here, beside = (Path.cwd() / where).resolve(), (Path(fixture_dir) / where).resolve()
    return beside if not here.is_file() and beside.is_file() else here


def _imports(kind, generates=False):
    """The script's standard-library imports, sorted as ruff's isort sorts them (zlib: the weight generator's)."""
    plain = {"faulthandler", "importlib", "itertools", "json", "sys"} | ({"os", "tempfile"} if kind == "adapter"
                                                           else {"importlib.util"}) | ({"zlib"} if generates else set())
    froms = ["from pathlib import Path", "from types import SimpleNamespace", "from typing import NamedTuple"]
    return "\n".join([f"import {m}" for m in sorted(plain)] + froms)


def _docstring_safe(text):
    return text.replace("\\", "\\\\").replace('"""', "'''")


def _wrap(text, width=116, indent=""):
    """Paragraphs of `text` wrapped at `width` (the first line unindented)."""
    return "\n".join(textwrap.fill(p, width, subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False) for p in text.split("\n"))


def _relative(target, start):
    return Path(os.path.relpath(target, start)).as_posix()
