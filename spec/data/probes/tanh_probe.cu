// tanhf as the fused_topk_deepseek kernel evaluates it: built with and without -use_fast_math (the JIT's
// default is with it). Writes 0.5f*tanhf(0.5f*x)+0.5f for every x of a grid as raw float32 to argv[1].
// nvcc -arch=sm_90 [-use_fast_math] tanh_probe.cu; cuobjdump -sass shows MUFU.TANH where tanh.approx is used.
#include <cstdio>
#include <vector>
__global__ void sig(const float* x, float* s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) s[i] = 0.5f * tanhf(0.5f * x[i]) + 0.5f;
}
int main(int argc, char** argv) {
  const int n = 1 << 21;
  std::vector<float> x(n), s(n);
  for (int i = 0; i < n; i++) x[i] = -24.0f + 48.0f * (float)i / (float)n;
  float *dx, *ds;
  cudaMalloc(&dx, n * 4); cudaMalloc(&ds, n * 4);
  cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
  sig<<<n / 256, 256>>>(dx, ds, n);
  cudaMemcpy(s.data(), ds, n * 4, cudaMemcpyDeviceToHost);
  FILE* f = fopen(argv[1], "wb"); fwrite(s.data(), 4, n, f); fclose(f);
  return 0;
}
