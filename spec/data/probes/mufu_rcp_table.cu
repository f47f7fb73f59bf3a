// MUFU.RCP's deviation from the correctly rounded reciprocal for every fp32 significand (H200): the table that
// spec.quant.hopper_rcp has for the 128 bf16 significands only (MUFU_RCP_BF16_ULPS), extended to all 2^23. The
// exhaustive run measured that the deviation depends on the significand alone and is -1, 0 or +1 ulp (mufu_exhaustive.cu), so
// x = 1.m (exponent field 127) stands for every normal x. Needed by SGLang's quantizers with fp16 / fp32 inputs
// (v2: 448·MUFU.RCP(amax), amax any fp16 value; v1: x·MUFU.RCP(s), s any fp32), whose one-code findings on the
// H200 (docs/device-results.md, "SGLang kernels") are one such ulp.
//
//   nvcc -O3 -arch=sm_90a -o /tmp/rcp_table spec/data/probes/mufu_rcp_table.cu && /tmp/rcp_table OUT.bin
//
// OUT.bin: 2^23 / 4 bytes, significand m's deviation d in bits 2(m % 4)..2(m % 4)+1 of byte m / 4, coded d + 1
// (0: one ulp below RN, 1: equal, 2: one ulp above; 3 never: anything else is counted and reported). Prints the
// counts as JSON.
#include <cstdio>
#include <cstdint>

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__global__ void table(uint8_t* codes, unsigned long long* counts) {
  uint32_t m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= (1u << 23)) return;
  float x = __uint_as_float((127u << 23) | m);
  int d = (int)__float_as_uint(rcp_approx(x)) - (int)__float_as_uint(__frcp_rn(x));
  int code = (d >= -1 && d <= 1) ? d + 1 : 3;
  atomicAdd(&counts[code], 1ull);
  codes[m] = (uint8_t)code;
}

int main(int argc, char** argv) {
  const uint32_t n = 1u << 23;
  uint8_t* codes;
  unsigned long long* counts;
  cudaMallocManaged(&codes, n);
  cudaMallocManaged(&counts, 4 * sizeof(unsigned long long));
  for (int i = 0; i < 4; ++i) counts[i] = 0;
  table<<<n / 256, 256>>>(codes, counts);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { fprintf(stderr, "%s\n", cudaGetErrorString(err)); return 1; }
  FILE* f = fopen(argc > 1 ? argv[1] : "rcp_table.bin", "wb");
  for (uint32_t i = 0; i < n; i += 4) {
    uint8_t b = codes[i] | (codes[i + 1] << 2) | (codes[i + 2] << 4) | (codes[i + 3] << 6);
    fputc(b, f);
  }
  fclose(f);
  printf("{\"significands\": %u, \"below\": %llu, \"equal\": %llu, \"above\": %llu, \"other\": %llu}\n", n,
         counts[0], counts[1], counts[2], counts[3]);
  return 0;
}
