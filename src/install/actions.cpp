#include "install/actions.hpp"
#include "archive/initramfs.hpp"

#include "container/runtime.hpp"

#include "driver/headers.hpp"
#include "driver/modinfo.hpp"
#include "driver/module_build.hpp"
#include "driver/mok.hpp"
#include "driver/signing.hpp"
#include "fetch/bundle.hpp"
#include "fetch/jobs.hpp"
#include "mirror/apt.hpp"
#include "repo/openpgp.hpp"
#include "util/atomic_file.hpp"
#include "util/overload.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

#include <unistd.h>

namespace hpcbake::install {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kTailLines = 20;
constexpr std::size_t kMaxKeyBytes = 1 << 18; // a key file is a few KiB

class Quiet final : public fetch::Observer {
public:
  void on_event(const fetch::Event&) override {}
};

StepResult failed(ErrorKind kind, std::string message, std::string hint = {}, std::string tail = {}) {
  return StepResult::failure(Error{kind, std::move(message), std::move(hint)}, std::move(tail));
}

} // namespace

Actions::Actions(ActionsConfig config) : c_(std::move(config)) {}

std::string Actions::boot_id() {
  return c_.host.read_attr("/proc/sys/kernel/random/boot_id").value_or("");
}

StepResult Actions::execute(const plan::Step& s) {
  using namespace plan;
  return std::visit(
      util::Overload{
          [&](const PackagesStep& p) { return packages(s, p); },
          [&](const RepositoryStep& r) { return repository(s, r); },
          [&](const HeadersStep& h) { return headers(h); },
          [&](const ArtifactStep& a) { return artifact(a); },
          [&](const ConfigStep& c) { return config(s, c); },
          [&](const ModulesLoadStep& m) {
            return config(s, ConfigStep{m.path, m.content()});
          },
          [&](const CommandStep& c) { return c.initramfs.empty() ? command(s, c.argv) : initramfs(s, c); },
          [&](const SigningKeyStep&) { return signing_key(); },
          [&](const RunInstallerStep& r) { return run_installer(s, r); },
          [&](const DkmsBuildStep& d) { return dkms_build(d); },
          [&](const DkmsCheckStep& d) { return dkms_check(s, d); },
          [&](const KernelHoldStep& h) {
            std::lock_guard lock(pkg_mu_);
            if (auto r = c_.packages->hold(h.packages); !r) return StepResult::failure(r.error());
            return StepResult::ok(fmt::format("held {}", util::join(h.packages, ", ")));
          },
          [&](const ServiceStep& sv) { return command(s, sv.argv); },
          [&](const WaagentStep&) {
            return c_.waagent ? c_.waagent(s)
                              : failed(ErrorKind::internal, fmt::format("{}: no waagent editor configured", s.id));
          },
          [&](const ContainerRuntimeStep& c) { return container_runtime(s, c); },
          [&](const RebootStep& r) { return StepResult::reboot(r.reason.empty() ? s.title : r.reason); },
          [&](const VerifyStep&) {
            return c_.verify ? c_.verify(s)
                             : failed(ErrorKind::internal, fmt::format("{}: no verifier configured", s.id));
          },
          [&](const CanonicalDriverStep& c) { return canonical_driver(s, c); },
          [&](const UnpackStep& u) { return unpack(s, u); },
          [&](const GitSourceStep& g) { return git_source(s, g); },
          [&](const BuildStep& b) { return build(s, b); },
      },
      s.action);
}

StepResult Actions::container_runtime(const plan::Step& s, const plan::ContainerRuntimeStep& c) {
  std::vector<std::string> done;
  for (const auto& [name, config] : c.engines) {
    const auto engine = container::parse_engine(name);
    if (!engine) return failed(ErrorKind::internal, fmt::format("{}: unknown container engine '{}'", s.id, name));
    const bool k8s = c.kubernetes && *engine == container::Engine::containerd;
    const bool memlock = c.rdma && *engine == container::Engine::docker;
    auto r = container::configure(c_.host, *engine, container::Runtime{c.runtime, c.binary, k8s, k8s, memlock}, config);
    if (!r) return StepResult::failure(r.error());
    done.push_back(fmt::format("{}: {}", config, r->what));
    // The engine reads its configuration at start (restarted only by the fixture-root rule).
    if (!r->changed || !exec::may_act_on_machine(c_.host, *c_.runner)) continue;
    if (auto res = command(s, {"systemctl", "try-restart", name + ".service"}); res.kind != StepResult::Kind::done)
      return res;
  }
  return StepResult::ok(util::join(done, "; "));
}

Status Actions::resolve_argv(const std::vector<std::string>& argv, std::vector<std::string>& out,
                             std::vector<util::Fd>& held) {
  for (const auto& arg : argv) {
    if (auto name = plan::artifact_of_ref(arg)) { // {artifact:NAME}: the verified file in the cache
      auto art = cached(*name);
      if (!art) return std::unexpected(art.error());
      out.push_back(art->path.string());
      held.push_back(std::move(art->lock));
    } else {
      out.push_back(arg);
    }
  }
  return {};
}

StepResult Actions::command(const plan::Step& s, const std::vector<std::string>& argv) {
  if (argv.empty()) return failed(ErrorKind::internal, fmt::format("{}: the plan gives no command", s.id));
  exec::Command cmd;
  std::vector<util::Fd> held; // the artifacts' shared locks, until the command is done
  if (auto r = resolve_argv(argv, cmd.argv, held); !r) return StepResult::failure(r.error());
  if (c_.on_output) cmd.on_output = [&](std::string_view line) { c_.on_output(s, std::string(line)); };
  auto r = c_.runner->run(cmd);
  if (!r) return StepResult::failure(r.error());
  if (!r->ok())
    return failed(ErrorKind::build, fmt::format("{}: {} {}", s.id, exec::shell_quote(cmd.argv), r->describe()),
                  "Read the output above; fix the cause and run install again (done steps are skipped).",
                  util::last_lines(r->output, kTailLines));
  return StepResult::ok();
}

// The initramfs is read first: without a module the plan configures inside, a rebuild changes
// nothing that boots (the blacklist and the options are read from /etc/modprobe.d once the root
// is mounted), and under emulation it is the longest step of a bake. On any doubt it is rebuilt.
StepResult Actions::initramfs(const plan::Step& s, const plan::CommandStep& c) {
  const auto check = archive::check_initramfs(c_.host, c.initramfs, c.only_if_holds);
  if (!check.needed())
    return StepResult::ok(fmt::format("not needed: {} holds no {} module ({} modules in {} archive(s))", c.initramfs,
                                      util::join(c.only_if_holds, " or "), check.held->modules.size(),
                                      check.held->archives));
  auto r = command(s, c.argv);
  if (r.kind == StepResult::Kind::done)
    r.message = check.held ? fmt::format("rebuilt: {} held {}", c.initramfs, util::join(check.found, ", "))
                           : fmt::format("rebuilt ({})", check.held.error().message);
  return r;
}

StepResult Actions::packages(const plan::Step& s, const plan::PackagesStep& p) {
  std::lock_guard lock(pkg_mu_);
  // With prebuilt modules for a driver's packages, or modules hpcbake signs with its key, their
  // postinst must not build them: DKMS's autoinstall is off until the packages are in, then
  // packaged_modules installs the modules.
  const bool own_modules = p.dkms && (p.dkms->prebuilt || p.dkms->sign);
  std::optional<driver::AutoinstallOff> off;
  if (own_modules) {
    auto held = driver::AutoinstallOff::hold(c_.host);
    if (!held) return StepResult::failure(held.error());
    off.emplace(std::move(*held));
  }
  // Which DKMS sources were there before: a discovered step builds those its packages add.
  const std::set<std::string> sources_before =
      own_modules && p.dkms->discovered() ? dkms_sources() : std::set<std::string>{};
  // A package file pinned by the step (DOCA's repository package, Fabric Manager's rpm on EL)
  // goes in first: a .deb through dpkg; an rpm through dnf, which resolves its dependencies from
  // the enabled repositories (azhpc-images: "dnf install ./FILE").
  const bool deb = p.manager == manifest::PackageManager::apt;
  for (const auto& name : p.files) {
    if (!deb) {
      auto path = rpm_path(name);
      if (!path) return StepResult::failure(path.error());
      if (auto r = c_.packages->install({path->string()}); !r) return StepResult::failure(r.error());
      continue;
    }
    auto r = command(s, {"dpkg", "-i", plan::artifact_ref(name)});
    if (r.kind != StepResult::Kind::done) return r;
  }
  // A repository package (p.files) may add sources. The index is refreshed once per change of the
  // sources in this run: three steps after one repository cost one `apt-get update`, not three.
  if (!p.files.empty()) ++sources_changed_;
  // The distro's own packages (no repository, no file) all installed already: nothing to ask of
  // apt or dnf, whose start alone costs seconds (apt-get install of installed packages is a no-op
  // too, except that it would upgrade them, which this step never promised), and no index needed.
  const bool present = p.files.empty() && p.repository.empty() && all_installed(p.packages);
  bool fresh = false;
  if (plan::refreshes_index(p) && !present) {
    const unsigned sources = sources_changed_.load();
    fresh = sources == index_refreshed_at_;
    if (!fresh) {
      if (auto r = c_.packages->refresh(); !r) return StepResult::failure(r.error());
      index_refreshed_at_ = sources;
    }
  }
  if (!p.packages.empty() && !present)
    if (auto r = c_.packages->install(p.packages); !r) return StepResult::failure(r.error());
  if (p.hold)
    if (auto r = hold(s, p); r.kind != StepResult::Kind::done) return r;
  const std::string installed =
      present ? fmt::format("{} package(s), all installed already", p.packages.size())
              : fmt::format("{} package(s){}", p.packages.size() + p.files.size(),
                            fresh ? " (the package index was refreshed earlier in this run)" : "");
  if (!own_modules) return StepResult::ok(installed);
  const bool admin_off = !off->ours();
  off.reset();
  // Signing with hpcbake's key: the modules are built here whoever turned autoinstall off.
  if (admin_off && !p.dkms->sign)
    return StepResult::ok(installed + fmt::format(" ({} was there before: the modules are left to DKMS's autoinstall, "
                                                  "which it turns off)",
                                                  driver::kNoAutoinstall));
  if (p.dkms->discovered()) return discovered_modules(p, sources_before, installed);
  return packaged_modules(p, installed);
}

// Every package (NAME, or NAME=VERSION: that version) installed; false on any doubt (a name the
// package database does not know, a query that fails), so the package manager decides.
bool Actions::all_installed(const std::vector<std::string>& packages) {
  if (packages.empty()) return false;
  for (const auto& pk : packages) {
    const auto eq = pk.find('=');
    auto v = c_.packages->installed_version(pk.substr(0, eq));
    if (!v || !*v || (eq != std::string::npos && **v != pk.substr(eq + 1))) return false;
  }
  return true;
}

// dnf takes a local package only by a path ending in .rpm: the verified cache entry, linked
// under its own name in the work directory.
Result<fs::path> Actions::rpm_path(const std::string& name) {
  HPCBAKE_TRY_ASSIGN(auto art, cached(name));
  const fs::path link = c_.work_dir / "rpms" / name;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  fs::remove(link, ec);
  fs::create_symlink(art.path, link, ec);
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("cannot link {} to {}: {}", link.string(), art.path.string(), ec.message()));
  return link;
}

// Holds what was installed, by name: a pinned file's package name comes from the file itself.
StepResult Actions::hold(const plan::Step& s, const plan::PackagesStep& p) {
  std::vector<std::string> names;
  for (const auto& pk : p.packages)
    names.push_back(pk.substr(0, pk.find('=')));
  const bool deb = p.manager == manifest::PackageManager::apt;
  for (const auto& name : p.files) {
    auto art = cached(name);
    if (!art) return StepResult::failure(art.error());
    const fs::path& path = art->path;
    exec::Command q;
    q.argv = deb ? std::vector<std::string>{"dpkg-deb", "--field", path.string(), "Package"}
                 : std::vector<std::string>{"rpm", "-qp", "--queryformat", "%{NAME}", path.string()};
    auto r = c_.runner->run(q);
    if (!r) return StepResult::failure(r.error());
    const std::string pkg(util::trim(r->output));
    if (!r->ok() || pkg.empty())
      return failed(ErrorKind::build, fmt::format("{}: cannot read the package name of {}", s.id, path.string()),
                    "The pinned file is not a package this distro's tools read; check the component manifest.");
    names.push_back(pkg);
  }
  if (!names.empty())
    if (auto r = c_.packages->hold(names); !r) return StepResult::failure(r.error());
  return StepResult::ok();
}

StepResult Actions::headers(const plan::HeadersStep& h) {
  std::lock_guard lock(pkg_mu_);
  auto r = driver::ensure_headers(c_.host, h.kernel, h.package, h.check, *c_.packages);
  if (!r) return StepResult::failure(r.error());
  return StepResult::ok(r->empty() ? "already installed" : "installed " + util::join(*r, ", "));
}

Result<Actions::Cached> Actions::cached(const std::string& name) {
  const auto& arts = c_.plan->artifacts;
  auto it = std::find_if(arts.begin(), arts.end(), [&](const auto& a) { return a.artifact.name == name; });
  if (it == arts.end()) return fail(ErrorKind::internal, fmt::format("artifact {} is not in the plan", name));
  HPCBAKE_TRY_ASSIGN(auto jobs, fetch::jobs_for({*it}, c_.sha256_pins, fetch::Unpinned::refuse));
  Quiet quiet;
  fetch::Cache cache(c_.fetch.cache_dir, c_.fetch.quarantine_budget);
  std::unique_lock one_copy(bundle_mu_, std::defer_lock);
  if (!c_.bundle.empty()) one_copy.lock();
  fetch::Observer& observer = c_.downloads ? *c_.downloads : static_cast<fetch::Observer&>(quiet);
  HPCBAKE_TRY_ASSIGN(auto rep, c_.bundle.empty() ? fetch::download(jobs, c_.fetch, observer)
                                                 : fetch::fetch_from_bundle(c_.bundle, jobs, cache, observer));
  if (one_copy.owns_lock()) one_copy.unlock();
  const auto& r = rep.results.front();
  if (!r.ok)
    return fail(r.lock_held ? ErrorKind::lock_held : ErrorKind::fetch, fmt::format("{}: {}", name, r.error),
                c_.bundle.empty() ? "Check the network or pass --bundle; a re-run resumes the partial download."
                                  : "Rebuild the bundle with 'hpcbake bundle create' for this size and distro.");
  auto lock = cache.lock_entry_shared(r.sha256);
  if (!lock) // gc removed it between the download and now: a re-run fetches it again
    return fail(ErrorKind::fetch,
                fmt::format("{}: the cache entry went away before it was used: {}", name, lock.error().message),
                "Run install again; do not run 'hpcbake cache gc' during an install.");
  return Cached{r.path, std::move(*lock)};
}

StepResult Actions::artifact(const plan::ArtifactStep& a) {
  auto p = cached(a.name);
  if (!p) return StepResult::failure(p.error());
  return StepResult::ok(p->path.string());
}

StepResult Actions::config(const plan::Step& s, const plan::ConfigStep& c) {
  if (c.path.empty() || c.path.front() != '/')
    return failed(ErrorKind::internal, fmt::format("{}: the plan gives no absolute path", s.id));
  const fs::path file = c_.host.resolve(c.path);
  if (auto cur = c_.host.read(c.path, util::host_file::config); cur && *cur == c.content)
    return StepResult::ok("unchanged");
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec)
    return failed(ErrorKind::internal,
                  fmt::format("{}: cannot create {}: {}", s.id, file.parent_path().string(), ec.message()));
  if (auto w = util::write_file_atomic(file, c.content, c.mode); !w) return StepResult::failure(w.error());
  return StepResult::ok("wrote " + c.path);
}

// The vendor's key, fetched from its URLs in turn and accepted only with the pinned
// fingerprint; then the key file and the source file, each written atomically.
// The key file from one URL: a file:/// path read under --root, or over HTTP(S) (never with a
// bundle: a bundle install does not use the network).
Result<std::string> Actions::repository_key(const std::string& url) const {
  if (plan::is_local_url(url)) {
    const std::string path = url.substr(std::string_view("file://").size());
    auto key = util::read_small_file(c_.host.resolve(path), kMaxKeyBytes);
    if (!key)
      return fail(ErrorKind::fetch, fmt::format("{}: {}", util::redact_url(url), key.error().message),
                  fmt::format("check that {} exists under --root and is the vendor's key file", path));
    return key;
  }
  if (!c_.bundle.empty())
    return fail(ErrorKind::unsupported,
                fmt::format("{}: a bundle install does not use the network", util::redact_url(url)));
  if (!c_.http) return fail(ErrorKind::internal, "no HTTP client configured");
  util::HttpRequest rq;
  rq.url = url;
  rq.connect_timeout_ms = 10'000;
  rq.timeout_ms = 60'000;
  rq.max_body_bytes = kMaxKeyBytes;
  rq.follow_redirects = true;
  rq.ca_file = c_.fetch.ca_file;
  HPCBAKE_TRY_ASSIGN(auto got, c_.http->get(rq));
  if (got.status != 200) return fail(ErrorKind::fetch, fmt::format("{}: HTTP {}", util::redact_url(url), got.status));
  return std::move(got.body);
}

// A repository an offline bundle carries: its files out of the bundle into the cache (each
// verified by its SHA-256), then into the mirror directory the source file names.
StepResult Actions::repository_copy(const plan::Step& s, const plan::RepositoryStep& r) {
  if (c_.bundle.empty())
    return failed(ErrorKind::internal, fmt::format("{}: a copied repository without a bundle", s.id));
  std::vector<fetch::Job> jobs;
  for (const auto& f : r.mirror)
    jobs.push_back({r.repository + "/" + f.path, {}, f.sha256, f.size});
  Quiet quiet;
  fetch::Cache cache(c_.fetch.cache_dir, c_.fetch.quarantine_budget);
  std::unique_lock one_copy(bundle_mu_);
  auto rep = fetch::fetch_from_bundle(c_.bundle, jobs, cache, quiet);
  one_copy.unlock();
  if (!rep) return StepResult::failure(rep.error());
  for (const auto& res : rep->results)
    if (!res.ok)
      return failed(ErrorKind::fetch, fmt::format("{}: {}", s.id, res.error),
                    "the bundle is damaged: make it again with 'hpcbake bundle create'");
  if (auto st = mirror::materialize(r.mirror, cache, c_.host.resolve(r.mirror_dir)); !st)
    return StepResult::failure(st.error());
  return StepResult::ok();
}

// Offline use (a bundle install) is refused up front by plan::offline_installable, unless the
// bundle carries the repository (r.mirror).
StepResult Actions::repository(const plan::Step& s, const plan::RepositoryStep& r) {
  if (!r.mirror_dir.empty())
    if (auto c = repository_copy(s, r); c.kind != StepResult::Kind::done) return c;
  std::vector<std::string> tried;
  std::optional<repo::KeyFile> key;
  std::string raw;
  for (const auto& url : r.key_urls) {
    auto got = repository_key(url);
    if (!got) {
      tried.push_back(got.error().message);
      continue;
    }
    auto verified = repo::verify_pinned_key(*got, r.fingerprint, util::redact_url(url));
    if (!verified) { // a wrong key is never retried from a mirror: it is reported as it is
      return StepResult::failure(verified.error());
    }
    key = std::move(*verified);
    raw = std::move(*got);
    break;
  }
  if (!key)
    return failed(
        ErrorKind::fetch,
        fmt::format("{}: no URL gave the key of repository {}: {}", s.id, r.repository, util::join(tried, "; ")),
        "check the network or proxy (or the file:/// path under --root); the key is pinned by fingerprint, so any "
        "mirror of the file will do");
  std::string key_bytes = key->binary; // apt: the verified packets, nothing else
  if (r.manager != manifest::PackageManager::apt) {
    if (!key->armored)
      return failed(ErrorKind::fetch, fmt::format("{}: rpm imports armored keys; {} is binary", s.id,
                                                  util::redact_url(r.key_urls.front())));
    key_bytes = raw;
  }
  if (auto w = config(s, plan::ConfigStep{r.key_path, key_bytes, 0644}); w.kind != StepResult::Kind::done) return w;
  if (auto w = config(s, plan::ConfigStep{r.source_path, r.source, 0644}); w.kind != StepResult::Kind::done) return w;
  ++sources_changed_; // after the write: a refresh that read the count before it runs again
  return StepResult::ok(fmt::format(
      "trusted {} with key {} ({}){}", r.repository, r.fingerprint, r.source_path,
      r.mirror_dir.empty() ? std::string()
                           : fmt::format(", {} files copied from the bundle to {}", r.mirror.size(), r.mirror_dir)));
}

StepResult Actions::signing_key() {
  auto key = driver::signing_key(c_.plan->signing);
  if (!key) return StepResult::failure(key.error());
  // Where shim handed the kernel a MOK list (a UEFI boot through shim), say where the certificate
  // stands: the modules load only once it is enrolled (docs/secure-boot.md). Never enrolled here.
  std::string enrolled;
  if (auto e = driver::enrollment_of_file(c_.host, key->cert_der); e && *e != driver::Enrollment::no_mok_list)
    enrolled = fmt::format(" ({})", driver::to_string(*e));
  return StepResult::ok(
      fmt::format("'{}'; certificate to enroll: {}{}", key->subject, key->cert_der.string(), enrolled));
}

Result<driver::DkmsOptions> Actions::dkms_options() {
  std::lock_guard lock(sign_mu_);
  if (!c_.plan->signing.enabled || signing_ready_) return c_.dkms;
  HPCBAKE_TRY_ASSIGN(auto key, driver::signing_key(c_.plan->signing));
  for (const auto& k : c_.plan->kernels) {
    auto sf = driver::find_sign_file(c_.host, k);
    if (!sf)
      return fail(ErrorKind::unsupported, fmt::format("modules must be signed but kernel {} has no sign-file", k),
                  fmt::format("install the headers of {} (they ship scripts/sign-file)", k));
    c_.dkms.sign_file = *sf;
  }
  // DKMS 2.8 (Ubuntu 22.04) signs only through sign_tool (driver/dkms.hpp); 3.0 ignores it.
  if (!c_.dkms.sign_file.empty()) {
    const fs::path tool = c_.work_dir / "dkms-sign-tool";
    std::error_code ec;
    fs::create_directories(c_.work_dir, ec);
    HPCBAKE_TRY(util::write_file_atomic(tool, driver::sign_tool_script(c_.dkms.sign_file, key), 0755));
    c_.dkms.sign_tool = tool;
  }
  c_.dkms.signing = key;
  signing_ready_ = true;
  return c_.dkms;
}

StepResult Actions::run_installer(const plan::Step& s, const plan::RunInstallerStep& r) {
  if (r.commands.empty())
    return failed(ErrorKind::unsupported, fmt::format("{}: no target kernel known on this host", s.id),
                  "Run install on the machine being baked (hpcbake detect shows its kernels).");
  std::vector<std::string> kernels;
  for (const auto& [kernel, argv] : r.commands) {
    if (auto res = command(s, argv); res.kind != StepResult::Kind::done) return res;
    kernels.push_back(kernel);
  }
  return StepResult::ok(fmt::format("installed for {}", util::join(kernels, ", ")));
}

StepResult Actions::dkms_build(const plan::DkmsBuildStep& d) {
  driver::BuildRequest rq;
  std::optional<Cached> src; // an artifact: locked until the build has extracted it
  if (d.source_dir.empty()) {
    auto c = cached(d.source);
    if (!c) return StepResult::failure(c.error());
    src = std::move(*c);
    rq.source = src->path;
  } else {
    // A directory an earlier step of the plan filled (a git-source checkout): registered from there.
    auto dir = c_.host.resolve_checked(d.source_dir);
    if (!dir) return StepResult::failure(dir.error());
    rq.source = *dir;
    std::error_code ec;
    if (!fs::is_directory(rq.source, ec))
      return failed(ErrorKind::build,
                    fmt::format("{}: the sources of {} {} are not there", rq.source.string(), d.dkms_name, d.version),
                    "the step that checks them out runs first: run install again (--resume continues the plan)");
  }
  rq.subdir = d.subdir;
  rq.spec.name = d.dkms_name;
  rq.spec.version = d.version;
  rq.spec.modules = d.modules;
  rq.spec.directives = d.directives;
  rq.kernels = d.kernels;
  rq.work_dir = c_.work_dir;
  auto dk = dkms_options();
  if (!dk) return StepResult::failure(dk.error());
  const fs::path scratch = c_.work_dir / fmt::format("prebuilt-{}-{}", d.dkms_name, ::getpid());
  std::error_code ec;
  if (d.prebuilt) {
    util::remove_stale_pid_entries(c_.work_dir, fmt::format("prebuilt-{}-", d.dkms_name));
    fs::remove_all(scratch, ec);
    const auto src_art = std::find_if(c_.plan->artifacts.begin(), c_.plan->artifacts.end(),
                                      [&](const auto& a) { return a.artifact.name == d.source; });
    const std::string source_sha = src_art != c_.plan->artifacts.end() ? src_art->artifact.sha256.value_or("") : "";
    use_prebuilt(*d.prebuilt, {{}, c_.plan->arch, d.dkms_name, d.version, source_sha, d.modules, d.signing.enabled},
                 d.signing.enabled ? &d.signing : nullptr, rq, scratch);
  }
  auto builds = build_checked(rq, *dk, scratch, d.dkms_conf_template);
  if (!builds) return StepResult::failure(builds.error());
  std::vector<std::string> notes;
  for (const auto& b : *builds)
    if (!b.note.empty()) notes.push_back(fmt::format("{}: {}", b.kernel, b.note));
  return StepResult::ok(fmt::format("{} {} for {}{}", rq.spec.name, rq.spec.version, util::join(d.kernels, ", "),
                                    notes.empty() ? std::string() : " (" + util::join(notes, "; ") + ")"));
}

Result<std::vector<driver::KernelBuild>> Actions::build_checked(const driver::BuildRequest& rq,
                                                                const driver::DkmsOptions& options,
                                                                const fs::path& scratch,
                                                                const std::string& dkms_conf_template) {
  driver::Dkms dkms(*c_.runner, options);
  auto builds = driver::build_module(rq, dkms, dkms_conf_template);
  std::error_code ec;
  fs::remove_all(scratch, ec);
  if (!builds) return std::unexpected(builds.error());
  // The error lists every kernel with its first compiler error, log tail and log path.
  HPCBAKE_TRY(driver::overall(rq.spec, *builds));
  return builds;
}

void Actions::use_prebuilt(const plan::PrebuiltUse& p, const driver::PrebuiltWant& want,
                           const driver::SigningPlan* signing, driver::BuildRequest& rq, const fs::path& scratch) {
  std::vector<std::string> fits;
  for (const auto& [k, why] : p.kernels)
    if (why.empty())
      fits.push_back(k);
    else
      rq.not_prebuilt[k] = why;
  auto refuse = [&](const std::string& why) {
    for (const auto& k : fits)
      rq.not_prebuilt[k] = why;
  };
  if (fits.empty()) return;
  // The file the plan saw, every member verified as it is extracted (driver/prebuilt.hpp).
  auto digest = util::sha256_file(p.file);
  if (!digest) return refuse(digest.error().message);
  if (*digest != p.sha256)
    return refuse(
        fmt::format("{} changed since the plan was made (SHA-256 {}, planned {})", p.file, *digest, p.sha256));
  auto m = driver::extract_prebuilt(p.file, scratch);
  if (!m) return refuse(m.error().message);
  std::optional<driver::Certificate> cert;
  if (signing) { // the plan's own certificate: what Secure Boot is told to trust
    auto key = driver::signing_key(*signing);
    auto c = key ? driver::read_certificate(key->cert_der) : std::unexpected(key.error());
    if (!c) return refuse(fmt::format("the plan's signing certificate cannot be read: {}", c.error().message));
    cert = *c;
  }
  for (const auto& k : fits) {
    driver::PrebuiltWant w = want;
    w.kernel = k;
    const std::string why = driver::prebuilt_mismatch(*m, w);
    if (!why.empty()) {
      rq.not_prebuilt[k] = why;
      continue;
    }
    driver::BuildRequest::Prebuilt use{m->arch, {}, p.file};
    for (const auto& mod : m->find(want.dkms_name)->modules) {
      const fs::path ko = scratch / want.dkms_name / want.version / mod.file;
      if (auto st = driver::check_prebuilt_module(ko, mod, k, cert); !st) {
        rq.not_prebuilt[k] = st.error().message;
        break;
      }
      use.files.push_back(ko);
    }
    if (!rq.not_prebuilt.contains(k)) rq.prebuilt[k] = std::move(use);
  }
}

StepResult Actions::dkms_check(const plan::Step& s, const plan::DkmsCheckStep& d) {
  const fs::path dir = c_.host.resolve("/lib/modules/" + d.kernel);
  std::optional<std::string> signer;
  if (d.check_signer) {
    auto key = driver::signing_key(c_.plan->signing);
    if (!key) return StepResult::failure(key.error());
    signer = key->subject;
  }
  std::vector<std::string> missing;
  for (const auto& m : d.modules) {
    auto ko = driver::find_module(c_.host, d.kernel, m);
    if (!ko) {
      missing.push_back(m);
      continue;
    }
    if (auto st = driver::check_module(*ko, d.kernel, signer); !st) return StepResult::failure(st.error());
  }
  if (!missing.empty())
    return failed(ErrorKind::build,
                  fmt::format("{}: not installed for {}: {} (looked under {})", s.id, d.kernel,
                              util::join(missing, ", "), dir.string()),
                  fmt::format("Run 'dkms status' and read /var/lib/dkms/{}/{}/build/make.log.", d.package, d.version));
  return StepResult::ok(fmt::format("{} present for {}", util::join(d.modules, ", "), d.kernel));
}

} // namespace hpcbake::install
