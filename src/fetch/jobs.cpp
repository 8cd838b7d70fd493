#include "fetch/jobs.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hpcbake::fetch {

std::vector<manifest::PinnedArtifact> all_artifacts(const manifest::Manifests& manifests) {
  std::vector<manifest::PinnedArtifact> out;
  for (const auto& c : manifests.components)
    for (const auto& v : c.variants)
      for (const auto& a : v.artifacts)
        out.push_back({c.component, v.version, a});
  return out;
}

Result<Sha256Pins> parse_sha256_pins(const std::vector<std::string>& overrides,
                                     const std::vector<manifest::PinnedArtifact>& artifacts) {
  Sha256Pins pins;
  for (const auto& kv : overrides) {
    auto eq = kv.find('=');
    const std::string hex = eq == std::string::npos ? std::string() : kv.substr(eq + 1);
    if (eq == std::string::npos || hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
      return fail(ErrorKind::usage, fmt::format("--sha256 '{}' is not NAME=<64 lower-case hex digits>", kv));
    const std::string name = kv.substr(0, eq);
    const auto it = std::find_if(artifacts.begin(), artifacts.end(),
                                 [&](const manifest::PinnedArtifact& pa) { return pa.artifact.name == name; });
    if (it == artifacts.end()) {
      std::vector<std::string> names;
      for (const auto& pa : artifacts)
        names.push_back(pa.artifact.name);
      return fail(ErrorKind::usage, fmt::format("--sha256 {}: no artifact of this plan is named so", name),
                  names.empty() ? std::string("this plan downloads nothing: drop --sha256")
                                : fmt::format("its artifacts: {}", util::join(names, ", ")));
    }
    if (it->artifact.sha256 && *it->artifact.sha256 != hex)
      return fail(ErrorKind::usage,
                  fmt::format("--sha256 {} contradicts the manifest's pin {}", name, *it->artifact.sha256),
                  "a pinned artifact cannot be overridden: fix the manifest instead");
    if (auto [at, fresh] = pins.emplace(name, hex); !fresh && at->second != hex)
      return fail(ErrorKind::usage, fmt::format("--sha256 {} is given twice with different values", name));
  }
  return pins;
}

Result<std::vector<Job>> jobs_for(const std::vector<manifest::PinnedArtifact>& artifacts, const Sha256Pins& pins,
                                  Unpinned unpinned_policy) {
  std::vector<Job> jobs;
  std::vector<std::string> unpinned;
  for (const auto& pa : artifacts) {
    const auto& a = pa.artifact;
    Job j{a.name, a.urls, a.sha256.value_or(""), {}};
    if (a.size) j.size = static_cast<std::uint64_t>(*a.size);
    if (auto it = pins.find(a.name); it != pins.end() && j.sha256.empty()) j.sha256 = it->second;
    if (j.sha256.empty()) {
      if (unpinned_policy == Unpinned::refuse) unpinned.push_back(a.name);
      continue;
    }
    jobs.push_back(std::move(j));
  }
  if (!unpinned.empty())
    return fail(ErrorKind::fetch,
                fmt::format("refusing to download without a pinned SHA-256: {}", util::join(unpinned, ", ")),
                fmt::format("pass --sha256 {}=<hex> from a source you trust", unpinned.front()));
  return jobs;
}

Result<std::vector<Job>> jobs_for(const std::vector<manifest::PinnedArtifact>& artifacts,
                                  const std::vector<std::string>& overrides, Unpinned unpinned) {
  HPCBAKE_TRY_ASSIGN(auto pins, parse_sha256_pins(overrides, artifacts));
  return jobs_for(artifacts, pins, unpinned);
}

} // namespace hpcbake::fetch
