#include "cli/bundle_cmd.hpp"

#include "exec/runner.hpp"
#include "mirror/apt.hpp"
#include "util/http.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

namespace hpcbake::cli {

namespace fs = std::filesystem;

Result<CarriedRepositories> carry_repositories(const plan::Plan& plan, const fetch::Options& fo,
                                               fetch::Observer& observer) {
  CarriedRepositories out;
  util::CurlHttpClient http;
  exec::SystemRunner runner;
  std::string tmpl = (fs::temp_directory_path() / "hpcbake-bundle-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    return fail(ErrorKind::internal, fmt::format("cannot create a directory like {}", tmpl), "check TMPDIR");
  const fs::path scratch = tmpl;
  struct Remove {
    fs::path dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{scratch};
  for (const auto& s : plan.steps) {
    const auto* r = s.as<plan::RepositoryStep>();
    if (!r || plan::is_local_url(r->uri)) continue;
    mirror::Env env{&http, &runner, fo, &observer, "amd64", scratch / r->repository}; // dnf: x86_64
    const bool apt = r->manager == manifest::PackageManager::apt;
    HPCBAKE_TRY_ASSIGN(auto snap, apt ? mirror::snapshot_apt(plan, *r, env) : mirror::snapshot_dnf(plan, *r, env));
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : snap.files) {
      out.jobs.push_back({r->repository + "/" + f.path, {}, f.sha256, f.size});
      files.push_back({{"path", f.path}, {"sha256", f.sha256}, {"size", f.size}});
    }
    out.index.push_back({{"id", r->repository},
                         {"manager", manifest::to_string(r->manager)},
                         {"uri", util::redact_url(r->uri)},
                         {"fingerprint", r->fingerprint},
                         {"packages", snap.packages},
                         {"from_distribution", snap.other},
                         {"files", std::move(files)}});
    out.summary.push_back(
        fmt::format("{}: {} packages, {} files, {} ({}){}", r->repository, snap.packages.size(), snap.files.size(),
                    util::human_bytes(snap.bytes()), util::join(snap.packages, " "),
                    snap.other.empty() ? std::string()
                                       : "; from the distribution's repositories: " + util::join(snap.other, ", ")));
    for (const auto& n : snap.notes)
      out.summary.push_back(fmt::format("{}: note: {}", r->repository, n));
  }
  return out;
}

} // namespace hpcbake::cli
