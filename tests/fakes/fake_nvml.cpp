// A fake libnvidia-ml.so.1: exactly the entry points hpcbake verify binds, with NVML's C ABI,
// answering from the scenario in the environment (scenario.hpp). A GPU is "under load" while the
// fake libcuda in the same process runs its spin kernel (fake_cuda_busy, found with dlopen
// RTLD_NOLOAD: never loaded by this library): clocks, reasons and PCIe generation then follow the
// FAKE_*_LOAD variables. Not NVIDIA code.
#include "scenario.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3;

struct FakeDevice {
  unsigned index;
};
FakeDevice devices[64];
int init_count = 0;

unsigned gpu_count() {
  const long n = fake::env_long("FAKE_GPU_COUNT", 2);
  return n < 0 ? 0u : n > 64 ? 64u : static_cast<unsigned>(n);
}

FakeDevice* lookup(void* handle) {
  for (unsigned i = 0; i < gpu_count(); ++i)
    if (handle == &devices[i]) return &devices[i];
  return nullptr;
}

struct FabricInfo {
  unsigned char cluster_uuid[16];
  nvmlReturn_t status;
  unsigned int clique_id;
  unsigned char state;
};

struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

// nvmlGridLicenseExpiry_t, nvmlGridLicensableFeature_t, nvmlGridLicensableFeatures_t (nvml.h).
struct GridLicenseExpiry {
  unsigned int year;
  unsigned short month, day, hour, min, sec;
  unsigned char status;
};
struct GridLicensableFeature {
  int featureCode;
  unsigned int featureState;
  char licenseInfo[128];
  char productName[128];
  unsigned int featureEnabled;
  GridLicenseExpiry licenseExpiry;
};
struct GridLicensableFeatures {
  int isGridLicenseSupported;
  unsigned int licensableFeaturesCount;
  GridLicensableFeature gridLicensableFeatures[3];
};

// GPU i's PCI domain: FAKE_GPU_DOMAINS ("1,2,3,8,9,a,b,c", hex, as ND H100 v5's layout numbers
// them), else i + 1.
unsigned gpu_domain(unsigned index) {
  const auto list = fake::split(fake::env("FAKE_GPU_DOMAINS"), ',');
  if (index < list.size()) return static_cast<unsigned>(std::strtoul(list[index].c_str(), nullptr, 16));
  return index + 1;
}

// Whether the fake libcuda, if this process has loaded it, runs the spin kernel on GPU `index`.
bool under_load(unsigned index) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda) return false;
  auto* busy = reinterpret_cast<int (*)(int)>(dlsym(cuda, "fake_cuda_busy"));
  const bool out = busy && busy(static_cast<int>(index)) != 0;
  dlclose(cuda);
  return out;
}

unsigned long long reasons(unsigned index) {
  return under_load(index) ? static_cast<unsigned long long>(fake::indexed("FAKE_THROTTLE_LOAD", index, 0))
                           : static_cast<unsigned long long>(fake::indexed("FAKE_THROTTLE", index, 0x1)); // idle
}

} // namespace

#define CHECK_DEV(h)                                                                                                   \
  if (!init_count) return UNINITIALIZED;                                                                               \
  FakeDevice* d = lookup(h);                                                                                           \
  if (!d) return INVALID_ARGUMENT

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  ++init_count;
  return OK;
}

nvmlReturn_t nvmlShutdown() {
  if (!init_count) return UNINITIALIZED;
  --init_count;
  return OK;
}

const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
  case 0:
    return "Success";
  case 1:
    return "Uninitialized";
  case 2:
    return "Invalid Argument";
  case 3:
    return "Not Supported";
  default:
    return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* buf, unsigned len) {
  if (!init_count) return UNINITIALIZED;
  const std::string v = fake::env("FAKE_DRIVER_VERSION", "580.126.20");
  if (!buf || len < v.size() + 1) return 7; // NVML_ERROR_INSUFFICIENT_SIZE
  std::memcpy(buf, v.c_str(), v.size() + 1);
  return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) {
  if (!init_count) return UNINITIALIZED;
  if (!n) return INVALID_ARGUMENT;
  *n = gpu_count();
  return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void** out) {
  if (!init_count) return UNINITIALIZED;
  if (i >= gpu_count() || !out) return INVALID_ARGUMENT;
  devices[i].index = i;
  *out = &devices[i];
  return OK;
}

nvmlReturn_t nvmlDeviceGetName(void* h, char* buf, unsigned len) {
  CHECK_DEV(h);
  std::snprintf(buf, len, "Fake H100 80GB HBM3");
  return OK;
}

// A stable UUID per index, GPU 0's as in tests/cli/test_cli_verify.py's CDI spec.
nvmlReturn_t nvmlDeviceGetUUID(void* h, char* buf, unsigned len) {
  CHECK_DEV(h);
  std::snprintf(buf, len, "GPU-8a7c2f5e-0000-0000-0000-%012x", d->index);
  return OK;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(void* h, PciInfo* pci) {
  CHECK_DEV(h);
  std::memset(pci, 0, sizeof *pci);
  pci->domain = gpu_domain(d->index);
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "%08X:00:00.0", pci->domain);
  std::snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "%04X:00:00.0", pci->domain);
  pci->pci_device_id = 0x233010de;
  return OK;
}

nvmlReturn_t nvmlDeviceGetEccMode(void* h, int* current, int* pending) {
  CHECK_DEV(h);
  const int on = fake::indexed("FAKE_ECC_MODE", d->index, 1) ? 1 : 0;
  *current = on;
  *pending = on;
  return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(void* h, int type, int counter, unsigned long long* count) {
  CHECK_DEV(h);
  if (type != 1 || counter != 0) return INVALID_ARGUMENT; // verify asks for volatile uncorrected only
  *count = static_cast<unsigned long long>(fake::indexed("FAKE_ECC_ERRORS", d->index, 0));
  return OK;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(void* h, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failure) {
  CHECK_DEV(h);
  *corr = 0;
  *unc = 0;
  *pending = fake::indexed("FAKE_REMAP_PENDING", d->index, 0) ? 1u : 0u;
  *failure = 0;
  return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void* h, unsigned long long* out) {
  CHECK_DEV(h);
  *out = reasons(d->index);
  return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void* h, unsigned long long* out) {
  CHECK_DEV(h);
  *out = reasons(d->index);
  return OK;
}

// SM clock (type 1, NVML_CLOCK_SM) only: FAKE_SM_CLOCK_LOAD under load, 345 MHz idle.
nvmlReturn_t nvmlDeviceGetClockInfo(void* h, int type, unsigned* mhz) {
  CHECK_DEV(h);
  if (type != 1) return NOT_SUPPORTED;
  *mhz = under_load(d->index) ? static_cast<unsigned>(fake::indexed("FAKE_SM_CLOCK_LOAD", d->index, 1980)) : 345u;
  return OK;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(void* h, int type, unsigned* mhz) {
  CHECK_DEV(h);
  if (type != 1) return NOT_SUPPORTED;
  *mhz = 1980;
  return OK;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(void* h, int* mode) {
  CHECK_DEV(h);
  *mode = fake::indexed("FAKE_PERSISTENCE", d->index, 1) ? 1 : 0;
  return OK;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(void* h, unsigned link, int* active) {
  CHECK_DEV(h);
  if (link >= static_cast<unsigned>(fake::env_long("FAKE_NVLINKS", 18))) return INVALID_ARGUMENT;
  *active = fake::indexed("FAKE_NVLINK_DOWN", d->index, -1) == static_cast<long>(link) ? 0 : 1;
  return OK;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(void* h, FabricInfo* info) {
  CHECK_DEV(h);
  std::memset(info, 0, sizeof *info);
  const std::string fm = fake::fabric_manager();
  if (fm == "unsupported") return NOT_SUPPORTED;
  if (fm == "state_unsupported") return OK; // state 0, NOT_SUPPORTED: what a real H100 alone answers
  if (fm == "never") {
    info->state = 2; // NVML_GPU_FABRIC_STATE_IN_PROGRESS
    info->status = 0;
  } else if (fm == "not_started") {
    info->state = 1;
  } else {
    info->state = 3; // COMPLETED
    info->status = 0;
    info->clique_id = 1;
    info->cluster_uuid[0] = 0xab;
  }
  return OK;
}

// PCIe generation: FAKE_PCIE_GEN_LOAD under load (default the maximum), FAKE_PCIE_GEN at idle
// (default 1, as real GPUs lower it to save power).
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(void* h, unsigned int* gen) {
  CHECK_DEV(h);
  if (!gen) return INVALID_ARGUMENT;
  const long max = fake::indexed("FAKE_PCIE_MAX_GEN", d->index, 5);
  *gen = static_cast<unsigned>(under_load(d->index) ? fake::indexed("FAKE_PCIE_GEN_LOAD", d->index, max)
                                                    : fake::indexed("FAKE_PCIE_GEN", d->index, 1));
  return OK;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(void* h, unsigned int* gen) {
  CHECK_DEV(h);
  if (!gen) return INVALID_ARGUMENT;
  *gen = static_cast<unsigned>(fake::indexed("FAKE_PCIE_MAX_GEN", d->index, 5));
  return OK;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(void* h, unsigned int* width) {
  CHECK_DEV(h);
  if (!width) return INVALID_ARGUMENT;
  *width = static_cast<unsigned>(fake::indexed("FAKE_PCIE_WIDTH", d->index, 16));
  return OK;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(void* h, unsigned int* width) {
  CHECK_DEV(h);
  if (!width) return INVALID_ARGUMENT;
  *width = static_cast<unsigned>(fake::indexed("FAKE_PCIE_MAX_WIDTH", d->index, 16));
  return OK;
}

nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(void* h, GridLicensableFeatures* f) {
  CHECK_DEV(h);
  if (!f) return INVALID_ARGUMENT;
  std::memset(f, 0, sizeof *f);
  f->isGridLicenseSupported = 1;
  f->licensableFeaturesCount = 1;
  auto& ft = f->gridLicensableFeatures[0];
  ft.featureCode = 2; // NVML_GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX
  ft.featureEnabled = 1;
  std::snprintf(ft.productName, sizeof ft.productName, "NVIDIA RTX Virtual Workstation");
  if (fake::indexed("FAKE_GRID_LICENSED", d->index, 1)) {
    ft.featureState = 1;
    ft.licenseExpiry = {2031, 1, 2, 3, 4, 5, 1}; // a fake date, far ahead
  }
  return OK;
}

} // extern "C"
