#pragma once
// From a plan's artifacts to download jobs: the pins come from the manifests, and a
// `--sha256 NAME=HEX` override may pin what the manifest leaves `unknown` (never replace a
// pin). Whatever is still unpinned is refused, or skipped when fetching everything.
#include "fetch/downloader.hpp"
#include "manifest/manifests.hpp"

#include <map>
#include <string>
#include <vector>

namespace hpcbake::fetch {

enum class Unpinned { refuse, skip };

// Every artifact of every component variant (fetch --all, bundle create --all).
std::vector<manifest::PinnedArtifact> all_artifacts(const manifest::Manifests& manifests);

// NAME -> SHA-256 from `--sha256 NAME=HEX` options.
using Sha256Pins = std::map<std::string, std::string>;

// `overrides` are "NAME=<64 lower-case hex>" strings as given on the command line, each
// checked against `artifacts` (a plan's, or every artifact for --all): an error names the
// override that is malformed, names no artifact there (listing the ones it could name), or
// contradicts the manifest's pin.
Result<Sha256Pins> parse_sha256_pins(const std::vector<std::string>& overrides,
                                     const std::vector<manifest::PinnedArtifact>& artifacts);

// Download jobs for `artifacts`; `pins` may name more artifacts than these (an install
// fetches one artifact at a time with the pins of its whole plan).
Result<std::vector<Job>> jobs_for(const std::vector<manifest::PinnedArtifact>& artifacts, const Sha256Pins& pins,
                                  Unpinned unpinned);

// parse_sha256_pins, then jobs_for.
Result<std::vector<Job>> jobs_for(const std::vector<manifest::PinnedArtifact>& artifacts,
                                  const std::vector<std::string>& overrides, Unpinned unpinned);

} // namespace hpcbake::fetch
