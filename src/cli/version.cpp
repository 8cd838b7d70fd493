#include "cli/version.hpp"

#include "cli/build_version.hpp" // generated at build time: include it nowhere else
#include "manifest/digest.hpp"
#include "util/datadir.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

namespace hpcbake::cli {

std::string version_text(const std::filesystem::path& manifests) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(manifests, ec).lexically_normal();
  if (ec) dir = manifests;
  if (!dir.has_filename()) dir = dir.parent_path(); // "manifests/." normalises to "manifests/"
  const auto digest = manifest::manifest_set_digest(dir);
  const std::string set = digest ? fmt::format("manifests sha256:{} from {}", *digest, dir.string())
                                 : fmt::format("manifests {}", digest.error().message);
  return fmt::format("hpcbake {} (commit {}, {})", build::release_version, build::commit, set);
}

std::string build_id() {
  // The link's target, then stat: stat("/proc/self/exe") would follow the link in the kernel,
  // where a wrapper such as valgrind is the executable.
  const auto exe = util::self_exe();
  struct stat st {};
  if (!exe || ::stat(exe->c_str(), &st) != 0) return {}; // unknown: no memo
  return fmt::format("{} {} {} {}.{}", build::release_version, build::commit, st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec);
}

} // namespace hpcbake::cli
