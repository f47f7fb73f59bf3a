"""SGLang per-token-group FP8 quantization: ``sgl_kernel.sgl_per_token_group_quant_8bit``, output buffers allocated
as SGLang's ``create_per_token_group_quant_fp8_output_scale`` allocates them (row-major, column-major,
column-major TMA-aligned, UE8M0 packed in int32), the kernel told the layout by nothing but ``output_s``'s strides.

The wrapper (sgl_kernel/gemm.py, 0.4.4) dispatches on the group size: 16, 32, 64, 128 to the v2 kernel
(csrc/gemm/per_token_group_quant_8bit_v2.cu), anything else to v1 (per_token_group_quant_8bit.cu,
``sglang.per_token_group_quant_8bit_v1`` runs v1 at every size). Both are built with -use_fast_math (SASS in
docs/sglang.md). v2, bf16 and fp16 inputs only, eps must be 1e-10: amax = max(1e-10, |x|...) (fmaxf: NaN
skipped); s = fl(amax·fl(1/448)); q = e4m3_satfinite(clamp(fl(x·fl(448·MUFU.RCP(amax))), ±448)), i.e. variant
"mul_448_div_amax" with scale formula "mul_rcp448"; UE8M0: e = the exponent of fl(amax·fl(1/448)) rounded up by
its bits (exact), s = 2^e, q = x·2^-e exactly, byte e + 127, and the tail bytes of the last packed word zeroed.
The clamp is fmaxf(fminf(·)) before the conversion: a NaN input is clamped to -448, not converted to NaN.

Layouts as SGLang allocates (torch.empty, so the adapter fills every buffer with 0xA5 bytes first: a byte the
kernel should write and does not shows up): row [T, G]; col [G, T]ᵀ; col_tma [G, ceil4(T)]ᵀ[:T];
ue8m0 int32 [ceil(G/4), ceil4(T)]ᵀ[:T]. ``scale_buffer`` is that whole allocation's bytes, which compare.py reads
through the spec layout's strides.
"""

from ._env import problem, to_numpy, to_torch, version  # noqa: F401 (version: the registry's)

NAME = "sglang.per_token_group_quant_8bit"
OP = "quant"
DETERMINISTIC = True
RECIPE = None  # a quantizer's formulation is its configuration's (variant, scale_formula, scale_fmt)
V2_GROUP_SIZES = (16, 32, 64, 128)  # sgl_kernel/gemm.py _V2_KERNEL_SUPPORTED_GROUP_SIZES
VARIANT = {"v1": "mul_mufu_rcp_scale", "v2": "mul_448_div_amax"}  # x·MUFU.RCP(s) / x·fl(448·MUFU.RCP(amax))
INPUT_DTYPES = {"v1": ("bf16", "fp16", "fp32"), "v2": ("bf16", "fp16")}
SCALE_FORMULA = "mul_rcp448"  # v1: amax·MUFU.RCP(448) = amax·fl(1/448) (448 is bf16: hopper.hopper_rcp exact)
EPS = 1e-10
FP8_MAX = 448.0
POISON = 0xA5
SPACE = {"scheme": "fp8_group", "group_size": list(V2_GROUP_SIZES), "input_dtype": list(INPUT_DTYPES["v2"]),
         "variant": VARIANT["v2"], "scale_formula": SCALE_FORMULA}


def available():
    return problem()


def kernel_for(group_size, enable_v2=None):
    """The kernel sgl_kernel's wrapper runs: v2 for its group sizes unless enable_v2 says otherwise."""
    return "v2" if (group_size in V2_GROUP_SIZES if enable_v2 is None else enable_v2) else "v1"


def unsupported(config):
    return _unsupported(config, kernel_for(config.group_size))


def _unsupported(c, kernel):
    if c.scheme != "fp8_group":
        return f"scheme {c.scheme!r}: the kernel quantizes per token group to e4m3 (mxfp8 / nvfp4 are other kernels)"
    if c.input_dtype not in INPUT_DTYPES[kernel]:
        return (f"input_dtype {c.input_dtype!r}: the {kernel} kernel is instantiated for {INPUT_DTYPES[kernel]} "
                "(group sizes 16..128 go to v2, whose dispatch is DISPATCH_PYTORCH_DTYPE_TO_CTYPE_FP16)")
    if c.scale_fmt == "ue8m0":
        if c.layout != "ue8m0_packed":
            return ("ue8m0 with row-major scales: SGLang asserts column-major TMA-aligned packing, and the kernel "
                    "ignores scale_ue8m0 for a row-major output_s (v1: a host assert compiled out under NDEBUG; v2: "
                    "the non-UE8M0 instantiation) and writes fp32 scales")
        if c.group_size != 128:
            return (f"ue8m0 with group_size={c.group_size}: SGLang's allocator packs K/128 groups (DeepGEMM's 1x128 "
                    "format; later SGLang raises for other group sizes)")
        return None
    if c.variant != VARIANT[kernel] or c.scale_formula != SCALE_FORMULA:
        return (f"variant {c.variant!r} / {c.scale_formula!r}: group_size={c.group_size} runs the {kernel} kernel, "
                f"whose quantizer is {VARIANT[kernel]!r} / {SCALE_FORMULA!r}")
    return None


def output_scale(T, H, group_size, layout, device):
    """(output_s as the kernel sees it, its whole allocation) for `layout`, as SGLang allocates them, every byte
    POISON."""
    import torch

    G, aligned = H // group_size, -(-T // 4) * 4
    if layout == "row":
        base = torch.empty((T, G), dtype=torch.float32, device=device)
        view = base
    elif layout == "col":
        base = torch.empty((G, T), dtype=torch.float32, device=device)
        view = base.t()
    elif layout == "col_tma":
        base = torch.empty((G, aligned), dtype=torch.float32, device=device)
        view = base.t()[:T]
    elif layout == "ue8m0_packed":
        base = torch.empty((-(-G // 4), aligned), dtype=torch.int32, device=device)
        view = base.t()[:T]
    else:
        raise ValueError(f"layout {layout!r} is not one of row, col, col_tma, ue8m0_packed")
    base.view(torch.uint8).fill_(POISON)
    return view, base


def logical_scales(view, G, ue8m0):
    """fp32 [T, G] scales read through the kernel's view: the floats, or 2^(byte − 127) of packed e8m0 bytes."""
    import torch

    if not ue8m0:
        return to_numpy(view.contiguous())
    words = torch.empty(tuple(view.shape), dtype=view.dtype, device=view.device).copy_(view)  # row-major words
    codes = words.view(torch.uint8).reshape(view.shape[0], 4 * view.shape[1])[:, :G].cpu()
    scales = torch.exp2(codes.to(torch.float64) - 127).float().masked_fill(codes == 255, float("nan"))
    return scales.numpy()


def per_token_group_quant_8bit(x, group_size, layout, scale_ue8m0, enable_v2=None):
    """x [T, H] bf16 | fp16 | fp32 CUDA -> (q float8_e4m3fn [T, H], output_s view, its allocation), through
    sgl_kernel's wrapper with SGLang's eps and ±448; T = 0 never reaches the kernel (SGLang's x.shape[0] > 0)."""
    import sgl_kernel
    import torch

    from ._env import launch_check

    if x.dim() != 2 or not x.is_contiguous() or x.shape[1] % group_size:
        raise ValueError(f"x must be a contiguous [T, H] tensor with H a multiple of {group_size}, got "
                         f"{tuple(x.shape)}")
    T, H = x.shape
    q = torch.empty((T, H), dtype=torch.float8_e4m3fn, device=x.device)
    q.view(torch.uint8).fill_(POISON)
    view, base = output_scale(T, H, group_size, layout, x.device)
    if T > 0:
        sgl_kernel.sgl_per_token_group_quant_8bit(x, q, view, group_size, EPS, -FP8_MAX, FP8_MAX, scale_ue8m0,
                                                  enable_v2=enable_v2)
        launch_check(f"sgl_per_token_group_quant_8bit ({kernel_for(group_size, enable_v2)})")
    return q, view, base


def run(config, inputs, device="cuda"):
    return _run(config, inputs, None, device)


def _run(config, inputs, enable_v2, device):
    """inputs {"x" [T, H] float32 (values of input_dtype)} -> {"q" codes, "scales" fp32 [T, G], "scale_buffer"}."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.input_dtype]
    x = to_torch(inputs["x"], "fp32", device).to(dtype)  # exact: x holds values of input_dtype
    ue8m0 = config.scale_fmt == "ue8m0"
    q, view, base = per_token_group_quant_8bit(x, config.group_size, config.layout, ue8m0, enable_v2)
    return {"q": to_numpy(q), "scales": logical_scales(view, config.hidden_size // config.group_size, ue8m0),
            "scale_buffer": to_numpy(base.view(torch.uint8).flatten())}
