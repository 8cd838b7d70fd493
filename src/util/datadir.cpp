#include "util/datadir.hpp"

#include "util/build_config.hpp"

#include <cstdlib>
#include <string>

#include <unistd.h>

namespace hpcbake::util {

std::optional<std::filesystem::path> self_exe() {
  std::string buf(256, '\0');
  for (;;) {
    const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
    if (n < 0) return std::nullopt;
    if (static_cast<std::size_t>(n) < buf.size())
      return std::filesystem::path(buf.substr(0, static_cast<std::size_t>(n)));
    buf.resize(buf.size() * 2); // truncated: try again with room to spare
  }
}

std::filesystem::path data_dir(const char* env_var, std::string_view name, std::string_view probe) {
  if (const char* env = std::getenv(env_var); env && *env) return env;
  std::error_code ec;
  // Beside the executable first: a package installs /usr/bin/hpcbake and /usr/share/hpcbake
  // whatever prefix the build was configured with.
  if (const auto exe = self_exe()) {
    const auto relocated = exe->parent_path().parent_path() / "share" / "hpcbake" / name;
    if (std::filesystem::exists(relocated / probe, ec)) return relocated;
  }
  const auto installed = std::filesystem::path(build::installed_datadir) / name;
  if (std::filesystem::exists(installed / probe, ec)) return installed;
  return std::filesystem::path(HPCBAKE_BUILD_SOURCE_DIR) / name;
}

} // namespace hpcbake::util
