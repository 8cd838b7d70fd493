#pragma once
// Every GPU kernel verify launches, in one place: hand-written PTX (ISA 4.0, .target sm_50) that
// the driver JIT-compiles for the GPU it runs on, so the M60 (sm_52) and every later GPU accept
// it. Each has its CUDA C++ source next to it in src/verify/kernels/<name>.cu; the ctest
// cuda/kernels assembles every PTX below with NVIDIA's ptxas and compiles every .cu with nvcc.
#include <vector>

namespace hpcbake::verify::cuda {

// `hpcbake_vadd(const float* a, const float* b, float* c, unsigned n)`: c[i] = a[i] + b[i].
extern const char* const vadd_ptx;
inline constexpr const char* vadd_entry = "hpcbake_vadd";

// `hpcbake_spin(unsigned long long ns, unsigned* out)`: FMAs until %globaltimer has advanced by
// `ns`, then out[thread] = rounds run (at least 1).
extern const char* const spin_ptx;
inline constexpr const char* spin_entry = "hpcbake_spin";

struct Kernel {
  const char* name;  // "vadd": src/verify/kernels/vadd.cu
  const char* entry; // the .entry the PTX declares
  const char* ptx;
};
std::vector<Kernel> kernels();

} // namespace hpcbake::verify::cuda
