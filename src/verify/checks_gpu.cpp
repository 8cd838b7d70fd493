// GPU checks. Level 0 through NVML: the driver is loaded and sees the size's GPUs at the
// manifest's version. Level 1: each GPU's health through NVML, then real work through
// the CUDA driver API (a JIT-compiled kernel and pinned copies).
#include "verify/checks.hpp"

#include "verify/cuda.hpp"
#include "verify/nvml.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

namespace hpcbake::verify {

namespace {

using clock = std::chrono::steady_clock;

constexpr const char* fm_hint =
    "nvidia-fabricmanager is not running or has not finished training the NVSwitch fabric: `systemctl status "
    "nvidia-fabricmanager`, `journalctl -u nvidia-fabricmanager`; its version must equal the driver's "
    "(`nvidia-smi -q | grep -i fabric`)";

// The plan promises the size's GPU model by its PCI device ids (gpu_pci_ids): every NVIDIA GPU on
// the bus must be one of them. A real H100 SXM5 (0x2330) checked as Standard_NC40ads_H100_v5,
// whose H100 NVL is 0x2321, passed every other check (docs/verify.md, "On a real GPU").
void check_pci_ids(Recorder& rec, const Expectations& e) {
  if (e.gpu_pci_ids.empty()) return;
  std::vector<std::string> other;
  int gpus = 0;
  for (const auto& d : rec.request().host->pci) {
    if (d.role != detect::PciRole::nvidia_gpu) continue;
    ++gpus;
    const std::string id = fmt::format("0x{:04x}", d.device);
    const bool known = std::any_of(e.gpu_pci_ids.begin(), e.gpu_pci_ids.end(),
                                   [&](const std::string& want) { return util::iequals(want, id); });
    if (!known) other.push_back(fmt::format("{} at {}", id, d.address));
  }
  const std::string expected = fmt::format("{} ({})", e.gpu_model, util::join(e.gpu_pci_ids, ", "));
  if (gpus == 0) { // nothing to tell the model by; gpu.count says how many there should be
    rec.add(make_check("gpu.pci_ids", 0, "GPU model (PCI device id)", expected, "no NVIDIA GPU on the PCI bus",
                       Verdict::skip, "", e.size_file + " gpu.pci_ids"));
    return;
  }
  const std::string observed = other.empty() ? fmt::format("{} of {} NVIDIA GPUs on the PCI bus", gpus, gpus)
                                             : fmt::format("another model: {}", util::join(other, ", "));
  rec.add(make_check("gpu.pci_ids", 0, "GPU model (PCI device id)", expected, observed,
                     other.empty() ? Verdict::pass : Verdict::fail,
                     other.empty() ? ""
                                   : fmt::format("this machine's GPUs are not the {} this size has: check the VM "
                                                 "size (`hpcbake detect`), or verify with the size the machine is",
                                                 e.gpu_model),
                     e.size_file + " gpu.pci_ids"));
}

// ": GPU idle, ..." for the bits that are no fault; empty when there are none.
std::string benign_throttle_names(unsigned long long bits) {
  std::vector<std::string> names;
  if (bits & nvml::throttle_gpu_idle) names.emplace_back("GPU idle");
  if (bits & nvml::throttle_applications_clocks) names.emplace_back("applications clocks setting");
  if (bits & nvml::throttle_sw_power_cap) names.emplace_back("SW power cap");
  return names.empty() ? std::string() : ": " + util::join(names, ", ");
}

std::string fabric_state_name(unsigned char state) {
  switch (state) {
  case nvml::fabric_not_supported:
    return "not supported";
  case nvml::fabric_not_started:
    return "not started";
  case nvml::fabric_in_progress:
    return "in progress";
  case nvml::fabric_completed:
    return "completed";
  default:
    return fmt::format("state {}", static_cast<int>(state));
  }
}

struct Gpu {
  unsigned index = 0;
  nvml::Device dev = nullptr;
  std::string name; // "GPU 0 (NVIDIA H100 80GB HBM3, 00000001:00:00.0)"
};

// Per-GPU NVML health (level 1), one check each.
void check_persistence(Recorder& rec, const nvml::Session& s, const Gpu& g) {
  const auto& a = s.api();
  const std::string id = fmt::format("gpu.{}.", g.index);
  if (a.device_get_persistence_mode) {
    nvml::EnableState mode = 0;
    const auto rc = a.device_get_persistence_mode(g.dev, &mode);
    const bool ok = rc == nvml::success && mode == nvml::feature_enabled;
    rec.add(make_check(
        id + "persistence", 1, g.name + ": persistence mode", "enabled",
        rc != nvml::success ? s.error(rc)
        : ok                ? "enabled"
                            : "disabled",
        rc == nvml::error_not_supported ? Verdict::skip
        : ok                            ? Verdict::pass
                                        : Verdict::fail,
        ok ? "" : "`systemctl enable --now nvidia-persistenced` (without it every CUDA start re-initializes the GPU)",
        "NVIDIA driver persistence daemon guide"));
  }
}

void check_ecc_mode(Recorder& rec, const nvml::Session& s, const Gpu& g) {
  const auto& a = s.api();
  const std::string id = fmt::format("gpu.{}.", g.index);
  const auto unsupported = [&](const char* what, nvml::Return rc) {
    return fmt::format("{} not reported: {}", what, s.error(rc));
  };
  if (a.device_get_ecc_mode) {
    nvml::EnableState cur = 0, pending = 0;
    const auto rc = a.device_get_ecc_mode(g.dev, &cur, &pending);
    if (rc == nvml::error_not_supported) {
      rec.add(make_check(id + "ecc_mode", 1, g.name + ": ECC mode", "enabled", unsupported("ECC", rc), Verdict::skip));
    } else {
      const bool ok = rc == nvml::success && cur == nvml::feature_enabled;
      std::string observed = rc != nvml::success ? s.error(rc) : cur == nvml::feature_enabled ? "enabled" : "disabled";
      if (rc == nvml::success && pending != cur)
        observed +=
            fmt::format(" ({} after the next reset)", pending == nvml::feature_enabled ? "enabled" : "disabled");
      rec.add(make_check(id + "ecc_mode", 1, g.name + ": ECC mode", "enabled", observed,
                         ok ? Verdict::pass : Verdict::fail,
                         ok ? "" : fmt::format("`nvidia-smi -i {} -e 1`, then reboot", g.index),
                         "azurehpc-health-checks check_gpu_ecc"));
    }
  }
}

void check_ecc_errors(Recorder& rec, const nvml::Session& s, const Gpu& g) {
  const auto& a = s.api();
  const std::string id = fmt::format("gpu.{}.", g.index);
  if (a.device_get_total_ecc_errors) {
    unsigned long long n = 0;
    const auto rc = a.device_get_total_ecc_errors(g.dev, nvml::memory_error_uncorrected, nvml::volatile_ecc, &n);
    Check c =
        make_check(id + "ecc_errors", 1, g.name + ": volatile uncorrectable ECC errors", "0",
                   rc == nvml::success ? std::to_string(n) : s.error(rc),
                   rc == nvml::error_not_supported ? Verdict::skip
                   : rc == nvml::success && n == 0 ? Verdict::pass
                                                   : Verdict::fail,
                   rc == nvml::success && n == 0
                       ? ""
                       : fmt::format("uncorrectable memory errors since the last driver load: drain the node, "
                                     "`nvidia-smi -q -d ECC,ROW_REMAPPER -i {}`; reset the GPU (`nvidia-smi -r -i "
                                     "{}`) or redeploy the VM, and report it if they return",
                                     g.index, g.index),
                   "azurehpc-health-checks check_gpu_ecc");
    if (rc == nvml::success) {
      c.value = static_cast<double>(n);
      c.threshold = 0;
    }
    rec.add(std::move(c));
  }
}

void check_memory_remap(Recorder& rec, const nvml::Session& s, const Gpu& g) {
  const auto& a = s.api();
  const std::string id = fmt::format("gpu.{}.", g.index);
  // Row remapping (A100 and later); retired pages on older GPUs.
  nvml::Return rr = nvml::error_function_not_found;
  unsigned corr = 0, unc = 0, pending = 0, failure = 0;
  if (a.device_get_remapped_rows) rr = a.device_get_remapped_rows(g.dev, &corr, &unc, &pending, &failure);
  if (rr == nvml::success) {
    const bool ok = !pending && !failure;
    rec.add(make_check(id + "row_remap", 1, g.name + ": row remapping", "no pending remap, no remap failure",
                       fmt::format("{} correctable, {} uncorrectable rows remapped; pending: {}; failure: {}", corr,
                                   unc, pending ? "yes" : "no", failure ? "yes" : "no"),
                       ok ? Verdict::pass : Verdict::fail,
                       ok ? ""
                       : failure
                           ? "row remapping failed: the GPU must be replaced; deallocate the VM and report the node"
                           : fmt::format("a row remap waits for a GPU reset: `nvidia-smi -r -i {}` or reboot", g.index),
                       "NVIDIA A100/H100 row remapping (nvidia-smi -q -d ROW_REMAPPER)"));
  } else if (a.device_get_retired_pages_pending_status) {
    nvml::EnableState p = 0;
    const auto rc = a.device_get_retired_pages_pending_status(g.dev, &p);
    const bool ok = rc == nvml::success && p != nvml::feature_enabled;
    rec.add(make_check(
        id + "retired_pages", 1, g.name + ": page retirement", "no retirement pending",
        rc == nvml::success ? (p == nvml::feature_enabled ? "retirement pending" : "none pending") : s.error(rc),
        rc == nvml::error_not_supported ? Verdict::skip
        : ok                            ? Verdict::pass
                                        : Verdict::fail,
        ok ? "" : "retired pages take effect at the next driver load: reboot", "nvidia-smi -q -d PAGE_RETIREMENT"));
  }
}

void check_throttle(Recorder& rec, const nvml::Session& s, const Gpu& g) {
  const auto& a = s.api();
  const std::string id = fmt::format("gpu.{}.", g.index);
  if (a.device_get_current_clocks_throttle_reasons) {
    unsigned long long bits = 0;
    const auto rc = a.device_get_current_clocks_throttle_reasons(g.dev, &bits);
    const bool ok = rc == nvml::success && (bits & nvml::throttle_bad) == 0;
    rec.add(make_check(id + "throttle", 1, g.name + ": clock throttling", "no HW slowdown, thermal or power brake",
                       rc == nvml::success
                           ? fmt::format("{} (reasons 0x{:x}{})", throttle_names(bits & nvml::throttle_bad), bits,
                                         benign_throttle_names(bits))
                           : s.error(rc),
                       rc == nvml::error_not_supported ? Verdict::skip
                       : ok                            ? Verdict::pass
                                                       : Verdict::fail,
                       ok ? ""
                          : fmt::format("`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i {}`; a GPU held in "
                                        "slowdown while idle needs a reset or the node reported",
                                        g.index),
                       "nvmlDeviceGetCurrentClocksThrottleReasons"));
  }
}

void check_nvlink(Recorder& rec, const Expectations& e, const nvml::Session& s, const Gpu& g) {
  const auto& a = s.api();
  const std::string id = fmt::format("gpu.{}.", g.index);
  if (e.nvswitch_count > 0 && a.device_get_nvlink_state) {
    int active = 0;
    std::vector<std::string> down;
    for (unsigned link = 0; link < nvml::nvlink_max_links; ++link) {
      nvml::EnableState st = 0;
      const auto rc = a.device_get_nvlink_state(g.dev, link, &st);
      if (rc != nvml::success) continue; // links this GPU does not have
      if (st == nvml::feature_enabled)
        ++active;
      else
        down.push_back(std::to_string(link));
    }
    const bool ok = active > 0 && down.empty();
    rec.add(make_check(id + "nvlink", 1, g.name + ": NVLink", "every link active",
                       down.empty() ? fmt::format("{} active", active)
                                    : fmt::format("{} active; inactive: {}", active, util::join(down, ", ")),
                       ok ? Verdict::pass : Verdict::fail,
                       ok ? "" : fmt::format("`nvidia-smi nvlink -s -i {}`; {}", g.index, fm_hint),
                       fmt::format("{} gpu.nvswitch_count", e.size_file)));
  }
}

void nvml_health(Recorder& rec, const Expectations& e, const nvml::Session& s, const Gpu& g) {
  check_persistence(rec, s, g);
  check_ecc_mode(rec, s, g);
  check_ecc_errors(rec, s, g);
  check_memory_remap(rec, s, g);
  check_throttle(rec, s, g);
  check_nvlink(rec, e, s, g);
}

// Fabric Manager: every GPU's fabric state COMPLETED, waiting until `deadline`.
void fabric_checks(Recorder& rec, const Expectations& e, const nvml::Session& s, const std::vector<Gpu>& gpus,
                   clock::time_point deadline) {
  const auto& a = s.api();
  const std::string source = e.size_file + " gpu.fabric_manager";
  if (!a.device_get_gpu_fabric_info) {
    for (const auto& g : gpus)
      rec.add(make_check(fmt::format("gpu.{}.fabric", g.index), 1, g.name + ": NVSwitch fabric (Fabric Manager)",
                         "completed", "this driver's NVML has no nvmlDeviceGetGpuFabricInfo (before R525)",
                         Verdict::skip, "", source));
    return;
  }
  std::vector<nvml::GpuFabricInfo> info(gpus.size());
  std::vector<nvml::Return> rcs(gpus.size());
  const auto start = clock::now();
  for (;;) {
    int waiting = 0;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      info[i] = {};
      rcs[i] = a.device_get_gpu_fabric_info(gpus[i].dev, &info[i]);
      if (rcs[i] == nvml::success &&
          (info[i].state == nvml::fabric_not_started || info[i].state == nvml::fabric_in_progress))
        ++waiting;
    }
    const auto now = clock::now();
    if (waiting == 0 || now >= deadline) break;
    rec.status(fmt::format("waiting for Fabric Manager: {} of {} GPUs not ready ({:.0f} s of {:.0f} s)", waiting,
                           gpus.size(), std::chrono::duration<double>(now - start).count(),
                           std::chrono::duration<double>(deadline - start).count()));
    std::this_thread::sleep_for(std::min<clock::duration>(std::chrono::milliseconds(500), deadline - now));
  }
  const double waited = std::chrono::duration<double>(clock::now() - start).count();
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const auto& g = gpus[i];
    const auto& f = info[i];
    const std::string id = fmt::format("gpu.{}.fabric", g.index);
    const std::string title = g.name + ": NVSwitch fabric (Fabric Manager)";
    if (rcs[i] == nvml::error_not_supported || (rcs[i] == nvml::success && f.state == nvml::fabric_not_supported)) {
      // What NVML said, not a guess at why: GPUs before Hopper answer this way, and so does a Hopper
      // GPU that is not on an NVSwitch fabric (a real H100 80GB HBM3 alone, driver 580.159.04: the
      // state NOT_SUPPORTED; docs/verify.md, "On a real GPU"). gpu.nvswitch_count checks the switches.
      rec.add(make_check(
          id, 1, title, "completed",
          fmt::format("no fabric state: nvmlDeviceGetGpuFabricInfo {}; CUDA start-up checks Fabric "
                      "Manager, gpu.nvswitch_count the NVSwitches",
                      rcs[i] == nvml::success ? "reports the state NOT_SUPPORTED" : "returned " + s.error(rcs[i])),
          Verdict::skip, "", source));
      continue;
    }
    if (rcs[i] != nvml::success) {
      rec.add(make_check(id, 1, title, "completed", s.error(rcs[i]), Verdict::fail, fm_hint, source));
      continue;
    }
    const bool ok = f.state == nvml::fabric_completed && f.status == nvml::success;
    std::string observed = fabric_state_name(f.state);
    if (f.state == nvml::fabric_completed)
      observed += fmt::format(", status {}, clique {}", s.error(f.status), f.clique_id);
    else
      observed += fmt::format(" after {:.0f} s", waited);
    rec.add(make_check(id, 1, title, "completed, status NVML_SUCCESS", observed, ok ? Verdict::pass : Verdict::fail,
                       ok ? "" : fm_hint, source));
  }
}

void cuda_checks(Recorder& rec, const Expectations& e, std::optional<unsigned> nvml_count, clock::time_point deadline) {
  const auto& req = rec.request();
  auto drv = cuda::Driver::load();
  const std::string init_title = "CUDA driver API initializes and sees the GPUs";
  const int want = nvml_count ? static_cast<int>(*nvml_count) : e.gpu_count;
  const std::string init_expected = fmt::format("cuInit succeeds; {} device{}", want, want == 1 ? "" : "s");
  if (!drv) {
    rec.add(
        make_check("cuda.init", 1, init_title, init_expected, drv.error().message, Verdict::fail, drv.error().hint));
    return;
  }
  const auto start = clock::now();
  const auto rc = drv->init(e.fabric_manager ? deadline : start, [&] {
    rec.status("CUDA: system not ready (Fabric Manager), retrying");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  });
  if (rc != cuda::success) {
    std::string hint = "`nvidia-smi` and `dmesg | grep -i -e nvrm -e xid` show why the driver refuses CUDA";
    std::string observed = fmt::format("cuInit: {}", drv->error(rc));
    if (rc == cuda::error_system_not_ready) {
      hint = fm_hint;
      observed += fmt::format(" after {:.0f} s", std::chrono::duration<double>(clock::now() - start).count());
    } else if (rc == cuda::error_no_device && !module_loaded(*req.fs, "nvidia")) {
      // What Debian's real libcuda 535 answers when the nvidia module is not loaded: the
      // driver, not the GPU, is what is missing.
      hint = "the nvidia kernel module is not loaded (libcuda reports no device without it): `modprobe nvidia`, "
             "then `dmesg | grep -i nvrm` for why it failed";
    } else if (rc == cuda::error_no_device) {
      hint = "no CUDA-capable GPU is visible: `nvidia-smi -L`; check CUDA_VISIBLE_DEVICES is unset";
    }
    rec.add(make_check("cuda.init", 1, init_title, init_expected, observed, Verdict::fail, hint));
    return;
  }
  int count = 0, version = 0;
  drv->api().device_get_count(&count);
  drv->api().driver_get_version(&version);
  const bool count_ok = count == want;
  rec.add(make_check(
      "cuda.init", 1, init_title, init_expected,
      fmt::format("{} device{}, CUDA {}.{}", count, count == 1 ? "" : "s", version / 1000, (version % 1000) / 10),
      count_ok ? Verdict::pass : Verdict::fail,
      count_ok ? "" : "CUDA sees a different number of GPUs than NVML: check CUDA_VISIBLE_DEVICES and `nvidia-smi -L`",
      nvml_count ? "NVML device count" : e.size_file + " gpu.count"));

  for (int i = 0; i < count; ++i) {
    const std::string name = drv->describe(i);
    const std::string id = fmt::format("cuda.{}.", i);
    auto v = drv->vector_add(i, req.vadd_elements);
    if (!v) {
      rec.add(make_check(id + "vector_add", 1, name + ": vector add (PTX JIT, launch, copy back)",
                         fmt::format("{} elements correct", req.vadd_elements), v.error().message, Verdict::fail,
                         "`nvidia-smi -q -i <gpu>` and `dmesg | grep -i xid`; a GPU that cannot run a kernel must be "
                         "reset or the node reported"));
      continue;
    }
    const bool ok = v->mismatches == 0;
    Check c = make_check(
        id + "vector_add", 1, name + ": vector add (PTX JIT, launch, copy back)",
        fmt::format("{} elements correct", v->elements),
        ok ? fmt::format("{} elements correct", v->elements)
           : fmt::format("{} of {} elements wrong; first at [{}]: {} instead of {}", v->mismatches, v->elements,
                         v->first_bad, v->first_bad_value, v->first_bad_expected),
        ok ? Verdict::pass : Verdict::fail,
        ok ? ""
           : "the GPU computed wrong results: drain the node, `nvidia-smi -q -d ECC,ROW_REMAPPER`, and report it; "
             "do not capture an image from it");
    c.value = static_cast<double>(v->mismatches);
    c.threshold = 0;
    rec.add(std::move(c));

    auto bw = drv->bandwidth(i, req.gpu_bw_bytes, req.gpu_bw_reps);
    const std::string source = e.gpu_bw_gbs
                                   ? e.size_file + " checks.gpu_bw_h2d_gbs (azurehpc-health-checks check_gpu_bw)"
                                   : "no threshold in " + e.size_file;
    const std::string expected = e.gpu_bw_gbs ? fmt::format(">= {} GB/s", number(*e.gpu_bw_gbs)) : "measured only";
    for (const bool h2d : {true, false}) {
      const std::string cid = id + (h2d ? "bw_h2d" : "bw_d2h");
      const std::string title =
          name + (h2d ? ": pinned host-to-device bandwidth" : ": pinned device-to-host bandwidth");
      if (!bw) {
        rec.add(make_check(cid, 1, title, expected, bw.error().message, Verdict::fail,
                           "`nvidia-smi -q -d PCIE`: the GPU's PCIe link may have trained down"));
        continue;
      }
      const double gbs = h2d ? bw->h2d_gbs : bw->d2h_gbs;
      const bool bw_ok = !e.gpu_bw_gbs || gbs >= *e.gpu_bw_gbs;
      Check b =
          make_check(cid, 1, title, expected, fmt::format("{:.1f} GB/s", gbs), bw_ok ? Verdict::pass : Verdict::fail,
                     bw_ok ? ""
                           : "`nvidia-smi -q -d PCIE` (link generation and width must be at their maximum); "
                             "run nothing else on the GPU while verifying",
                     source);
      b.value = gbs;
      b.threshold = e.gpu_bw_gbs;
      rec.add(std::move(b));
    }
  }
}

} // namespace

std::string throttle_names(unsigned long long bits) {
  std::vector<std::string> names;
  if (bits & nvml::throttle_hw_slowdown) names.emplace_back("HW slowdown");
  if (bits & nvml::throttle_hw_thermal) names.emplace_back("HW thermal slowdown");
  if (bits & nvml::throttle_hw_power_brake) names.emplace_back("HW power brake");
  if (bits & nvml::throttle_sw_thermal) names.emplace_back("SW thermal slowdown");
  return names.empty() ? std::string("none") : util::join(names, ", ");
}

void gpu_checks(Recorder& rec, const Expectations& e, int level) {
  const auto& req = rec.request();
  auto session = nvml::Session::open();
  std::optional<unsigned> nvml_count;
  std::vector<Gpu> gpus;
  if (!session) {
    rec.add(make_check("gpu.nvml", 0, "NVIDIA driver answers (NVML)", "libnvidia-ml.so.1 loads, nvmlInit_v2 succeeds",
                       session.error().message, Verdict::fail, session.error().hint));
    check_pci_ids(rec, e); // read from the PCI bus: no driver needed
  } else {
    const auto& a = session->api();
    rec.add(make_check("gpu.nvml", 0, "NVIDIA driver answers (NVML)", "libnvidia-ml.so.1 loads, nvmlInit_v2 succeeds",
                       "initialized", Verdict::pass));
    unsigned n = 0;
    const auto rc = a.device_get_count_v2(&n);
    if (rc == nvml::success) nvml_count = n;
    const int pci = req.host->count(detect::PciRole::nvidia_gpu);
    const bool ok = rc == nvml::success && static_cast<int>(n) == e.gpu_count;
    Check c = make_check("gpu.count", 0, "GPU count", std::to_string(e.gpu_count),
                         rc == nvml::success ? fmt::format("{} (NVML; {} NVIDIA GPUs on the PCI bus)", n, pci)
                                             : session->error(rc),
                         ok ? Verdict::pass : Verdict::fail,
                         ok ? ""
                            : "a GPU is missing or fell off the bus: `nvidia-smi -L`, `lspci -d 10de:`, `dmesg | grep "
                              "-i -e xid -e 'fallen off'`; on Azure, deallocate and start the VM again (it moves to "
                              "another host), and report the node if it persists",
                         e.size_file + " gpu.count");
    if (nvml_count) c.value = *nvml_count;
    c.threshold = e.gpu_count;
    rec.add(std::move(c));
    check_pci_ids(rec, e);

    if (!e.driver_version.empty()) {
      char buf[96] = {};
      const auto vrc = a.system_get_driver_version(buf, sizeof buf);
      const std::string have = vrc == nvml::success ? std::string(buf, strnlen(buf, sizeof buf)) : session->error(vrc);
      const bool vok = vrc == nvml::success && have == e.driver_version;
      rec.add(make_check("gpu.driver_version", 0, "NVIDIA driver version", e.driver_version, have,
                         vok ? Verdict::pass : Verdict::fail,
                         vok ? ""
                             : "another driver is installed than the manifests pin: run `hpcbake install` again, or "
                               "reboot if a new driver was installed and the old one is still loaded",
                         e.driver_source));
    }
    for (unsigned i = 0; rc == nvml::success && i < n; ++i) {
      nvml::Device dev = nullptr;
      if (a.device_get_handle_by_index_v2(i, &dev) != nvml::success) {
        rec.add(make_check(fmt::format("gpu.{}.handle", i), 0, fmt::format("GPU {} reachable", i), "a handle",
                           "nvmlDeviceGetHandleByIndex_v2 failed", Verdict::fail,
                           "`nvidia-smi -q -i N`; `dmesg | grep -i xid`"));
        continue;
      }
      gpus.push_back({i, dev, session->describe(i, dev)});
    }
  }
  if (e.nvswitch_count > 0) {
    const int sw = req.host->count(detect::PciRole::nvswitch);
    const bool ok = sw == e.nvswitch_count;
    rec.add(make_check("gpu.nvswitch_count", 0, "NVSwitches on the PCI bus", std::to_string(e.nvswitch_count),
                       std::to_string(sw) + " (/sys/bus/pci/devices)", ok ? Verdict::pass : Verdict::fail,
                       ok ? "" : "`lspci -d 10de:` ; NVSwitches missing from the guest need the VM redeployed",
                       e.size_file + " gpu.nvswitch_count"));
  }
  if (level < 1) return;
  const auto deadline = clock::now() + req.fabric_wait;
  if (session) {
    for (const auto& g : gpus)
      nvml_health(rec, e, *session, g);
    if (e.fabric_manager) fabric_checks(rec, e, *session, gpus, deadline);
  }
  cuda_checks(rec, e, nvml_count, deadline);
}

} // namespace hpcbake::verify
