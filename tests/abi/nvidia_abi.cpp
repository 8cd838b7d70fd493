// ctest abi/nvidia-headers: hpcbake's hand-declared NVML and CUDA driver ABI (src/verify/nvml.hpp,
// cuda.hpp, nvml_entry_points.def, cuda_entry_points.def) compiled against NVIDIA's own nvml.h and
// cuda.h (tests/abi/nvidia_headers.py finds them and builds this file with nvidia_names.cpp).
//
// At compile time (static_assert, so a wrong declaration does not build): every entry point of
// both tables is declared by the header under the symbol name verify binds, with the same return
// and parameter types modulo hpcbake's stand-ins (abi_check.hpp); every hand-declared struct has
// NVIDIA's size, alignment and field offsets; every hand-declared constant has NVIDIA's value.
// At run time: every constant, struct and type alias of nvml.hpp and cuda.hpp is in the tables
// below (so none is added unchecked), and nvidia_names.cpp's notes on versioned names are printed.
//
// The headers are included so that they declare every version of every exported function, with
// its exact prototype, and rename none: nvml.h with NVML_NO_UNVERSIONED_FUNC_DEFS (its documented
// switch: no `#define nvmlInit nvmlInit_v2`, the older versions declared too) and cuda.h with
// __CUDA_API_VERSION_INTERNAL (how the driver itself is built: the current versions and, in the
// header's "CUDA API versioning support" section, every older one it still exports, such as
// cuCtxCreate_v2 that the public header no longer declares since CUDA 13 maps cuCtxCreate to
// cuCtxCreate_v4). Which version the public header maps each name to is nvidia_names.cpp's part.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>
#include <nvml.h>

#include "abi_check.hpp"
#include "verify/cuda.hpp"
#include "verify/nvml.hpp"

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace nvml = hpcbake::verify::nvml;
namespace cuda = hpcbake::verify::cuda;

// nvidia_names.cpp: the versioned-name checks and notes.
int check_versioned_names(std::vector<std::string>& notes);

namespace {

// What the tables below checked, by the name nvml.hpp / cuda.hpp declares it with ("nvml::PciInfo").
std::set<std::string>& checked() {
  static std::set<std::string> names;
  return names;
}
struct Checked {
  explicit Checked(const char* name) { checked().insert(name); }
};

} // namespace

// One line per hand-declared struct, opaque handle, type alias, struct field and constant.
#define HPCBAKE_ABI_ONCE2(line) abi_checked_##line
#define HPCBAKE_ABI_ONCE(line) HPCBAKE_ABI_ONCE2(line)
#define HPCBAKE_ABI_REGISTER(name) static const Checked HPCBAKE_ABI_ONCE(__LINE__){name};

// A struct verify passes to NVIDIA by pointer: the same size and alignment (each field below).
#define HPCBAKE_ABI_STRUCT(ours, theirs)                                                                               \
  template <> struct abi::nvidia_of<ours> { using type = theirs; };                                                    \
  static_assert(sizeof(ours) == sizeof(theirs), #ours " is not the size of " #theirs);                                 \
  static_assert(alignof(ours) == alignof(theirs), #ours " is not aligned as " #theirs);                                \
  HPCBAKE_ABI_REGISTER(#ours)
#define HPCBAKE_ABI_FIELD(ours, field, theirs, their_field)                                                            \
  static_assert(offsetof(ours, field) == offsetof(theirs, their_field),                                                \
                #ours "::" #field " is not at the offset of " #theirs "::" #their_field);                              \
  static_assert(abi::compatible<decltype(ours::field), decltype(theirs::their_field)>(),                               \
                #ours "::" #field " is not of the type of " #theirs "::" #their_field);                                \
  HPCBAKE_ABI_REGISTER(#ours "::" #field)
// An opaque handle's struct: pointers to it stand for pointers to NVIDIA's (never dereferenced).
#define HPCBAKE_ABI_OPAQUE(ours, theirs)                                                                               \
  template <> struct abi::nvidia_of<ours> { using type = theirs; };                                                    \
  HPCBAKE_ABI_REGISTER(#ours)
// A type alias standing for NVIDIA's type (an int for an enum, a pointer for a handle).
#define HPCBAKE_ABI_TYPE(ours, theirs)                                                                                 \
  static_assert(abi::compatible<ours, theirs>(), #ours " does not stand for " #theirs);                                \
  HPCBAKE_ABI_REGISTER(#ours)
#define HPCBAKE_ABI_CONSTANT(ours, theirs)                                                                             \
  static_assert(abi::same_value(ours, theirs), #ours " is not " #theirs);                                              \
  HPCBAKE_ABI_REGISTER(#ours)
// Declared in nvml.hpp / cuda.hpp but not part of NVIDIA's ABI, and why.
#define HPCBAKE_ABI_NOT_ABI(ours, why) HPCBAKE_ABI_REGISTER(#ours)

// --- nvml.hpp against nvml.h -------------------------------------------------------------------
HPCBAKE_ABI_OPAQUE(nvml::DeviceSt, nvmlDevice_st)
HPCBAKE_ABI_TYPE(nvml::Device, nvmlDevice_t)
HPCBAKE_ABI_TYPE(nvml::Return, nvmlReturn_t)
HPCBAKE_ABI_TYPE(nvml::EnableState, nvmlEnableState_t)

HPCBAKE_ABI_STRUCT(nvml::PciInfo, nvmlPciInfo_t)
HPCBAKE_ABI_FIELD(nvml::PciInfo, bus_id_legacy, nvmlPciInfo_t, busIdLegacy)
HPCBAKE_ABI_FIELD(nvml::PciInfo, domain, nvmlPciInfo_t, domain)
HPCBAKE_ABI_FIELD(nvml::PciInfo, bus, nvmlPciInfo_t, bus)
HPCBAKE_ABI_FIELD(nvml::PciInfo, device, nvmlPciInfo_t, device)
HPCBAKE_ABI_FIELD(nvml::PciInfo, pci_device_id, nvmlPciInfo_t, pciDeviceId)
HPCBAKE_ABI_FIELD(nvml::PciInfo, pci_subsystem_id, nvmlPciInfo_t, pciSubSystemId)
HPCBAKE_ABI_FIELD(nvml::PciInfo, bus_id, nvmlPciInfo_t, busId)

HPCBAKE_ABI_STRUCT(nvml::GpuFabricInfo, nvmlGpuFabricInfo_t)
HPCBAKE_ABI_FIELD(nvml::GpuFabricInfo, cluster_uuid, nvmlGpuFabricInfo_t, clusterUuid)
HPCBAKE_ABI_FIELD(nvml::GpuFabricInfo, status, nvmlGpuFabricInfo_t, status)
HPCBAKE_ABI_FIELD(nvml::GpuFabricInfo, clique_id, nvmlGpuFabricInfo_t, cliqueId)
HPCBAKE_ABI_FIELD(nvml::GpuFabricInfo, state, nvmlGpuFabricInfo_t, state)

HPCBAKE_ABI_STRUCT(nvml::GridLicenseExpiry, nvmlGridLicenseExpiry_t)
HPCBAKE_ABI_FIELD(nvml::GridLicenseExpiry, year, nvmlGridLicenseExpiry_t, year)
HPCBAKE_ABI_FIELD(nvml::GridLicenseExpiry, month, nvmlGridLicenseExpiry_t, month)
HPCBAKE_ABI_FIELD(nvml::GridLicenseExpiry, day, nvmlGridLicenseExpiry_t, day)
HPCBAKE_ABI_FIELD(nvml::GridLicenseExpiry, hour, nvmlGridLicenseExpiry_t, hour)
HPCBAKE_ABI_FIELD(nvml::GridLicenseExpiry, min, nvmlGridLicenseExpiry_t, min)
HPCBAKE_ABI_FIELD(nvml::GridLicenseExpiry, sec, nvmlGridLicenseExpiry_t, sec)
HPCBAKE_ABI_FIELD(nvml::GridLicenseExpiry, status, nvmlGridLicenseExpiry_t, status)

HPCBAKE_ABI_STRUCT(nvml::GridLicensableFeature, nvmlGridLicensableFeature_t)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeature, feature_code, nvmlGridLicensableFeature_t, featureCode)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeature, feature_state, nvmlGridLicensableFeature_t, featureState)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeature, license_info, nvmlGridLicensableFeature_t, licenseInfo)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeature, product_name, nvmlGridLicensableFeature_t, productName)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeature, feature_enabled, nvmlGridLicensableFeature_t, featureEnabled)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeature, license_expiry, nvmlGridLicensableFeature_t, licenseExpiry)

HPCBAKE_ABI_STRUCT(nvml::GridLicensableFeatures, nvmlGridLicensableFeatures_t)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeatures, is_grid_license_supported, nvmlGridLicensableFeatures_t,
                  isGridLicenseSupported)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeatures, licensable_features_count, nvmlGridLicensableFeatures_t,
                  licensableFeaturesCount)
HPCBAKE_ABI_FIELD(nvml::GridLicensableFeatures, features, nvmlGridLicensableFeatures_t, gridLicensableFeatures)

HPCBAKE_ABI_CONSTANT(nvml::grid_license_buffer_size, NVML_GRID_LICENSE_BUFFER_SIZE)
HPCBAKE_ABI_CONSTANT(nvml::grid_license_feature_max_count, NVML_GRID_LICENSE_FEATURE_MAX_COUNT)
HPCBAKE_ABI_CONSTANT(nvml::grid_feature_vgpu, NVML_GRID_LICENSE_FEATURE_CODE_VGPU)
HPCBAKE_ABI_CONSTANT(nvml::grid_feature_nvidia_rtx, NVML_GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX)
HPCBAKE_ABI_CONSTANT(nvml::grid_feature_gaming, NVML_GRID_LICENSE_FEATURE_CODE_GAMING)
HPCBAKE_ABI_CONSTANT(nvml::grid_feature_compute, NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE)

HPCBAKE_ABI_CONSTANT(nvml::success, NVML_SUCCESS)
HPCBAKE_ABI_CONSTANT(nvml::error_invalid_argument, NVML_ERROR_INVALID_ARGUMENT)
HPCBAKE_ABI_CONSTANT(nvml::error_not_supported, NVML_ERROR_NOT_SUPPORTED)
HPCBAKE_ABI_CONSTANT(nvml::error_no_permission, NVML_ERROR_NO_PERMISSION)
HPCBAKE_ABI_CONSTANT(nvml::error_driver_not_loaded, NVML_ERROR_DRIVER_NOT_LOADED)
HPCBAKE_ABI_CONSTANT(nvml::error_function_not_found, NVML_ERROR_FUNCTION_NOT_FOUND)
HPCBAKE_ABI_CONSTANT(nvml::error_gpu_is_lost, NVML_ERROR_GPU_IS_LOST)
HPCBAKE_ABI_CONSTANT(nvml::error_lib_rm_version_mismatch, NVML_ERROR_LIB_RM_VERSION_MISMATCH)
HPCBAKE_ABI_CONSTANT(nvml::feature_enabled, NVML_FEATURE_ENABLED)
HPCBAKE_ABI_CONSTANT(nvml::memory_error_uncorrected, NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
HPCBAKE_ABI_CONSTANT(nvml::volatile_ecc, NVML_VOLATILE_ECC)
HPCBAKE_ABI_CONSTANT(nvml::throttle_sw_thermal, nvmlClocksThrottleReasonSwThermalSlowdown)
HPCBAKE_ABI_CONSTANT(nvml::throttle_hw_slowdown, nvmlClocksThrottleReasonHwSlowdown)
HPCBAKE_ABI_CONSTANT(nvml::throttle_hw_thermal, nvmlClocksThrottleReasonHwThermalSlowdown)
HPCBAKE_ABI_CONSTANT(nvml::throttle_hw_power_brake, nvmlClocksThrottleReasonHwPowerBrakeSlowdown)
HPCBAKE_ABI_CONSTANT(nvml::throttle_gpu_idle, nvmlClocksThrottleReasonGpuIdle)
HPCBAKE_ABI_CONSTANT(nvml::throttle_applications_clocks, nvmlClocksThrottleReasonApplicationsClocksSetting)
HPCBAKE_ABI_CONSTANT(nvml::throttle_sw_power_cap, nvmlClocksThrottleReasonSwPowerCap)
HPCBAKE_ABI_CONSTANT(nvml::nvlink_max_links, NVML_NVLINK_MAX_LINKS)
HPCBAKE_ABI_CONSTANT(nvml::clock_sm, NVML_CLOCK_SM)
HPCBAKE_ABI_CONSTANT(nvml::fabric_not_supported, NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
HPCBAKE_ABI_CONSTANT(nvml::fabric_not_started, NVML_GPU_FABRIC_STATE_NOT_STARTED)
HPCBAKE_ABI_CONSTANT(nvml::fabric_in_progress, NVML_GPU_FABRIC_STATE_IN_PROGRESS)
HPCBAKE_ABI_CONSTANT(nvml::fabric_completed, NVML_GPU_FABRIC_STATE_COMPLETED)
HPCBAKE_ABI_NOT_ABI(nvml::throttle_bad, "the OR of four bits checked above")
HPCBAKE_ABI_NOT_ABI(nvml::soname, "the library's file name, not in nvml.h")
HPCBAKE_ABI_NOT_ABI(nvml::Api, "nvml_entry_points.def, every line checked below")

// --- cuda.hpp against cuda.h -------------------------------------------------------------------
HPCBAKE_ABI_OPAQUE(cuda::CtxSt, CUctx_st)
HPCBAKE_ABI_OPAQUE(cuda::ModSt, CUmod_st)
HPCBAKE_ABI_OPAQUE(cuda::FuncSt, CUfunc_st)
HPCBAKE_ABI_OPAQUE(cuda::StreamSt, CUstream_st)
HPCBAKE_ABI_OPAQUE(cuda::EventSt, CUevent_st)
HPCBAKE_ABI_TYPE(cuda::Result_, CUresult)
HPCBAKE_ABI_TYPE(cuda::Device, CUdevice)
HPCBAKE_ABI_TYPE(cuda::Context, CUcontext)
HPCBAKE_ABI_TYPE(cuda::Module, CUmodule)
HPCBAKE_ABI_TYPE(cuda::Function, CUfunction)
HPCBAKE_ABI_TYPE(cuda::Stream, CUstream)
HPCBAKE_ABI_TYPE(cuda::Event, CUevent)
HPCBAKE_ABI_TYPE(cuda::DevicePtr, CUdeviceptr)

HPCBAKE_ABI_CONSTANT(cuda::success, CUDA_SUCCESS)
HPCBAKE_ABI_CONSTANT(cuda::error_no_device, CUDA_ERROR_NO_DEVICE)
HPCBAKE_ABI_CONSTANT(cuda::error_system_not_ready, CUDA_ERROR_SYSTEM_NOT_READY)
HPCBAKE_ABI_CONSTANT(cuda::jit_error_log_buffer, CU_JIT_ERROR_LOG_BUFFER)
HPCBAKE_ABI_CONSTANT(cuda::jit_error_log_buffer_size_bytes, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
HPCBAKE_ABI_CONSTANT(cuda::error_not_ready, CUDA_ERROR_NOT_READY)
HPCBAKE_ABI_CONSTANT(cuda::error_peer_access_already_enabled, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
HPCBAKE_ABI_CONSTANT(cuda::p2p_attribute_performance_rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK)
HPCBAKE_ABI_CONSTANT(cuda::p2p_attribute_native_atomic_supported, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED)
HPCBAKE_ABI_CONSTANT(cuda::attribute_multiprocessor_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
HPCBAKE_ABI_CONSTANT(cuda::stream_non_blocking, CU_STREAM_NON_BLOCKING)
HPCBAKE_ABI_NOT_ABI(cuda::soname, "the library's file name, not in cuda.h")
HPCBAKE_ABI_NOT_ABI(cuda::vadd_entry, "the name of verify's own PTX kernel")
HPCBAKE_ABI_NOT_ABI(cuda::Api, "cuda_entry_points.def, every line checked below")

// --- the entry-point tables, every line ---------------------------------------------------------
// The symbol is a name the header declares (not a macro renaming it), with verify's prototype.
// The X-macros pass it both as written (#symbol) and as the token the header may expand.
#define HPCBAKE_ABI_ENTRY(ns, header, member, symbol_name, symbol)                                                     \
  static_assert(std::string_view(symbol_name) == HPCBAKE_ABI_XSTR(symbol),                                             \
                header " defines " symbol_name " as a macro: bind the name it expands to");                            \
  static_assert(abi::same_prototype<decltype(ns::Api::member), decltype(&::symbol)>(),                                 \
                #ns "_entry_points.def: " #member " is not the prototype " header " declares for " symbol_name);
#define HPCBAKE_NVML_ENTRY(member, api, symbol, need, ret, params)                                                     \
  HPCBAKE_ABI_ENTRY(nvml, "nvml.h", member, #symbol, symbol)
#include "verify/nvml_entry_points.def"
#undef HPCBAKE_NVML_ENTRY
#define HPCBAKE_CUDA_ENTRY(member, api, symbol, need, ret, params)                                                     \
  HPCBAKE_ABI_ENTRY(cuda, "cuda.h", member, #symbol, symbol)
#include "verify/cuda_entry_points.def"
#undef HPCBAKE_CUDA_ENTRY

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every constant, top-level struct (and its fields) and type alias `header` declares, as
// "ns::name": what the tables above must cover.
std::vector<std::string> declared(const std::string& text, const std::string& ns) {
  std::vector<std::string> names;
  static const std::regex constant(R"(inline constexpr [^=;(]*?\b(\w+) =)");
  static const std::regex alias(R"((?:^|\n)using (\w+) =)");
  static const std::regex structure(R"((?:^|\n)struct (\w+)( \{([^}]*)\})?)");
  static const std::regex field(R"((\w+)(\[[^\]]*\])?;)");
  for (const auto* re : {&constant, &alias})
    for (std::sregex_iterator it(text.begin(), text.end(), *re), end; it != end; ++it)
      names.push_back(ns + "::" + (*it)[1].str());
  for (std::sregex_iterator it(text.begin(), text.end(), structure), end; it != end; ++it) {
    const std::string name = ns + "::" + (*it)[1].str();
    names.push_back(name);
    if (name == ns + "::Api" || !(*it)[2].matched) continue;
    const std::string body = (*it)[3].str();
    for (std::sregex_iterator f(body.begin(), body.end(), field), fend; f != fend; ++f)
      names.push_back(name + "::" + (*f)[1].str());
  }
  return names;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SOURCE_DIR (hpcbake's checkout, for src/verify/*.hpp)\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (const char* lib : {"nvml", "cuda"}) {
    const std::string path = std::string(argv[1]) + "/src/verify/" + lib + ".hpp";
    const std::string text = read(path);
    if (text.empty()) {
      std::printf("FAIL: cannot read %s\n", path.c_str());
      ++failures;
      continue;
    }
    for (const auto& name : declared(text, lib))
      if (!checked().contains(name)) {
        std::printf("FAIL: %s declares %s, which tests/abi/nvidia_abi.cpp does not check against NVIDIA's header: "
                    "add a line for it there (HPCBAKE_ABI_CONSTANT, _STRUCT, _FIELD, _OPAQUE, _TYPE or _NOT_ABI)\n",
                    path.c_str(), name.c_str());
        ++failures;
      }
  }
  std::vector<std::string> notes;
  failures += check_versioned_names(notes);
  for (const auto& n : notes)
    std::printf("note: %s\n", n.c_str());
  int nvml_entries = 0, cuda_entries = 0;
#define HPCBAKE_NVML_ENTRY(...) ++nvml_entries;
#include "verify/nvml_entry_points.def"
#undef HPCBAKE_NVML_ENTRY
#define HPCBAKE_CUDA_ENTRY(...) ++cuda_entries;
#include "verify/cuda_entry_points.def"
#undef HPCBAKE_CUDA_ENTRY
  std::printf("abi/nvidia-headers: nvml.h (NVML_API_VERSION %d) and cuda.h (CUDA_VERSION %d): %d NVML and %d CUDA "
              "entry points, %zu structs, fields, handles, types and constants: %s\n",
              NVML_API_VERSION, CUDA_VERSION, nvml_entries, cuda_entries, checked().size(),
              failures ? "FAILED" : "all match");
  return failures ? 1 : 0;
}
