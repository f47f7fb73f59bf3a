"""The quant op: bit-exact codes and scales, layouts as memory."""

import numpy as np

from spec.numerics import E2M1, E4M3FN, E8M0, decode

from .. import impl_spec
from .verdict import _bit_exact, failed, worst


def _number(v):
    """A decoded scale: its value, and 2^e where it is a power of two."""
    v = float(v)
    mantissa, e = np.frexp(v)
    return f"{v:.9g} = 2^{e - 1}" if np.isfinite(v) and mantissa == 0.5 else f"{v:.9g}"


def _e8m0(code):
    """An e8m0 code as the power of two it stands for (0xff: NaN)."""
    return "NaN" if int(code) == 0xFF else f"2^{int(code) - E8M0.bias}"


def scale_value(config, packed=False):
    """bits -> the scale they stand for, as text (the _bits of a quant case's scales, or of its scale buffer read
    through the layout): fp32 bits, e8m0 (mxfp8) or e4m3 (nvfp4) codes, or (``packed``, UE8M0 words) the four e8m0
    bytes of an int32 word, low byte first (bytes past the last group are padding)."""
    if packed:
        return lambda w: "bytes " + ", ".join(_e8m0((int(w) >> 8 * b) & 0xFF) for b in range(4))
    if config.scheme == "mxfp8":
        return _e8m0
    if config.scheme == "nvfp4":
        return lambda b: _number(decode(np.uint8(b), E4M3FN))
    return lambda b: _number(np.uint32(b).view(np.float32))


def code_value(config):
    """bits -> the value a quant case's q code stands for, as text: e4m3 (fp8_group, mxfp8), or nvfp4's two e2m1
    codes of a byte, low nibble (the even element) first."""
    if config.scheme == "nvfp4":
        return lambda b: ", ".join(f"{float(decode(np.uint8((int(b) >> s) & 0xF), E2M1)):g}" for s in (0, 4))
    return lambda b: f"{float(decode(np.uint8(b), E4M3FN)):g}"


def nan_sign_free(codes):
    """e4m3fn codes with every NaN (0x7f, 0xff) as 0x7f: a NaN's sign is no contract (PTX cvt writes 0x7f
    whatever the input, torch keeps the input's sign bit), every other bit is."""
    codes = np.asarray(codes)
    return np.where((codes & 0x7F) == 0x7F, np.uint8(0x7F), codes).astype(np.uint8)


def compare_quant(case, inputs, out, recipe, tag):
    """Codes (NaN sign aside) and logical scales bit-exact; the scale buffer read through the spec layout's
    strides."""
    c = case.config
    want = impl_spec.quantize(c, inputs)
    q, ref = out["q"], want["q"]
    if c.scheme in ("fp8_group", "mxfp8"):
        q, ref = nan_sign_free(q), nan_sign_free(ref)
    verdicts = [_bit_exact("q", q, ref, tag, value=code_value(c)),
                _bit_exact("scales", out["scales"], want["scales"], tag, value=scale_value(c))]
    layout = want["layout"]
    data = np.ascontiguousarray(out["scale_buffer"]).view(np.uint8).ravel()
    if data.nbytes != layout.data.nbytes:
        verdicts.append(failed("scale_buffer", "shape", f"scale_buffer holds {data.nbytes} bytes but the {c.layout} "
                                                        f"layout needs {layout.data.nbytes} [{tag}]"))
    else:
        read = impl_spec.layouts.view(layout._replace(data=data.view(layout.data.dtype)))
        verdicts.append(_bit_exact(f"scale_buffer as {c.layout}", read, impl_spec.layouts.view(layout), tag,
                                   "scale_buffer", scale_value(c, packed=c.layout == "ue8m0_packed")))
    return worst(*verdicts)
