// tanh.approx.f32 on every finite fp32 input (H200, 2026-12-01): the measured worst case behind the "tanh"
// sigmoid's key uncertainty (spec/bounds.py TANH_APPROX_REL; the PTX ISA documents 2^-11).
//
//   nvcc -O3 -arch=sm_90a -o /tmp/tanh_exhaustive spec/data/probes/tanh_exhaustive.cu && /tmp/tanh_exhaustive
//
// Prints JSON: per binade of |x| (exponent field 0..254) the max relative error of tanh.approx(x) against
// tanh((double)x), and the max absolute error of the routing kernels' sigmoid, fmaf(0.5, tanh.approx(0.5x), 0.5)
// (RoutingKernel.cuh:128 under -use_fast_math), against 1/(1 + exp(-(double)x)).
#include <cstdio>
#include <cstdint>
#include <cmath>

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void atomic_max_pos(float* a, float v) {  // v >= 0: int order is float order
  atomicMax(reinterpret_cast<int*>(a), __float_as_int(v));
}

__global__ void sweep(uint64_t start, uint64_t n, float* tanh_rel, float* sig_abs) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t bits = (uint32_t)(start + i);
    float x = __uint_as_float(bits);
    if (!isfinite(x)) continue;
    int e = (bits >> 23) & 0xff;
    double ref = tanh((double)x);
    float t = tanh_approx(x);
    if (ref != 0.0) atomic_max_pos(&tanh_rel[e], (float)(fabs((double)t - ref) / fabs(ref)));
    float s = fmaf(0.5f, tanh_approx(0.5f * x), 0.5f);
    double sref = 1.0 / (1.0 + exp(-(double)x));
    atomic_max_pos(&sig_abs[e], (float)fabs((double)s - sref));
  }
}

int main() {
  float *d_tr, *d_sa, tr[256], sa[256];
  cudaMalloc(&d_tr, sizeof tr);
  cudaMalloc(&d_sa, sizeof sa);
  cudaMemset(d_tr, 0, sizeof tr);
  cudaMemset(d_sa, 0, sizeof sa);
  const uint64_t total = 1ull << 32, chunk = 1ull << 30;
  for (uint64_t s = 0; s < total; s += chunk) sweep<<<132 * 16, 256>>>(s, chunk, d_tr, d_sa);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) { printf("{\"error\": \"%s\"}\n", cudaGetErrorString(err)); return 1; }
  cudaMemcpy(tr, d_tr, sizeof tr, cudaMemcpyDeviceToHost);
  cudaMemcpy(sa, d_sa, sizeof sa, cudaMemcpyDeviceToHost);
  float worst_rel = 0.f, worst_sig = 0.f;
  printf("{\"binades\": [");
  for (int e = 0; e < 255; ++e) {
    worst_rel = fmaxf(worst_rel, tr[e]);
    worst_sig = fmaxf(worst_sig, sa[e]);
    printf("%s[%d, %.9g, %.9g]", e ? ", " : "", e, tr[e], sa[e]);
  }
  printf("], \"max_tanh_rel\": %.9g, \"log2_max_tanh_rel\": %.4f, \"max_sigmoid_abs\": %.9g, "
         "\"log2_max_sigmoid_abs\": %.4f}\n", worst_rel, log2f(worst_rel), worst_sig, log2f(worst_sig));
  return 0;
}
