#pragma once
// The digest of a manifest set: one SHA-256 that tells two sets of manifests apart, for
// `hpcbake --version` (which manifests a binary would use) and for comparing installs.
//
// For each *.yaml under DIR (in subdirectories too, without following links to directories;
// a link to a file counts as the file), in byte order of its path relative to DIR ('/'
// between components): the relative path, a NUL byte, then the lower-case hex SHA-256 of the
// file's bytes; the digest is the SHA-256 of all of that. The same in a shell:
//   cd DIR && find . -name '*.yaml' -xtype f | sed 's|^\./||' | LC_ALL=C sort |
//     while IFS= read -r f; do printf '%s\0%s' "$f" "$(sha256sum < "$f" | cut -c1-64)"; done | sha256sum
#include "util/error.hpp"

#include <filesystem>
#include <string>

namespace hpcbake::manifest {

// Lower-case hex. An error names DIR (missing, not a directory) or the file that cannot be read.
Result<std::string> manifest_set_digest(const std::filesystem::path& dir);

// Everything a plan reads from disk: every regular file (not only *.yaml) under DIR and under
// its recipe directory (recipes_dir(DIR): drivers/ beside it), in byte order of the relative
// path within each: "manifests/" or "drivers/", the relative path, NUL, the size in decimal,
// NUL, then the file's bytes, all into one SHA-256. For the plan memo (install/plan_memo.hpp).
// With `only_size` (only_size_stem's answer), sizes/ contributes that one file, as
// load_manifests reads only it: the other sizes cannot change the plan. The overlays
// (default_overlays(): files, and every file of a directory) count too, under "overlays/N/".
Result<std::string> plan_files_digest(const std::filesystem::path& dir, const std::string& only_size = {});

} // namespace hpcbake::manifest
