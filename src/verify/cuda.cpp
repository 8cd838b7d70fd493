#include "verify/cuda.hpp"
#include "util/cleanup.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace hpcbake::verify::cuda {

// PTX ISA 4.0 (CUDA 6.0) for sm_50: the oldest target every supported GPU (M60 is sm_52,
// H100 sm_90) accepts; the driver JIT-compiles it for the GPU it runs on. c[i] = a[i] + b[i]
// for i < n, one thread per element.
const char* const vadd_ptx = R"(//
// hpcbake verify: vector add, hand-written PTX
//
.version 4.0
.target sm_50
.address_size 64

.visible .entry hpcbake_vadd(
	.param .u64 hpcbake_vadd_a,
	.param .u64 hpcbake_vadd_b,
	.param .u64 hpcbake_vadd_c,
	.param .u32 hpcbake_vadd_n
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<11>;

	ld.param.u64 	%rd1, [hpcbake_vadd_a];
	ld.param.u64 	%rd2, [hpcbake_vadd_b];
	ld.param.u64 	%rd3, [hpcbake_vadd_c];
	ld.param.u32 	%r2, [hpcbake_vadd_n];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r1, %r2;
	@%p1 bra 	DONE;
	cvta.to.global.u64 	%rd4, %rd1;
	cvta.to.global.u64 	%rd5, %rd2;
	cvta.to.global.u64 	%rd6, %rd3;
	mul.wide.u32 	%rd7, %r1, 4;
	add.s64 	%rd8, %rd4, %rd7;
	add.s64 	%rd9, %rd5, %rd7;
	add.s64 	%rd10, %rd6, %rd7;
	ld.global.f32 	%f1, [%rd8];
	ld.global.f32 	%f2, [%rd9];
	add.f32 	%f3, %f1, %f2;
	st.global.f32 	[%rd10], %f3;
DONE:
	ret;
}
)";

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

#undef HPCBAKE_CU

} // namespace hpcbake::verify::cuda
