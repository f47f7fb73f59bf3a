// MUFU.EX2 and MUFU.RCP on every finite fp32 input (H200, 2026-12-01): the measured worst cases behind
// spec/bounds.py MUFU_EX2_REL and MUFU_RCP_REL, the fast-math expf and division of the trtllm-gen dev kernels
// (activation: expf(-g) = ex2.approx.ftz(g * -log2e), rcp of 1 + that; FP8 requant: y * rcp(scale)).
//
//   nvcc -O3 -arch=sm_90a -o /tmp/mufu_exhaustive spec/data/probes/mufu_exhaustive.cu && /tmp/mufu_exhaustive
//
// Prints JSON. ex2: per binade of |x| (exponent field 0..254, both signs) the max relative error of
// ex2.approx.ftz.f32(x) against exp2((double)x), over inputs whose true result is an fp32 normal (FTZ: a
// subnormal result is 0 by design, counted apart). rcp: for every x whose 1/x is an fp32 normal, the max relative
// error of rcp.approx.ftz.f32(x) against 1/(double)x, the count of each deviation in ulps from the correctly
// rounded __frcp_rn(x) (-2..2; "other" for anything else), and whether the deviation depends on the significand
// only (the spec's hopper_rcp table assumes it): every x is checked against x's significand at exponent 127.
#include <cstdio>
#include <cstdint>
#include <cmath>

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

__device__ __forceinline__ void atomic_max_pos(float* a, float v) {  // v >= 0: int order is float order
  atomicMax(reinterpret_cast<int*>(a), __float_as_int(v));
}

__global__ void sweep(uint64_t start, uint64_t n, float* ex2_rel, unsigned long long* ex2_sub,
                      float* rcp_rel, unsigned long long* rcp_dev, unsigned long long* rcp_conflicts) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t bits = (uint32_t)(start + i);
    float x = __uint_as_float(bits);
    if (!isfinite(x)) continue;
    int e = (bits >> 23) & 0xff;
    double ref = exp2((double)x);
    float y = ex2_approx(x);
    if (ref >= 1.1754943508222875e-38 && ref <= 3.4028234663852886e38) {
      atomic_max_pos(&ex2_rel[e], (float)(fabs((double)y - ref) / ref));
    } else if (ref < 1.1754943508222875e-38) {
      atomicAdd(ex2_sub, 1ull);
    }
    double r = 1.0 / (double)x;
    if (e == 0 || fabs(r) < 1.1754943508222875e-38 || fabs(r) > 3.4028234663852886e38) continue;
    float a = rcp_approx(x), rn = __frcp_rn(x);
    atomic_max_pos(&rcp_rel[e], (float)(fabs((double)a - r) / fabs(r)));
    int d = (int)__float_as_int(a) - (int)__float_as_int(rn);  // sign-magnitude: in ulps of magnitude
    atomicAdd(&rcp_dev[(d >= -2 && d <= 2) ? d + 2 : 5], 1ull);
    // the same significand at exponent 127 (x in [1, 2)): its deviation must be d
    float x1 = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
    int d1 = (int)__float_as_int(rcp_approx(x1)) - (int)__float_as_int(__frcp_rn(x1));
    if (d1 != d) atomicAdd(rcp_conflicts, 1ull);
  }
}

int main() {
  float *d_er, *d_rr, er[256], rr[256];
  unsigned long long *d_c, c[8];
  cudaMalloc(&d_er, sizeof er);
  cudaMalloc(&d_rr, sizeof rr);
  cudaMalloc(&d_c, sizeof c);
  cudaMemset(d_er, 0, sizeof er);
  cudaMemset(d_rr, 0, sizeof rr);
  cudaMemset(d_c, 0, sizeof c);
  const uint64_t total = 1ull << 32, chunk = 1ull << 30;
  for (uint64_t s = 0; s < total; s += chunk) sweep<<<132 * 16, 256>>>(s, chunk, d_er, d_c + 7, d_rr, d_c, d_c + 6);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { printf("{\"error\": \"%s\"}\n", cudaGetErrorString(err)); return 1; }
  cudaMemcpy(er, d_er, sizeof er, cudaMemcpyDeviceToHost);
  cudaMemcpy(rr, d_rr, sizeof rr, cudaMemcpyDeviceToHost);
  cudaMemcpy(c, d_c, sizeof c, cudaMemcpyDeviceToHost);
  float we = 0.f, wr = 0.f;
  printf("{\"binades\": [");
  for (int e = 0; e < 255; ++e) {
    we = fmaxf(we, er[e]);
    wr = fmaxf(wr, rr[e]);
    printf("%s[%d, %.9g, %.9g]", e ? ", " : "", e, er[e], rr[e]);
  }
  printf("], \"max_ex2_rel\": %.9g, \"log2_max_ex2_rel\": %.4f, \"ex2_subnormal_results\": %llu, "
         "\"max_rcp_rel\": %.9g, \"log2_max_rcp_rel\": %.4f, \"rcp_ulps_vs_rn\": {\"-2\": %llu, \"-1\": %llu, "
         "\"0\": %llu, \"1\": %llu, \"2\": %llu, \"other\": %llu}, \"rcp_significand_conflicts\": %llu}\n",
         we, log2f(we), c[7], wr, log2f(wr), c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
  return 0;
}
