#pragma once
// The CUDA driver API (libcuda.so.1), loaded at run time, with its exact C ABI declared
// here (cuda.h of CUDA 11/12): handles are opaque pointers, CUdeviceptr is 64 bits, and
// the `_v2` entry points (cuCtxCreate_v2, cuMemAlloc_v2, cuMemcpyHtoD_v2, ...) are the
// ones cuda.h has mapped the plain names to since CUDA 3.2 (cuda_entry_points.def lists them).
// ctest abi/nvidia-headers checks every declaration here against NVIDIA's cuda.h.
//
// What verify asks of each GPU: a context, an embedded PTX vector-add kernel JIT-compiled
// by the driver (PTX ISA 4.0 for sm_50, so every GPU from the M60 to the H100 and later
// can run it), every element of the result checked, and pinned host<->device bandwidth
// timed with CUDA events.
#include "util/cleanup.hpp"
#include "verify/dynlib.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace hpcbake::verify::cuda {

using Result_ = int; // CUresult
inline constexpr Result_ success = 0;
inline constexpr Result_ error_no_device = 100;
inline constexpr Result_ error_system_not_ready = 802;

using Device = int; // CUdevice
struct CtxSt;
using Context = CtxSt*;
struct ModSt;
using Module = ModSt*;
struct FuncSt;
using Function = FuncSt*;
struct StreamSt;
using Stream = StreamSt*;
struct EventSt;
using Event = EventSt*;
using DevicePtr = unsigned long long; // CUdeviceptr on 64-bit hosts

inline constexpr int jit_error_log_buffer = 5;            // CU_JIT_ERROR_LOG_BUFFER
inline constexpr int jit_error_log_buffer_size_bytes = 6; // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES

// Every entry point verify binds, one member each (cuda_entry_points.def): `ctx_create_v2` is
// `Result_ (*)(Context*, unsigned, Device)`, bound to cuCtxCreate_v2, and so on. Optional ones
// (cuGetErrorName, CUDA 6.0+; cuDeviceGetPCIBusId, 4.1+) are nullptr when missing.
struct Api {
#define HPCBAKE_CUDA_ENTRY(member, api, symbol, need, ret, params) ret(*member) params = nullptr;
#include "verify/cuda_entry_points.def"
#undef HPCBAKE_CUDA_ENTRY
};

inline constexpr const char* soname = "libcuda.so.1";

// Loads the library and looks up every entry point above, calling none (verify --libraries).
LibraryProbe probe();

// The embedded kernel: `hpcbake_vadd(const float* a, const float* b, float* c, unsigned n)`.
extern const char* const vadd_ptx;
inline constexpr const char* vadd_entry = "hpcbake_vadd";

class Driver {
public:
  // dlopen + bind; cuInit is separate because it may have to wait for Fabric Manager.
  static Result<Driver> load();

  const Api& api() const { return api_; }
  // "CUDA_ERROR_SYSTEM_NOT_READY (802)"
  std::string error(Result_ rc) const;
  // "CUDA device 0 (0001:00:00.0)"; CUDA's ordinals need not follow nvidia-smi's order.
  std::string describe(int ordinal) const;

  // cuInit(0), retried while it answers CUDA_ERROR_SYSTEM_NOT_READY (Fabric Manager not
  // up yet) until `deadline`; returns the last result. `sleep` is called between tries.
  Result_ init(std::chrono::steady_clock::time_point deadline, const std::function<void()>& sleep) const;

  struct VaddResult {
    std::size_t elements = 0;
    std::size_t mismatches = 0;
    std::size_t first_bad = 0;
    float first_bad_value = 0, first_bad_expected = 0;
  };
  struct Bandwidth {
    double h2d_gbs = 0, d2h_gbs = 0; // GB/s, 1e9 bytes per second
  };
  // On device `ordinal`: a context, the vector add over `elements` floats, then pinned
  // H2D and D2H copies of `bw_bytes` (best of `reps` after one warm-up), each timed with
  // events. Errors (kind smoke_test) name the call that failed.
  Result<VaddResult> vector_add(int ordinal, std::size_t elements) const;
  Result<Bandwidth> bandwidth(int ordinal, std::size_t bw_bytes, int reps) const;

private:
  Driver(DynLib lib, Api api) : lib_(std::move(lib)), api_(api) {}
  // A context on device `ordinal`, destroyed when `cleanup` runs.
  Result<Context> open_context(int ordinal, util::Cleanup& cleanup) const;
  DynLib lib_;
  Api api_;
};

} // namespace hpcbake::verify::cuda
