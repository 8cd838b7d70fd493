#pragma once
// The vendor installer's command line from its recipe (manifest::Recipe, drivers/*.yaml).
// Used by the planner only: the plan carries the resolved argv and install runs exactly it.
#include "manifest/recipes.hpp"
#include "util/error.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::driver {

struct RunRequest {
  std::string run_file; // argv[1]: the .run (or a reference the executor resolves)
  std::string kernel;
  std::string flavour = "open";      // open | proprietary
  std::filesystem::path signing_key; // empty: unsigned
  std::filesystem::path signing_cert;
};

// `sh <run_file> <args...>` for one kernel (sh: the cache keeps files non-executable). An
// error when the recipe has no .run installer or does not offer the flavour.
Result<std::vector<std::string>> run_installer_argv(const manifest::Recipe& recipe, const RunRequest& request);

} // namespace hpcbake::driver
