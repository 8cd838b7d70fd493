#include "verify/cuda.hpp"
#include "util/cleanup.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace hpcbake::verify::cuda {

namespace {

using util::Cleanup;

constexpr const char* install_hint =
    "the CUDA driver library is missing: install the NVIDIA driver (`hpcbake install`), "
    "or its libcuda1 / nvidia-driver-cuda package";

// Every CUDA driver API entry point verify uses, looked up in `lib`.
Result<Api> bind(DynLib& lib) {
  Api a;
  // Every lookup first (optional ones too), so a too-old library is reported whole.
  std::vector<Status> found;
#define HPCBAKE_CUDA_ENTRY(member, api, symbol, need, ret, params)                                                     \
  found.push_back(lib.look_up(a.member, #symbol, Need::need));
#include "verify/cuda_entry_points.def"
#undef HPCBAKE_CUDA_ENTRY
  HPCBAKE_TRY(all_found(found));
  return a;
}

} // namespace

LibraryProbe probe() {
  return probe_library(soname, install_hint, [](DynLib& lib) { return bind(lib); });
}

Result<Driver> Driver::load() {
  HPCBAKE_TRY_ASSIGN(auto lib, DynLib::open(soname, install_hint));
  HPCBAKE_TRY_ASSIGN(auto a, bind(lib));
  return Driver(std::move(lib), a);
}

std::string Driver::error(Result_ rc) const {
  const char* name = nullptr;
  if (api_.get_error_name && api_.get_error_name(rc, &name) == success && name) return fmt::format("{} ({})", name, rc);
  return fmt::format("CUresult {}", rc);
}

std::string Driver::describe(int ordinal) const {
  char bus[32] = {};
  Device dev = 0;
  if (api_.device_get_pci_bus_id && api_.device_get(&dev, ordinal) == success &&
      api_.device_get_pci_bus_id(bus, static_cast<int>(sizeof bus), dev) == success && bus[0])
    return fmt::format("CUDA device {} ({})", ordinal, std::string(bus, strnlen(bus, sizeof bus)));
  return fmt::format("CUDA device {}", ordinal);
}

Result_ Driver::init(std::chrono::steady_clock::time_point deadline, const std::function<void()>& sleep) const {
  for (;;) {
    const Result_ rc = api_.init(0);
    if (rc != error_system_not_ready || std::chrono::steady_clock::now() >= deadline) return rc;
    sleep();
  }
}

#define HPCBAKE_CU(call)                                                                                               \
  do {                                                                                                                 \
    if (const Result_ rc_ = (call); rc_ != success)                                                                    \
      return fail(ErrorKind::smoke_test, fmt::format("{} failed: {}", #call, error(rc_)));                             \
  } while (0)

Result<Context> Driver::open_context(int ordinal, Cleanup& cleanup) const {
  const auto& a = api_;
  Device dev = 0;
  HPCBAKE_CU(a.device_get(&dev, ordinal));
  Context ctx = nullptr;
  HPCBAKE_CU(a.ctx_create_v2(&ctx, 0, dev));
  cleanup.add([&a, ctx] { a.ctx_destroy_v2(ctx); });
  return ctx;
}

Result<Driver::VaddResult> Driver::vector_add(int ordinal, std::size_t elements) const {
  const auto& a = api_;
  Cleanup cleanup;
  HPCBAKE_TRY(open_context(ordinal, cleanup));

  std::vector<char> log(8192, '\0');
  int opts[] = {jit_error_log_buffer, jit_error_log_buffer_size_bytes};
  void* vals[] = {log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(log.size()))};
  Module mod = nullptr;
  if (const Result_ rc = a.module_load_data_ex(&mod, vadd_ptx, 2, opts, vals); rc != success)
    return fail(ErrorKind::smoke_test,
                fmt::format("the driver could not JIT-compile the vector-add PTX: {}{}{}", error(rc),
                            log[0] ? ": " : "", std::string(log.data(), strnlen(log.data(), log.size()))));
  cleanup.add([&a, mod] { a.module_unload(mod); });
  Function fn = nullptr;
  HPCBAKE_CU(a.module_get_function(&fn, mod, vadd_entry));

  const std::size_t bytes = elements * sizeof(float);
  std::vector<float> ha(elements), hb(elements), hc(elements, -1.0f);
  for (std::size_t i = 0; i < elements; ++i) {
    // Exact in float for every i below 2^22: any wrong element shows.
    ha[i] = static_cast<float>(i % 4194304);
    hb[i] = static_cast<float>((i * 7) % 4194304) + 0.5f;
  }
  DevicePtr da = 0, db = 0, dc = 0;
  for (DevicePtr* p : {&da, &db, &dc}) {
    HPCBAKE_CU(a.mem_alloc_v2(p, bytes));
    cleanup.add([&a, d = *p] { a.mem_free_v2(d); });
  }
  HPCBAKE_CU(a.memcpy_htod_v2(da, ha.data(), bytes));
  HPCBAKE_CU(a.memcpy_htod_v2(db, hb.data(), bytes));
  HPCBAKE_CU(a.memcpy_htod_v2(dc, hc.data(), bytes));
  unsigned n = static_cast<unsigned>(elements);
  void* params[] = {&da, &db, &dc, &n};
  const unsigned block = 256;
  const unsigned grid = static_cast<unsigned>((elements + block - 1) / block);
  HPCBAKE_CU(a.launch_kernel(fn, grid, 1, 1, block, 1, 1, 0, nullptr, params, nullptr));
  HPCBAKE_CU(a.ctx_synchronize());
  HPCBAKE_CU(a.memcpy_dtoh_v2(hc.data(), dc, bytes));

  VaddResult r;
  r.elements = elements;
  for (std::size_t i = 0; i < elements; ++i) {
    const float want = ha[i] + hb[i];
    if (hc[i] != want) {
      if (r.mismatches++ == 0) {
        r.first_bad = i;
        r.first_bad_value = hc[i];
        r.first_bad_expected = want;
      }
    }
  }
  return r;
}

Result<Driver::Bandwidth> Driver::bandwidth(int ordinal, std::size_t bw_bytes, int reps) const {
  const auto& a = api_;
  Cleanup cleanup;
  HPCBAKE_TRY(open_context(ordinal, cleanup));
  void* host = nullptr;
  HPCBAKE_CU(a.mem_alloc_host_v2(&host, bw_bytes));
  cleanup.add([&a, host] { a.mem_free_host(host); });
  std::memset(host, 0x5a, bw_bytes);
  DevicePtr dbuf = 0;
  HPCBAKE_CU(a.mem_alloc_v2(&dbuf, bw_bytes));
  cleanup.add([&a, dbuf] { a.mem_free_v2(dbuf); });
  Event start = nullptr, stop = nullptr;
  HPCBAKE_CU(a.event_create(&start, 0));
  cleanup.add([&a, start] { a.event_destroy_v2(start); });
  HPCBAKE_CU(a.event_create(&stop, 0));
  cleanup.add([&a, stop] { a.event_destroy_v2(stop); });

  // Best of `reps` after a warm-up: the question is what the link can do, not how noisy
  // the first copy is.
  auto time_copy = [&](bool h2d) -> Result<double> {
    double best = 0;
    for (int i = 0; i <= reps; ++i) {
      HPCBAKE_CU(a.event_record(start, nullptr));
      if (h2d)
        HPCBAKE_CU(a.memcpy_htod_v2(dbuf, host, bw_bytes));
      else
        HPCBAKE_CU(a.memcpy_dtoh_v2(host, dbuf, bw_bytes));
      HPCBAKE_CU(a.event_record(stop, nullptr));
      HPCBAKE_CU(a.event_synchronize(stop));
      float ms = 0;
      HPCBAKE_CU(a.event_elapsed_time(&ms, start, stop));
      if (i == 0 || ms <= 0) continue;
      best = std::max(best, static_cast<double>(bw_bytes) / (static_cast<double>(ms) * 1e-3) / 1e9);
    }
    return best;
  };
  Bandwidth bw;
  HPCBAKE_TRY_ASSIGN(auto h2d, time_copy(true));
  HPCBAKE_TRY_ASSIGN(auto d2h, time_copy(false));
  bw.h2d_gbs = h2d;
  bw.d2h_gbs = d2h;
  return bw;
}

// The entry points a P2P or load check needs that this library lacks, by name ("" when none).
namespace {
std::string missing(std::initializer_list<std::pair<bool, const char*>> fns) {
  std::string out;
  for (const auto& [present, name] : fns)
    if (!present) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}
} // namespace

#define HPCBAKE_CU_NEED(...)                                                                                           \
  do {                                                                                                                 \
    if (const std::string m_ = missing({__VA_ARGS__}); !m_.empty())                                                    \
      return fail(ErrorKind::smoke_test, "this CUDA driver library lacks " + m_,                                       \
                  "update the NVIDIA driver (`hpcbake install`)");                                                     \
  } while (0)

Result<Driver::PeerLink> Driver::peer_link(int reader, int source) const {
  const auto& a = api_;
  HPCBAKE_CU_NEED({a.device_can_access_peer != nullptr, "cuDeviceCanAccessPeer"});
  Device r = 0, s = 0;
  HPCBAKE_CU(a.device_get(&r, reader));
  HPCBAKE_CU(a.device_get(&s, source));
  int can = 0;
  HPCBAKE_CU(a.device_can_access_peer(&can, r, s));
  PeerLink link;
  link.access = can != 0;
  if (a.device_get_p2p_attribute) {
    int v = 0;
    if (a.device_get_p2p_attribute(&v, p2p_attribute_performance_rank, r, s) == success) link.perf_rank = v;
    if (a.device_get_p2p_attribute(&v, p2p_attribute_native_atomic_supported, r, s) == success) link.native_atomics = v;
  }
  return link;
}

Result<std::vector<Context>> Driver::open_contexts(int count, Cleanup& cleanup) const {
  std::vector<Context> out;
  for (int i = 0; i < count; ++i) {
    HPCBAKE_TRY_ASSIGN(auto ctx, open_context(i, cleanup));
    out.push_back(ctx);
  }
  return out;
}

Result<Driver::PeerCopy> Driver::peer_copy(const std::vector<Context>& ctx, int reader, int source,
                                           const PeerCopyRequest& req) const {
  const auto& a = api_;
  HPCBAKE_CU_NEED(
      {a.ctx_set_current != nullptr, "cuCtxSetCurrent"}, {a.ctx_enable_peer_access != nullptr, "cuCtxEnablePeerAccess"},
      {a.memcpy_peer_async != nullptr, "cuMemcpyPeerAsync"}, {a.stream_create != nullptr, "cuStreamCreate"},
      {a.stream_synchronize != nullptr, "cuStreamSynchronize"}, {a.stream_destroy_v2 != nullptr, "cuStreamDestroy_v2"});
  const Context rctx = ctx.at(static_cast<std::size_t>(reader)), sctx = ctx.at(static_cast<std::size_t>(source));
  Cleanup cleanup;
  // Each buffer is freed with its own context current.
  HPCBAKE_CU(a.ctx_set_current(sctx));
  DevicePtr src = 0;
  HPCBAKE_CU(a.mem_alloc_v2(&src, req.bytes));
  cleanup.add([&a, sctx, src] {
    a.ctx_set_current(sctx);
    a.mem_free_v2(src);
  });
  HPCBAKE_CU(a.ctx_set_current(rctx));
  if (const Result_ rc = a.ctx_enable_peer_access(sctx, 0); rc != success && rc != error_peer_access_already_enabled)
    return fail(ErrorKind::smoke_test, fmt::format("cuCtxEnablePeerAccess failed: {}", error(rc)));
  DevicePtr dst = 0;
  HPCBAKE_CU(a.mem_alloc_v2(&dst, req.bytes));
  cleanup.add([&a, rctx, dst] {
    a.ctx_set_current(rctx);
    a.mem_free_v2(dst);
  });
  Stream stream = nullptr;
  HPCBAKE_CU(a.stream_create(&stream, stream_non_blocking));
  cleanup.add([&a, rctx, stream] {
    a.ctx_set_current(rctx);
    a.stream_destroy_v2(stream);
  });
  Event start = nullptr, stop = nullptr;
  HPCBAKE_CU(a.event_create(&start, 0));
  cleanup.add([&a, start] { a.event_destroy_v2(start); });
  HPCBAKE_CU(a.event_create(&stop, 0));
  cleanup.add([&a, stop] { a.event_destroy_v2(stop); });

  // `n` copies of `bytes` between two events: milliseconds.
  auto timed = [&](std::size_t bytes, int n) -> Result<double> {
    HPCBAKE_CU(a.event_record(start, stream));
    for (int i = 0; i < n; ++i)
      HPCBAKE_CU(a.memcpy_peer_async(dst, rctx, src, sctx, bytes, stream));
    HPCBAKE_CU(a.event_record(stop, stream));
    HPCBAKE_CU(a.event_synchronize(stop));
    float ms = 0;
    HPCBAKE_CU(a.event_elapsed_time(&ms, start, stop));
    return static_cast<double>(ms);
  };
  HPCBAKE_CU(a.memcpy_peer_async(dst, rctx, src, sctx, req.bytes, stream)); // warm-up
  HPCBAKE_CU(a.stream_synchronize(stream));
  std::vector<double> gbs;
  for (int s = 0; s < std::max(1, req.samples); ++s) {
    HPCBAKE_TRY_ASSIGN(const double ms, timed(req.bytes, std::max(1, req.loops)));
    if (ms > 0) gbs.push_back(static_cast<double>(req.bytes) * std::max(1, req.loops) / (ms * 1e-3) / 1e9);
  }
  PeerCopy out;
  if (!gbs.empty()) {
    std::sort(gbs.begin(), gbs.end());
    const std::size_t m = gbs.size() / 2;
    out.gbs = gbs.size() % 2 ? gbs[m] : (gbs[m - 1] + gbs[m]) / 2;
  }
  HPCBAKE_TRY_ASSIGN(const double lat_ms, timed(req.latency_bytes, std::max(1, req.latency_loops)));
  out.latency_us = lat_ms * 1e3 / std::max(1, req.latency_loops);
  return out;
}

Result<Driver::Spin> Driver::launch_spin(Context ctx, int ordinal, unsigned long long ns, Cleanup& cleanup) const {
  const auto& a = api_;
  HPCBAKE_CU_NEED({a.ctx_set_current != nullptr, "cuCtxSetCurrent"},
                  {a.device_get_attribute != nullptr, "cuDeviceGetAttribute"},
                  {a.event_query != nullptr, "cuEventQuery"});
  HPCBAKE_CU(a.ctx_set_current(ctx));
  Device dev = 0;
  HPCBAKE_CU(a.device_get(&dev, ordinal));
  int sms = 0;
  HPCBAKE_CU(a.device_get_attribute(&sms, attribute_multiprocessor_count, dev));
  std::vector<char> log(8192, '\0');
  int opts[] = {jit_error_log_buffer, jit_error_log_buffer_size_bytes};
  void* vals[] = {log.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(log.size()))};
  Module mod = nullptr;
  if (const Result_ rc = a.module_load_data_ex(&mod, spin_ptx, 2, opts, vals); rc != success)
    return fail(ErrorKind::smoke_test,
                fmt::format("the driver could not JIT-compile the spin PTX: {}{}{}", error(rc), log[0] ? ": " : "",
                            std::string(log.data(), strnlen(log.data(), log.size()))));
  cleanup.add([&a, ctx, mod] {
    a.ctx_set_current(ctx);
    a.module_unload(mod);
  });
  Function fn = nullptr;
  HPCBAKE_CU(a.module_get_function(&fn, mod, spin_entry));
  const unsigned block = 256;
  const unsigned grid = static_cast<unsigned>(std::max(1, sms) * 2);
  Spin spin;
  spin.threads = grid * block;
  HPCBAKE_CU(a.mem_alloc_v2(&spin.out, spin.threads * sizeof(unsigned)));
  cleanup.add([&a, ctx, out = spin.out] {
    a.ctx_set_current(ctx);
    a.mem_free_v2(out);
  });
  unsigned long long duration = ns;
  DevicePtr out = spin.out;
  void* params[] = {&duration, &out};
  HPCBAKE_CU(a.event_create(&spin.done, 0));
  cleanup.add([&a, done = spin.done] { a.event_destroy_v2(done); });
  HPCBAKE_CU(a.launch_kernel(fn, grid, 1, 1, block, 1, 1, 0, nullptr, params, nullptr));
  HPCBAKE_CU(a.event_record(spin.done, nullptr));
  return spin;
}

bool Driver::spin_done(Context ctx, const Spin& spin) const {
  api_.ctx_set_current(ctx);
  return api_.event_query(spin.done) != error_not_ready;
}

Result<unsigned> Driver::finish_spin(Context ctx, const Spin& spin) const {
  const auto& a = api_;
  HPCBAKE_CU(a.ctx_set_current(ctx));
  HPCBAKE_CU(a.ctx_synchronize());
  std::vector<unsigned> rounds(spin.threads);
  HPCBAKE_CU(a.memcpy_dtoh_v2(rounds.data(), spin.out, rounds.size() * sizeof(unsigned)));
  return rounds.empty() ? 0u : *std::min_element(rounds.begin(), rounds.end());
}

#undef HPCBAKE_CU_NEED
#undef HPCBAKE_CU

} // namespace hpcbake::verify::cuda
