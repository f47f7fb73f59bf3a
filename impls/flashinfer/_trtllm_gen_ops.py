"""FlashInfer's trtllm-gen MoE dev kernels, one function each: permute, activation, activation_deepseek_fp8,
convertsf, finalize, finalize_deepseek_fp8.

The kernels are FlashInfer's (flashinfer-python 0.7.2.post1,
``data/csrc/fused_moe/trtllm_backend/trtllm_fused_moe_dev_kernel.cu``, cited as ``dev.cu:LINE``), reached
through the project's own tvm-ffi binding (``csrc/trtllm_gen_dev_kernels.cu``) built by
``_trtllm_gen_jit.dev_kernels_spec``. Each function checks its arguments here (one-line ValueError or TypeError
naming the constraint; the binding repeats the checks), allocates its outputs and calls the binding once.
docs/trtllm_gen_dev_kernels.md is the long account.

Facts common to all six:

- built with ``-use_fast_math`` (FlashInfer's default, flashinfer/jit/core.py:746): ``a / b`` is
  ``a * MUFU.RCP(b)``, ``expf(x)`` is ``MUFU.EX2(x * log2(e))``, fp32 subnormals flush to zero;
- float -> bf16 / fp16 stores round to nearest even; float -> e4m3 rounds to nearest even and saturates to
  ±448 (``cvt.rn.satfinite.e4m3x2.f32``, cutlass/float8.h:421), NaN stays NaN;
- routing: expanded index ``e = t * top_k + k``; ``expanded_idx_to_permuted_idx[t, k]`` is the row of the
  permuted (expert-grouped, tile-padded) buffers holding token t's k-th expert, or -1 where that expert is not
  local (activation and finalize skip it);
- DeepSeek FP8 block scales of a ``[rows, cols]`` tensor are float32 ``[cols / 128, rows]``:
  ``scale[j // 128, r]`` multiplies element ``[r, j]``. For the permuted buffers the scale row stride the
  kernels use is the device value ``total_num_padded_tokens`` (here: the buffer's row count unless given).
"""

import functools

import torch

from . import _trtllm_gen_jit

FP8 = torch.float8_e4m3fn
ELEMENT_DTYPES = (torch.bfloat16, torch.float16, FP8)
SF_LAYOUTS = ("R128c4", "R8c4", "R8c16")
MAX_TOP_K = 64  # dev.cu:746, finalize's shared-memory tables


@functools.cache
def _module():
    headers, why = _trtllm_gen_jit.export_headers()
    if headers is None:
        raise RuntimeError(why)
    return _trtllm_gen_jit.load(_trtllm_gen_jit.dev_kernels_spec(_trtllm_gen_jit.arch_of_device(), headers))


def _fail(kind, message):
    raise kind(message)


def _dtype(t, name, dtypes):
    if t.dtype not in dtypes:
        _fail(TypeError, f"{name} must be {' or '.join(str(d).removeprefix('torch.') for d in dtypes)}, "
                         f"got {str(t.dtype).removeprefix('torch.')}")


def _shape(t, name, shape):
    if tuple(t.shape) != tuple(shape):
        _fail(ValueError, f"{name} must have shape {list(shape)}, got {list(t.shape)}")


def _routing(idx):
    """(num_tokens, top_k) of expanded_idx_to_permuted_idx [num_tokens, top_k] int32."""
    _dtype(idx, "expanded_idx_to_permuted_idx", (torch.int32,))
    if idx.dim() != 2 or idx.shape[0] < 1 or idx.shape[1] < 1:
        _fail(ValueError, f"expanded_idx_to_permuted_idx must be [num_tokens >= 1, top_k >= 1], "
                          f"got {list(idx.shape)}")
    return idx.shape


def _on_cuda(*tensors):
    """All given tensors on one CUDA device, contiguous: the binding reads raw pointers."""
    present = [t for t in tensors if t is not None]
    if any(t.device.type != "cuda" for t in present):
        _fail(ValueError, "all tensors must be CUDA tensors (FlashInfer dev kernels run on the GPU)")
    if len({t.device for t in present}) != 1:
        _fail(ValueError, "all tensors must be on the same CUDA device")
    if any(not t.is_contiguous() for t in present):
        _fail(ValueError, "all tensors must be contiguous")


def _zeros(shape, dtype, device):
    """Zeros of any dtype, float8 included (filled as bytes)."""
    if dtype == FP8:
        return torch.zeros(shape, dtype=torch.uint8, device=device).view(dtype)
    return torch.zeros(shape, dtype=dtype, device=device)


def _check_rows(idx, num_rows, allow_unmapped):
    """Every permuted row in range; -1 only where the kernel skips it (synchronizes: a device read)."""
    low = -1 if allow_unmapped else 0
    if idx.numel() and (int(idx.min()) < low or int(idx.max()) >= num_rows):
        _fail(ValueError, f"expanded_idx_to_permuted_idx entries must be in [{low}, {num_rows})")


def _total(total_num_padded_tokens, num_rows, device):
    """The [1] int32 device tensor the DeepSeek kernels read their scale row stride from."""
    if total_num_padded_tokens is None:
        return torch.tensor([num_rows], dtype=torch.int32, device=device)
    _dtype(total_num_padded_tokens, "total_num_padded_tokens", (torch.int32,))
    _shape(total_num_padded_tokens, "total_num_padded_tokens", (1,))
    if not 1 <= int(total_num_padded_tokens[0]) <= num_rows:
        _fail(ValueError, f"total_num_padded_tokens must be in [1, {num_rows}] (the permuted rows)")
    return total_num_padded_tokens


def _swiglu_controls(alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim, num_rows):
    given = [(n, t) for n, t in (("alpha", alpha), ("beta", beta), ("clamp_limit", clamp_limit)) if t is not None]
    for name, t in given:
        _dtype(t, name, (torch.float32,))
        if t.dim() != 1 or t.shape[0] != given[0][1].shape[0] or t.shape[0] < 1:
            _fail(ValueError, f"{name} must be [num_local_experts], the same length as the other SwiGLU controls")
    if not given:
        return
    if cta_idx_xy_to_batch_idx is None or tile_tokens_dim < 1:
        _fail(ValueError, "alpha, beta and clamp_limit need cta_idx_xy_to_batch_idx and tile_tokens_dim >= 1")
    _dtype(cta_idx_xy_to_batch_idx, "cta_idx_xy_to_batch_idx", (torch.int32,))
    tiles = -(-num_rows // tile_tokens_dim)
    if cta_idx_xy_to_batch_idx.dim() != 1 or cta_idx_xy_to_batch_idx.shape[0] < tiles:
        _fail(ValueError, f"cta_idx_xy_to_batch_idx must be 1-D with >= ceil(rows / tile_tokens_dim) = {tiles} "
                          f"entries")


def _check_tile_map(cta_idx_xy_to_batch_idx, num_local_experts, num_tiles):
    if cta_idx_xy_to_batch_idx is None:
        return
    used = cta_idx_xy_to_batch_idx[:num_tiles]
    if int(used.min()) < 0 or int(used.max()) >= num_local_experts:
        _fail(ValueError, f"cta_idx_xy_to_batch_idx entries must be in [0, {num_local_experts})")


def permute(hidden_states, expanded_idx_to_permuted_idx, num_padded_tokens, hidden_states_scale=None,
            enable_pdl=False):
    """out[p(t, k), :] = hidden_states[t, :] for every (t, k): a copy, no arithmetic (dev.cu:621-634).

    [T, H] bf16/fp16/e4m3 -> [num_padded_tokens, H], same dtype; rows no (t, k) maps to stay 0. The kernel
    writes row p(t, k) without testing for -1 (dev.cu:631-632), so every entry must be a row: checked here.
    With hidden_states_scale [H/128, T] float32 (DeepSeek FP8, H % 128 == 0) it also copies the scales,
    out_scale[:, p(t, k)] = hidden_states_scale[:, t] (dev.cu:635-648), and returns (out, out_scale).
    """
    num_tokens, _ = _routing(expanded_idx_to_permuted_idx)
    _dtype(hidden_states, "hidden_states", ELEMENT_DTYPES)
    if hidden_states.dim() != 2 or hidden_states.shape[0] != num_tokens or hidden_states.shape[1] < 1:
        _fail(ValueError, f"hidden_states must be [num_tokens={num_tokens}, H >= 1], got {list(hidden_states.shape)}")
    hidden = hidden_states.shape[1]
    if num_padded_tokens < 1:
        _fail(ValueError, "num_padded_tokens must be >= 1")
    if hidden_states_scale is not None:
        if hidden % 128:
            _fail(ValueError, f"H must be a multiple of 128 with hidden_states_scale, got {hidden}")
        _dtype(hidden_states_scale, "hidden_states_scale", (torch.float32,))
        _shape(hidden_states_scale, "hidden_states_scale", (hidden // 128, num_tokens))
    _on_cuda(hidden_states, expanded_idx_to_permuted_idx, hidden_states_scale)
    _check_rows(expanded_idx_to_permuted_idx, num_padded_tokens, allow_unmapped=False)
    out = _zeros((num_padded_tokens, hidden), hidden_states.dtype, hidden_states.device)
    out_scale = None
    if hidden_states_scale is not None:
        out_scale = hidden_states_scale.new_zeros(hidden // 128, num_padded_tokens)
    total = _total(None, num_padded_tokens, hidden_states.device)
    with torch.cuda.device(hidden_states.device):
        _module().permute(hidden_states, out, expanded_idx_to_permuted_idx, total, hidden_states_scale, out_scale,
                          enable_pdl)
    return out if out_scale is None else (out, out_scale)


def activation(gemm1_out, expanded_idx_to_permuted_idx, alpha=None, beta=None, clamp_limit=None,
               cta_idx_xy_to_batch_idx=None, tile_tokens_dim=0, enable_pdl=False):
    """out[p, j] = round(silu(g) * u), u = gemm1_out[p, j], g = gemm1_out[p, I + j]: the SECOND half is gated.

    [P, 2I] bf16/fp16 -> [P, I] same dtype, 2I even and >= 128 (run() launches 2I/128 CTAs, dev.cu:419); only
    rows some (t, k) maps to are written (dev.cu:109-114), the rest stay 0. All in fp32 (dev.cu:122-125):
    silu(g) = g * rcp(1 + ex2(-g * log2 e)) (dev.cu:55, fast math), times u, one rounding at the store.
    With the SwiGLU controls (float32 [E_local], per local expert e = cta_idx_xy_to_batch_idx[p // tile]):
    g' = min(g, L), u' = min(max(u, -L), L) (clamp_limit L), out = g' / (1 + exp(-alpha * g')) * (u' + beta)
    (dev.cu:68-93); absent controls are alpha = 1, beta = 0, no clamp.
    """
    _routing(expanded_idx_to_permuted_idx)
    _dtype(gemm1_out, "gemm1_out", (torch.bfloat16, torch.float16))
    if gemm1_out.dim() != 2 or gemm1_out.shape[1] < 128 or gemm1_out.shape[1] % 2:
        _fail(ValueError, f"gemm1_out must be [P, 2I] with 2I even and >= 128, got {list(gemm1_out.shape)}")
    rows, inner = gemm1_out.shape
    _swiglu_controls(alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim, rows)
    _on_cuda(gemm1_out, expanded_idx_to_permuted_idx, alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx)
    _check_rows(expanded_idx_to_permuted_idx, rows, allow_unmapped=True)
    controls = [t for t in (alpha, beta, clamp_limit) if t is not None]
    if controls:
        _check_tile_map(cta_idx_xy_to_batch_idx, controls[0].shape[0], -(-rows // tile_tokens_dim))
    out = gemm1_out.new_zeros(rows, inner // 2)
    with torch.cuda.device(gemm1_out.device):
        _module().activation(gemm1_out, out, expanded_idx_to_permuted_idx, alpha, beta, clamp_limit,
                             cta_idx_xy_to_batch_idx, tile_tokens_dim, enable_pdl)
    return out


def activation_deepseek_fp8(gemm1_out, gemm1_out_scale, expanded_idx_to_permuted_idx, total_num_padded_tokens=None,
                            alpha=None, beta=None, clamp_limit=None, cta_idx_xy_to_batch_idx=None, tile_tokens_dim=0,
                            enable_pdl=False):
    """Dequantize, gate, requantize per 128 columns: (out [P, I] e4m3, out_scale [I/128, P] float32).

    gemm1_out [P, 2I] e4m3 with gemm1_out_scale [2I/128, P]; I % 128 == 0 (each 128-thread CTA reduces one
    output block, dev.cu:397-416). In fp32 (dev.cu:305-327): u = s[j // 128, p] * q[p, j],
    g = s[(I + j) // 128, p] * q[p, I + j], y = silu(g) * u exactly as ``activation`` (controls included).
    Per row p and block b of 128 output columns (dev.cu:330-352): amax = max |y| (cub block reduction, FMNMX:
    NaN dropped), out_scale[b, p] = max(fl(amax * fl(1/448)), FLT_MIN) (fast math turns / 448 into that FMUL),
    out[p, j] = e4m3_rn_sat(fl(y * MUFU.RCP(out_scale))) (dev.cu:369; not a correctly rounded division).
    Rows/blocks no (t, k) maps to stay 0.
    """
    _routing(expanded_idx_to_permuted_idx)
    _dtype(gemm1_out, "gemm1_out", (FP8,))
    if gemm1_out.dim() != 2 or gemm1_out.shape[1] < 256 or gemm1_out.shape[1] % 256:
        _fail(ValueError, f"gemm1_out must be [P, 2I] with I a multiple of 128, got {list(gemm1_out.shape)}")
    rows, inner = gemm1_out.shape
    _dtype(gemm1_out_scale, "gemm1_out_scale", (torch.float32,))
    _shape(gemm1_out_scale, "gemm1_out_scale", (inner // 128, rows))
    _swiglu_controls(alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim, rows)
    _on_cuda(gemm1_out, gemm1_out_scale, expanded_idx_to_permuted_idx, total_num_padded_tokens, alpha, beta,
             clamp_limit, cta_idx_xy_to_batch_idx)
    _check_rows(expanded_idx_to_permuted_idx, rows, allow_unmapped=True)
    controls = [t for t in (alpha, beta, clamp_limit) if t is not None]
    if controls:
        _check_tile_map(cta_idx_xy_to_batch_idx, controls[0].shape[0], -(-rows // tile_tokens_dim))
    total = _total(total_num_padded_tokens, rows, gemm1_out.device)
    out = _zeros((rows, inner // 2), FP8, gemm1_out.device)
    out_scale = gemm1_out_scale.new_zeros(inner // 256, rows)
    with torch.cuda.device(gemm1_out.device):
        _module().activation_deepseek_fp8(gemm1_out, gemm1_out_scale, out, out_scale, expanded_idx_to_permuted_idx,
                                          total, alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim,
                                          enable_pdl)
    return out, out_scale


def sf_from_linear(sf, layout):
    """The inverse of ``convertsf``: a [M, N] linear scale-factor tensor laid out as ``layout``, flat.

    R128c4: [ceil(M/128), N/4, 32, 4, 4], element (i, j) at (i//128, j//4, i%32, (i%128)//32, j%4).
    R8c4:   [ceil(M/8), N/4, 8, 4], element (i, j) at (i//8, j//4, i%8, j%4).
    R8c16:  [ceil(M/8), N/16, 8, 16], element (i, j) at (i//8, j//16, i%8, j%16).
    (trtllm/gen/SfLayoutDecl.h; padding rows are 0.)
    """
    if layout not in SF_LAYOUTS:
        _fail(ValueError, f"layout must be one of {', '.join(SF_LAYOUTS)}, got {layout!r}")
    rows_per_tile, cols_per_tile = {"R128c4": (128, 4), "R8c4": (8, 4), "R8c16": (8, 16)}[layout]
    m, n = sf.shape
    if n % cols_per_tile:
        _fail(ValueError, f"N must be a multiple of {cols_per_tile} for {layout}, got {n}")
    padded = _zeros((-(-m // rows_per_tile) * rows_per_tile, n), sf.dtype, sf.device)
    padded[:m] = sf
    if layout == "R128c4":
        tiles = padded.view(-1, 4, 32, n // 4, 4).permute(0, 3, 2, 1, 4)  # (i//128, j//4, i%32, (i%128)//32, j%4)
    else:
        tiles = padded.view(-1, rows_per_tile, n // cols_per_tile, cols_per_tile).permute(0, 2, 1, 3)
    return tiles.contiguous().view(-1)


def convertsf(sf, num_tokens, hidden_dim_sf, src_layout, enable_pdl=False):
    """out[i, j] = sf[offset_src(i, j)]: a swizzled scale-factor tensor back to linear [num_tokens, hidden_dim_sf].

    Bytes are moved 4 at a time as uint32 (dev.cu:546-561), so any one-byte dtype passes through unchanged.
    src_layout R128c4, R8c4 or R8c16 (the only conversions compiled, dev.cu:571-593; offsets dev.cu:441-524,
    the same as ``sf_from_linear``); hidden_dim_sf a multiple of 4 (16 for R8c16); sf holds at least
    ceil(num_tokens / tile_rows) * tile_rows * hidden_dim_sf bytes.
    """
    if src_layout not in SF_LAYOUTS:
        _fail(ValueError, f"src_layout must be one of {', '.join(SF_LAYOUTS)}, got {src_layout!r}")
    if sf.element_size() != 1:
        _fail(TypeError, f"sf must have a one-byte dtype, got {str(sf.dtype).removeprefix('torch.')}")
    rows_per_tile, cols_per_tile = {"R128c4": (128, 4), "R8c4": (8, 4), "R8c16": (8, 16)}[src_layout]
    if num_tokens < 1:
        _fail(ValueError, "num_tokens must be >= 1")
    if hidden_dim_sf < cols_per_tile or hidden_dim_sf % cols_per_tile:
        _fail(ValueError, f"hidden_dim_sf must be a positive multiple of {cols_per_tile} for {src_layout}, "
                          f"got {hidden_dim_sf}")
    need = -(-num_tokens // rows_per_tile) * rows_per_tile * hidden_dim_sf
    if sf.numel() < need:
        _fail(ValueError, f"sf must hold ceil(num_tokens / {rows_per_tile}) * {rows_per_tile} * hidden_dim_sf = "
                          f"{need} elements, got {sf.numel()}")
    _on_cuda(sf)
    out = _zeros((num_tokens, hidden_dim_sf), sf.dtype, sf.device)
    with torch.cuda.device(sf.device):
        _module().convertsf(sf, out, num_tokens, hidden_dim_sf, src_layout, enable_pdl)
    return out


def finalize_variant(num_tokens, hidden, hidden_padded, top_k, dtype):
    """(kernel, k_split): which finalize kernel run() launches (dev.cu:1154-1194), so which summation order.

    "small_batch" (dev.cu:975-1075) when ceil(H/256) * min(T, 8192) < 1184, both widths whole 16-byte vectors
    and 4 < top_k <= 64: k_split thread groups (the least power of two with 4 * k_split >= top_k); group g sums
    k = g, g + k_split, g + 2 k_split, ... in that order, then group 0 adds groups 1, 2, ... in order.
    "scalar" (dev.cu:677-729) when the grid is that small or a width is not whole vectors, and "vec_load"
    (dev.cu:853-961) otherwise: both sum k = 0, 1, ..., top_k - 1 in order (k_split 1).
    """
    elems_per_vector = 16 // torch.empty(0, dtype=dtype).element_size()
    small_grid = -(-hidden // 256) * min(num_tokens, 8192) < 1184
    aligned = hidden % elems_per_vector == 0 and hidden_padded % elems_per_vector == 0
    if small_grid and aligned and 4 < top_k <= 16 * 4:
        k_split = 1
        while k_split * 4 < top_k:
            k_split *= 2
        return "small_batch", k_split
    return ("scalar" if small_grid or not aligned else "vec_load"), 1


def _finalize_args(gemm2_out, expert_weights, expanded_idx_to_permuted_idx, hidden, weights_required):
    num_tokens, top_k = _routing(expanded_idx_to_permuted_idx)
    if top_k > MAX_TOP_K:
        _fail(ValueError, f"top_k must be <= {MAX_TOP_K} (finalize's shared-memory tables), got {top_k}")
    _dtype(gemm2_out, "gemm2_out", ELEMENT_DTYPES)
    if gemm2_out.dim() != 2 or gemm2_out.shape[1] < 1:
        _fail(ValueError, f"gemm2_out must be [P, hidden_padded], got {list(gemm2_out.shape)}")
    hidden = gemm2_out.shape[1] if hidden is None else hidden
    if not 1 <= hidden <= gemm2_out.shape[1]:
        _fail(ValueError, f"hidden must be in [1, hidden_padded={gemm2_out.shape[1]}], got {hidden}")
    if expert_weights is None and weights_required:
        _fail(ValueError, "expert_weights is required (finalizeDeepSeekKernel reads it unconditionally)")
    if expert_weights is not None:
        _dtype(expert_weights, "expert_weights", (torch.bfloat16, torch.float32))
        _shape(expert_weights, "expert_weights", (num_tokens, top_k))
    return num_tokens, hidden


def _aligned16(*tensors):
    if any(t is not None and t.data_ptr() % 16 for t in tensors):
        _fail(ValueError, "finalize's tensors must be 16-byte aligned (its 128-bit vector loads)")


def finalize(gemm2_out, expanded_idx_to_permuted_idx, expert_weights=None, hidden=None, gemm2_out2=None,
             enable_pdl=False):
    """out[t, h] = round(sum over mapped k of w[t, k] * x[p(t, k), h]), x = gemm2_out (+ gemm2_out2), in fp32.

    gemm2_out [P, hidden_padded] bf16/fp16/e4m3 -> [T, hidden] same dtype, hidden <= hidden_padded (the row
    stride; the unpadding is fused, dev.cu:707, 1036). Each term is one FFMA into the fp32 accumulator (SASS),
    with w = 1 when expert_weights is None; with gemm2_out2 the term is w * fl(x + x2) (dev.cu:706-711).
    Entries p = -1 are skipped; an all-unmapped token is 0. The summation order is ``finalize_variant``'s; one
    rounding to the output dtype at the store (dev.cu:726, 958, 1073).
    """
    num_tokens, hidden = _finalize_args(gemm2_out, expert_weights, expanded_idx_to_permuted_idx, hidden, False)
    if gemm2_out2 is not None:
        _dtype(gemm2_out2, "gemm2_out2", (gemm2_out.dtype,))
        _shape(gemm2_out2, "gemm2_out2", gemm2_out.shape)
    _on_cuda(gemm2_out, gemm2_out2, expert_weights, expanded_idx_to_permuted_idx)
    _check_rows(expanded_idx_to_permuted_idx, gemm2_out.shape[0], allow_unmapped=True)
    out = gemm2_out.new_empty(num_tokens, hidden)
    _aligned16(gemm2_out, gemm2_out2, out, expert_weights, expanded_idx_to_permuted_idx)
    with torch.cuda.device(gemm2_out.device):
        _module().finalize(gemm2_out, gemm2_out2, out, expert_weights, expanded_idx_to_permuted_idx, enable_pdl)
    return out


def finalize_deepseek_fp8(gemm2_out, expert_weights, expanded_idx_to_permuted_idx, gemm2_out_scale=None,
                          quantize_output=True, hidden=None, total_num_padded_tokens=None, enable_pdl=False):
    """Block-dequantize, combine, optionally requantize per 128 columns (dev.cu:1079-1139).

    acc[t, h] = sum over mapped k in order k = 0, 1, ... of fl(w[t, k] * s_in[h // 128, p]) * x[p, h], fp32
    (s_in = gemm2_out_scale [hidden_padded/128, P], or 1 when None). With quantize_output, per token and block b
    of 128 columns: amax = max |acc|, out_scale[b, t] = fl(amax * fl(1/448)) with NO lower bound,
    out = cast(fl(acc * MUFU.RCP(out_scale))) (dev.cu:1122-1136): an all-zero block gives out_scale 0 and NaN
    outputs. Without it, out = cast(acc). gemm2_out [P, hidden_padded] bf16/fp16/e4m3; out [T, hidden] the same
    dtype, hidden % 128 == 0.
    FlashInfer's own runner never takes this path (it sets mUseDeepSeekFp8 = false for finalize).
    Returns out, or (out, out_scale [hidden/128, T] float32).
    """
    num_tokens, hidden = _finalize_args(gemm2_out, expert_weights, expanded_idx_to_permuted_idx, hidden, True)
    if hidden % 128:
        _fail(ValueError, f"hidden must be a multiple of 128 (one 128-thread CTA per block), got {hidden}")
    rows, hidden_padded = gemm2_out.shape
    if gemm2_out_scale is not None:
        if hidden_padded % 128:
            _fail(ValueError, f"hidden_padded must be a multiple of 128 with gemm2_out_scale, got {hidden_padded}")
        _dtype(gemm2_out_scale, "gemm2_out_scale", (torch.float32,))
        _shape(gemm2_out_scale, "gemm2_out_scale", (hidden_padded // 128, rows))
    _on_cuda(gemm2_out, gemm2_out_scale, expert_weights, expanded_idx_to_permuted_idx, total_num_padded_tokens)
    _check_rows(expanded_idx_to_permuted_idx, rows, allow_unmapped=True)
    total = _total(total_num_padded_tokens, rows, gemm2_out.device)
    out = gemm2_out.new_empty(num_tokens, hidden)
    out_scale = torch.zeros(hidden // 128, num_tokens, dtype=torch.float32, device=gemm2_out.device) \
        if quantize_output else None
    _aligned16(gemm2_out, out, expert_weights, expanded_idx_to_permuted_idx)
    with torch.cuda.device(gemm2_out.device):
        _module().finalize_deepseek_fp8(gemm2_out, gemm2_out_scale, out, out_scale, expert_weights,
                                        expanded_idx_to_permuted_idx, total, enable_pdl)
    return out if out_scale is None else (out, out_scale)
