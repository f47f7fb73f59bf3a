// Two facts the spec takes without a measurement (issue 26; H200, 2026-12-01), on the H200:
//  1. SGLang v1's UE8M0 scale (sgl-kernel 0.4.4, per_token_group_quant_8bit.cu): y_s = exp2f(ceilf(log2f(max(s,
//     1e-10f)))) and the byte (uint8_t)(((int)log2f(y_s)) + 127), under -use_fast_math MUFU.LG2 / FRND.CEIL /
//     MUFU.EX2 / F2I.TRUNC (the shipped SASS). The fixture sglang-per_token_group_quant_8bit_v1-ue8m0_exponent_
//     plus_one says the byte is one above the exponent for every s < 1, and ceil(log2(2^k)) = k + 1. This prints
//     lg2.approx.ftz.f32(2^k) and ex2.approx.ftz.f32(k) for every k in -126..127, the byte v1 writes for 2^k, and,
//     over every positive normal s, how often ceil(lg2.approx(s)) differs from the exact ceil(log2 s) (the spec's
//     ue8m0_ceil), by class (s a power of two / not), with the first 32 such s.
//  2. rcp.approx.ftz.f32 outside the normal range (spec.hopper.hopper_rcp's FTZ rules, from the PTX ISA): every x
//     with exponent field 0, 253 (significand > 0), 254 or 255, both signs, against the rule; mismatches counted.
//
//   nvcc -O3 -arch=sm_90a -o /tmp/lg2 spec/data/probes/mufu_lg2_probe.cu && /tmp/lg2 > OUT.json
#include <cstdio>
#include <cstdint>

__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__global__ void powers(uint32_t* lg2_bits, uint32_t* ex2_bits, int* byte) {
  int k = (int)threadIdx.x - 126;  // 254 threads: k = -126..127
  if (k > 127) return;
  float p = __uint_as_float((uint32_t)(k + 127) << 23);
  lg2_bits[threadIdx.x] = __float_as_uint(lg2_approx(p));
  float e = ex2_approx((float)k);
  ex2_bits[threadIdx.x] = __float_as_uint(e);
  byte[threadIdx.x] = (int)lg2_approx(e) + 127;  // F2I truncates toward zero, as (int) in the source
}

// every positive normal s: ceil(lg2.approx(s)) against the exponent rounded up by the bits
__global__ void ceil_sweep(unsigned long long* counts, uint32_t* first, unsigned int* nfirst) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < 254ull << 23;
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t bits = (uint32_t)i + (1u << 23);
    int exact = (int)(bits >> 23) - 127 + ((bits & 0x7fffff) != 0);
    int dev = (int)ceilf(lg2_approx(__uint_as_float(bits)));
    if (dev != exact) {
      atomicAdd(&counts[(bits & 0x7fffff) == 0 ? 0 : 1], 1ull);
      unsigned int n = atomicAdd(nfirst, 1u);
      if (n < 32) first[n] = bits;
    }
  }
}

// rcp outside the normal range: the rule hopper_rcp states
__global__ void rcp_edges(unsigned long long* bad, uint32_t* first_bad) {
  const uint32_t fields[4] = {0, 253, 254, 255};
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < 8ull << 23;
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t m = (uint32_t)i & 0x7fffff, f = fields[(i >> 23) & 3], sign = (uint32_t)(i >> 25) << 31;
    if (f == 253 && m == 0) continue;  // 2^126: a normal reciprocal, covered by the table
    uint32_t x = sign | (f << 23) | m;
    uint32_t want = f == 0 ? (sign | 0x7f800000u) : (f == 255 && m != 0) ? 0xffffffffu : sign;
    uint32_t got = __float_as_uint(rcp_approx(__uint_as_float(x)));
    bool ok = want == 0xffffffffu ? (got & 0x7fffffffu) > 0x7f800000u : got == want;
    if (!ok && atomicAdd(bad, 1ull) == 0) *first_bad = x;
  }
}

int main() {
  uint32_t *lg2_bits, *ex2_bits, *first, *first_bad;
  int* byte;
  unsigned long long *counts, *bad;
  unsigned int* nfirst;
  cudaMallocManaged(&lg2_bits, 256 * 4);
  cudaMallocManaged(&ex2_bits, 256 * 4);
  cudaMallocManaged(&byte, 256 * 4);
  cudaMallocManaged(&first, 32 * 4);
  cudaMallocManaged(&first_bad, 4);
  cudaMallocManaged(&counts, 2 * 8);
  cudaMallocManaged(&bad, 8);
  cudaMallocManaged(&nfirst, 4);
  counts[0] = counts[1] = 0;
  *bad = 0;
  *nfirst = 0;
  *first_bad = 0;
  powers<<<1, 256>>>(lg2_bits, ex2_bits, byte);
  ceil_sweep<<<132 * 16, 256>>>(counts, first, nfirst);
  rcp_edges<<<132 * 16, 256>>>(bad, first_bad);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { printf("{\"error\": \"%s\"}\n", cudaGetErrorString(err)); return 1; }
  printf("{\"k\": [");
  for (int i = 0; i < 254; ++i) printf("%s%d", i ? ", " : "", i - 126);
  printf("],\n \"lg2_of_2k_bits\": [");
  for (int i = 0; i < 254; ++i) printf("%s%u", i ? ", " : "", lg2_bits[i]);
  printf("],\n \"ex2_of_k_bits\": [");
  for (int i = 0; i < 254; ++i) printf("%s%u", i ? ", " : "", ex2_bits[i]);
  printf("],\n \"v1_byte_of_2k\": [");
  for (int i = 0; i < 254; ++i) printf("%s%d", i ? ", " : "", byte[i]);
  printf("],\n \"ceil_lg2_wrong_at_powers_of_two\": %llu, \"ceil_lg2_wrong_elsewhere\": %llu, \"first_wrong_s_bits\": [",
         counts[0], counts[1]);
  unsigned int n = *nfirst < 32 ? *nfirst : 32;
  for (unsigned int i = 0; i < n; ++i) printf("%s%u", i ? ", " : "", first[i]);
  printf("],\n \"rcp_edge_mismatches\": %llu, \"rcp_edge_first_mismatch_bits\": %u}\n", *bad, *first_bad);
  return 0;
}
