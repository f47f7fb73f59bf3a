// tvm-ffi entry points for FlashInfer's trtllm-gen MoE "dev" kernels (DevKernel.h): permute, gated
// activation (plain and DeepSeek FP8), scale-factor layout conversion, finalize (plain and DeepSeek FP8).
//
// Each entry checks its tensors against what the kernel indexes (shapes, dtypes, the int32 offsets the
// kernels compute, the alignment of their vector loads), fills the kernel's Data struct and launches on
// the tensor's current stream. Outputs are caller-allocated (impls/flashinfer/trtllm_gen_ops.py).
// The math each kernel computes is written up in docs/trtllm_gen_dev_kernels.md.

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <limits>
#include <string>

#include "flashinfer/trtllm/fused_moe/DevKernel.h"
#include "tvm_ffi_utils.h"

namespace difftest_trtllm_gen {

namespace tg = batchedGemm::trtllm::gen;
using tvm::ffi::Optional;
using tvm::ffi::String;
using tvm::ffi::TensorView;

// A check that throws one line: `<what> (<got>)`.
#define REQUIRE(cond, Kind) \
  if (!(cond)) TVM_FFI_THROW(Kind)

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kDsBlock = 128;  // DeepSeek FP8 scale block along the hidden dimension.

void* ptr(TensorView const& t) { return static_cast<char*>(t.data_ptr()) + t.byte_offset(); }

template <typename T>
T* typed(TensorView const& t) {
  return static_cast<T*>(ptr(t));
}

template <typename T>
T* typed_or_null(Optional<TensorView> const& t) {
  return t.has_value() ? typed<T>(t.value()) : nullptr;
}

void check_contiguous(TensorView const& t, char const* name) {
  REQUIRE(t.IsContiguous(), ValueError) << name << " must be contiguous";
}

// Device checks come last in every entry, so each shape and dtype check before them also answers for
// CPU tensors (tests/impls/test_trtllm_gen_ops.py calls the binding without a GPU).
void check_on_device(std::initializer_list<std::pair<TensorView const*, char const*>> tensors) {
  TensorView const& first = *tensors.begin()->first;
  for (auto const& [t, name] : tensors) {
    if (t == nullptr) continue;
    REQUIRE(t->device().device_type == kDLCUDA, ValueError) << name << " must be a CUDA tensor";
    REQUIRE(t->device().device_id == first.device().device_id, ValueError)
        << name << " must be on the same device as " << tensors.begin()->second;
  }
}

TensorView const* opt(Optional<TensorView> const& t) { return t.has_value() ? &t.value() : nullptr; }

void check_shape2(TensorView const& t, char const* name, int64_t rows, int64_t cols) {
  REQUIRE(t.ndim() == 2 && t.size(0) == rows && t.size(1) == cols, ValueError)
      << name << " must have shape [" << rows << ", " << cols << "]";
}

void check_dtype(TensorView const& t, DLDataType d, char const* name, char const* dtype_name) {
  REQUIRE(t.dtype() == d, TypeError) << name << " must be " << dtype_name;
}

void check_aligned(TensorView const& t, int64_t bytes, char const* name) {
  REQUIRE(reinterpret_cast<uintptr_t>(ptr(t)) % bytes == 0, ValueError)
      << name << " must be " << bytes << "-byte aligned (its vector loads/stores)";
}

void check_int32_extent(int64_t numel, char const* name) {
  REQUIRE(numel <= kInt32Max, ValueError)
      << name << " has " << numel << " elements; the kernel's int32 offsets need <= 2^31-1";
}

tg::Dtype elt_dtype(TensorView const& t, char const* name) {
  DLDataType const d = t.dtype();
  if (d == dl_bfloat16) return tg::Dtype::Bfloat16;
  if (d == dl_float16) return tg::Dtype::Fp16;
  REQUIRE(d == dl_float8_e4m3fn, TypeError) << name << " must be bfloat16, float16 or float8_e4m3fn";
  return tg::Dtype::E4m3;
}

tg::Dtype expert_weight_dtype(TensorView const& t) {
  if (t.dtype() == dl_bfloat16) return tg::Dtype::Bfloat16;
  REQUIRE(t.dtype() == dl_float32, TypeError) << "expert_weights must be bfloat16 or float32";
  return tg::Dtype::Fp32;
}

// expanded_idx_to_permuted_idx: [num_tokens, top_k] int32; returns (num_tokens, top_k).
std::pair<int32_t, int32_t> routing_dims(TensorView const& idx) {
  check_contiguous(idx, "expanded_idx_to_permuted_idx");
  check_dtype(idx, dl_int32, "expanded_idx_to_permuted_idx", "int32");
  REQUIRE(idx.ndim() == 2 && idx.size(0) >= 1 && idx.size(1) >= 1, ValueError)
      << "expanded_idx_to_permuted_idx must be [num_tokens >= 1, top_k >= 1]";
  check_int32_extent(idx.numel(), "expanded_idx_to_permuted_idx");
  return {static_cast<int32_t>(idx.size(0)), static_cast<int32_t>(idx.size(1))};
}

void check_total_num_padded_tokens(TensorView const& t) {
  check_contiguous(t, "total_num_padded_tokens");
  check_dtype(t, dl_int32, "total_num_padded_tokens", "int32");
  REQUIRE(t.numel() == 1, ValueError) << "total_num_padded_tokens must have exactly one element";
}

// Per-128 block scales of a [rows, cols] tensor, stored [cols / 128, rows] (rows contiguous).
void check_block_scales(TensorView const& s, char const* name, int64_t rows, int64_t cols) {
  check_contiguous(s, name);
  check_dtype(s, dl_float32, name, "float32");
  check_shape2(s, name, cols / kDsBlock, rows);
}

// --- permute ---------------------------------------------------------------------------------------

void permute(TensorView input, TensorView output, TensorView expanded_idx_to_permuted_idx,
             TensorView total_num_padded_tokens, Optional<TensorView> input_scale,
             Optional<TensorView> output_scale, bool enable_pdl) {
  check_contiguous(input, "input");
  REQUIRE(input.ndim() == 2, ValueError) << "input must be [num_tokens, hidden]";
  auto const [num_tokens, top_k] = routing_dims(expanded_idx_to_permuted_idx);
  int64_t const hidden = input.size(1);
  REQUIRE(input.size(0) == num_tokens, ValueError)
      << "input rows must equal expanded_idx_to_permuted_idx rows (num_tokens)";
  REQUIRE(hidden >= 1, ValueError) << "hidden must be >= 1";
  check_contiguous(output, "output");
  REQUIRE(output.ndim() == 2 && output.size(1) == hidden, ValueError)
      << "output must be [num_padded_tokens, hidden]";
  REQUIRE(output.dtype() == input.dtype(), TypeError) << "output dtype must equal input dtype";
  check_int32_extent(input.numel(), "input");
  check_int32_extent(output.numel(), "output");
  check_total_num_padded_tokens(total_num_padded_tokens);
  REQUIRE(input_scale.has_value() == output_scale.has_value(), ValueError)
      << "input_scale and output_scale must be given together (DeepSeek FP8 permute)";
  bool const deepseek = input_scale.has_value();
  if (deepseek) {
    REQUIRE(hidden % kDsBlock == 0, ValueError) << "hidden must be a multiple of 128 with scales";
    check_block_scales(input_scale.value(), "input_scale", num_tokens, hidden);
    check_block_scales(output_scale.value(), "output_scale", output.size(0), hidden);
  }

  check_on_device({{&input, "input"}, {&output, "output"}, {&expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"},
                   {&total_num_padded_tokens, "total_num_padded_tokens"}, {opt(input_scale), "input_scale"},
                   {opt(output_scale), "output_scale"}});
  moe::dev::permute::Data data;
  data.mDtypeElt = elt_dtype(input, "input");
  data.mUsePdl = enable_pdl;
  data.mUseDeepSeekFp8 = deepseek;
  data.inPtr = ptr(input);
  data.outPtr = ptr(output);
  data.inDqSfsPtr = typed_or_null<float>(input_scale);
  data.outDqSfsPtr = typed_or_null<float>(output_scale);
  data.expandedIdxToPermutedIdx = typed<int32_t>(expanded_idx_to_permuted_idx);
  data.hiddenDim = static_cast<int32_t>(hidden);
  data.numTokens = num_tokens;
  data.topK = top_k;
  data.totalNumPaddedTokens = typed<int32_t>(total_num_padded_tokens);
  moe::dev::permute::run(data, get_stream(input.device()));
}

// --- activation ------------------------------------------------------------------------------------

// The optional SwiGLU controls, one float per local expert, looked up through the tile -> expert map.
void fill_swiglu_controls(moe::dev::activation::Data& data, Optional<TensorView> const& alpha,
                          Optional<TensorView> const& beta, Optional<TensorView> const& clamp_limit,
                          Optional<TensorView> const& cta_idx_xy_to_batch_idx,
                          int64_t tile_tokens_dim, int64_t num_padded_tokens) {
  int64_t num_local_experts = -1;
  auto check_control = [&](Optional<TensorView> const& t, char const* name) {
    if (!t.has_value()) return;
    TensorView const& v = t.value();
    check_contiguous(v, name);
    check_dtype(v, dl_float32, name, "float32");
    REQUIRE(v.ndim() == 1 && v.size(0) >= 1, ValueError) << name << " must be [num_local_experts]";
    REQUIRE(num_local_experts < 0 || v.size(0) == num_local_experts, ValueError)
        << name << " must have as many entries as the other SwiGLU controls";
    num_local_experts = v.size(0);
  };
  check_control(alpha, "alpha");
  check_control(beta, "beta");
  check_control(clamp_limit, "clamp_limit");
  bool const any = alpha.has_value() || beta.has_value() || clamp_limit.has_value();
  if (any) {
    REQUIRE(cta_idx_xy_to_batch_idx.has_value(), ValueError)
        << "cta_idx_xy_to_batch_idx is required with alpha, beta or clamp_limit";
    REQUIRE(tile_tokens_dim >= 1, ValueError) << "tile_tokens_dim must be >= 1";
    TensorView const& map = cta_idx_xy_to_batch_idx.value();
    check_contiguous(map, "cta_idx_xy_to_batch_idx");
    check_dtype(map, dl_int32, "cta_idx_xy_to_batch_idx", "int32");
    int64_t const num_tiles = (num_padded_tokens + tile_tokens_dim - 1) / tile_tokens_dim;
    REQUIRE(map.ndim() == 1 && map.size(0) >= num_tiles, ValueError)
        << "cta_idx_xy_to_batch_idx must be 1-D with >= ceil(num_padded_tokens / tile_tokens_dim) = "
        << num_tiles << " entries";
  }
  data.gatedActAlphaPtr = typed_or_null<float const>(alpha);
  data.gatedActBetaPtr = typed_or_null<float const>(beta);
  data.gatedActClampLimitPtr = typed_or_null<float const>(clamp_limit);
  data.ctaIdxXyToBatchIdx = any ? typed<int32_t const>(cta_idx_xy_to_batch_idx.value()) : nullptr;
  data.tileTokensDim = any ? static_cast<int32_t>(tile_tokens_dim) : 0;
}

void activation(TensorView input, TensorView output, TensorView expanded_idx_to_permuted_idx,
                Optional<TensorView> alpha, Optional<TensorView> beta,
                Optional<TensorView> clamp_limit, Optional<TensorView> cta_idx_xy_to_batch_idx,
                int64_t tile_tokens_dim, bool enable_pdl) {
  check_contiguous(input, "input");
  REQUIRE(input.dtype() == dl_bfloat16 || input.dtype() == dl_float16, TypeError)
      << "input must be bfloat16 or float16 (float8 goes through activation_deepseek_fp8)";
  REQUIRE(input.ndim() == 2, ValueError) << "input must be [num_padded_tokens, 2 * intermediate]";
  int64_t const padded = input.size(0);
  int64_t const inner = input.size(1);
  // run() launches inner / 128 CTAs along x: fewer than 128 columns would launch none.
  REQUIRE(inner >= 128 && inner % 2 == 0, ValueError)
      << "input columns (2 * intermediate) must be even and >= 128";
  auto const [num_tokens, top_k] = routing_dims(expanded_idx_to_permuted_idx);
  check_contiguous(output, "output");
  check_shape2(output, "output", padded, inner / 2);
  REQUIRE(output.dtype() == input.dtype(), TypeError) << "output dtype must equal input dtype";
  check_int32_extent(inner, "input row");

  moe::dev::activation::Data data;
  data.mDtypeElt = elt_dtype(input, "input");
  data.mUsePdl = enable_pdl;
  data.mUseDeepSeekFp8 = false;
  data.inPtr = ptr(input);
  data.outPtr = ptr(output);
  data.innerDim = static_cast<int32_t>(inner);
  data.numTokens = num_tokens;
  data.topK = top_k;
  data.expandedIdxToPermutedIdx = typed<int32_t>(expanded_idx_to_permuted_idx);
  data.totalNumPaddedTokens = nullptr;  // activationKernel never reads it
  fill_swiglu_controls(data, alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim,
                       padded);
  check_on_device({{&input, "input"}, {&output, "output"}, {&expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"},
                   {opt(alpha), "alpha"}, {opt(beta), "beta"}, {opt(clamp_limit), "clamp_limit"},
                   {opt(cta_idx_xy_to_batch_idx), "cta_idx_xy_to_batch_idx"}});
  moe::dev::activation::run(data, get_stream(input.device()));
}

void activation_deepseek_fp8(TensorView input, TensorView input_scale, TensorView output,
                             TensorView output_scale, TensorView expanded_idx_to_permuted_idx,
                             TensorView total_num_padded_tokens, Optional<TensorView> alpha,
                             Optional<TensorView> beta, Optional<TensorView> clamp_limit,
                             Optional<TensorView> cta_idx_xy_to_batch_idx, int64_t tile_tokens_dim,
                             bool enable_pdl) {
  check_contiguous(input, "input");
  check_dtype(input, dl_float8_e4m3fn, "input", "float8_e4m3fn");
  REQUIRE(input.ndim() == 2, ValueError) << "input must be [num_padded_tokens, 2 * intermediate]";
  int64_t const padded = input.size(0);
  int64_t const inner = input.size(1);
  // One 128-thread CTA per 128-column output block takes part in a block reduction: a partial
  // block would leave threads out of it.
  REQUIRE(inner >= 256 && inner % 256 == 0, ValueError)
      << "input columns (2 * intermediate) must be a multiple of 256";
  auto const [num_tokens, top_k] = routing_dims(expanded_idx_to_permuted_idx);
  check_block_scales(input_scale, "input_scale", padded, inner);
  check_contiguous(output, "output");
  check_dtype(output, dl_float8_e4m3fn, "output", "float8_e4m3fn");
  check_shape2(output, "output", padded, inner / 2);
  check_block_scales(output_scale, "output_scale", padded, inner / 2);
  check_total_num_padded_tokens(total_num_padded_tokens);
  check_int32_extent(inner, "input row");

  moe::dev::activation::Data data;
  data.mDtypeElt = tg::Dtype::E4m3;
  data.mUsePdl = enable_pdl;
  data.mUseDeepSeekFp8 = true;
  data.inPtr = ptr(input);
  data.outPtr = ptr(output);
  data.inDqSfsPtr = typed<float>(input_scale);
  data.outDqSfsPtr = typed<float>(output_scale);
  data.innerDim = static_cast<int32_t>(inner);
  data.numTokens = num_tokens;
  data.topK = top_k;
  data.expandedIdxToPermutedIdx = typed<int32_t>(expanded_idx_to_permuted_idx);
  data.totalNumPaddedTokens = typed<int32_t const>(total_num_padded_tokens);
  fill_swiglu_controls(data, alpha, beta, clamp_limit, cta_idx_xy_to_batch_idx, tile_tokens_dim,
                       padded);
  check_on_device({{&input, "input"}, {&input_scale, "input_scale"}, {&output, "output"},
                   {&output_scale, "output_scale"}, {&expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"},
                   {&total_num_padded_tokens, "total_num_padded_tokens"}, {opt(alpha), "alpha"}, {opt(beta), "beta"},
                   {opt(clamp_limit), "clamp_limit"}, {opt(cta_idx_xy_to_batch_idx), "cta_idx_xy_to_batch_idx"}});
  moe::dev::activation::run(data, get_stream(input.device()));
}

// --- convertsf -------------------------------------------------------------------------------------

void convertsf(TensorView input_sf, TensorView output_sf, int64_t num_tokens, int64_t hidden_dim_sf,
               String src_layout, bool enable_pdl) {
  check_contiguous(input_sf, "input_sf");
  REQUIRE(input_sf.dtype().bits == 8 && input_sf.dtype().lanes == 1, TypeError)
      << "input_sf must have a one-byte dtype (uint8, float8_e4m3fn, float8_e8m0fnu)";
  REQUIRE(num_tokens >= 1, ValueError) << "num_tokens must be >= 1";
  std::string const layout(src_layout);
  int64_t row_tile = 0;
  int64_t col_tile = 0;
  tg::SfLayout src = tg::SfLayout::Linear;
  if (layout == "R128c4") {
    src = tg::SfLayout::R128c4, row_tile = 128, col_tile = 4;
  } else if (layout == "R8c4") {
    src = tg::SfLayout::R8c4, row_tile = 8, col_tile = 4;
  } else if (layout == "R8c16") {
    src = tg::SfLayout::R8c16, row_tile = 8, col_tile = 16;
  } else {
    TVM_FFI_THROW(ValueError) << "src_layout must be R128c4, R8c4 or R8c16 (conversion is to Linear)";
  }
  // The kernel moves 4 scale factors per 32-bit word and computes tile offsets with
  // hidden_dim_sf / col_tile, so a partial column tile has no defined place.
  REQUIRE(hidden_dim_sf >= col_tile && hidden_dim_sf % col_tile == 0, ValueError)
      << "hidden_dim_sf must be a positive multiple of " << col_tile << " for " << layout;
  int64_t const padded_rows = (num_tokens + row_tile - 1) / row_tile * row_tile;
  REQUIRE(input_sf.numel() >= padded_rows * hidden_dim_sf, ValueError)
      << "input_sf must hold ceil(num_tokens / " << row_tile << ") * " << row_tile
      << " * hidden_dim_sf = " << padded_rows * hidden_dim_sf << " elements";
  check_int32_extent(padded_rows * hidden_dim_sf, "input_sf");
  check_contiguous(output_sf, "output_sf");
  REQUIRE(output_sf.dtype() == input_sf.dtype(), TypeError)
      << "output_sf dtype must equal input_sf dtype";
  check_shape2(output_sf, "output_sf", num_tokens, hidden_dim_sf);
  check_aligned(input_sf, 4, "input_sf");
  check_aligned(output_sf, 4, "output_sf");
  check_on_device({{&input_sf, "input_sf"}, {&output_sf, "output_sf"}});

  moe::dev::convertsf::Data data;
  data.mUsePdl = enable_pdl;
  data.inSfPtr = ptr(input_sf);
  data.outSfPtr = ptr(output_sf);
  data.hiddenDimSf = static_cast<int32_t>(hidden_dim_sf);
  data.numTokens = static_cast<int32_t>(num_tokens);
  data.sfLayoutSrc = src;
  data.sfLayoutDst = tg::SfLayout::Linear;
  moe::dev::convertsf::run(data, get_stream(input_sf.device()));
}

// --- finalize --------------------------------------------------------------------------------------

// Shared checks of input [num_padded_tokens, hidden_padded], output [num_tokens, hidden] and the
// routing tensors; fills everything but the DeepSeek fields.
moe::dev::finalize::Data finalize_data(TensorView const& input, TensorView const& output,
                                       Optional<TensorView> const& expert_weights,
                                       TensorView const& idx, bool enable_pdl) {
  check_contiguous(input, "input");
  REQUIRE(input.ndim() == 2 && input.size(1) >= 1, ValueError)
      << "input must be [num_padded_tokens, hidden_padded]";
  auto const [num_tokens, top_k] = routing_dims(idx);
  REQUIRE(top_k <= 64, ValueError) << "top_k must be <= 64 (finalize's shared-memory tables)";
  check_contiguous(output, "output");
  REQUIRE(output.ndim() == 2 && output.size(0) == num_tokens, ValueError)
      << "output must be [num_tokens, hidden]";
  REQUIRE(output.size(1) >= 1 && output.size(1) <= input.size(1), ValueError)
      << "output columns (hidden) must be in [1, input columns (hidden_padded)]";
  REQUIRE(output.dtype() == input.dtype(), TypeError) << "output dtype must equal input dtype";
  check_int32_extent(input.numel(), "input");
  check_int32_extent(output.numel(), "output");
  check_aligned(input, 16, "input");
  check_aligned(output, 16, "output");
  check_aligned(idx, 16, "expanded_idx_to_permuted_idx");

  moe::dev::finalize::Data data;
  data.mDtypeElt = elt_dtype(input, "input");
  data.mDtypeExpW = tg::Dtype::Bfloat16;
  data.mUsePdl = enable_pdl;
  data.inPtr = ptr(input);
  data.outPtr = ptr(output);
  data.expertWeightsPtr = nullptr;
  if (expert_weights.has_value()) {
    TensorView const& w = expert_weights.value();
    check_contiguous(w, "expert_weights");
    check_shape2(w, "expert_weights", num_tokens, top_k);
    check_aligned(w, 16, "expert_weights");
    data.mDtypeExpW = expert_weight_dtype(w);
    data.expertWeightsPtr = ptr(w);
  }
  data.expandedIdxToPermutedIdx = typed<int32_t>(idx);
  data.numTokens = num_tokens;
  data.numExperts = 0;  // no finalize kernel reads it
  data.topK = top_k;
  data.hiddenDim = static_cast<int32_t>(output.size(1));
  data.hiddenDimPadded = static_cast<int32_t>(input.size(1));
  data.totalNumPaddedTokens = nullptr;
  return data;
}

void finalize(TensorView input, Optional<TensorView> input2, TensorView output,
              Optional<TensorView> expert_weights, TensorView expanded_idx_to_permuted_idx,
              bool enable_pdl) {
  auto data = finalize_data(input, output, expert_weights, expanded_idx_to_permuted_idx, enable_pdl);
  if (input2.has_value()) {
    TensorView const& in2 = input2.value();
    check_contiguous(in2, "input2");
    REQUIRE(in2.dtype() == input.dtype(), TypeError) << "input2 dtype must equal input dtype";
    check_shape2(in2, "input2", input.size(0), input.size(1));
    check_aligned(in2, 16, "input2");
    data.inPtr2 = ptr(in2);
  }
  data.mUseDeepSeekFp8 = false;
  check_on_device({{&input, "input"}, {opt(input2), "input2"}, {&output, "output"}, {opt(expert_weights), "expert_weights"},
                   {&expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"}});
  moe::dev::finalize::run(data, get_stream(input.device()));
}

void finalize_deepseek_fp8(TensorView input, Optional<TensorView> input_scale, TensorView output,
                           Optional<TensorView> output_scale, TensorView expert_weights,
                           TensorView expanded_idx_to_permuted_idx,
                           TensorView total_num_padded_tokens, bool enable_pdl) {
  auto data = finalize_data(input, output, expert_weights, expanded_idx_to_permuted_idx, enable_pdl);
  int64_t const hidden = output.size(1);
  // finalizeDeepSeekKernel: 128 threads per CTA reduce one 128-column block of one token.
  REQUIRE(hidden % kDsBlock == 0, ValueError) << "output columns (hidden) must be a multiple of 128";
  check_total_num_padded_tokens(total_num_padded_tokens);
  if (input_scale.has_value()) {
    REQUIRE(input.size(1) % kDsBlock == 0, ValueError)
        << "input columns (hidden_padded) must be a multiple of 128 with input_scale";
    check_block_scales(input_scale.value(), "input_scale", input.size(0), input.size(1));
  }
  if (output_scale.has_value()) {
    check_block_scales(output_scale.value(), "output_scale", output.size(0), hidden);
  }
  check_on_device({{&input, "input"}, {opt(input_scale), "input_scale"}, {&output, "output"},
                   {opt(output_scale), "output_scale"}, {&expert_weights, "expert_weights"},
                   {&expanded_idx_to_permuted_idx, "expanded_idx_to_permuted_idx"},
                   {&total_num_padded_tokens, "total_num_padded_tokens"}});
  data.mUseDeepSeekFp8 = true;
  data.inDqSfsPtr = typed_or_null<float>(input_scale);
  data.outDqSfsPtr = typed_or_null<float>(output_scale);
  data.totalNumPaddedTokens = typed<int32_t const>(total_num_padded_tokens);
  moe::dev::finalize::run(data, get_stream(input.device()));
}

#undef REQUIRE

}  // namespace difftest_trtllm_gen

TVM_FFI_DLL_EXPORT_TYPED_FUNC(permute, difftest_trtllm_gen::permute);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(activation, difftest_trtllm_gen::activation);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(activation_deepseek_fp8, difftest_trtllm_gen::activation_deepseek_fp8);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(convertsf, difftest_trtllm_gen::convertsf);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(finalize, difftest_trtllm_gen::finalize);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(finalize_deepseek_fp8, difftest_trtllm_gen::finalize_deepseek_fp8);
