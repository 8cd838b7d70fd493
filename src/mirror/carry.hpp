#pragma once
// bundle create's part beyond artifacts: the signed repositories a plan installs from (apt and
// dnf), each as the snapshot of what this plan needs (snapshot_apt, snapshot_dnf), for the
// plan's CPU architecture; and the plan's git sources, each as a git bundle at its pinned commit.
#include "exec/runner.hpp"
#include "fetch/downloader.hpp"
#include "fetch/git_bundle.hpp"
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"
#include "util/error.hpp"
#include "util/http.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::mirror {

// The name `manager` gives the CPU architecture `arch` (uname -m, as plan.arch spells it):
// apt the Debian one (x86_64 -> amd64, aarch64 -> arm64), dnf and tdnf the RPM one (x86_64,
// aarch64). A snapshot keeps that architecture's packages and the architecture-independent ones
// (apt "all", rpm "noarch"). `where` names whose architecture it is, for the error. Errors:
// another architecture (kind usage), naming the two a bundle carries.
Result<std::string> package_arch(manifest::PackageManager manager, std::string_view arch, const std::string& where);

struct CarriedRepositories {
  std::vector<fetch::Job> jobs;                   // every file, by digest (in the cache)
  nlohmann::json index = nlohmann::json::array(); // index.json's "repositories"
  std::vector<std::string> summary;               // one line per repository, for people
};

// Snapshots each network repository of `plan` (file:/// ones are on the node already) for
// plan.arch: the keys and signed metadata through `http`, gpgv through `runner`, indexes and
// packages through the fetch engine into fo.cache_dir. Errors: an architecture package_arch
// refuses (before any download), and those of snapshot_apt and snapshot_dnf.
Result<CarriedRepositories> carry_repositories(const plan::Plan& plan, util::HttpClient& http, exec::Runner& runner,
                                               const fetch::Options& fo, fetch::Observer& observer);

struct CarriedGitSources {
  std::vector<fetch::Job> jobs;                   // each git bundle file, by digest (in the cache)
  nlohmann::json index = nlohmann::json::array(); // index.json's "git_sources"
  std::vector<std::string> summary;               // one line per source, for people
};

// Each git-source step of `plan` (file:/// ones too: the node may not have that directory) as a
// git bundle file at its pinned commit (fetch::carry_git_source), git run through `runner`, the
// files written into fo.cache_dir. index.json lists each as {component, url, commit, name,
// sha256, size}; install --bundle plans its git-source step from that file.
Result<CarriedGitSources> carry_git_sources(const plan::Plan& plan, exec::Runner& runner, const fetch::Options& fo);

} // namespace hpcbake::mirror
