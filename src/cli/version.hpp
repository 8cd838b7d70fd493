#pragma once
// `hpcbake --version`: the release version and the commit this binary was built from (read from
// git at build time, cmake/version.cmake) and the digest of the manifest set it would use
// (manifest/digest.hpp). version.cpp is the only file that includes the generated header, so a
// new commit recompiles that one file.
#include <filesystem>
#include <string>

namespace hpcbake::cli {

// "hpcbake 0.1.0-57-gcb6a636 (commit <40 hex>, manifests sha256:<64 hex> from DIR)", DIR
// absolute; a set that cannot be read gives "manifests DIR: why" in place of the digest.
std::string version_text(const std::filesystem::path& manifests);

// Tells this binary from any other build: the version, the commit, and the size and mtime of
// the executable (a rebuild of uncommitted changes has the same commit). For the plan memo
// (install/plan_memo.hpp).
std::string build_id();

} // namespace hpcbake::cli
