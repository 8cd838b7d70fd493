// A fake libcuda.so.1: exactly the driver API entry points hpcbake verify binds, with the
// CUDA driver API's C ABI. Device memory is host memory behind synthetic device addresses
// (never dereferenceable by the caller); the "kernel" is the vector add the PTX declares,
// run only if the loaded image really is PTX naming that entry; copies advance a virtual
// clock at FAKE_BW_GBS so events time them deterministically. Peer copies (cuMemcpyPeerAsync)
// advance it at FAKE_P2P_GBS (or a FAKE_P2P_PAIR rate) once the reader's context has enabled
// access to the source's; the spin kernel advances it by the nanoseconds it is asked to spin and
// leaves its device "under load" until the context is synchronized, which the fake NVML asks
// through fake_cuda_busy (same process: dlopen RTLD_NOLOAD). Not NVIDIA code.
#include "scenario.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201, INVALID_PTX = 218,
                   INVALID_HANDLE = 400, NOT_FOUND = 500, SYSTEM_NOT_READY = 802;

bool initialized = false;
int gpu_count() {
  return static_cast<int>(fake::env_long("FAKE_GPU_COUNT", 2));
}

struct Ctx {
  int device;
  std::set<int> peers; // devices this context has enabled peer access to
};
struct Stream {
  Ctx* ctx;
};
thread_local Ctx* current = nullptr;

struct Module;
struct Function {
  Module* module;
  std::string name;
};
// Owns its functions, as a CUmodule owns its CUfunctions: cuModuleUnload frees them.
struct Module {
  std::string ptx;
  std::vector<std::unique_ptr<Function>> functions;
};
struct Event {
  double at = -1; // virtual seconds
};

// Synthetic device addresses: 0x7e00'0000'0000 + n * 2^32, never valid host pointers.
std::map<std::uint64_t, std::vector<unsigned char>> device_mem;
std::uint64_t next_addr = 0x7e0000000000ULL;
std::map<void*, std::size_t> pinned;
std::map<std::uint64_t, int> owner; // allocation -> device
double virtual_clock = 0;
std::set<int> busy; // devices running the spin kernel (launched, not yet synchronized)

// "0-1" in a comma-separated FAKE_* list: reader 0, source 1.
bool pair_listed(const char* name, int reader, int source) {
  for (const auto& item : fake::split(fake::env(name), ','))
    if (item == std::to_string(reader) + "-" + std::to_string(source)) return true;
  return false;
}

// FAKE_P2P_PAIR "0-1:120,2-3:80": that pair's rate; FAKE_P2P_GBS otherwise.
double p2p_gbs(int reader, int source) {
  const std::string key = std::to_string(reader) + "-" + std::to_string(source) + ":";
  for (const auto& item : fake::split(fake::env("FAKE_P2P_PAIR"), ','))
    if (item.rfind(key, 0) == 0) return std::strtod(item.c_str() + key.size(), nullptr);
  return fake::env_double("FAKE_P2P_GBS", 350);
}

// The device an allocation holding [addr, addr+len) belongs to, or -1.
int owner_of(std::uint64_t addr) {
  auto it = owner.upper_bound(addr);
  if (it == owner.begin()) return -1;
  return std::prev(it)->second;
}

// The allocation holding [addr, addr+len), or nullptr.
unsigned char* resolve(std::uint64_t addr, std::size_t len) {
  auto it = device_mem.upper_bound(addr);
  if (it == device_mem.begin()) return nullptr;
  --it;
  if (addr < it->first || addr + len > it->first + it->second.size()) return nullptr;
  return it->second.data() + (addr - it->first);
}

void advance(std::size_t bytes) {
  virtual_clock += static_cast<double>(bytes) / (fake::env_double("FAKE_BW_GBS", 50) * 1e9);
}

} // namespace

extern "C" {

CUresult cuInit(unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  // A GPU with no fabric to wait for (not on an NVSwitch system) starts as on a ready one.
  if (const auto fm = fake::fabric_manager(); fm == "never" || fm == "not_started") return SYSTEM_NOT_READY;
  initialized = true;
  return OK;
}

CUresult cuDriverGetVersion(int* v) {
  *v = 12080;
  return OK;
}

CUresult cuDeviceGetCount(int* n) {
  if (!initialized) return NOT_INITIALIZED;
  *n = gpu_count();
  return OK;
}

CUresult cuDeviceGet(int* dev, int ordinal) {
  if (!initialized) return NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= gpu_count()) return 101; // CUDA_ERROR_INVALID_DEVICE
  *dev = ordinal;
  return OK;
}

CUresult cuDeviceGetPCIBusId(char* buf, int len, int dev) {
  if (!initialized) return NOT_INITIALIZED;
  std::snprintf(buf, static_cast<std::size_t>(len), "%04X:00:00.0", dev + 1);
  return OK;
}

CUresult cuGetErrorName(CUresult rc, const char** name) {
  switch (rc) {
  case OK:
    *name = "CUDA_SUCCESS";
    return OK;
  case NOT_INITIALIZED:
    *name = "CUDA_ERROR_NOT_INITIALIZED";
    return OK;
  case INVALID_CONTEXT:
    *name = "CUDA_ERROR_INVALID_CONTEXT";
    return OK;
  case INVALID_PTX:
    *name = "CUDA_ERROR_INVALID_PTX";
    return OK;
  case NOT_FOUND:
    *name = "CUDA_ERROR_NOT_FOUND";
    return OK;
  case SYSTEM_NOT_READY:
    *name = "CUDA_ERROR_SYSTEM_NOT_READY";
    return OK;
  default:
    *name = nullptr;
    return INVALID_VALUE;
  }
}

CUresult cuCtxCreate_v2(Ctx** ctx, unsigned, int dev) {
  if (!initialized) return NOT_INITIALIZED;
  if (dev < 0 || dev >= gpu_count()) return 101;
  *ctx = new Ctx{dev, {}};
  current = *ctx;
  return OK;
}

CUresult cuCtxDestroy_v2(Ctx* ctx) {
  if (!ctx) return INVALID_CONTEXT;
  busy.erase(ctx->device);
  if (current == ctx) current = nullptr;
  delete ctx;
  return OK;
}

CUresult cuCtxSynchronize() {
  if (!current) return INVALID_CONTEXT;
  busy.erase(current->device);
  return OK;
}

CUresult cuCtxSetCurrent(Ctx* ctx) {
  current = ctx;
  return OK;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
  if (!initialized) return NOT_INITIALIZED;
  if (dev < 0 || dev >= gpu_count()) return 101;
  if (attribute != 16) return INVALID_VALUE; // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT only
  *value = static_cast<int>(fake::env_long("FAKE_SM_COUNT", 132));
  return OK;
}

CUresult cuDeviceCanAccessPeer(int* can, int dev, int peer) {
  if (!initialized) return NOT_INITIALIZED;
  if (dev < 0 || dev >= gpu_count() || peer < 0 || peer >= gpu_count()) return 101;
  *can = dev != peer && !pair_listed("FAKE_P2P_DENY", dev, peer);
  return OK;
}

CUresult cuDeviceGetP2PAttribute(int* value, int attribute, int src, int dst) {
  if (!initialized) return NOT_INITIALIZED;
  if (src < 0 || src >= gpu_count() || dst < 0 || dst >= gpu_count() || src == dst) return 101;
  const bool access = !pair_listed("FAKE_P2P_DENY", src, dst);
  switch (attribute) {
  case 1: // PERFORMANCE_RANK
    *value = 0;
    return OK;
  case 2: // ACCESS_SUPPORTED
  case 3: // NATIVE_ATOMIC_SUPPORTED
    *value = access ? 1 : 0;
    return OK;
  default:
    return INVALID_VALUE;
  }
}

CUresult cuCtxEnablePeerAccess(Ctx* peer, unsigned flags) {
  if (!current) return INVALID_CONTEXT;
  if (!peer || flags != 0) return INVALID_VALUE;
  if (peer->device == current->device || pair_listed("FAKE_P2P_DENY", current->device, peer->device))
    return 217;                                                // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
  if (!current->peers.insert(peer->device).second) return 704; // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
  return OK;
}

CUresult cuStreamCreate(Stream** s, unsigned) {
  if (!current) return INVALID_CONTEXT;
  *s = new Stream{current};
  return OK;
}

CUresult cuStreamSynchronize(Stream* s) {
  return s ? OK : INVALID_HANDLE;
}

CUresult cuStreamDestroy_v2(Stream* s) {
  delete s;
  return OK;
}

// Copies between devices; timed at the pair's rate once the destination's context has enabled
// access to the source's device, at half FAKE_BW_GBS (staged through host memory) otherwise.
CUresult cuMemcpyPeerAsync(std::uint64_t dst, Ctx* dst_ctx, std::uint64_t src, Ctx* src_ctx, std::size_t bytes,
                           Stream* stream) {
  if (!current || !dst_ctx || !src_ctx) return INVALID_CONTEXT;
  if (stream && stream->ctx != current) return INVALID_HANDLE;
  unsigned char* d = resolve(dst, bytes);
  const unsigned char* s = resolve(src, bytes);
  if (!d || !s || owner_of(dst) != dst_ctx->device || owner_of(src) != src_ctx->device) return INVALID_VALUE;
  std::memmove(d, s, bytes);
  const bool direct = dst_ctx->peers.count(src_ctx->device) > 0;
  const double gbs = direct ? p2p_gbs(dst_ctx->device, src_ctx->device) : fake::env_double("FAKE_BW_GBS", 50) / 2;
  virtual_clock += static_cast<double>(bytes) / (gbs * 1e9);
  return OK;
}

CUresult cuEventQuery(void*) {
  return OK; // every fake kernel and copy completes before its call returns
}

// For the fake NVML (same process): whether `dev` runs the spin kernel.
int fake_cuda_busy(int dev) {
  return busy.count(dev) ? 1 : 0;
}

CUresult cuModuleLoadDataEx(Module** mod, const void* image, unsigned n, int* options, void** values) {
  if (!current) return INVALID_CONTEXT;
  const std::string ptx = static_cast<const char*>(image);
  if (const std::string log = fake::env("FAKE_PTX_LOG"); !log.empty())
    if (FILE* f = std::fopen(log.c_str(), "a")) {
      std::fwrite(ptx.data(), 1, ptx.size(), f);
      std::fclose(f);
    }
  if (ptx.find(".version") == std::string::npos || ptx.find(".target") == std::string::npos ||
      ptx.find(".entry") == std::string::npos) {
    for (unsigned i = 0; i < n; ++i)
      if (options[i] == 5) std::snprintf(static_cast<char*>(values[i]), 64, "ptxas fatal: not PTX");
    return INVALID_PTX;
  }
  *mod = new Module{ptx};
  return OK;
}

CUresult cuModuleUnload(Module* mod) {
  delete mod;
  return OK;
}

CUresult cuModuleGetFunction(Function** fn, Module* mod, const char* name) {
  if (!mod) return INVALID_HANDLE;
  if (mod->ptx.find(std::string(".entry ") + name + "(") == std::string::npos) return NOT_FOUND;
  mod->functions.push_back(std::make_unique<Function>(Function{mod, name}));
  *fn = mod->functions.back().get();
  return OK;
}

CUresult cuMemAlloc_v2(std::uint64_t* ptr, std::size_t bytes) {
  if (!current) return INVALID_CONTEXT;
  *ptr = next_addr;
  device_mem[next_addr] = std::vector<unsigned char>(bytes);
  owner[next_addr] = current->device;
  next_addr += 1ULL << 32;
  return OK;
}

CUresult cuMemFree_v2(std::uint64_t ptr) {
  owner.erase(ptr);
  return device_mem.erase(ptr) ? OK : INVALID_VALUE;
}

CUresult cuMemAllocHost_v2(void** p, std::size_t bytes) {
  if (!current) return INVALID_CONTEXT;
  *p = std::malloc(bytes);
  pinned[*p] = bytes;
  return OK;
}

CUresult cuMemFreeHost(void* p) {
  if (!pinned.erase(p)) return INVALID_VALUE;
  std::free(p);
  return OK;
}

CUresult cuMemcpyHtoD_v2(std::uint64_t dst, const void* src, std::size_t bytes) {
  if (!current) return INVALID_CONTEXT;
  unsigned char* d = resolve(dst, bytes);
  if (!d) return INVALID_VALUE;
  std::memcpy(d, src, bytes);
  advance(bytes);
  return OK;
}

CUresult cuMemcpyDtoH_v2(void* dst, std::uint64_t src, std::size_t bytes) {
  if (!current) return INVALID_CONTEXT;
  const unsigned char* s = resolve(src, bytes);
  if (!s) return INVALID_VALUE;
  std::memcpy(dst, s, bytes);
  advance(bytes);
  return OK;
}

// hpcbake_vadd(a, b, c, n): c[i] = a[i] + b[i] for the threads the grid covers.
CUresult cuLaunchKernel(Function* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned, void*, void** params, void** extra) {
  if (!current) return INVALID_CONTEXT;
  if (fn && fn->name == "hpcbake_spin" && params && !extra) {
    // hpcbake_spin(ns, out): every thread spins `ns` and writes its round count (1 here).
    const std::uint64_t ns = *static_cast<std::uint64_t*>(params[0]);
    const std::uint64_t out = *static_cast<std::uint64_t*>(params[1]);
    const std::size_t threads = std::size_t{gx} * gy * gz * bx * by * bz;
    auto* rounds = reinterpret_cast<unsigned*>(resolve(out, threads * 4));
    if (!rounds) return 700;
    for (std::size_t i = 0; i < threads; ++i)
      rounds[i] = 1;
    virtual_clock += static_cast<double>(ns) * 1e-9;
    busy.insert(current->device);
    return OK;
  }
  if (!fn || fn->name != "hpcbake_vadd" || !params || extra) return INVALID_VALUE;
  const std::uint64_t a = *static_cast<std::uint64_t*>(params[0]);
  const std::uint64_t b = *static_cast<std::uint64_t*>(params[1]);
  const std::uint64_t c = *static_cast<std::uint64_t*>(params[2]);
  const unsigned n = *static_cast<unsigned*>(params[3]);
  const std::size_t threads = std::size_t{gx} * gy * gz * bx * by * bz;
  const std::size_t count = std::min<std::size_t>(n, threads);
  auto* fa = reinterpret_cast<float*>(resolve(a, count * 4));
  auto* fb = reinterpret_cast<float*>(resolve(b, count * 4));
  auto* fc = reinterpret_cast<float*>(resolve(c, count * 4));
  if (!fa || !fb || !fc) return 700; // CUDA_ERROR_ILLEGAL_ADDRESS
  for (std::size_t i = 0; i < count; ++i)
    fc[i] = fa[i] + fb[i];
  if (fake::indexed("FAKE_VADD_CORRUPT", current->device, 0) && count > 4321) fc[4321] += 1.0f;
  return OK;
}

CUresult cuEventCreate(Event** ev, unsigned) {
  *ev = new Event;
  return OK;
}

CUresult cuEventRecord(Event* ev, void*) {
  if (!current) return INVALID_CONTEXT;
  ev->at = virtual_clock;
  return OK;
}

CUresult cuEventSynchronize(Event* ev) {
  return ev->at < 0 ? 600 : OK;
} // CUDA_ERROR_NOT_READY

CUresult cuEventElapsedTime(float* ms, Event* start, Event* stop) {
  if (start->at < 0 || stop->at < 0) return 600;
  *ms = static_cast<float>((stop->at - start->at) * 1e3);
  return OK;
}

CUresult cuEventDestroy_v2(Event* ev) {
  delete ev;
  return OK;
}

} // extern "C"
