#include "manifest/digest.hpp"

#include "util/sha256.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace hpcbake::manifest {

namespace fs = std::filesystem;

namespace {

Result<std::vector<std::string>> yaml_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fail(ErrorKind::manifest, fmt::format("{}: not a directory", dir.string()),
                "pass --manifests DIR naming a manifest directory, or set HPCBAKE_MANIFESTS");
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code file_ec;
    if (p.extension() == ".yaml" && fs::is_regular_file(p, file_ec))
      files.push_back(p.lexically_relative(dir).generic_string());
  }
  if (ec)
    return fail(ErrorKind::manifest, fmt::format("{}: cannot list: {}", dir.string(), ec.message()),
                "check that hpcbake may read the manifest directory");
  std::sort(files.begin(), files.end()); // std::string compares bytes: LC_ALL=C sort
  return files;
}

} // namespace

Result<std::string> manifest_set_digest(const fs::path& dir) {
  HPCBAKE_TRY_ASSIGN(const auto files, yaml_files(dir));
  util::Sha256 set;
  for (const auto& rel : files) {
    HPCBAKE_TRY_ASSIGN(const std::string file, util::sha256_file(dir / rel));
    HPCBAKE_TRY(set.update(rel.data(), rel.size()));
    HPCBAKE_TRY(set.update("", 1)); // the NUL between the path and the file's digest
    HPCBAKE_TRY(set.update(file.data(), file.size()));
  }
  return set.hex();
}

} // namespace hpcbake::manifest
