#include "manifest/digest.hpp"

#include "manifest/overlay.hpp"
#include "manifest/recipes.hpp"
#include "util/hostfs.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace hpcbake::manifest {

namespace fs = std::filesystem;

namespace {

// Regular files under `dir`, relative, sorted; `skip` names a top-level directory left out.
Result<std::vector<std::string>> files_under(const fs::path& dir, bool yaml_only, const std::string& skip = {}) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fail(ErrorKind::manifest, fmt::format("{}: not a directory", dir.string()),
                "pass --manifests DIR naming a manifest directory, or set HPCBAKE_MANIFESTS");
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (!skip.empty() && it.depth() == 0 && p.filename() == skip) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code file_ec;
    if ((!yaml_only || p.extension() == ".yaml") && fs::is_regular_file(p, file_ec))
      files.push_back(p.lexically_relative(dir).generic_string());
  }
  if (ec)
    return fail(ErrorKind::manifest, fmt::format("{}: cannot list: {}", dir.string(), ec.message()),
                "check that hpcbake may read the manifest directory");
  std::sort(files.begin(), files.end()); // std::string compares bytes: LC_ALL=C sort
  return files;
}

// Each file as "<prefix><relative path> NUL <size> NUL <bytes>" into one digest: one hash
// context for the whole set (a context per file costs more than hashing these small files).
Status add_files(util::Sha256& set, const fs::path& dir, const std::string& prefix, const std::string& only_size = {}) {
  HPCBAKE_TRY_ASSIGN(const auto files, files_under(dir, false, only_size.empty() ? "" : "sizes"));
  if (!only_size.empty()) {
    const std::string rel = "sizes/" + only_size + ".yaml";
    HPCBAKE_TRY_ASSIGN(const std::string bytes, util::read_file_or_error(dir / rel));
    const std::string head = fmt::format("{}{}{}{}{}", prefix, rel, '\0', bytes.size(), '\0');
    HPCBAKE_TRY(set.update(head.data(), head.size()));
    HPCBAKE_TRY(set.update(bytes.data(), bytes.size()));
  }
  for (const auto& rel : files) {
    HPCBAKE_TRY_ASSIGN(const std::string bytes, util::read_file_or_error(dir / rel));
    const std::string head = fmt::format("{}{}{}{}{}", prefix, rel, '\0', bytes.size(), '\0');
    HPCBAKE_TRY(set.update(head.data(), head.size()));
    HPCBAKE_TRY(set.update(bytes.data(), bytes.size()));
  }
  return {};
}

} // namespace

Result<std::string> manifest_set_digest(const fs::path& dir) {
  HPCBAKE_TRY_ASSIGN(const auto files, files_under(dir, true));
  util::Sha256 set;
  for (const auto& rel : files) {
    HPCBAKE_TRY_ASSIGN(const std::string file, util::sha256_file(dir / rel));
    HPCBAKE_TRY(set.update(rel.data(), rel.size()));
    HPCBAKE_TRY(set.update("", 1)); // the NUL between the path and the file's digest
    HPCBAKE_TRY(set.update(file.data(), file.size()));
  }
  return set.hex();
}

Result<std::string> plan_files_digest(const fs::path& dir, const std::string& only_size) {
  util::Sha256 set;
  HPCBAKE_TRY(add_files(set, dir, "manifests/", only_size));
  std::error_code ec;
  if (const fs::path recipes = recipes_dir(dir); fs::is_directory(recipes, ec))
    HPCBAKE_TRY(add_files(set, recipes, "drivers/"));
  // The overlays change the plan as the files do: an edited overlay is no no-op re-run.
  const auto& overlays = default_overlays();
  for (std::size_t i = 0; i < overlays.size(); ++i) {
    const std::string prefix = fmt::format("overlays/{}/", i);
    if (fs::is_directory(overlays[i], ec)) {
      HPCBAKE_TRY(add_files(set, overlays[i], prefix));
    } else {
      HPCBAKE_TRY_ASSIGN(const std::string bytes, util::read_file_or_error(overlays[i]));
      const std::string head = fmt::format("{}{}{}{}{}", prefix, overlays[i].string(), '\0', bytes.size(), '\0');
      HPCBAKE_TRY(set.update(head.data(), head.size()));
      HPCBAKE_TRY(set.update(bytes.data(), bytes.size()));
    }
  }
  return set.hex();
}

} // namespace hpcbake::manifest
