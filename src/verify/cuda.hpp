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
#include "verify/kernels.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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

inline constexpr Result_ error_not_ready = 600;                   // CUDA_ERROR_NOT_READY
inline constexpr Result_ error_peer_access_already_enabled = 704; // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
inline constexpr int p2p_attribute_performance_rank = 1;          // CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK
inline constexpr int p2p_attribute_native_atomic_supported = 3;   // CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED
inline constexpr int attribute_multiprocessor_count = 16;         // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
inline constexpr unsigned stream_non_blocking = 1;                // CU_STREAM_NON_BLOCKING

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

  // --- peer to peer (cuda.p2p.I-J, level 2) ---
  // Whether device `reader` can access `source`'s memory (cuDeviceCanAccessPeer), with the
  // link's CUDA performance rank and native atomics where the driver reports them (-1: not).
  struct PeerLink {
    bool access = false;
    int perf_rank = -1, native_atomics = -1;
  };
  Result<PeerLink> peer_link(int reader, int source) const;
  // One context per device 0..count-1 (the order of the ordinals), destroyed by `cleanup`.
  Result<std::vector<Context>> open_contexts(int count, util::Cleanup& cleanup) const;
  // The defaults are nvbandwidth's (NVIDIA/nvbandwidth@5d3643680d22d8d92381686d8340b74304b93700
  // common.h: defaultBufferSize 512 MiB, defaultLoopCount 16, the median of the samples) with
  // the sample count Azure runs it with (Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a
  // customTests/azure_gpu_bandwidth.nhc: `nvbandwidth -t ... device_to_device_memcpy_read_ce -i 10`).
  struct PeerCopyRequest {
    std::size_t bytes = 512ull << 20; // nvbandwidth's default buffer (512 MiB)
    int loops = 16;                   // copies per sample (nvbandwidth's loopCount)
    int samples = 10;                 // samples; the median counts (Azure runs nvbandwidth -i 10)
    std::size_t latency_bytes = 4;
    int latency_loops = 100;
  };
  struct PeerCopy {
    double gbs = 0;        // median over the samples, 1e9 bytes per second
    double latency_us = 0; // mean time of one `latency_bytes` copy
  };
  // `reader` reads `source`'s buffer into its own: peer access enabled from the reader's context,
  // every copy cuMemcpyPeerAsync on a stream of the reader's context (nvbandwidth's
  // device_to_device_memcpy_read_ce: NVIDIA/nvbandwidth@040fd28131472ebea40898756c522fc134c03d44
  // testcases_ce.cpp DeviceToDeviceReadCE, "copy from dst to src (backwards) using src context"),
  // timed with events on that stream. What differs: nvbandwidth holds the queued copies behind a
  // spin kernel so that launch overhead does not count, and verifies the data; this does neither.
  Result<PeerCopy> peer_copy(const std::vector<Context>& ctx, int reader, int source, const PeerCopyRequest& req) const;

  // --- the load (gpu.N.clocks_under_load, level 1) ---
  struct Spin {
    DevicePtr out = 0;
    unsigned threads = 0;
    Event done = nullptr; // recorded after the launch
  };
  // Launches the spin kernel on `ordinal` (context `ctx`) for `ns` nanoseconds of GPU time, two
  // 256-thread blocks per multiprocessor (all resident at once); returns at once. The module and
  // the output buffer live until `cleanup` runs.
  Result<Spin> launch_spin(Context ctx, int ordinal, unsigned long long ns, util::Cleanup& cleanup) const;
  // Whether the spin kernel has finished (cuEventQuery); errors other than "not ready" count as done.
  bool spin_done(Context ctx, const Spin& spin) const;
  // Waits for the spin kernel and returns the fewest rounds a thread ran (0: some thread never ran).
  Result<unsigned> finish_spin(Context ctx, const Spin& spin) const;

private:
  Driver(DynLib lib, Api api) : lib_(std::move(lib)), api_(api) {}
  // A context on device `ordinal`, destroyed when `cleanup` runs.
  Result<Context> open_context(int ordinal, util::Cleanup& cleanup) const;
  DynLib lib_;
  Api api_;
};

} // namespace hpcbake::verify::cuda
