#include "fetch/jobs.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

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

Result<std::vector<Job>> jobs_for(const std::vector<manifest::PinnedArtifact>& artifacts,
                                  const std::vector<std::string>& overrides, Unpinned unpinned_policy) {
  std::map<std::string, std::string> pins;
  for (const auto& kv : overrides) {
    auto eq = kv.find('=');
    const std::string hex = eq == std::string::npos ? std::string() : kv.substr(eq + 1);
    if (eq == std::string::npos || hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
      return fail(ErrorKind::usage, fmt::format("--sha256 '{}' is not NAME=<64 lower-case hex digits>", kv));
    pins[kv.substr(0, eq)] = hex;
  }
  std::vector<Job> jobs;
  std::vector<std::string> unpinned;
  for (const auto& pa : artifacts) {
    const auto& a = pa.artifact;
    Job j{a.name, a.urls, a.sha256.value_or(""), {}};
    if (a.size) j.size = static_cast<std::uint64_t>(*a.size);
    if (auto it = pins.find(a.name); it != pins.end()) {
      if (a.sha256 && *a.sha256 != it->second)
        return fail(ErrorKind::usage,
                    fmt::format("--sha256 {} contradicts the manifest's pin {}", it->first, *a.sha256),
                    "a pinned artifact cannot be overridden: fix the manifest instead");
      j.sha256 = it->second;
      pins.erase(it);
    }
    if (j.sha256.empty()) {
      if (unpinned_policy == Unpinned::refuse) unpinned.push_back(a.name);
      continue;
    }
    jobs.push_back(std::move(j));
  }
  if (!pins.empty())
    return fail(ErrorKind::usage, fmt::format("--sha256 names no artifact of this plan: {}", pins.begin()->first));
  if (!unpinned.empty())
    return fail(ErrorKind::fetch,
                fmt::format("refusing to download without a pinned SHA-256: {}", util::join(unpinned, ", ")),
                fmt::format("pass --sha256 {}=<hex> from a source you trust", unpinned.front()));
  return jobs;
}

} // namespace hpcbake::fetch
