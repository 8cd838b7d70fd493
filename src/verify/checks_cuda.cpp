// GPU checks that need the CUDA driver API and NVML together. Level 1: clocks, throttling and
// PCIe generation sampled through NVML while a spin kernel loads every GPU at once
// (gpu.N.clocks_under_load, gpu.N.pcie_gen_under_load). Level 2: GPU peer-to-peer copy bandwidth
// and latency for every ordered pair (cuda.p2p.I-J), as Azure's check_gpu_bw measures it with
// nvbandwidth.
#include "verify/checks.hpp"

#include "verify/cuda.hpp"
#include "verify/nvml.hpp"

#include "util/cleanup.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <thread>

namespace hpcbake::verify {

namespace {

using clock = std::chrono::steady_clock;

// The health checks every threshold and verdict here follows (Azure's own, for the same sizes).
constexpr const char* azure = "Azure/azurehpc-health-checks@0e0a1ac26a64b32ac4dd7632a529638505d3314a";

// What NVML showed of one GPU while the spin kernel ran.
struct LoadSeen {
  int samples = 0;
  nvml::Return reasons_rc = nvml::success;
  unsigned long long reasons = 0; // every reason bit seen in any sample
  nvml::Return clock_rc = nvml::success, max_clock_rc = nvml::success;
  unsigned sm_min = UINT_MAX, sm_max = 0, sm_limit = 0; // MHz
  nvml::Return gen_rc = nvml::success, max_gen_rc = nvml::success;
  unsigned gen_min = UINT_MAX, gen_max = 0, gen_limit = 0;
};

void sample(const nvml::Api& a, nvml::Device dev, LoadSeen& s) {
  ++s.samples;
  unsigned long long bits = 0;
  s.reasons_rc = a.device_get_current_clocks_event_reasons ? a.device_get_current_clocks_event_reasons(dev, &bits)
                 : a.device_get_current_clocks_throttle_reasons
                     ? a.device_get_current_clocks_throttle_reasons(dev, &bits)
                     : nvml::error_function_not_found;
  if (s.reasons_rc == nvml::success) s.reasons |= bits;
  unsigned v = 0;
  s.clock_rc =
      a.device_get_clock_info ? a.device_get_clock_info(dev, nvml::clock_sm, &v) : nvml::error_function_not_found;
  if (s.clock_rc == nvml::success) {
    s.sm_min = std::min(s.sm_min, v);
    s.sm_max = std::max(s.sm_max, v);
  }
  s.gen_rc = a.device_get_curr_pcie_link_generation ? a.device_get_curr_pcie_link_generation(dev, &v)
                                                    : nvml::error_function_not_found;
  if (s.gen_rc == nvml::success) {
    s.gen_min = std::min(s.gen_min, v);
    s.gen_max = std::max(s.gen_max, v);
  }
}

void limits(const nvml::Api& a, nvml::Device dev, LoadSeen& s) {
  s.max_clock_rc = a.device_get_max_clock_info ? a.device_get_max_clock_info(dev, nvml::clock_sm, &s.sm_limit)
                                               : nvml::error_function_not_found;
  s.max_gen_rc = a.device_get_max_pcie_link_generation ? a.device_get_max_pcie_link_generation(dev, &s.gen_limit)
                                                       : nvml::error_function_not_found;
}

void add_clock_check(Recorder& rec, const nvml::Session& s, unsigned index, const std::string& name,
                     const LoadSeen& seen, const std::string& load) {
  const std::string id = fmt::format("gpu.{}.clocks_under_load", index);
  const std::string title = name + ": clocks and throttling under load";
  const std::string expected = "no HW slowdown, HW thermal, power brake or SW thermal reason under load";
  // The failing bits are nvml.h's slowdowns (nvmlClocksEventReasonHwSlowdown, HwThermalSlowdown,
  // HwPowerBrakeSlowdown, SwThermalSlowdown), as the idle check reads them. Azure's check only logs
  // a warning, for every reason but idle, none and SW power cap, and only at idle.
  const std::string source = fmt::format("nvml.h clock event reasons (HW slowdown, HW thermal, HW power brake, SW "
                                         "thermal); {} customTests/azure_gpu_clock_throttling.nhc warns at idle",
                                         azure);
  if (seen.reasons_rc != nvml::success) {
    rec.add(make_check(id, 1, title, expected, "clock event reasons: " + s.error(seen.reasons_rc),
                       seen.reasons_rc == nvml::error_not_supported || seen.reasons_rc == nvml::error_function_not_found
                           ? Verdict::skip
                           : Verdict::fail,
                       fmt::format("`nvidia-smi -q -d PERFORMANCE -i {}`", index), source));
    return;
  }
  const unsigned long long bad = seen.reasons & nvml::throttle_bad;
  std::string clocks = "SM clock not reported";
  if (seen.clock_rc == nvml::success && seen.sm_max > 0)
    clocks = seen.sm_min == seen.sm_max ? fmt::format("SM clock {} MHz", seen.sm_max)
                                        : fmt::format("SM clock {}-{} MHz", seen.sm_min, seen.sm_max);
  if (seen.max_clock_rc == nvml::success) clocks += fmt::format(" of max {} MHz", seen.sm_limit);
  Check c =
      make_check(id, 1, title, expected,
                 fmt::format("{} ({}; {} sample{}); reasons: {} (0x{:x})", clocks, load, seen.samples,
                             seen.samples == 1 ? "" : "s", throttle_names(bad), seen.reasons),
                 bad ? Verdict::fail : Verdict::pass,
                 bad ? fmt::format("the GPU slows down under load: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER "
                                   "-i {}`; drain the node and report it (cooling or power delivery)",
                                   index)
                     : "",
                 source);
  if (seen.clock_rc == nvml::success && seen.sm_max > 0) c.value = seen.sm_min;
  rec.add(std::move(c));
}

void add_pcie_check(Recorder& rec, const nvml::Session& s, unsigned index, const std::string& name,
                    const LoadSeen& seen, const std::string& load) {
  const std::string id = fmt::format("gpu.{}.pcie_gen_under_load", index);
  const std::string title = name + ": PCIe link generation under load";
  const std::string source = "nvmlDeviceGetMaxPcieLinkGeneration (the GPU and system maximum)";
  const auto unsupported = [](nvml::Return rc) {
    return rc == nvml::error_not_supported || rc == nvml::error_function_not_found;
  };
  if (seen.gen_rc != nvml::success || seen.max_gen_rc != nvml::success) {
    const nvml::Return rc = seen.gen_rc != nvml::success ? seen.gen_rc : seen.max_gen_rc;
    rec.add(make_check(id, 1, title, "the maximum generation", "PCIe generation: " + s.error(rc),
                       unsupported(rc) ? Verdict::skip : Verdict::fail,
                       fmt::format("`nvidia-smi -q -d PCIE -i {}`", index), source));
    return;
  }
  // GPUs lower the link generation at idle to save power: only the generation under load counts.
  const bool ok = seen.gen_max >= seen.gen_limit;
  Check c = make_check(id, 1, title, fmt::format("generation {}", seen.gen_limit),
                       fmt::format("generation {} ({})", seen.gen_max, load), ok ? Verdict::pass : Verdict::fail,
                       ok ? ""
                          : fmt::format("the GPU's PCIe link trained below its maximum: `nvidia-smi -q -d PCIE -i {}` "
                                        "(also the width); reboot, or deallocate and start the VM (another host), "
                                        "and report the node if it persists",
                                        index),
                       source);
  c.value = seen.gen_max;
  c.threshold = seen.gen_limit;
  rec.add(std::move(c));
}

struct NvmlGpu {
  unsigned index = 0;
  nvml::Device dev = nullptr;
  std::string name;
};

std::vector<NvmlGpu> nvml_gpus(const nvml::Session& s) {
  std::vector<NvmlGpu> out;
  unsigned n = 0;
  if (s.api().device_get_count_v2(&n) != nvml::success) return out;
  for (unsigned i = 0; i < n; ++i) {
    nvml::Device dev = nullptr;
    if (s.api().device_get_handle_by_index_v2(i, &dev) == nvml::success) out.push_back({i, dev, s.describe(i, dev)});
  }
  return out;
}

// Level 1: the spin kernel on every CUDA device at once; NVML sampled every 100 ms until all have
// finished (at least once).
void load_checks(Recorder& rec, const cuda::Driver& drv, int count) {
  const auto& req = rec.request();
  auto session = nvml::Session::open();
  if (!session) return; // gpu.nvml has failed already
  const auto gpus = nvml_gpus(*session);
  util::Cleanup cleanup;
  auto ctx = drv.open_contexts(count, cleanup);
  const std::string hint = "`nvidia-smi -q -i <gpu>` and `dmesg | grep -i xid`; a GPU that cannot run a kernel "
                           "must be reset or the node reported";
  if (!ctx) {
    rec.add(make_check("cuda.load", 1, "spin kernel on every GPU (the load of gpu.N.clocks_under_load)",
                       "a context on every GPU", ctx.error().message, Verdict::fail, hint));
    return;
  }
  const auto ns = static_cast<unsigned long long>(std::chrono::nanoseconds(req.load_time).count());
  std::vector<cuda::Driver::Spin> spins(static_cast<std::size_t>(count));
  bool loaded = true;
  for (int i = 0; i < count; ++i) {
    auto spin = drv.launch_spin((*ctx)[static_cast<std::size_t>(i)], i, ns, cleanup);
    if (!spin) {
      loaded = false;
      rec.add(make_check(fmt::format("cuda.{}.load", i), 1, drv.describe(i) + ": spin kernel (load)",
                         "the kernel starts", spin.error().message, Verdict::fail, hint));
      continue;
    }
    spins[static_cast<std::size_t>(i)] = *spin;
  }
  rec.status(fmt::format("GPU load: spin kernel on {} GPU{} for {} ms, sampling clocks", count, count == 1 ? "" : "s",
                         req.load_time.count()));
  std::vector<LoadSeen> seen(gpus.size());
  for (std::size_t g = 0; g < gpus.size(); ++g)
    limits(session->api(), gpus[g].dev, seen[g]);
  const auto start = clock::now();
  const auto give_up = start + req.load_time + std::chrono::seconds(10);
  for (bool running = loaded; running;) {
    // Sample once the clocks have had time to rise (milliseconds), never at the launch itself.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (std::size_t g = 0; g < gpus.size(); ++g)
      sample(session->api(), gpus[g].dev, seen[g]);
    running = clock::now() < give_up && std::any_of(spins.begin(), spins.end(), [&](const cuda::Driver::Spin& s) {
                const auto i = static_cast<std::size_t>(&s - spins.data());
                return s.done && !drv.spin_done((*ctx)[i], s);
              });
  }
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  for (int i = 0; loaded && i < count; ++i) {
    const auto& spin = spins[static_cast<std::size_t>(i)];
    // A kernel still running 10 s past its time is a hung GPU: synchronizing would block the boot
    // unit until systemd's timeout, so it fails here and is left to the context's teardown.
    if (spin.done && !drv.spin_done((*ctx)[static_cast<std::size_t>(i)], spin)) {
      loaded = false;
      rec.add(make_check(fmt::format("cuda.{}.load", i), 1, drv.describe(i) + ": spin kernel (load)",
                         "every thread ran", fmt::format("still running {:.0f} s after its start", seconds),
                         Verdict::fail, hint));
      continue;
    }
    auto rounds = drv.finish_spin((*ctx)[static_cast<std::size_t>(i)], spin);
    if (!rounds || *rounds == 0) {
      loaded = false;
      rec.add(make_check(fmt::format("cuda.{}.load", i), 1, drv.describe(i) + ": spin kernel (load)",
                         "every thread ran", rounds ? "a thread never ran" : rounds.error().message, Verdict::fail,
                         hint));
    }
  }
  if (!loaded) return; // the clocks were not sampled under load: the cuda.N.load failure says why
  const std::string load = fmt::format("spin kernel on {} GPU{}, {:.1f} s", count, count == 1 ? "" : "s", seconds);
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    add_clock_check(rec, *session, gpus[g].index, gpus[g].name, seen[g], load);
    add_pcie_check(rec, *session, gpus[g].index, gpus[g].name, seen[g], load);
  }
}

// One ordered pair: `reader` copies `source`'s buffer into its own.
void p2p_pair(Recorder& rec, const Expectations& e, const cuda::Driver& drv, const std::vector<cuda::Context>& ctx,
              int reader, int source) {
  const auto& req = rec.request();
  const std::string id = fmt::format("cuda.p2p.{}-{}", reader, source);
  const std::string title = fmt::format("CUDA device {} reads device {} (peer-to-peer copy)", reader, source);
  const std::string expected =
      e.gpu_bw_p2p_gbs ? fmt::format(">= {} GB/s", number(*e.gpu_bw_p2p_gbs)) : "peer access; measured only";
  const std::string source_text =
      e.gpu_bw_p2p_gbs ? fmt::format("{} checks.gpu_bw_p2p_gbs ({} customTests/azure_gpu_bandwidth.nhc: nvbandwidth "
                                     "device_to_device_memcpy_read_ce)",
                                     e.size_file, azure)
                       : "no P2P threshold published for " + e.size_file;
  const std::string hint = "`nvidia-smi topo -m` (how the pair is connected), `nvidia-smi nvlink -s`; on NVSwitch "
                           "sizes Fabric Manager must be running; run nothing else on the GPUs while verifying";
  auto link = drv.peer_link(reader, source);
  if (!link) {
    rec.add(make_check(id, 2, title, expected, link.error().message, Verdict::fail, hint, source_text));
    return;
  }
  if (!link->access) {
    // Where NVSwitches connect every GPU to every other, every pair must reach the other; elsewhere
    // (NVLink bridges between pairs, PCIe) a pair without access is what the size is, as
    // nvbandwidth reports it N/A and Azure's check_gpu_bw skips it.
    const bool must = e.nvswitch_count > 0;
    rec.add(make_check(id, 2, title, expected, "cuDeviceCanAccessPeer: no peer access",
                       must ? Verdict::fail : Verdict::skip, must ? hint : "",
                       must ? source_text : "this size promises no GPU peer access"));
    return;
  }
  cuda::Driver::PeerCopyRequest pr;
  pr.bytes = req.p2p_bytes;
  pr.loops = req.p2p_loops;
  pr.samples = req.p2p_samples;
  auto copy = drv.peer_copy(ctx, reader, source, pr);
  if (!copy) {
    rec.add(make_check(id, 2, title, expected, copy.error().message, Verdict::fail, hint, source_text));
    return;
  }
  const bool ok = !e.gpu_bw_p2p_gbs || copy->gbs >= *e.gpu_bw_p2p_gbs;
  std::string observed = fmt::format("{:.1f} GB/s (median of {} x {} copies of {} MiB); {} B copy {:.2f} us", copy->gbs,
                                     pr.samples, pr.loops, pr.bytes >> 20, pr.latency_bytes, copy->latency_us);
  if (link->perf_rank >= 0) observed += fmt::format("; CUDA P2P performance rank {}", link->perf_rank);
  Check c =
      make_check(id, 2, title, expected, observed, ok ? Verdict::pass : Verdict::fail, ok ? "" : hint, source_text);
  c.value = copy->gbs;
  c.threshold = e.gpu_bw_p2p_gbs;
  rec.add(std::move(c));
}

// Level 2: every ordered pair of CUDA devices.
void p2p_checks(Recorder& rec, const Expectations& e, const cuda::Driver& drv, int count) {
  const std::string title = "GPU peer-to-peer copies";
  if (count < 2) {
    rec.add(make_check("cuda.p2p", 2, title, "every pair of GPUs",
                       fmt::format("needs at least two GPUs (CUDA sees {})", count), Verdict::skip));
    return;
  }
  if (!e.gpu_bw_p2p_gbs && e.nvswitch_count == 0) {
    // Nothing published to compare with (no check_gpu_bw P2P figure, no NVSwitch fabric): no
    // copies are made, as for every other check without an expectation.
    rec.add(make_check(
        "cuda.p2p", 2, title, "every pair of GPUs",
        fmt::format("no expectation published ({} has no checks.gpu_bw_p2p_gbs and no NVSwitches)", e.size_file),
        Verdict::skip));
    return;
  }
  util::Cleanup cleanup;
  auto ctx = drv.open_contexts(count, cleanup);
  if (!ctx) {
    rec.add(make_check("cuda.p2p", 2, title, "a context on every GPU", ctx.error().message, Verdict::fail,
                       "`nvidia-smi -q` and `dmesg | grep -i xid`"));
    return;
  }
  for (int i = 0; i < count; ++i)
    for (int j = 0; j < count; ++j) {
      if (i == j) continue;
      rec.status(fmt::format("GPU peer-to-peer: device {} reads device {}", i, j));
      p2p_pair(rec, e, drv, *ctx, i, j);
    }
}

} // namespace

void cuda_load_checks(Recorder& rec, const Expectations& e, int level) {
  if (level < 1) return;
  auto drv = cuda::Driver::load();
  if (!drv) return; // cuda.init has failed already
  int count = 0;
  if (drv->api().init(0) != cuda::success || drv->api().device_get_count(&count) != cuda::success || count < 1)
    return; // likewise
  load_checks(rec, *drv, count);
  if (level >= 2) p2p_checks(rec, e, *drv, count);
}

} // namespace hpcbake::verify
