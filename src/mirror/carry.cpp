#include "mirror/carry.hpp"

#include "manifest/kinds.hpp"
#include "mirror/apt.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace hpcbake::mirror {

namespace fs = std::filesystem;

Result<std::string> package_arch(manifest::PackageManager manager, std::string_view arch, const std::string& where) {
  const auto a = manifest::parse_arch(arch);
  if (!a)
    return fail(ErrorKind::unsupported,
                fmt::format("{}: hpcbake snapshots {} repositories for {}, not for the CPU architecture '{}'", where,
                            manifest::to_string(manager), util::join(manifest::arch_names(), " and "), arch),
                fmt::format("bundle a size whose manifest (manifests/sizes/) says arch: {}",
                            util::join(manifest::arch_names(), " or arch: ")));
  // A switch with no default: a new Arch is a -Wswitch warning here (an error in the test build),
  // not a silent amd64.
  const bool apt = manager == manifest::PackageManager::apt;
  switch (*a) {
  case manifest::Arch::x86_64:
    return std::string(apt ? "amd64" : "x86_64");
  case manifest::Arch::aarch64:
    return std::string(apt ? "arm64" : "aarch64"); // dnf and tdnf: rpm's names, uname -m's
  }
  return fail(ErrorKind::internal, fmt::format("{}: architecture '{}' has no package name", where, arch));
}

namespace {

// A private directory for gpgv's files, removed with everything in it when this goes.
struct ScratchDir {
  fs::path dir;
  ScratchDir() = default;
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

// A new private directory under TMPDIR (else /tmp).
Result<fs::path> make_scratch() {
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec); // TMPDIR, else /tmp; an error, not a throw
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("no directory for temporary files (TMPDIR={}): {}",
                            std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "unset", ec.message()),
                "set TMPDIR to a writable directory");
  std::string tmpl = (tmp / "hpcbake-bundle-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    return fail(ErrorKind::internal, fmt::format("cannot create a directory like {}: {}", tmpl, std::strerror(errno)),
                "check TMPDIR");
  return fs::path(tmpl);
}

void add_carried(CarriedRepositories& out, const plan::RepositoryStep& r, const Snapshot& snap) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : snap.files) {
    out.jobs.push_back({r.repository + "/" + f.path, {}, f.sha256, f.size});
    files.push_back({{"path", f.path}, {"sha256", f.sha256}, {"size", f.size}});
  }
  out.index.push_back({{"id", r.repository},
                       {"manager", manifest::to_string(r.manager)},
                       {"uri", util::redact_url(r.uri)},
                       {"fingerprint", r.fingerprint},
                       {"packages", snap.packages},
                       {"from_distribution", snap.other},
                       {"files", std::move(files)}});
  out.summary.push_back(fmt::format(
      "{}: {} packages, {} files, {} ({}){}", r.repository, snap.packages.size(), snap.files.size(),
      util::human_bytes(snap.bytes()), util::join(snap.packages, " "),
      snap.other.empty() ? std::string() : "; from the distribution's repositories: " + util::join(snap.other, ", ")));
  for (const auto& n : snap.notes)
    out.summary.push_back(fmt::format("{}: note: {}", r.repository, n));
}

} // namespace

Result<CarriedRepositories> carry_repositories(const plan::Plan& plan, util::HttpClient& http, exec::Runner& runner,
                                               const fetch::Options& fo, fetch::Observer& observer) {
  // Every repository's architecture name first: a plan no snapshot can serve downloads nothing.
  std::vector<std::pair<const plan::RepositoryStep*, std::string>> repos;
  for (const auto& s : plan.steps) {
    const auto* r = s.as<plan::RepositoryStep>();
    if (!r || plan::is_local_url(r->uri)) continue;
    HPCBAKE_TRY_ASSIGN(auto arch, package_arch(r->manager, plan.arch,
                                               fmt::format("repository {} of the plan for {} on {}", r->repository,
                                                           plan.size, plan.distro_id)));
    repos.emplace_back(r, std::move(arch));
  }
  CarriedRepositories out;
  if (repos.empty()) return out;
  ScratchDir scratch;
  HPCBAKE_TRY_ASSIGN(scratch.dir, make_scratch());
  for (const auto& [r, arch] : repos) {
    const Env env{&http, &runner, fo, &observer, arch, scratch.dir / r->repository};
    const bool apt = r->manager == manifest::PackageManager::apt;
    HPCBAKE_TRY_ASSIGN(auto snap, apt ? snapshot_apt(plan, *r, env) : snapshot_dnf(plan, *r, env));
    add_carried(out, *r, snap);
  }
  return out;
}

Result<CarriedGitSources> carry_git_sources(const plan::Plan& plan, exec::Runner& runner, const fetch::Options& fo) {
  CarriedGitSources out;
  std::vector<const plan::GitSourceStep*> sources;
  for (const auto& s : plan.steps)
    if (const auto* g = s.as<plan::GitSourceStep>()) sources.push_back(g);
  if (sources.empty()) return out;
  ScratchDir scratch;
  HPCBAKE_TRY_ASSIGN(scratch.dir, make_scratch());
  const fetch::Cache cache(fo.cache_dir, fo.quarantine_budget);
  for (const auto* g : sources) {
    const fetch::GitPin pin{g->component, g->url, g->commit};
    HPCBAKE_TRY_ASSIGN(auto file, fetch::carry_git_source(pin, runner, cache, scratch.dir));
    out.jobs.push_back({file.name, {}, file.sha256, file.size});
    out.index.push_back({{"component", g->component},
                         {"url", util::redact_url(g->url)},
                         {"commit", g->commit},
                         {"name", file.name},
                         {"sha256", file.sha256},
                         {"size", file.size}});
    out.summary.push_back(fmt::format("{}: git bundle of {} at {} ({})", g->component, util::redact_url(g->url),
                                      g->commit, util::human_bytes(file.size)));
  }
  return out;
}

} // namespace hpcbake::mirror
