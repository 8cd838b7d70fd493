#pragma once
// Where hpcbake's data directories (manifests/, drivers/) are: the environment variable
// when set, the installed copy when it holds `probe`, otherwise the source tree's (so a
// build directory works without installing).
#include <filesystem>
#include <string_view>

namespace hpcbake::util {

std::filesystem::path data_dir(const char* env_var, std::string_view name, std::string_view probe);

} // namespace hpcbake::util
