#include "cli/app.hpp"
#include "util/paths.hpp"

#include "cli/complete.hpp"
#include "cli/container_cmd.hpp"
#include "cli/driver_cmds.hpp"
#include "cli/help.hpp"
#include "cli/install_cmd.hpp"
#include "cli/progress.hpp"
#include "cli/rdma_cmd.hpp"
#include "cli/report.hpp"
#include "cli/seal_cmd.hpp"
#include "cli/signals.hpp"
#include "cli/sizes_cmd.hpp"
#include "cli/test_runner.hpp"
#include "cli/verify_cmd.hpp"
#include "cli/version.hpp"
#include "fetch/bundle.hpp"
#include "fetch/downloader.hpp"
#include "fetch/jobs.hpp"
#include "install/prebuild.hpp"
#include "mirror/carry.hpp"
#include "util/datadir.hpp"
#include "util/preflight.hpp"

#include "detect/host.hpp"
#include "manifest/catalog.hpp"
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"
#include "plan/resolve.hpp"
#include "util/error.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace hpcbake::cli {

namespace {

struct Options {
  std::string root = "/";
  std::string manifests;
  std::vector<std::string> overlays; // --overlay (default: /etc/hpcbake/manifests.d under --root)
  std::string imds_url;
  bool no_imds = false;
  bool json = false, quiet = false, verbose = false; // the global output options (cli/ui.hpp)
  std::string size;
  std::string distro;
  std::string profile = "default"; // profiles/<id>.yaml: the optional components
  std::string driver;
  std::string lint_dir;
  std::string sign = "auto";
  std::string driver_source = "auto"; // plan/install --driver-source
  std::string driver_version;         // plan/install --driver-version
  bool hold_kernel = false;
  std::string hardware_checks = "now"; // plan/install --hardware-checks: now | deferred
  std::vector<std::string> kernels;    // plan/install --dry-run --kernel (repeatable)
  bool markdown = false;               // manifest matrix: a Markdown table
  // fetch / cache
  bool all = false;
  std::string cache;
  int parallel = 4;
  std::vector<std::string> mirrors;
  std::string ca_file;
  std::vector<std::string> sha256_overrides; // NAME=HEX
  long stall_timeout_s = 30;
  double retry_backoff_s = 1.0;
  int attempts = 4;
  std::uint64_t max_download_bytes = fetch::kDefaultMaxUnpinnedBytes;
  std::uint64_t quarantine_budget = fetch::kDefaultQuarantineBudget;
  long lock_timeout_s = 600;  // fetch and bundle create --lock-timeout (fetch::Options::lock_timeout)
  std::string bundle;         // fetch --bundle PATH
  std::string bundle_out;     // bundle create OUT
  std::string prebuilt;       // plan/install --prebuilt FILE
  std::string modules_out;    // bundle modules OUT
  std::string modules_kernel; // bundle modules --kernel
};

constexpr const char* default_cache = paths::kCacheDir;

std::filesystem::path cache_dir(const Options& o) {
  if (!o.cache.empty()) return o.cache;
  return util::HostFs(o.root).resolve(default_cache);
}

std::filesystem::path manifest_dir(const Options& o) {
  return manifest::manifest_dir_or_default(o.manifests);
}

// The metadata service is asked only about the real machine, unless an endpoint is
// named explicitly (tests and fixture roots).
detect::ImdsOptions imds_options(const Options& o, const util::HostFs& host) {
  detect::ImdsOptions imds;
  const char* env = std::getenv("HPCBAKE_IMDS_URL");
  if (!o.imds_url.empty())
    imds.url = o.imds_url;
  else if (env && *env)
    imds.url = env;
  else if (!host.is_real_root()) {
    imds.enabled = false;
    imds.disabled_reason = "--root names another tree; --imds-url or HPCBAKE_IMDS_URL names a service to ask";
  }
  if (o.no_imds) {
    imds.enabled = false;
    imds.disabled_reason = "--no-imds";
  }
  return imds;
}

int cmd_detect(const Options& o, std::ostream& out, std::ostream& err) {
  const util::HostFs host(o.root);
  // Manifests map os-release to a distro id and vmSize to a size; detect still works without them.
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests)
    err << "hpcbake: warning: manifests not loaded, distro and size are not mapped:\n  " << manifests.error().message
        << "\n";
  util::CurlHttpClient http;
  auto facts = detect::detect_host(host, http, imds_options(o, host), manifests ? &*manifests : nullptr);
  if (o.json)
    out << util::dump_json(detect::to_json(facts), 2) << "\n";
  else
    out << detect::render_text(facts);
  return 0;
}

// What --size/--distro/--driver/--sign and --root say to plan for (plan::resolve).
Result<plan::ResolveRequest> resolve_request(const Options& o) {
  plan::ResolveRequest rq;
  rq.host = util::HostFs(o.root);
  rq.imds = imds_options(o, rq.host);
  rq.size = o.size;
  rq.distro = o.distro;
  rq.profile = o.profile;
  if (!o.driver.empty()) rq.driver = manifest::parse_driver_kind(o.driver); // CLI11 checked the spelling
  HPCBAKE_TRY_ASSIGN(auto mode, driver::parse_sign_mode(o.sign));
  rq.signing.mode = mode;
  rq.signing.key_dir = rq.host.resolve(paths::kKeyDir);
  rq.hold_kernel = o.hold_kernel;
  rq.defer_hardware = o.hardware_checks == "deferred";
  rq.kernels = o.kernels;
  rq.driver_source =
      plan::parse_driver_source(o.driver_source).value_or(plan::DriverSource::automatic); // CLI11 checked
  rq.driver_version = o.driver_version;
  if (!o.prebuilt.empty()) rq.prebuilt = std::filesystem::absolute(o.prebuilt);
  return rq;
}

Result<plan::Plan> resolve_plan(const Options& o, const manifest::Manifests& manifests) {
  HPCBAKE_TRY_ASSIGN(auto rq, resolve_request(o));
  util::CurlHttpClient http;
  HPCBAKE_TRY_ASSIGN(auto r, plan::resolve(manifests, rq, http));
  return std::move(r.plan);
}

fetch::Options fetch_options(const Options& o) {
  fetch::Options fo;
  fo.cache_dir = cache_dir(o);
  fo.parallel = o.parallel;
  fo.mirrors = o.mirrors;
  fo.ca_file = o.ca_file;
  fo.low_speed_seconds = o.stall_timeout_s;
  fo.backoff_initial_s = o.retry_backoff_s;
  fo.attempts_per_url = o.attempts;
  fo.max_unpinned_bytes = o.max_download_bytes;
  fo.quarantine_budget = o.quarantine_budget;
  fo.lock_timeout = std::chrono::seconds(o.lock_timeout_s);
  return fo;
}

int cmd_install(const Options& o, const InstallOptions& io, std::ostream& out, std::ostream& err) {
  install::InstallRequest rq;
  rq.manifests_dir = manifest_dir(o);
  rq.size_filter = o.size;
  auto resolve = resolve_request(o);
  if (!resolve) return report(resolve.error(), err);
  rq.resolve = std::move(*resolve);
  rq.fetch = fetch_options(o);
  if (!o.bundle.empty()) rq.bundle = std::filesystem::absolute(o.bundle);
  rq.sha256_overrides = o.sha256_overrides;
  if (io.resume) {
    // The stored plan is the whole request: an option that would change it is refused, not ignored.
    std::vector<std::string> given;
    const auto add = [&given](bool set, const char* name) {
      if (set) given.push_back(name);
    };
    add(!o.size.empty(), "--size");
    add(!o.distro.empty(), "--distro");
    add(o.profile != "default", "--profile");
    add(!o.driver.empty(), "--driver");
    add(o.sign != "auto", "--sign");
    add(o.hold_kernel, "--hold-kernel");
    add(o.hardware_checks != "now", "--hardware-checks");
    add(!o.kernels.empty(), "--kernel");
    add(o.driver_source != "auto", "--driver-source");
    add(!o.driver_version.empty(), "--driver-version");
    add(!o.bundle.empty(), "--bundle");
    add(!o.prebuilt.empty(), "--prebuilt");
    add(!o.sha256_overrides.empty(), "--sha256");
    add(!o.cache.empty(), "--cache");
    add(!o.mirrors.empty(), "--mirror");
    add(!o.ca_file.empty(), "--ca-file");
    add(o.max_download_bytes != fetch::kDefaultMaxUnpinnedBytes, "--max-download-bytes");
    add(o.quarantine_budget != fetch::kDefaultQuarantineBudget, "--quarantine-budget");
    for (const auto& name : resume_conflicts(io))
      given.push_back(name);
    if (!given.empty())
      return report(Error{ErrorKind::usage,
                          fmt::format("install --resume continues the stored plan with its stored options; {} would "
                                      "change them",
                                      util::join(given, ", ")),
                          "drop them to resume, or run 'hpcbake install' with them to plan afresh"},
                    err);
  }
  if (!o.kernels.empty() && !io.dry_run && !io.resume)
    return report(Error{ErrorKind::usage,
                        "--kernel is for a dry run: install builds for the kernels this machine will boot (its "
                        "running and next-boot kernels), never for kernels named on the command line",
                        "add --dry-run to see the plan for those kernels, or drop --kernel to install here"},
                  err);
  return run_install(io, Ui{o.json, o.quiet, o.verbose}, std::move(rq), out, err);
}

int cmd_plan(const Options& o, std::ostream& out, std::ostream& err) {
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) return report(manifests.error(), err);
  auto p = resolve_plan(o, *manifests);
  if (!p) return report(p.error(), err);
  if (o.json) {
    out << util::dump_json(plan::to_json(*p), 2) << "\n";
    return 0;
  }
  const fetch::Cache cache(cache_dir(o));
  out << plan::render_text(*p) << plan::download_summary(*p, [&](const std::string& sha) { return cache.has(sha); });
  return 0;
}

// bundle modules: the plan's DKMS modules built, signed and packed for one kernel (install/prebuild.hpp).
int cmd_bundle_modules(const Options& o, std::ostream& out, std::ostream& err) {
  install::PrebuildRequest rq;
  rq.host = util::HostFs(o.root);
  const std::string mdir = manifest_dir(o).string();
  // DKMS runs as root with the recipe's dkms.conf; the plan's key signs kernel code.
  std::vector<util::TrustedPath> trusted = {manifest::manifest_trust(mdir),
                                            manifest::drivers_trust(mdir),
                                            {rq.host.resolve(paths::kKeyDir), "signing key directory", 1, {}}};
  if (auto s = util::preflight("bundle modules", rq.host, trusted); !s) return report(s.error(), err);
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) return report(manifests.error(), err);
  auto p = resolve_plan(o, *manifests);
  if (!p) return report(p.error(), err);
  auto pins = fetch::parse_sha256_pins(o.sha256_overrides, p->artifacts);
  if (!pins) return report(pins.error(), err);
  auto runner = make_runner(rq.host);
  rq.plan = &*p;
  rq.kernel = o.modules_kernel;
  rq.out = std::filesystem::absolute(o.modules_out);
  rq.fetch = fetch_options(o);
  rq.sha256_pins = *pins;
  if (!o.bundle.empty()) rq.bundle = std::filesystem::absolute(o.bundle);
  rq.runner = runner.get();
  rq.dkms_conf_template = util::read_file(manifests->recipes_dir / "dkms" / "dkms.conf.in").value_or("");
  rq.work_dir = rq.host.resolve(paths::kStateDir) / "prebuild";
  rq.log_dir = rq.host.resolve(paths::kDkmsLogDir);
  err << fmt::format("bundle: building {}'s DKMS modules for {}\n", p->size, rq.kernel);
  auto r = install::prebuild(rq);
  if (!r) return report(r.error(), err);
  if (o.json) {
    out << util::dump_json(nlohmann::json{{"file", rq.out}, {"manifest", driver::to_json(r->manifest)}}, 2) << "\n";
    return 0;
  }
  for (const auto& line : r->lines)
    out << "  " << line << "\n";
  out << fmt::format("{}: prebuilt modules for {} ({}); install them with 'hpcbake install --prebuilt {}'\n",
                     rq.out.string(), rq.kernel, r->manifest.arch, rq.out.string());
  return 0;
}

// The artifacts to fetch: one plan's (kept in `planned`), or every pinned artifact (--all, for
// mirrors and bundles).
Result<std::vector<fetch::Job>> fetch_jobs(const Options& o, const manifest::Manifests& m,
                                           std::optional<plan::Plan>& planned) {
  if (o.all) {
    std::vector<std::string> picked; // --all takes every component of every distro: a choice of one is a conflict
    if (!o.size.empty()) picked.emplace_back("--size");
    if (!o.distro.empty()) picked.emplace_back("--distro");
    if (o.profile != "default") picked.emplace_back("--profile");
    if (!picked.empty())
      return fail(
          ErrorKind::usage,
          fmt::format("--all takes every pinned artifact of every component for every distro, and {} picks "
                      "one plan's: they cannot be given together",
                      util::join(picked, ", ")),
          fmt::format("drop --all to take that plan's artifacts, or drop {} to take all", util::join(picked, ", ")));
    return fetch::jobs_for(fetch::all_artifacts(m), o.sha256_overrides, fetch::Unpinned::skip);
  }
  HPCBAKE_TRY_ASSIGN(auto p, resolve_plan(o, m));
  if (!o.bundle_out.empty()) HPCBAKE_TRY(plan::bundle_can_carry(p)); // a bundle that cannot install offline
  auto jobs = fetch::jobs_for(p.artifacts, o.sha256_overrides, fetch::Unpinned::refuse);
  planned = std::move(p);
  return jobs;
}

// Ctrl-C during fetch: what was kept, and how to go on.
int report_interrupted(const fetch::Report& rep, const std::filesystem::path& cache, std::ostream& err) {
  std::size_t kept = 0, done = 0;
  std::uint64_t bytes = 0;
  for (const auto& r : rep.results) {
    done += r.ok;
    if (r.interrupted && r.partial_bytes) {
      ++kept;
      bytes += r.partial_bytes;
    }
  }
  err << fmt::format("hpcbake: interrupted: {} of {} artifacts are verified in the cache", done, rep.results.size());
  if (kept)
    err << fmt::format("; {} partial downloads ({}) are kept in {}", kept, human_bytes(bytes),
                       (cache / "partial").string());
  err << "\n  hint: run the same command again: verified artifacts are not fetched again";
  err << (kept ? " and partial downloads resume where they stopped\n" : "\n");
  return static_cast<int>(ExitCode::interrupted);
}

// bundle create, once the plan's artifacts are in the cache: the repositories and git sources the
// plan uses carried beside them, then the tar.
int write_bundle(const Options& o, const std::optional<plan::Plan>& planned, std::vector<fetch::Job> jobs,
                 const fetch::Options& fo, ProgressRenderer& progress, std::ostream& out, std::ostream& err) {
  mirror::CarriedRepositories repos;
  mirror::CarriedGitSources sources;
  if (planned) {
    util::CurlHttpClient http;
    auto runner = make_runner(util::HostFs(o.root)); // gpgv, on the files it names
    auto carried = mirror::carry_repositories(*planned, http, *runner, fo, progress);
    if (!carried) return report(carried.error(), err);
    repos = std::move(*carried);
    auto git = mirror::carry_git_sources(*planned, *runner, fo); // each pinned source as a git bundle
    if (!git) return report(git.error(), err);
    sources = std::move(*git);
  }
  const std::size_t artifacts = jobs.size();
  jobs.insert(jobs.end(), repos.jobs.begin(), repos.jobs.end());
  jobs.insert(jobs.end(), sources.jobs.begin(), sources.jobs.end());
  if (auto s = fetch::create_bundle(o.bundle_out, jobs, fetch::Cache(fo.cache_dir), manifest_dir(o), repos.index,
                                    sources.index);
      !s)
    return report(s.error(), err);
  repos.summary.insert(repos.summary.end(), sources.summary.begin(), sources.summary.end());
  if (o.json) {
    out << util::dump_json(nlohmann::json{{"event", "result"},
                                          {"bundle", o.bundle_out},
                                          {"artifacts", artifacts},
                                          {"repositories", repos.index.size()},
                                          {"git_sources", sources.index.size()},
                                          {"summary", repos.summary}})
        << "\n";
    return 0;
  }
  out << fmt::format("{}: {} artifacts, {} repositories, {} git sources and the manifests\n", o.bundle_out, artifacts,
                     repos.index.size(), sources.index.size());
  for (const auto& line : repos.summary)
    out << "  " << line << "\n";
  return 0;
}

int cmd_fetch(const Options& o, std::ostream& out, std::ostream& err) {
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) return report(manifests.error(), err);
  const bool create = !o.bundle_out.empty();
  fetch::Options fo = fetch_options(o);
  // The system cache is root's: install runs what it finds there without downloading again.
  // As root, a cache others could write is refused (they could put their own bytes under a
  // pinned digest's name); a user's own --cache is theirs to manage.
  if (::geteuid() != 0 && o.cache.empty() && util::HostFs(o.root).is_real_root())
    return report(
        Error{ErrorKind::permission,
              fmt::format("{} writes the system cache {}, which only root may change (hpcbake runs as uid {})",
                          create ? "bundle create" : "fetch", fo.cache_dir.string(), ::geteuid()),
              "run it as root, or pass --cache DIR to use a cache of your own"},
        err);
  if (::geteuid() == 0)
    if (auto s = util::check_trusted({{fo.cache_dir, "artifact cache", -1, "or pass --cache DIR"}}); !s)
      return report(s.error(), err);
  std::optional<plan::Plan> planned;
  auto jobs = fetch_jobs(o, *manifests, planned);
  if (!jobs) return report(jobs.error(), err);
  // Progress goes to stderr on a terminal and as lines; --json events go to stdout.
  ProgressRenderer::Options po;
  po.mode = o.quiet && !o.json ? ProgressMode::quiet : progress_mode_for(o.json, STDERR_FILENO);
  po.width = terminal_width(STDERR_FILENO);
  po.jobs = jobs->size();
  std::vector<std::optional<std::uint64_t>> sizes;
  for (const auto& j : *jobs)
    sizes.push_back(j.size);
  po.total_bytes = known_total(sizes);
  ProgressRenderer progress(po.mode == ProgressMode::json ? out : err, po);
  StopSignals signals;
  fo.stop = signals.flag();
  // With --bundle, artifacts come only from the bundle, each verified; nothing touches the network.
  auto rep = o.bundle.empty() ? fetch::download(*jobs, fo, progress)
                              : fetch::fetch_from_bundle(o.bundle, *jobs,
                                                         fetch::Cache(fo.cache_dir, fo.quarantine_budget), progress);
  if (!rep) return report(rep.error(), err);
  progress.finish();
  if (signals.stopped()) return report_interrupted(*rep, fo.cache_dir, err);
  int failed = 0, locked = 0;
  for (const auto& r : rep->results)
    if (!r.ok) {
      ++failed;
      locked += r.lock_held;
      err << fmt::format("hpcbake: error: {}: {}\n", r.name, r.error);
    }
  if (failed && locked == failed) { // only held locks: exit 8, as for install's lock
    err << fmt::format("  hint: {} of {} artifacts are being downloaded by another process: run this again when it "
                       "is done (what it verified is then a cache hit), or wait longer with --lock-timeout\n",
                       failed, rep->results.size());
    return static_cast<int>(ExitCode::lock_held);
  }
  if (failed) {
    err << fmt::format("  hint: {} of {} artifacts failed; a re-run resumes partial downloads\n", failed,
                       rep->results.size());
    return static_cast<int>(ExitCode::fetch);
  }
  if (create) return write_bundle(o, planned, std::move(*jobs), fo, progress, out, err);
  if (o.json) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& r : rep->results)
      files.push_back({{"name", r.name}, {"sha256", r.sha256}, {"path", r.path.string()}, {"cached", r.from_cache}});
    out << util::dump_json(nlohmann::json{{"event", "result"}, {"artifacts", files}}) << "\n";
    return 0;
  }
  for (const auto& r : rep->results)
    out << fmt::format("{}  {}\n", r.path.string(), r.name);
  return 0;
}

int cmd_cache_list(const Options& o, std::ostream& out, std::ostream& err) {
  fetch::Cache cache(cache_dir(o));
  std::vector<fetch::ListProblem> problems;
  const auto entries = cache.list(&problems);
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries)
      list.push_back({{"sha256", e.sha256}, {"bytes", e.size}});
    out << util::dump_json(nlohmann::json{{"schema", 1}, {"cache", cache.dir().string()}, {"artifacts", list}}, 2)
        << "\n";
  } else {
    for (const auto& e : entries)
      out << fmt::format("{}  {:>12}\n", e.sha256, e.size);
  }
  for (const auto& p : problems)
    err << fmt::format("hpcbake: warning: {}: skipped: {}\n", p.path.string(), p.error);
  return 0;
}

int cmd_cache_verify(const Options& o, std::ostream& out, std::ostream& err) {
  fetch::Cache cache(cache_dir(o), o.quarantine_budget);
  int good = 0;
  const auto problems = cache.verify(&good);
  for (const auto& p : problems)
    err << fmt::format("hpcbake: error: {}\n", p.describe(cache.entry(p.sha256)));
  if (o.json) {
    nlohmann::json corrupt = nlohmann::json::array();
    for (const auto& p : problems)
      corrupt.push_back({{"sha256", p.sha256}, {"problem", p.describe(cache.entry(p.sha256))}});
    out << util::dump_json(
               nlohmann::json{{"schema", 1}, {"cache", cache.dir().string()}, {"verified", good}, {"corrupt", corrupt}},
               2)
        << "\n";
  } else {
    out << fmt::format("{}: {} verified, {} corrupt\n", cache.dir().string(), good, problems.size());
  }
  return problems.empty() ? 0 : static_cast<int>(ExitCode::fetch);
}

int cmd_cache_gc(const Options& o, std::ostream& out, std::ostream& err) {
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) return report(manifests.error(), err);
  std::set<std::string> pinned;
  for (const auto& c : manifests->components)
    for (const auto& v : c.variants)
      for (const auto& a : v.artifacts)
        if (a.sha256) pinned.insert(*a.sha256);
  fetch::Cache cache(cache_dir(o));
  const auto r = cache.gc(pinned);
  for (const auto& s : r.skipped)
    err << fmt::format("hpcbake: {}: {}\n", s.path.string(), s.reason);
  if (o.json)
    out << util::dump_json(
               nlohmann::json{
                   {"schema", 1}, {"cache", cache.dir().string()}, {"removed", r.removed}, {"freed_bytes", r.freed}},
               2)
        << "\n";
  else
    out << fmt::format("{}: removed {} files, freed {}\n", cache.dir().string(), r.removed, human_bytes(r.freed));
  return 0;
}

nlohmann::json lint_json(const manifest::LintResult& result, const std::filesystem::path& dir) {
  const auto diagnostics = [](const auto& list) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& d : list)
      a.push_back(d.str());
    return a;
  };
  const auto& m = result.manifests;
  nlohmann::json doc = {{"schema", 1},
                        {"dir", dir.string()},
                        {"files", result.files},
                        {"clean", result.diagnostics.empty() && result.unverifiable.empty()},
                        {"problems", diagnostics(result.diagnostics)},
                        {"unverifiable", diagnostics(result.unverifiable)},
                        {"counts",
                         {{"sizes", m.sizes.size()},
                          {"distros", m.distros.size()},
                          {"components", m.components.size()},
                          {"repositories", m.repositories.size()},
                          {"profiles", m.profiles.size()}}}};
  for (const auto& ov : m.overrides) // present only when an overlay set something
    doc["overrides"].push_back({{"what", ov.what()}, {"value", ov.value}, {"file", ov.overlay}, {"line", ov.line}});
  return doc;
}

int cmd_lint(const Options& o, std::ostream& out, std::ostream& err) {
  const std::filesystem::path dir = o.lint_dir.empty() ? manifest_dir(o) : std::filesystem::path(o.lint_dir);
  auto result = manifest::lint_manifests(dir);
  const bool clean = result.diagnostics.empty() && result.unverifiable.empty();
  if (o.json) { // the problems are in the document; the exit code says the same as without --json
    out << util::dump_json(lint_json(result, dir), 2) << "\n";
    return clean ? 0 : static_cast<int>(ExitCode::usage);
  }
  for (const auto& d : result.diagnostics)
    err << d.str() << "\n";
  for (const auto& d : result.unverifiable)
    err << d.str() << "\n";
  const auto& m = result.manifests;
  if (!clean) {
    err << fmt::format("hpcbake: {} problem(s) and {} unverifiable artifact(s) in {} file(s) under {}\n",
                       result.diagnostics.size(), result.unverifiable.size(), result.files, dir.string());
    return static_cast<int>(ExitCode::usage);
  }
  out << fmt::format("{}: {} files clean ({} sizes, {} distros, {} components, {} repositories, {} profiles), 0 "
                     "unverifiable artifacts\n",
                     dir.string(), result.files, m.sizes.size(), m.distros.size(), m.components.size(),
                     m.repositories.size(), m.profiles.size());
  for (const auto& ov : m.overrides)
    out << fmt::format("override: {} = {} (from {}:{})\n", ov.what(), ov.value, ov.overlay, ov.line);
  return 0;
}

// The matrix as a Markdown table: a row per size, a column per distro; each cell the signing route
// (with --sign on: how the plan's modules are trusted under Secure Boot) or "refused [n]", with the
// reasons numbered below (one per distinct reason).
std::string matrix_markdown(const manifest::Manifests& m, const nlohmann::json& pairs, const std::string& sign) {
  std::string out = "| size |";
  std::string rule = "|---|";
  for (const auto& d : m.distros) {
    out += " " + d.id + " |";
    rule += "---|";
  }
  out += "\n" + rule + "\n";
  std::vector<std::string> reasons;
  std::size_t i = 0;
  for (const auto& size : m.sizes) {
    out += "| " + size.size + " |";
    for (std::size_t d = 0; d < m.distros.size(); ++d, ++i) {
      const auto& row = pairs.at(i);
      std::string cell;
      if (row.at("result") == "refused") {
        // One numbered reason per kind of refusal, not per pair: its first sentence, the pair's
        // size and distro named generically (`--json` keeps each pair's whole message).
        std::string why = row.at("reason").get<std::string>();
        if (const auto end = why.find(". "); end != std::string::npos) why.resize(end + 1);
        const std::string& distro = m.distros[d].id;
        why = util::replace_all(why, "distros/" + distro + ".yaml", "distros/\x01.yaml"); // a file name stays
        why = util::replace_all(util::replace_all(why, size.size, "the size"), distro, "the distro");
        why = util::replace_all(why, "\x01", distro);
        auto it = std::find(reasons.begin(), reasons.end(), why);
        if (it == reasons.end()) it = reasons.insert(reasons.end(), why);
        cell = fmt::format("refused [{}]", it - reasons.begin() + 1);
      } else {
        cell = row.at("route").get<std::string>();
        if (row.at("result") != "planned") cell += " (" + row.at("result").get<std::string>() + ")";
      }
      out += " " + cell + " |";
    }
    out += "\n";
  }
  out += fmt::format("\nSigning: --sign {}. A cell is the plan's route (canonical-signed: the NVIDIA driver is "
                     "Canonical's signed precompiled modules, no key to enrol for it; hpcbake-key: every module the "
                     "plan builds is signed with hpcbake's key, whose certificate the VM must trust; none: the plan "
                     "builds or signs no module), or the reason below.\n",
                     sign);
  for (std::size_t r = 0; r < reasons.size(); ++r)
    out += fmt::format(
        "\n{}. {}\n", r + 1,
        util::replace_all(util::replace_all(util::replace_all(reasons[r], m.dir.string() + "/", ""), "|", "\\|"), "\n",
                          " "));
  return out;
}

// Every size x distro planned for another machine (no host facts): each pair plans with every
// artifact pinned and every repository's key pinned, or is refused with the reason. With --sign on
// (Secure Boot on), each pair's signing route, or why it cannot be signed.
int cmd_matrix(const Options& o, std::ostream& out, std::ostream& err) {
  auto m = manifest::load_manifests(manifest_dir(o));
  if (!m) return report(m.error(), err);
  auto mode = driver::parse_sign_mode(o.sign);
  if (!mode) return report(mode.error(), err);
  nlohmann::json pairs = nlohmann::json::array();
  int planned = 0, refused = 0, unpinned = 0;
  for (const auto& size : m->sizes)
    for (const auto& distro : m->distros) {
      plan::PlanRequest rq;
      rq.size = size.size;
      rq.distro = distro.id;
      rq.profile = o.profile;
      rq.signing.mode = *mode;
      rq.signing.key_dir = paths::kKeyDir;
      auto p = plan::make_plan(*m, rq);
      if (!p && p.error().kind != ErrorKind::unsupported) return report(p.error(), err);
      nlohmann::json row = {{"size", size.size}, {"distro", distro.id}};
      if (p) {
        const bool pinned = std::all_of(p->artifacts.begin(), p->artifacts.end(),
                                        [](const auto& a) { return a.artifact.sha256.has_value(); });
        ++(pinned ? planned : unpinned);
        row["result"] = pinned ? "planned" : "needs --sha256";
        row["steps"] = p->steps.size();
        // The NVIDIA driver's route where the planner chose one (Canonical's signed modules, or
        // hpcbake's key); else how the plan's own-built modules are trusted.
        row["route"] = plan::to_string(p->route != plan::SigningRoute::none ? p->route : p->signing_route());
      } else {
        ++refused;
        row["result"] = "refused";
        row["reason"] = p.error().message;
      }
      if (!o.json && !o.markdown)
        out << fmt::format("{:<40} {:<15} {}\n", size.size, distro.id,
                           p ? row["result"].get<std::string>() + fmt::format(" ({} steps, route {})", p->steps.size(),
                                                                              row["route"].get<std::string>())
                             : "refused: " + p.error().message);
      pairs.push_back(std::move(row));
    }
  if (o.json)
    out << util::dump_json(nlohmann::json{{"schema", 1},
                                          {"profile", o.profile},
                                          {"sign", o.sign},
                                          {"planned", planned},
                                          {"refused", refused},
                                          {"needs_sha256", unpinned},
                                          {"pairs", pairs}},
                           2)
        << "\n";
  else if (o.markdown)
    out << matrix_markdown(*m, pairs, o.sign);
  else
    out << fmt::format("{} pairs ({} sizes x {} distros, profile {}, --sign {}): {} plan fully verifiable, {} refused "
                       "with a reason, {} need --sha256\n",
                       pairs.size(), m->sizes.size(), m->distros.size(), o.profile, o.sign, planned, refused, unpinned);
  return unpinned == 0 ? 0 : static_cast<int>(ExitCode::usage);
}

// The option groups several verbs share, spelled once.
void add_target_options(CLI::App& c, Options& o) {
  c.add_option("--size", o.size, "VM size (default: from the metadata service)")->option_text("VM_SIZE");
  c.add_option("--distro", o.distro, "distro manifest id (default: this host's)")->option_text("ID-VERSION");
  c.add_option("--profile", o.profile,
               "image profile: the optional components (manifests/profiles/: default, minimal, containers, ai, hpc, "
               "kubernetes)")
      ->option_text("ID");
}

void add_sign_option(CLI::App& c, Options& o) {
  c.add_option("--sign", o.sign, "module signing: auto (when Secure Boot is on), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  c.add_option("--driver-version", o.driver_version,
               "the NVIDIA driver version the manifests pin for the distro (refused, listing them, otherwise)")
      ->option_text("VERSION");
  c.add_option("--driver-source", o.driver_source,
               "where the NVIDIA driver comes from: auto (Canonical's signed precompiled modules when modules must "
               "be signed and Ubuntu publishes the branch, else the manifest's), repository, run, canonical")
      ->check(CLI::IsMember({"auto", "repository", "run", "canonical"}));
  c.add_flag("--hold-kernel", o.hold_kernel,
             "after the modules are built, hold the distro's kernel packages so no update installs a kernel they "
             "were not built for (docs/kernels.md)");
  c.add_option("--hardware-checks", o.hardware_checks,
               "now (default): the closing verify checks this machine's GPUs and HCAs against the size; deferred: "
               "this machine is not the size (a bake on another VM), so only what is on disk is checked now and "
               "the hardware checks run at the first boot on the size (verify --boot; seal --verify deferred)")
      ->check(CLI::IsMember({"now", "deferred"}))
      ->option_text("now|deferred");
}

void add_kernel_option(CLI::App& c, Options& o, const char* what) {
  c.add_option("--kernel", o.kernels,
               fmt::format("{} for this target kernel (the target's `uname -r`; repeatable) instead of this host's "
                           "running and next-boot kernels: any size and distro from any machine",
                           what))
      ->option_text("RELEASE");
}

void add_prebuilt_option(CLI::App& c, Options& o) {
  c.add_option("--prebuilt", o.prebuilt,
               "prebuilt modules (made by 'bundle modules'): installed for a target kernel they fit, checked, "
               "instead of compiling; DKMS builds for any other, saying why")
      ->check(CLI::ExistingFile)
      ->option_text("FILE");
}

void add_quarantine_option(CLI::App& c, Options& o) {
  c.add_option("--quarantine-budget", o.quarantine_budget,
               "bytes quarantine/ may hold (one copy per digest); the oldest go first")
      ->check(CLI::PositiveNumber)
      ->default_val(fetch::kDefaultQuarantineBudget)
      ->option_text("N");
}

void add_artifact_options(CLI::App& c, Options& o) {
  c.add_option("--cache", o.cache, "artifact cache (default: /var/cache/hpcbake under --root)")->option_text("DIR");
  c.add_option("--mirror", o.mirrors, "base URL tried first (<URL>/sha256/<hex>, then <URL>/<name>); repeatable")
      ->option_text("URL");
  c.add_option("--ca-file", o.ca_file, "verify TLS with this CA bundle only (default: the host's CA store)")
      ->check(CLI::ExistingFile)
      ->option_text("FILE");
  c.add_option("--sha256", o.sha256_overrides, "pin an artifact the manifests leave unpinned; repeatable")
      ->option_text("NAME=HEX");
  c.add_option("--max-download-bytes", o.max_download_bytes,
               "stop a download without a pinned size after N bytes (one with a pinned size stops at it)")
      ->check(CLI::PositiveNumber)
      ->default_val(fetch::kDefaultMaxUnpinnedBytes)
      ->option_text("N");
  add_quarantine_option(c, o);
}

void add_lock_timeout_option(CLI::App& c, Options& o) {
  c.add_option("--lock-timeout", o.lock_timeout_s,
               "wait this long for another process downloading the same artifact into the cache, then use its "
               "verified result")
      ->check(CLI::Range(0L, 86400L))
      ->default_val(600)
      ->option_text("SECONDS");
}

struct Verbs {
  CLI::App *detect = nullptr, *plan = nullptr, *fetch = nullptr, *bundle_create = nullptr, *bundle_modules = nullptr,
           *cache_list = nullptr, *cache_verify = nullptr, *cache_gc = nullptr, *lint = nullptr, *matrix = nullptr,
           *install = nullptr;
};

void add_global_options(CLI::App& app, Options& o) {
  app.require_subcommand(1);
  // Global options anywhere on the line (`hpcbake plan --no-imds`, `hpcbake cache list --root D`):
  // a verb passes an option it does not know to its parent. Subcommands inherit this setting.
  app.fallthrough();
  app.add_option("--root", o.root, "read every host path under DIR (a fixture tree can stand in for a machine)")
      ->option_text("DIR");
  app.add_option("--manifests", o.manifests,
                 "manifest directory (default: $HPCBAKE_MANIFESTS, the installed manifests, then the source tree's)")
      ->option_text("DIR");
  app.add_option("--overlay", o.overlays,
                 "override values of the manifests with this YAML file, or each *.yaml of this directory in name "
                 "order; repeatable, later wins (default: /etc/hpcbake/manifests.d under --root)")
      ->option_text("PATH");
  app.add_option("--imds-url", o.imds_url, "metadata service endpoint (default: $HPCBAKE_IMDS_URL or Azure's)")
      ->option_text("URL");
  app.add_flag("--no-imds", o.no_imds, "do not ask the metadata service");
  app.add_flag("--json", o.json,
               "machine-readable output on stdout (install and fetch: a JSON object per event, per line)");
  auto* quiet = app.add_flag("-q,--quiet", o.quiet, "only errors and the final result");
  app.add_flag("-v,--verbose", o.verbose, "also each command's output, as install logs it")->excludes(quiet);
  // After --manifests: CLI11 runs option callbacks in the order they were added, and the
  // version flag's callback ends the parse: --manifests must be stored first (version_text uses it).
  app.set_version_flag("-V,--version", "", "print the version, the commit and the manifest set's digest, and exit");
}

void add_fetch_verbs(CLI::App& app, Options& o, Verbs& v) {
  v.fetch = app.add_subcommand("fetch", "download and verify a plan's artifacts into the cache");
  add_target_options(*v.fetch, o);
  v.fetch->add_flag("--all", o.all, "every pinned artifact of every component (for mirrors and bundles)");
  add_artifact_options(*v.fetch, o);
  v.fetch->add_option("--parallel,-j", o.parallel, "transfers at once")->check(CLI::Range(1, 64))->default_val(4);
  v.fetch->add_option("--stall-timeout", o.stall_timeout_s, "a transfer under 1 KiB/s for this long is retried")
      ->check(CLI::Range(1L, 3600L))
      ->default_val(30)
      ->option_text("SECONDS");
  v.fetch->add_option("--retry-backoff", o.retry_backoff_s, "first retry delay; doubles per attempt, with jitter")
      ->check(CLI::Range(0.0, 60.0))
      ->default_val(1.0)
      ->option_text("SECONDS");
  v.fetch->add_option("--attempts", o.attempts, "attempts per URL before the next mirror")
      ->check(CLI::Range(1, 20))
      ->default_val(4);
  add_lock_timeout_option(*v.fetch, o);
  v.fetch->add_option("--bundle", o.bundle, "take artifacts only from this bundle (made by 'bundle create')")
      ->check(CLI::ExistingFile)
      ->option_text("PATH");

  auto* bundle_cmd = app.add_subcommand("bundle", "offline bundles: manifests + artifacts in one tar");
  bundle_cmd->require_subcommand(1);
  v.bundle_create = bundle_cmd->add_subcommand("create", "fetch a plan's (or --all) artifacts and write them to OUT");
  v.bundle_create->add_option("OUT", o.bundle_out, "the tar to write")->required();
  add_target_options(*v.bundle_create, o);
  v.bundle_create->add_flag("--all", o.all, "every pinned artifact of every component");
  add_artifact_options(*v.bundle_create, o);
  add_lock_timeout_option(*v.bundle_create, o);
  v.bundle_modules = bundle_cmd->add_subcommand(
      "modules", "build the plan's DKMS modules for one kernel, sign them as the plan decides, and write them to OUT "
                 "for 'install --prebuilt'");
  v.bundle_modules->add_option("OUT", o.modules_out, "the prebuilt-modules file to write")->required();
  v.bundle_modules->add_option("--kernel", o.modules_kernel, "the kernel release to build for (its headers installed)")
      ->required()
      ->option_text("VERSION");
  add_target_options(*v.bundle_modules, o);
  v.bundle_modules->add_option("--sign", o.sign, "module signing: auto (when Secure Boot is on), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  v.bundle_modules->add_option("--bundle", o.bundle, "take the module sources only from this offline bundle")
      ->check(CLI::ExistingFile)
      ->option_text("PATH");
  add_artifact_options(*v.bundle_modules, o);

  auto* cache_cmd = app.add_subcommand("cache", "inspect the artifact cache");
  cache_cmd->require_subcommand(1);
  cache_cmd->add_option("--cache", o.cache, "cache directory (default: /var/cache/hpcbake under --root)")
      ->option_text("DIR");
  v.cache_list = cache_cmd->add_subcommand("list", "list verified artifacts (SHA-256, bytes)");
  v.cache_verify = cache_cmd->add_subcommand("verify", "re-hash every artifact; move corrupt ones to quarantine/");
  add_quarantine_option(*v.cache_verify, o);
  v.cache_gc = cache_cmd->add_subcommand("gc", "remove partial downloads, quarantined files and unpinned entries");
}

Verbs add_core_verbs(CLI::App& app, Options& o, InstallOptions& iopts) {
  Verbs v;
  v.detect = app.add_subcommand("detect", "print this machine's facts, each with where it came from");

  v.plan = app.add_subcommand("plan", "print what install would do for a size and distro");
  add_target_options(*v.plan, o);
  v.plan->add_option("--driver", o.driver, "driver kind; must agree with the size")
      ->check(CLI::IsMember({"cuda", "grid"}));
  add_sign_option(*v.plan, o);
  add_kernel_option(*v.plan, o, "plan");
  add_prebuilt_option(*v.plan, o);

  add_fetch_verbs(app, o, v);

  auto* manifest_cmd = app.add_subcommand("manifest", "manifest tools");
  manifest_cmd->require_subcommand(1);
  v.lint = manifest_cmd->add_subcommand("lint", "check every manifest; errors name file:line:column");
  v.lint->add_option("DIR", o.lint_dir, "manifest directory (default: --manifests)");
  v.matrix = manifest_cmd->add_subcommand(
      "matrix", "plan every size x distro: which plan fully verifiable and why each other pair is refused");
  v.matrix->add_option("--profile", o.profile, "image profile (default: default)")->option_text("ID");
  v.matrix
      ->add_option("--sign", o.sign,
                   "module signing as if Secure Boot were: on (each pair's signing route, or why it is refused), "
                   "off, auto (decided on the target)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  v.matrix->add_flag("--markdown", o.markdown,
                     "print a Markdown table: a row per size, a column per distro, each cell the route or a "
                     "numbered reason");

  v.install = app.add_subcommand("install", "execute the plan on this machine as a journaled, resumable transaction");
  add_target_options(*v.install, o);
  v.install->add_option("--bundle", o.bundle, "take artifacts only from this offline bundle")
      ->check(CLI::ExistingFile)
      ->option_text("PATH");
  add_artifact_options(*v.install, o);
  add_sign_option(*v.install, o);
  add_kernel_option(*v.install, o, "with --dry-run: plan");
  add_prebuilt_option(*v.install, o);
  add_install_options(*v.install, iopts);
  return v;
}

std::optional<int> run_core_verb(const Verbs& v, const Options& o, const InstallOptions& iopts, std::ostream& out,
                                 std::ostream& err) {
  if (v.detect->parsed()) return cmd_detect(o, out, err);
  if (v.plan->parsed()) return cmd_plan(o, out, err);
  if (v.lint->parsed()) return cmd_lint(o, out, err);
  if (v.matrix->parsed()) return cmd_matrix(o, out, err);
  if (v.fetch->parsed() || v.bundle_create->parsed()) return cmd_fetch(o, out, err);
  if (v.bundle_modules->parsed()) return cmd_bundle_modules(o, out, err);
  if (v.cache_list->parsed()) return cmd_cache_list(o, out, err);
  if (v.cache_verify->parsed()) return cmd_cache_verify(o, out, err);
  if (v.cache_gc->parsed()) return cmd_cache_gc(o, out, err);
  if (v.install->parsed()) return cmd_install(o, iopts, out, err);
  return std::nullopt;
}

// argv into the app; a return value ends the run (help, version, a usage error).
std::vector<CLI::App*> all_subcommands(CLI::App* app) {
  return app->get_subcommands([](CLI::App*) { return true; });
}

CLI::App* subcommand_named(CLI::App* app, const std::string& name) {
  for (auto* sub : all_subcommands(app))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

std::vector<std::string> subcommand_names(CLI::App* app) {
  std::vector<std::string> names;
  for (auto* sub : all_subcommands(app))
    names.push_back(sub->get_name());
  return names;
}

std::string did_you_mean(const std::string& wanted, const std::vector<std::string>& names) {
  return manifest::did_you_mean(wanted, names, false, 2, " or ");
}

// The commands parsed so far, outermost first: the last is the one whose options and
// subcommands were expected.
std::vector<CLI::App*> parsed_chain(CLI::App* app) {
  std::vector<CLI::App*> chain{app};
  for (auto subs = app->get_subcommands(); !subs.empty(); subs = subs.front()->get_subcommands())
    chain.push_back(subs.front());
  return chain;
}

CLI::App* deepest_parsed(CLI::App* app) {
  return parsed_chain(app).back();
}

std::string command_path(CLI::App* app) {
  std::string path;
  for (auto* a : parsed_chain(app))
    path += (path.empty() ? "" : " ") + a->get_name();
  return path;
}

// A usage error in the words of a person: the unknown command or option, and the closest name.
std::string explain_usage_error(CLI::App& app, const std::vector<std::string>& args, const CLI::ParseError& e) {
  CLI::App* at = deepest_parsed(&app);
  const std::string where = command_path(&app);
  // Matched by type: CLI11 names a subcommand's error after the subcommand.
  if (dynamic_cast<const CLI::RequiredError*>(&e) &&
      std::string(e.what()).find("subcommand is required") != std::string::npos) {
    // The first word after the command that is neither an option nor a known command.
    bool after = at == &app;
    for (std::size_t i = 1; i < args.size(); ++i) {
      if (!after) {
        after = args[i] == at->get_name();
        continue;
      }
      if (args[i].starts_with("-")) continue;
      if (!subcommand_named(at, args[i]))
        return fmt::format("unknown command '{}' for {}{}", args[i], where,
                           did_you_mean(args[i], subcommand_names(at)));
    }
    return fmt::format("{} needs a command: {}", where, util::join(subcommand_names(at), ", "));
  }
  const std::string what = e.what();
  // CLI11: "--reboot: At Most 1 required but received 2"; "--verbose excludes --quiet".
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && what.find(": At Most 1 required") != std::string::npos)
    return fmt::format("{} was given more than once; give it once", what.substr(0, what.find(':')));
  if (dynamic_cast<const CLI::ExcludesError*>(&e)) {
    const auto ex = what.find(" excludes ");
    if (ex != std::string::npos)
      return fmt::format("{} and {} cannot be given together", what.substr(0, ex), what.substr(ex + 10));
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    std::vector<std::string> options;
    for (CLI::App* a : parsed_chain(&app))
      for (const auto* opt : a->get_options())
        for (const auto& n : opt->get_lnames())
          options.push_back("--" + n);
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string name = args[i].substr(0, args[i].find('='));
      if (name.starts_with("--") && std::find(options.begin(), options.end(), name) == options.end())
        return fmt::format("unknown option '{}' for {}{}", name, where, did_you_mean(name, options));
    }
  }
  return e.what();
}

// Help text, fitted to the terminal (the option rows are already; the description and footer may not be).
void print_help(std::ostream& out, const std::string& text) {
  const int width = output_width(STDOUT_FILENO);
  out << (width ? fit_to_width(text, width) : text);
}

// The URLs given as options, refused before anything runs when libcurl would read them otherwise
// than they read (util/url.hpp); the error shows each one redacted. HPCBAKE_IMDS_URL is checked
// where it is used (util::CurlHttpClient), as a variable set for another command is no error here.
Status check_url_options(const Options& o) {
  for (const auto& m : o.mirrors)
    HPCBAKE_TRY(util::check_url(m, "--mirror"));
  if (!o.imds_url.empty()) HPCBAKE_TRY(util::check_url(o.imds_url, "--imds-url"));
  return {};
}

std::optional<int> parse(CLI::App& app, const Options& o, const std::vector<std::string>& args, std::ostream& out,
                         std::ostream& err) {
  // A bare `hpcbake` and `hpcbake help [COMMAND...]` print help, as git and kubectl do.
  if (args.size() <= 1) {
    print_help(out, app.help());
    return 0;
  }
  if (args[1] == "__complete") { // the shell's question (cli/complete.hpp); not a verb for people
    for (const auto& c : complete_words(app, {args.begin() + 2, args.end()}))
      out << c << "\n";
    return 0;
  }
  if (args[1] == "version" && args.size() == 2) { // as `hpcbake --version` (and -V): what people type
    out << version_text(manifest_dir(o)) << "\n";
    return 0;
  }
  if (args[1] == "help") {
    CLI::App* at = &app;
    for (std::size_t i = 2; i < args.size(); ++i) {
      CLI::App* sub = subcommand_named(at, args[i]);
      if (!sub) {
        err << fmt::format("hpcbake: usage error: unknown command '{}'{}\n  hint: run 'hpcbake help'\n", args[i],
                           did_you_mean(args[i], subcommand_names(at)));
        return static_cast<int>(ExitCode::usage);
      }
      at = sub;
    }
    print_help(out, at->help());
    return 0;
  }
  std::vector<std::string> rev(args.rbegin(), args.rend() - 1);
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    print_help(out, app.help());
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    print_help(out, app.help("", CLI::AppFormatMode::All));
    return 0;
  } catch (const CLI::CallForVersion&) {
    out << version_text(manifest_dir(o)) << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    const std::string path = command_path(&app); // "hpcbake cache list"
    err << "hpcbake: usage error: " << explain_usage_error(app, args, e) << "\n  hint: run 'hpcbake help"
        << path.substr(std::string("hpcbake").size()) << "'\n";
    return static_cast<int>(ExitCode::usage);
  }
  return std::nullopt;
}

} // namespace

// The overlays every manifest read applies: --overlay as given, else the directory under --root.
static void set_overlays(const Options& o) {
  std::vector<std::filesystem::path> paths(o.overlays.begin(), o.overlays.end());
  std::error_code ec;
  const auto system = util::HostFs(o.root).resolve("/etc/hpcbake/manifests.d");
  if (paths.empty() && std::filesystem::is_directory(system, ec)) paths.push_back(system);
  manifest::set_default_overlays(std::move(paths));
}

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Options o;
  CLI::App app{"hpcbake: turn a Linux VM into a working GPU/InfiniBand machine, then into an image", "hpcbake"};
  app.formatter(std::make_shared<HelpFormatter>(terminal_width(STDOUT_FILENO))); // verbs inherit it
  add_global_options(app, o);
  InstallOptions iopts;
  const Verbs verbs = add_core_verbs(app, o, iopts);
  DriverOptions dopts;
  const DriverCommands driver_cmds = add_driver_commands(app, dopts);

  RdmaCliOptions ropts; // rdma enable | disable | status (cli/rdma_cmd.cpp)
  const RdmaCommands rdma_cmds = add_rdma_commands(app, ropts);
  ContainerCliOptions copts; // container configure | status (cli/container_cmd.cpp)
  const ContainerCommands container_cmds = add_container_commands(app, copts);
  VerifyOptions vopts;
  const VerifyCommands verify_cmds = add_verify_commands(app, vopts);
  SealOptions sopts;
  const SealCommands seal_cmds = add_seal_commands(app, sopts);
  SizesCliOptions zopts;
  const CLI::App* sizes_cmd = add_sizes_command(app, zopts);

  if (auto rc = parse(app, o, args, out, err)) return *rc;
  // --json is global: every verb's options see it.
  vopts.json = ropts.json = copts.json = sopts.json = zopts.json = dopts.json = o.json;
  if (auto s = util::refuse_test_hooks_on_real_root(util::HostFs(o.root)); !s) return report(s.error(), err);
  if (auto s = check_url_options(o); !s) return report(s.error(), err);
  set_overlays(o);
  // Text for people fits the terminal (or COLUMNS): long lines wrap under their indent. Verbs that
  // stream (install, fetch, bundle) and JSON are written as they come.
  const bool streams = verbs.install->parsed() || verbs.fetch->parsed() || verbs.bundle_create->parsed();
  const int width = o.json || streams ? 0 : output_width(STDOUT_FILENO);
  std::ostringstream buffered;
  std::ostream& to = width ? buffered : out;
  const int code = [&]() -> int {
    try {
      if (auto rc = run_core_verb(verbs, o, iopts, to, err)) return *rc;
      if (auto rc = run_driver_command(driver_cmds, dopts, o.root, o.manifests, to, err)) return *rc;
      if (auto rc = run_rdma_command(rdma_cmds, ropts, o.root, o.manifests, to, err)) return *rc;
      if (auto rc = run_container_command(container_cmds, copts, o.root, to, err)) return *rc;
      if (auto rc = run_verify_command(verify_cmds, vopts, o.root, o.manifests, imds_options(o, util::HostFs(o.root)),
                                       to, err))
        return *rc;
      if (auto rc = run_seal_command(seal_cmds, sopts, o.root, to, err)) return *rc;
      if (auto rc = run_sizes_command(sizes_cmd, zopts, o.manifests, to, err)) return *rc;
    } catch (const std::exception& e) {
      err << "hpcbake: internal error: " << e.what() << "\n";
      return static_cast<int>(ExitCode::internal);
    }
    return static_cast<int>(ExitCode::usage);
  }();
  if (width) out << fit_to_width(buffered.str(), width);
  return code;
}

} // namespace hpcbake::cli
