// ctest abi/nvidia-headers, the versioned names: NVIDIA's headers as an application includes them,
// where `#define nvmlInit nvmlInit_v2` (nvml.h) and `#define cuMemAlloc cuMemAlloc_v2` (cuda.h)
// say which version of each function a program built today calls. For every line of the
// entry-point tables (api, symbol):
// - at compile time, the header declares `api` (or the name it maps it to); `symbol` is `api` or
//   a version of it (`api_vN`), never newer than the one the header maps `api` to;
// - at run time, a note for every symbol older than the header's mapping: verify binds a version
//   NVIDIA keeps exporting for programs built against older headers (nvidia_abi.cpp checked that
//   the header still declares it, with verify's prototype; cuda.h does so in its "CUDA API
//   versioning support" section), not the one the header now maps to.
#include <cuda.h>
#include <nvml.h>

#include "abi_check.hpp"

#include <string>
#include <vector>

// The tables' X-macros pass the names both as written (#api, #symbol) and as tokens, which the
// preprocessor expands through the header's macros before HPCBAKE_ABI_NAME sees them.
#define HPCBAKE_ABI_NAME(header, api_name, api, symbol_name)                                                           \
  static_assert(sizeof(&api) != 0, header " does not declare " api_name);                                              \
  static_assert(abi::is_version_of(symbol_name, api_name), "the symbol bound is not a version of " api_name);          \
  static_assert(abi::is_version_of(HPCBAKE_ABI_XSTR(api), api_name),                                                   \
                header " maps " api_name " to " HPCBAKE_ABI_XSTR(api) ", not a version of it");                        \
  static_assert(abi::version_of(symbol_name) <= abi::version_of(HPCBAKE_ABI_XSTR(api)),                                \
                "the symbol bound for " api_name " is newer than " HPCBAKE_ABI_XSTR(api) ", where " header             \
                                                                                         " maps it");
#define HPCBAKE_NVML_ENTRY(member, api, symbol, need, ret, params) HPCBAKE_ABI_NAME("nvml.h", #api, api, #symbol)
#include "verify/nvml_entry_points.def"
#undef HPCBAKE_NVML_ENTRY
#define HPCBAKE_CUDA_ENTRY(member, api, symbol, need, ret, params) HPCBAKE_ABI_NAME("cuda.h", #api, api, #symbol)
#include "verify/cuda_entry_points.def"
#undef HPCBAKE_CUDA_ENTRY

namespace {

struct Name {
  const char* header;
  const char* api;
  const char* mapped; // what the header's macro makes of `api`
  const char* symbol;
};

constexpr Name names[] = {
#define HPCBAKE_NVML_ENTRY(member, api, symbol, need, ret, params) {"nvml.h", #api, HPCBAKE_ABI_XSTR(api), #symbol},
#include "verify/nvml_entry_points.def"
#undef HPCBAKE_NVML_ENTRY
#define HPCBAKE_CUDA_ENTRY(member, api, symbol, need, ret, params) {"cuda.h", #api, HPCBAKE_ABI_XSTR(api), #symbol},
#include "verify/cuda_entry_points.def"
#undef HPCBAKE_CUDA_ENTRY
};

} // namespace

// The notes (one per symbol older than the header's mapping); the failures were compile errors.
int check_versioned_names(std::vector<std::string>& notes) {
  for (const auto& n : names)
    if (std::string(n.mapped) != n.symbol)
      notes.push_back(std::string(n.header) + " maps " + n.api + " to " + n.mapped + "; verify binds " + n.symbol +
                      ", an older version the header still declares for programs built against older "
                      "headers (nvidia_abi.cpp checked its prototype)");
  return 0;
}
