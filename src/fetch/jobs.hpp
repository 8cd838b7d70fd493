#pragma once
// From a plan's artifacts to download jobs: the pins come from the manifests, and a
// `--sha256 NAME=HEX` override may pin what the manifest leaves `unknown` (never replace a
// pin). Whatever is still unpinned is refused, or skipped when fetching everything.
#include "fetch/downloader.hpp"
#include "manifest/manifests.hpp"

#include <string>
#include <vector>

namespace hpcbake::fetch {

enum class Unpinned { refuse, skip };

// Every artifact of every component variant (fetch --all, bundle create --all).
std::vector<manifest::PinnedArtifact> all_artifacts(const manifest::Manifests& manifests);

// `overrides` are "NAME=<64 lower-case hex>" strings as given on the command line.
Result<std::vector<Job>> jobs_for(const std::vector<manifest::PinnedArtifact>& artifacts,
                                  const std::vector<std::string>& overrides, Unpinned unpinned);

} // namespace hpcbake::fetch
