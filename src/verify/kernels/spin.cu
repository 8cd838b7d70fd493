// hpcbake verify: the load of gpu.N.clocks_under_load, as CUDA C++. Every thread runs dependent
// FMAs until the GPU's %globaltimer (nanoseconds) has advanced by `ns`, then writes how many
// rounds it ran (never 0 once it ran) to out[thread]; the sign test keeps the FMAs alive. The PTX
// hpcbake embeds (src/verify/kernels.cpp, spin_ptx) is hand-written from this at PTX ISA 4.0 for
// sm_50 (see vadd.cu for why).
extern "C" __global__ void hpcbake_spin(unsigned long long ns, unsigned* out) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  float x = static_cast<float>(threadIdx.x);
  unsigned rounds = 0;
  do {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      x = fmaf(x, 0.999f, 0.5f);
    ++rounds;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  if (x < -1.0f) rounds += 1u << 30;
  out[blockIdx.x * blockDim.x + threadIdx.x] = rounds;
}
