#include "verify/nvml.hpp"

#include <fmt/format.h>

#include <vector>

#include <utility>

namespace hpcbake::verify::nvml {

namespace {

std::string init_hint(Return rc) {
  switch (rc) {
  case error_driver_not_loaded:
    return "the nvidia kernel module is not loaded: `modprobe nvidia`, then `dmesg | grep -i nvrm` for why it failed; "
           "after a kernel update, rebuild it with `hpcbake module install` or `dkms autoinstall`";
  case error_lib_rm_version_mismatch:
    return "the NVIDIA user-space libraries and the loaded kernel module differ in version: reboot after a driver "
           "update, or reinstall the driver with `hpcbake install`";
  case error_no_permission:
    return "run verify as root (or a user in the video group)";
  default:
    return "`nvidia-smi` shows the same failure; `dmesg | grep -i -e nvrm -e xid` tells why";
  }
}

constexpr const char* install_hint =
    "the NVIDIA driver's user-space libraries are missing: install the driver (`hpcbake install`), or its "
    "libnvidia-ml package";

// Every NVML entry point verify uses, looked up in `lib`.
Result<Api> bind(DynLib& lib) {
  Api a;
  // Every lookup first (optional ones too), so a too-old library is reported whole.
  const std::vector<Status> required = {lib.require(a.init_v2, "nvmlInit_v2"),
                                        lib.require(a.shutdown, "nvmlShutdown"),
                                        lib.require(a.error_string, "nvmlErrorString"),
                                        lib.require(a.system_get_driver_version, "nvmlSystemGetDriverVersion"),
                                        lib.require(a.device_get_count_v2, "nvmlDeviceGetCount_v2"),
                                        lib.require(a.device_get_handle_by_index_v2, "nvmlDeviceGetHandleByIndex_v2")};
  lib.bind(a.device_get_name, "nvmlDeviceGetName");
  lib.bind(a.device_get_pci_info_v3, "nvmlDeviceGetPciInfo_v3");
  lib.bind(a.device_get_ecc_mode, "nvmlDeviceGetEccMode");
  lib.bind(a.device_get_total_ecc_errors, "nvmlDeviceGetTotalEccErrors");
  lib.bind(a.device_get_remapped_rows, "nvmlDeviceGetRemappedRows");
  lib.bind(a.device_get_retired_pages_pending_status, "nvmlDeviceGetRetiredPagesPendingStatus");
  lib.bind(a.device_get_current_clocks_throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  lib.bind(a.device_get_persistence_mode, "nvmlDeviceGetPersistenceMode");
  lib.bind(a.device_get_nvlink_state, "nvmlDeviceGetNvLinkState");
  lib.bind(a.device_get_gpu_fabric_info, "nvmlDeviceGetGpuFabricInfo");
  // clocks and PCIe generation under load (checks_cuda.cpp)
  lib.bind(a.device_get_clock_info, "nvmlDeviceGetClockInfo");
  lib.bind(a.device_get_max_clock_info, "nvmlDeviceGetMaxClockInfo");
  lib.bind(a.device_get_current_clocks_event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  lib.bind(a.device_get_curr_pcie_link_generation, "nvmlDeviceGetCurrPcieLinkGeneration");
  lib.bind(a.device_get_max_pcie_link_generation, "nvmlDeviceGetMaxPcieLinkGeneration");
  HPCBAKE_TRY(all_found(required));
  return a;
}

} // namespace

LibraryProbe probe() {
  return probe_library(soname, install_hint, [](DynLib& lib) { return bind(lib); });
}

Result<Session> Session::open() {
  HPCBAKE_TRY_ASSIGN(auto lib, DynLib::open(soname, install_hint));
  HPCBAKE_TRY_ASSIGN(auto a, bind(lib));
  if (Return rc = a.init_v2(); rc != success) {
    const char* text = a.error_string(rc);
    return fail(ErrorKind::smoke_test, fmt::format("nvmlInit_v2 failed: {} ({})", text ? text : "unknown error", rc),
                init_hint(rc));
  }
  return Session(std::move(lib), a);
}

Session::Session(Session&& other) noexcept
    : lib_(std::move(other.lib_)), api_(other.api_), live_(std::exchange(other.live_, false)) {}

Session::~Session() {
  if (live_ && api_.shutdown) api_.shutdown();
}

std::string Session::error(Return rc) const {
  const char* text = api_.error_string ? api_.error_string(rc) : nullptr;
  return fmt::format("{} ({})", text ? text : "unknown NVML error", rc);
}

std::string Session::describe(unsigned index, Device dev) const {
  std::string name, bus;
  char buf[96] = {};
  if (api_.device_get_name && api_.device_get_name(dev, buf, sizeof buf) == success) name = buf;
  PciInfo pci{};
  if (api_.device_get_pci_info_v3 && api_.device_get_pci_info_v3(dev, &pci) == success) {
    pci.bus_id[sizeof pci.bus_id - 1] = '\0';
    bus = pci.bus_id;
  }
  if (name.empty() && bus.empty()) return fmt::format("GPU {}", index);
  if (bus.empty()) return fmt::format("GPU {} ({})", index, name);
  if (name.empty()) return fmt::format("GPU {} ({})", index, bus);
  return fmt::format("GPU {} ({}, {})", index, name, bus);
}

} // namespace hpcbake::verify::nvml
