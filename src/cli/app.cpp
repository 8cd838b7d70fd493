#include "util/paths.hpp"
#include "cli/app.hpp"

#include "cli/driver_cmds.hpp"
#include "cli/install_cmd.hpp"
#include "cli/verify_cmd.hpp"
#include "cli/preflight.hpp"
#include "cli/progress.hpp"
#include "cli/rdma_cmd.hpp"
#include "cli/seal_cmd.hpp"
#include "cli/report.hpp"
#include "fetch/bundle.hpp"
#include "fetch/downloader.hpp"
#include "fetch/jobs.hpp"

#include "detect/host.hpp"
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"
#include "util/build_config.hpp"
#include "util/error.hpp"
#include "util/strings.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <optional>

namespace hpcbake::cli {

namespace {

struct Options {
  std::string root = "/";
  std::string manifests;
  std::string imds_url;
  bool no_imds = false;
  bool json = false;
  std::string size;
  std::string distro;
  std::string driver;
  std::string lint_dir;
  std::string sign = "auto";
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
  std::string bundle;     // fetch --bundle PATH
  std::string bundle_out; // bundle create OUT
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
  if (!o.imds_url.empty()) imds.url = o.imds_url;
  else if (env && *env) imds.url = env;
  else if (!host.is_real_root()) {
    imds.enabled = false;
  }
  if (o.no_imds) imds.enabled = false;
  return imds;
}

int cmd_detect(const Options& o, std::ostream& out, std::ostream& err) {
  const util::HostFs host(o.root);
  // Manifests map os-release to a distro id and vmSize to a size; detect still works without them.
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) err << "hpcbake: warning: manifests not loaded, distro and size are not mapped:\n  "
                      << manifests.error().message << "\n";
  util::CurlHttpClient http;
  auto facts = detect::detect_host(host, http, imds_options(o, host), manifests ? &*manifests : nullptr);
  if (o.json) out << detect::to_json(facts).dump(2) << "\n";
  else out << detect::render_text(facts);
  return 0;
}

// Resolves --size/--distro (or the host's) into a plan; shared by plan, fetch and install
// (which also wants the host's facts: `facts_out`).
Result<plan::Plan> resolve_plan(const Options& o, const manifest::Manifests& manifests,
                                detect::HostFacts* facts_out = nullptr, const driver::SigningRequest* signing = nullptr) {
  const util::HostFs host(o.root);
  auto imds = imds_options(o, host);
  if (!o.size.empty()) imds.enabled = false; // the size is given: no need to ask the network
  util::CurlHttpClient http;
  detect::HostFacts local = detect::detect_host(host, http, imds, &manifests);
  const detect::HostFacts& facts = local;

  plan::PlanRequest req;
  req.size = o.size;
  if (req.size.empty()) {
    if (!facts.imds.on_azure)
      return fail(ErrorKind::usage, fmt::format("no --size given, and the VM size is unknown: {}", facts.imds.status),
                  "pass --size VM_SIZE, e.g. --size Standard_ND96isr_H100_v5");
    req.size = facts.imds.vm_size;
  }
  req.distro = o.distro;
  if (req.distro.empty()) {
    if (facts.distro_id.empty())
      return fail(ErrorKind::unsupported,
                  facts.os ? fmt::format("this host's distro (ID={} VERSION_ID={}, {}) has no manifest", facts.os->id(),
                                         facts.os->version_id(), facts.os->source)
                           : facts.os_error,
                  "pass --distro ID-VERSION to plan for another distro; run 'hpcbake manifest lint' to list them");
    req.distro = facts.distro_id;
  }
  if (!o.driver.empty()) req.driver_kind = o.driver;
  if (signing) {
    req.signing = *signing;
  } else {
    auto mode = driver::parse_sign_mode(o.sign);
    if (!mode) return std::unexpected(mode.error());
    req.signing.mode = *mode;
    req.signing.key_dir = host.resolve(paths::kKeyDir);
  }
  req.host = &facts;
  auto p = plan::make_plan(manifests, req);
  if (facts_out) *facts_out = std::move(local);
  return p;
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
  return fo;
}

int cmd_install(const Options& o, const InstallOptions& io, std::ostream& out, std::ostream& err) {
  InstallInputs in;
  in.root = o.root;
  in.manifests_dir = manifest_dir(o);
  in.size = o.size;
  in.fetch = fetch_options(o);
  in.bundle = o.bundle.empty() ? std::string() : std::filesystem::absolute(o.bundle).string();
  in.sha256_overrides = o.sha256_overrides;
  in.sign = o.sign;
  in.resolve = [&o, &io](const manifest::Manifests& m) -> Result<std::pair<plan::Plan, detect::HostFacts>> {
    detect::HostFacts facts;
    auto mode = driver::parse_sign_mode(o.sign);
    if (!mode) return std::unexpected(mode.error());
    const driver::SigningRequest signing{*mode, io.sign_key, io.sign_cert,
                                         io.key_dir.empty() ? util::HostFs(o.root).resolve(paths::kKeyDir)
                                                            : std::filesystem::path(io.key_dir)};
    auto p = resolve_plan(o, m, &facts, &signing);
    if (!p) return std::unexpected(p.error());
    return std::pair{std::move(*p), std::move(facts)};
  };
  // What the resume unit repeats: the same machine, manifests, size, distro and artifacts.
  auto& global = in.global_args;
  if (o.root != "/") global.insert(global.end(), {"--root", std::filesystem::absolute(o.root).string()});
  global.insert(global.end(), {"--manifests", std::filesystem::absolute(manifest_dir(o)).string()});
  if (o.no_imds) global.push_back("--no-imds");
  if (!o.imds_url.empty()) global.insert(global.end(), {"--imds-url", o.imds_url});
  auto& sub = in.install_args;
  if (!o.cache.empty()) sub.insert(sub.end(), {"--cache", std::filesystem::absolute(o.cache).string()});
  if (!o.size.empty()) sub.insert(sub.end(), {"--size", o.size});
  if (!o.distro.empty()) sub.insert(sub.end(), {"--distro", o.distro});
  if (!in.bundle.empty()) sub.insert(sub.end(), {"--bundle", in.bundle});
  if (o.sign != "auto") sub.insert(sub.end(), {"--sign", o.sign});
  for (const auto& s : o.sha256_overrides) sub.insert(sub.end(), {"--sha256", s});
  return run_install(io, in, out, err);
}

int cmd_plan(const Options& o, std::ostream& out, std::ostream& err) {
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) return report(manifests.error(), err);
  auto p = resolve_plan(o, *manifests);
  if (!p) return report(p.error(), err);
  if (o.json) out << plan::to_json(*p).dump(2) << "\n";
  else out << plan::render_text(*p);
  return 0;
}

// The artifacts to fetch: one plan's, or every pinned artifact (--all, for mirrors and bundles).
Result<std::vector<fetch::Job>> fetch_jobs(const Options& o, const manifest::Manifests& m) {
  if (o.all) return fetch::jobs_for(fetch::all_artifacts(m), o.sha256_overrides, fetch::Unpinned::skip);
  auto p = resolve_plan(o, m);
  if (!p) return std::unexpected(p.error());
  return fetch::jobs_for(p->artifacts, o.sha256_overrides, fetch::Unpinned::refuse);
}

int cmd_fetch(const Options& o, std::ostream& out, std::ostream& err) {
  auto manifests = manifest::load_manifests(manifest_dir(o));
  if (!manifests) return report(manifests.error(), err);
  const bool create = !o.bundle_out.empty();
  const fetch::Options fo = fetch_options(o);
  // The system cache is root's: install runs what it finds there without downloading again.
  // As root, a cache others could write is refused (they could put their own bytes under a
  // pinned digest's name); a user's own --cache is theirs to manage.
  if (::geteuid() != 0 && o.cache.empty() && util::HostFs(o.root).is_real_root())
    return report(Error{ErrorKind::permission,
                        fmt::format("{} writes the system cache {}, which only root may change (hpcbake runs as uid {})",
                                    create ? "bundle create" : "fetch", fo.cache_dir.string(), ::geteuid()),
                        "run it as root, or pass --cache DIR to use a cache of your own"},
                  err);
  if (::geteuid() == 0)
    if (auto s = check_trusted({{fo.cache_dir, "artifact cache", -1, "or pass --cache DIR"}}); !s)
      return report(s.error(), err);
  auto jobs = fetch_jobs(o, *manifests);
  if (!jobs) return report(jobs.error(), err);
  // Progress goes to stderr on a terminal and as lines; --json events go to stdout.
  const auto mode = progress_mode_for(o.json, o.json ? 1 : 2);
  ProgressRenderer progress(mode == ProgressMode::json ? out : err, mode, jobs->size());
  // With --bundle, artifacts come only from the bundle, each verified; nothing touches the network.
  auto rep = o.bundle.empty() ? fetch::download(*jobs, fo, progress)
                              : fetch::fetch_from_bundle(o.bundle, *jobs, fetch::Cache(fo.cache_dir), progress);
  if (!rep) return report(rep.error(), err);
  progress.finish();
  int failed = 0;
  for (const auto& r : rep->results)
    if (!r.ok) {
      ++failed;
      err << fmt::format("hpcbake: error: {}: {}\n", r.name, r.error);
    }
  if (failed) {
    err << fmt::format("  hint: {} of {} artifacts failed; a re-run resumes partial downloads\n", failed,
                       rep->results.size());
    return static_cast<int>(ExitCode::fetch);
  }
  if (create) {
    if (auto s = fetch::create_bundle(o.bundle_out, *jobs, fetch::Cache(fo.cache_dir), manifest_dir(o)); !s)
      return report(s.error(), err);
    out << fmt::format("{}: {} artifacts and the manifests\n", o.bundle_out, jobs->size());
    return 0;
  }
  if (!o.json)
    for (const auto& r : rep->results) out << fmt::format("{}  {}\n", r.path.string(), r.name);
  return 0;
}

int cmd_cache_list(const Options& o, std::ostream& out, std::ostream& err) {
  fetch::Cache cache(cache_dir(o));
  std::vector<fetch::ListProblem> problems;
  for (const auto& e : cache.list(&problems)) out << fmt::format("{}  {:>12}\n", e.sha256, e.size);
  for (const auto& p : problems) err << fmt::format("hpcbake: warning: {}: skipped: {}\n", p.path.string(), p.error);
  return 0;
}

int cmd_cache_verify(const Options& o, std::ostream& out, std::ostream& err) {
  fetch::Cache cache(cache_dir(o));
  int good = 0;
  const auto problems = cache.verify(&good);
  for (const auto& p : problems) err << fmt::format("hpcbake: error: {}\n", p.describe(cache.entry(p.sha256)));
  out << fmt::format("{}: {} verified, {} corrupt\n", cache.dir().string(), good, problems.size());
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
  for (const auto& s : r.skipped) err << fmt::format("hpcbake: {}: {}\n", s.path.string(), s.reason);
  out << fmt::format("{}: removed {} files, freed {}\n", cache.dir().string(), r.removed, human_bytes(r.freed));
  return 0;
}

int cmd_lint(const Options& o, std::ostream& out, std::ostream& err) {
  const std::filesystem::path dir = o.lint_dir.empty() ? manifest_dir(o) : std::filesystem::path(o.lint_dir);
  auto result = manifest::lint_manifests(dir);
  for (const auto& d : result.diagnostics) err << d.str() << "\n";
  const auto& m = result.manifests;
  if (!result.diagnostics.empty()) {
    err << fmt::format("hpcbake: {} problem(s) in {} file(s) under {}\n", result.diagnostics.size(), result.files,
                       dir.string());
    return static_cast<int>(ExitCode::usage);
  }
  out << fmt::format("{}: {} files clean ({} sizes, {} distros, {} components)\n", dir.string(), result.files,
                     m.sizes.size(), m.distros.size(), m.components.size());
  return 0;
}

} // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Options o;
  CLI::App app{"hpcbake: turn a Linux VM into a working GPU/InfiniBand machine, then into an image", "hpcbake"};
  app.set_version_flag("--version", std::string("hpcbake ") + build::version);
  app.require_subcommand(1);
  app.add_option("--root", o.root, "read every host path under DIR (a fixture tree can stand in for a machine)")
      ->option_text("DIR");
  app.add_option("--manifests", o.manifests,
                 "manifest directory (default: $HPCBAKE_MANIFESTS, the installed manifests, then the source tree's)")
      ->option_text("DIR");
  app.add_option("--imds-url", o.imds_url, "metadata service endpoint (default: $HPCBAKE_IMDS_URL or Azure's)")
      ->option_text("URL");
  app.add_flag("--no-imds", o.no_imds, "do not ask the metadata service");

  auto* detect = app.add_subcommand("detect", "print this machine's facts, each with where it came from");
  detect->add_flag("--json", o.json, "machine-readable output");

  auto* planc = app.add_subcommand("plan", "print what install would do for a size and distro");
  planc->add_option("--size", o.size, "VM size (default: from the metadata service)")->option_text("VM_SIZE");
  planc->add_option("--distro", o.distro, "distro manifest id (default: this host's)")->option_text("ID-VERSION");
  planc->add_option("--driver", o.driver, "driver kind; must agree with the size")
      ->check(CLI::IsMember({"cuda", "grid"}));
  planc->add_option("--sign", o.sign, "module signing: auto (when Secure Boot is on), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  planc->add_flag("--json", o.json, "machine-readable output");

  auto* fetchc = app.add_subcommand("fetch", "download and verify a plan's artifacts into the cache");
  fetchc->add_option("--size", o.size, "VM size (default: from the metadata service)")->option_text("VM_SIZE");
  fetchc->add_option("--distro", o.distro, "distro manifest id (default: this host's)")->option_text("ID-VERSION");
  fetchc->add_flag("--all", o.all, "every pinned artifact of every component (for mirrors and bundles)");
  fetchc->add_option("--cache", o.cache, "cache directory (default: /var/cache/hpcbake under --root)")->option_text("DIR");
  fetchc->add_option("--parallel,-j", o.parallel, "transfers at once")->check(CLI::Range(1, 64))->default_val(4);
  fetchc->add_option("--mirror", o.mirrors, "base URL tried first (<URL>/sha256/<hex>, then <URL>/<name>); repeatable")
      ->option_text("URL");
  fetchc->add_option("--ca-file", o.ca_file, "an extra CA bundle for TLS verification")->check(CLI::ExistingFile);
  fetchc->add_option("--sha256", o.sha256_overrides, "pin an artifact the manifests leave unpinned; repeatable")
      ->option_text("NAME=HEX");
  fetchc->add_option("--stall-timeout", o.stall_timeout_s, "a transfer under 1 KiB/s for this long is retried")
      ->check(CLI::Range(1L, 3600L))->default_val(30)->option_text("SECONDS");
  fetchc->add_option("--retry-backoff", o.retry_backoff_s, "first retry delay; doubles per attempt, with jitter")
      ->check(CLI::Range(0.0, 60.0))->default_val(1.0)->option_text("SECONDS");
  fetchc->add_option("--attempts", o.attempts, "attempts per URL before the next mirror")
      ->check(CLI::Range(1, 20))->default_val(4);
  fetchc->add_flag("--json", o.json, "JSON-lines events on stdout");
  fetchc->add_option("--bundle", o.bundle, "take artifacts only from this bundle (made by 'bundle create')")
      ->check(CLI::ExistingFile)->option_text("PATH");

  auto* bundle_cmd = app.add_subcommand("bundle", "offline bundles: manifests + artifacts in one tar");
  bundle_cmd->require_subcommand(1);
  auto* bundle_create = bundle_cmd->add_subcommand("create", "fetch a plan's (or --all) artifacts and write them to OUT");
  bundle_create->add_option("OUT", o.bundle_out, "the tar to write")->required();
  bundle_create->add_option("--size", o.size, "VM size")->option_text("VM_SIZE");
  bundle_create->add_option("--distro", o.distro, "distro manifest id")->option_text("ID-VERSION");
  bundle_create->add_flag("--all", o.all, "every pinned artifact of every component");
  bundle_create->add_option("--cache", o.cache, "cache directory")->option_text("DIR");
  bundle_create->add_option("--mirror", o.mirrors, "base URL tried first; repeatable")->option_text("URL");
  bundle_create->add_option("--ca-file", o.ca_file, "an extra CA bundle")->check(CLI::ExistingFile);
  bundle_create->add_option("--sha256", o.sha256_overrides, "pin an unpinned artifact; repeatable")->option_text("NAME=HEX");

  auto* cache_cmd = app.add_subcommand("cache", "inspect the artifact cache");
  cache_cmd->require_subcommand(1);
  cache_cmd->add_option("--cache", o.cache, "cache directory (default: /var/cache/hpcbake under --root)")->option_text("DIR");
  auto* cache_list = cache_cmd->add_subcommand("list", "list verified artifacts (SHA-256, bytes)");
  auto* cache_verify = cache_cmd->add_subcommand("verify", "re-hash every artifact; move corrupt ones to quarantine/");
  auto* cache_gc = cache_cmd->add_subcommand("gc", "remove partial downloads, quarantined files and unpinned entries");

  auto* manifest_cmd = app.add_subcommand("manifest", "manifest tools");
  manifest_cmd->require_subcommand(1);
  auto* lint = manifest_cmd->add_subcommand("lint", "check every manifest; errors name file:line:column");
  lint->add_option("DIR", o.lint_dir, "manifest directory (default: --manifests)");

  InstallOptions iopts;
  auto* installc = app.add_subcommand("install", "execute the plan on this machine as a journaled, resumable transaction");
  installc->add_option("--size", o.size, "VM size (default: from the metadata service)")->option_text("VM_SIZE");
  installc->add_option("--distro", o.distro, "distro manifest id (default: this host's)")->option_text("ID-VERSION");
  installc->add_option("--bundle", o.bundle, "take artifacts only from this offline bundle")
      ->check(CLI::ExistingFile)->option_text("PATH");
  installc->add_option("--cache", o.cache, "artifact cache (default: /var/cache/hpcbake under --root)")->option_text("DIR");
  installc->add_option("--mirror", o.mirrors, "base URL tried first for artifacts; repeatable")->option_text("URL");
  installc->add_option("--ca-file", o.ca_file, "an extra CA bundle for TLS verification")->check(CLI::ExistingFile);
  installc->add_option("--sha256", o.sha256_overrides, "pin an artifact the manifests leave unpinned; repeatable")
      ->option_text("NAME=HEX");
  installc->add_option("--sign", o.sign, "module signing: auto (when Secure Boot is on), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  add_install_options(*installc, iopts);

  DriverOptions dopts;
  const DriverCommands driver_cmds = add_driver_commands(app, dopts);

  RdmaCliOptions ropts; // rdma enable | disable | status (cli/rdma_cmd.cpp)
  const RdmaCommands rdma_cmds = add_rdma_commands(app, ropts);
  VerifyOptions vopts;
  const VerifyCommands verify_cmds = add_verify_commands(app, vopts);
  SealOptions sopts;
  const SealCommands seal_cmds = add_seal_commands(app, sopts);

  std::vector<std::string> rev(args.rbegin(), args.rend() - 1);
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    out << "hpcbake " << build::version << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "hpcbake: usage error: " << e.what() << "\n  hint: run 'hpcbake --help'\n";
    return static_cast<int>(ExitCode::usage);
  }
  if (auto s = refuse_test_hooks_on_real_root(util::HostFs(o.root)); !s) return report(s.error(), err);
  try {
    if (detect->parsed()) return cmd_detect(o, out, err);
    if (planc->parsed()) return cmd_plan(o, out, err);
    if (lint->parsed()) return cmd_lint(o, out, err);
    if (fetchc->parsed() || bundle_create->parsed()) return cmd_fetch(o, out, err);
    if (cache_list->parsed()) return cmd_cache_list(o, out, err);
    if (cache_verify->parsed()) return cmd_cache_verify(o, out, err);
    if (cache_gc->parsed()) return cmd_cache_gc(o, out, err);
    if (installc->parsed()) return cmd_install(o, iopts, out, err);
    if (auto rc = run_driver_command(driver_cmds, dopts, o.root, o.manifests, out, err)) return *rc;
    if (auto rc = run_rdma_command(rdma_cmds, ropts, o.root, o.manifests, out, err)) return *rc;
    if (auto rc = run_verify_command(verify_cmds, vopts, o.root, o.manifests, imds_options(o, util::HostFs(o.root)),
                                     out, err))
      return *rc;
    if (auto rc = run_seal_command(seal_cmds, sopts, o.root, o.manifests, out, err)) return *rc;
  } catch (const std::exception& e) {
    err << "hpcbake: internal error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::internal);
  }
  return static_cast<int>(ExitCode::usage);
}

} // namespace hpcbake::cli
