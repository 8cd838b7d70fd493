// hpcbake verify: the vector add of cuda.N.vector_add, as CUDA C++. The PTX hpcbake embeds
// (src/verify/kernels.cpp, vadd_ptx) is hand-written from this at PTX ISA 4.0 for sm_50, which
// CUDA 13's nvcc can no longer emit (its oldest target is compute_75); the ctest cuda/kernels
// checks that nvcc still compiles this source and that ptxas assembles the embedded PTX.
extern "C" __global__ void hpcbake_vadd(const float* a, const float* b, float* c, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
