#pragma once
// bundle create's part beyond artifacts: the signed repositories a plan installs from (apt and
// dnf), each as the snapshot of what this plan needs (mirror::snapshot_apt, snapshot_dnf).
#include "fetch/downloader.hpp"
#include "plan/plan.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hpcbake::cli {

struct CarriedRepositories {
  std::vector<fetch::Job> jobs;                   // every file, by digest (in the cache)
  nlohmann::json index = nlohmann::json::array(); // index.json's "repositories"
  std::vector<std::string> summary;               // one line per repository, for people
};

// Snapshots each network repository of `plan` (file:/// ones are on the node already).
Result<CarriedRepositories> carry_repositories(const plan::Plan& plan, const fetch::Options& fo,
                                               fetch::Observer& observer);

} // namespace hpcbake::cli
