#include "util/datadir.hpp"

#include "util/build_config.hpp"

#include <cstdlib>

namespace hpcbake::util {

std::filesystem::path data_dir(const char* env_var, std::string_view name, std::string_view probe) {
  if (const char* env = std::getenv(env_var); env && *env) return env;
  std::error_code ec;
  const auto installed = std::filesystem::path(build::installed_datadir) / name;
  if (std::filesystem::exists(installed / probe, ec)) return installed;
  return std::filesystem::path(build::source_dir) / name;
}

} // namespace hpcbake::util
