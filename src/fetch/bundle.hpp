#pragma once
// Offline bundles: one tar holding index.json (name, SHA-256, size of each artifact),
// the manifests, and the artifacts under artifacts/<sha256>. A Batch pool fetches one
// bundle from blob storage instead of every node hitting vendor servers; an
// air-gapped build carries it in. Reading verifies every artifact while streaming it
// out of the tar; a tampered one is refused by name and never reaches the cache.
#include "fetch/cache.hpp"
#include "fetch/downloader.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::fetch {

// Writes OUT atomically (OUT.tmp, then rename). Every job must already be in the cache.
// `repositories` (a JSON array) goes into index.json as it is: the repositories the bundle carries,
// each with its files, whose bytes are among the jobs (mirror::Snapshot); `git_sources` likewise:
// the git bundle files of the plan's pinned sources (mirror::carry_git_sources), among the jobs.
Status create_bundle(const std::filesystem::path& out, const std::vector<Job>& jobs, const Cache& cache,
                     const std::filesystem::path& manifest_dir,
                     const nlohmann::json& repositories = nlohmann::json::array(),
                     const nlohmann::json& git_sources = nlohmann::json::array());

// The "repositories" of a bundle's index.json (an empty array for a bundle that carries none).
Result<nlohmann::json> bundle_repositories(const std::filesystem::path& bundle);

// Its "git_sources" (an empty array for a bundle that carries none).
Result<nlohmann::json> bundle_git_sources(const std::filesystem::path& bundle);

// Copies the jobs' artifacts from the bundle into the cache, verifying each.
Result<Report> fetch_from_bundle(const std::filesystem::path& bundle, const std::vector<Job>& jobs, const Cache& cache,
                                 Observer& observer);

} // namespace hpcbake::fetch
