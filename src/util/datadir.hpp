#pragma once
// Where hpcbake's data directories (manifests/, drivers/) are, the first that holds `probe`:
// the environment variable when set (taken as is); <dir of the executable>/../share/hpcbake
// (a .deb/.rpm, or any relocated install); the configured install prefix's copy; otherwise
// the source tree's (so a build directory works without installing).
#include <filesystem>
#include <optional>
#include <string_view>

namespace hpcbake::util {

// This executable's path, from readlink(/proc/self/exe); nullopt when /proc is not mounted.
// readlink alone, not std::filesystem::read_symlink: that lstat()s the link first, which
// qemu-user (running the aarch64 release on x86_64 in CI) answers with ELOOP.
std::optional<std::filesystem::path> self_exe();

std::filesystem::path data_dir(const char* env_var, std::string_view name, std::string_view probe);

} // namespace hpcbake::util
