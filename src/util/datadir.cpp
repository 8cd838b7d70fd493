#include "util/datadir.hpp"

#include "util/build_config.hpp"

#include <cstdlib>

namespace hpcbake::util {

std::filesystem::path data_dir(const char* env_var, std::string_view name, std::string_view probe) {
  if (const char* env = std::getenv(env_var); env && *env) return env;
  std::error_code ec;
  // Beside the executable first: a package installs /usr/bin/hpcbake and /usr/share/hpcbake
  // whatever prefix the build was configured with.
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto relocated = exe.parent_path().parent_path() / "share" / "hpcbake" / name;
    if (std::filesystem::exists(relocated / probe, ec)) return relocated;
  }
  const auto installed = std::filesystem::path(build::installed_datadir) / name;
  if (std::filesystem::exists(installed / probe, ec)) return installed;
  return std::filesystem::path(build::source_dir) / name;
}

} // namespace hpcbake::util
