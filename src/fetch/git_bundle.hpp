#pragma once
// A source tree pinned by commit (a plan's git-source step), carried in an offline bundle: the
// URL cloned where the bundle is made, the pinned commit required, and a `git bundle` file holding
// that commit and its history under one ref written into the cache by its SHA-256, so the
// bundle lists and verifies it like any artifact. On the node, `git clone` reads that file (git
// checks every object's hash as it indexes the pack) and HEAD must still be the pin.
#include "exec/runner.hpp"
#include "fetch/cache.hpp"
#include "util/error.hpp"

#include <cstdint>
#include <filesystem>
#include <string>

namespace hpcbake::fetch {

struct GitPin {
  std::string component;
  std::string url;    // as the plan shows it
  std::string commit; // 40 hex digits
};

struct GitBundleFile {
  std::string name; // git/<component>-<commit>.bundle: how the bundle's index and errors name it
  std::string sha256;
  std::uint64_t size = 0;
};

// The ref the bundle file holds: the only one, at the pinned commit.
inline constexpr const char* kGitBundleRef = "refs/heads/hpcbake-pin";

std::string git_bundle_name(const GitPin& pin);

// Clones pin.url (bare) into `scratch`/<component>.git through `runner`, requires pin.commit there
// as a commit, writes the git bundle of kGitBundleRef at that commit, checks that it lists that one
// ref, and publishes it into `cache`. Errors (kind fetch) name the URL, the commit and the command.
Result<GitBundleFile> carry_git_source(const GitPin& pin, exec::Runner& runner, const Cache& cache,
                                       const std::filesystem::path& scratch);

} // namespace hpcbake::fetch
