#pragma once
// NVML (libnvidia-ml.so.1), loaded at run time. The types below are declared here with
// NVML's exact C ABI (nvml.h of driver R450 and later): no NVIDIA header or library is
// needed to build hpcbake. Only the entry points verify uses are bound (nvml_entry_points.def);
// the versioned ones (`_v2`, `_v3`) are the names every driver since R450 exports. ctest
// abi/nvidia-headers checks every declaration here against NVIDIA's nvml.h.
#include "verify/dynlib.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace hpcbake::verify::nvml {

using Return = int; // nvmlReturn_t
inline constexpr Return success = 0;
inline constexpr Return error_invalid_argument = 2;
inline constexpr Return error_not_supported = 3;
inline constexpr Return error_no_permission = 4;
inline constexpr Return error_driver_not_loaded = 9;
inline constexpr Return error_function_not_found = 13;
inline constexpr Return error_gpu_is_lost = 15;
inline constexpr Return error_lib_rm_version_mismatch = 18;

struct DeviceSt;
using Device = DeviceSt*; // nvmlDevice_t
using EnableState = int;  // nvmlEnableState_t: 0 disabled, 1 enabled
inline constexpr EnableState feature_enabled = 1;

inline constexpr int memory_error_uncorrected = 1; // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr int volatile_ecc = 0;             // NVML_VOLATILE_ECC

// nvmlClocksThrottleReasons bits that mean the hardware is slowing the GPU down.
inline constexpr unsigned long long throttle_sw_thermal = 0x20ULL;
inline constexpr unsigned long long throttle_hw_slowdown = 0x08ULL;
inline constexpr unsigned long long throttle_hw_thermal = 0x40ULL;
inline constexpr unsigned long long throttle_hw_power_brake = 0x80ULL;
inline constexpr unsigned long long throttle_bad =
    throttle_sw_thermal | throttle_hw_slowdown | throttle_hw_thermal | throttle_hw_power_brake;
// And bits that do not (nvml.h, nvmlClocksEventReasons, formerly nvmlClocksThrottleReasons),
// named in the report so that "reasons 0x1" reads as the idle GPU a real H100 reported.
inline constexpr unsigned long long throttle_gpu_idle = 0x01ULL;
inline constexpr unsigned long long throttle_applications_clocks = 0x02ULL;
inline constexpr unsigned long long throttle_sw_power_cap = 0x04ULL;

inline constexpr unsigned nvlink_max_links = 18; // NVML_NVLINK_MAX_LINKS (Hopper)

// nvmlGpuFabricInfo_t (R525+, Hopper and later with NVSwitch).
inline constexpr unsigned char fabric_not_supported = 0;
inline constexpr unsigned char fabric_not_started = 1;
inline constexpr unsigned char fabric_in_progress = 2;
inline constexpr unsigned char fabric_completed = 3;
struct GpuFabricInfo {
  unsigned char cluster_uuid[16];
  Return status;
  unsigned int clique_id;
  unsigned char state; // nvmlGpuFabricState_t
};

// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};

// vGPU software licensing (nvml.h: nvmlGridLicenseExpiry_t, nvmlGridLicensableFeature_t,
// nvmlGridLicensableFeatures_t, NVML_GRID_LICENSE_BUFFER_SIZE 128, NVML_GRID_LICENSE_FEATURE_MAX_COUNT
// 3), as nvmlDeviceGetGridLicensableFeatures_v4 fills it. Field for field as nvml.h declares them;
// the static_asserts below pin the layout that follows from it on every ABI hpcbake builds for.
inline constexpr unsigned grid_license_buffer_size = 128;
inline constexpr unsigned grid_license_feature_max_count = 3;
struct GridLicenseExpiry {
  unsigned int year;
  unsigned short month, day, hour, min, sec;
  unsigned char status;
};
struct GridLicensableFeature {
  int feature_code;                            // nvmlGridLicenseFeatureCode_t (an enum: int-sized)
  unsigned int feature_state;                  // non-zero: the feature is licensed now
  char license_info[grid_license_buffer_size]; // deprecated
  char product_name[grid_license_buffer_size];
  unsigned int feature_enabled;
  GridLicenseExpiry license_expiry;
};
struct GridLicensableFeatures {
  int is_grid_license_supported;
  unsigned int licensable_features_count;
  GridLicensableFeature features[grid_license_feature_max_count];
};
static_assert(sizeof(GridLicenseExpiry) == 16 && offsetof(GridLicenseExpiry, status) == 14);
static_assert(offsetof(GridLicensableFeature, product_name) == 136 &&
              offsetof(GridLicensableFeature, license_expiry) == 268 && sizeof(GridLicensableFeature) == 284);
static_assert(offsetof(GridLicensableFeatures, features) == 8 && sizeof(GridLicensableFeatures) == 860);
// nvmlGridLicenseFeatureCode_t
inline constexpr int grid_feature_vgpu = 1, grid_feature_nvidia_rtx = 2, grid_feature_gaming = 3,
                     grid_feature_compute = 4;

// Every entry point verify binds, one member each (nvml_entry_points.def): `init_v2` is
// `Return (*)()`, bound to nvmlInit_v2, and so on. Optional ones are nullptr when missing.
struct Api {
#define HPCBAKE_NVML_ENTRY(member, api, symbol, need, ret, params) ret(*member) params = nullptr;
#include "verify/nvml_entry_points.def"
#undef HPCBAKE_NVML_ENTRY
};
inline constexpr int clock_sm = 1; // NVML_CLOCK_SM

inline constexpr const char* soname = "libnvidia-ml.so.1";

// Loads the library and looks up every entry point above, calling none (verify --libraries).
LibraryProbe probe();

// An initialized NVML session; nvmlShutdown on destruction.
class Session {
public:
  // dlopen + bind + nvmlInit_v2. Errors (kind smoke_test) say what to do.
  static Result<Session> open();
  Session(Session&& other) noexcept;
  Session& operator=(Session&&) = delete;
  Session(const Session&) = delete;
  ~Session();

  const Api& api() const { return api_; }
  // "NVML_ERROR_NOT_SUPPORTED"-style text for a return code.
  std::string error(Return rc) const;
  // "GPU 0 (NVIDIA H100 80GB HBM3, 0001:00:00.0)"
  std::string describe(unsigned index, Device dev) const;

private:
  Session(DynLib lib, Api api) : lib_(std::move(lib)), api_(api) {}
  DynLib lib_;
  Api api_;
  bool live_ = true;
};

} // namespace hpcbake::verify::nvml
