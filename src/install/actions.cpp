#include "install/actions.hpp"

#include "driver/headers.hpp"
#include "driver/modinfo.hpp"
#include "driver/signing.hpp"
#include "driver/module_build.hpp"
#include "fetch/bundle.hpp"
#include "fetch/jobs.hpp"
#include "util/atomic_file.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

namespace hpcbake::install {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kTailLines = 20;

class Quiet final : public fetch::Observer {
public:
  void on_event(const fetch::Event&) override {}
};

std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  if (auto it = j.find(key); it != j.end() && it->is_array())
    for (const auto& v : *it)
      if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

std::string text(const json& j, const char* key) {
  if (auto it = j.find(key); it != j.end() && it->is_string()) return it->get<std::string>();
  return {};
}

StepResult failed(ErrorKind kind, std::string message, std::string hint = {}, std::string tail = {}) {
  return StepResult::failure(Error{kind, std::move(message), std::move(hint)}, std::move(tail));
}

} // namespace

Actions::Actions(ActionsConfig config) : c_(std::move(config)) {}

std::string Actions::boot_id() {
  return c_.host.read_attr("/proc/sys/kernel/random/boot_id").value_or("");
}

StepResult Actions::execute(const plan::Step& s) {
  using K = plan::StepKind;
  switch (s.kind) {
  case K::packages: return packages(s);
  case K::kernel_headers: return headers(s);
  case K::artifact: return artifact(s);
  case K::config: return config(s);
  case K::initramfs: return command(s, strings(s.detail, "argv"));
  case K::reboot: return StepResult::reboot(text(s.detail, "reason").empty() ? s.title : text(s.detail, "reason"));
  case K::driver: return driver(s);
  case K::dkms: return dkms_check(s);
  case K::service: return service(s);
  case K::waagent:
    if (!c_.waagent) return failed(ErrorKind::internal, fmt::format("{}: no waagent editor configured", s.id));
    return c_.waagent(s);
  case K::verify:
    if (!c_.verify) return failed(ErrorKind::internal, fmt::format("{}: no verifier configured", s.id));
    return c_.verify(s);
  }
  return failed(ErrorKind::internal, fmt::format("{}: unknown step kind", s.id));
}

StepResult Actions::command(const plan::Step& s, const std::vector<std::string>& argv) {
  if (argv.empty()) return failed(ErrorKind::internal, fmt::format("{}: the plan gives no command", s.id));
  exec::Command cmd;
  cmd.argv = argv;
  if (c_.on_output) cmd.on_output = [&](std::string_view line) { c_.on_output(s, std::string(line)); };
  auto r = c_.runner->run(cmd);
  if (!r) return StepResult::failure(r.error());
  if (!r->ok())
    return failed(ErrorKind::build, fmt::format("{}: {} {}", s.id, exec::shell_quote(argv), r->describe()),
                  "Read the output above; fix the cause and run install again (done steps are skipped).",
                  util::last_lines(r->output, kTailLines));
  return StepResult::ok();
}

StepResult Actions::package_file(const plan::Step& s, const std::string& name) {
  auto path = cached(name);
  if (!path) return StepResult::failure(path.error());
  const bool deb = c_.distro->package_manager == "apt";
  return command(s, deb ? std::vector<std::string>{"dpkg", "-i", path->string()}
                        : std::vector<std::string>{"rpm", "-U", "--replacepkgs", path->string()});
}

StepResult Actions::packages(const plan::Step& s) {
  std::lock_guard lock(pkg_mu_);
  // A package file pinned by the step (Fabric Manager's .deb, DOCA's repository package) goes
  // in first through the low-level tool, which verifies its own signature rules.
  for (const auto& name : strings(s.detail, "files"))
    if (auto r = package_file(s, name); r.kind != StepResult::Kind::done) return r;
  const auto pkgs = strings(s.detail, "packages");
  if (!pkgs.empty())
    if (auto r = c_.packages->install(pkgs); !r) return StepResult::failure(r.error());
  if (s.detail.value("hold", false)) {
    // Hold what was installed, by name: a pinned file's package name comes from the file itself.
    std::vector<std::string> names;
    for (const auto& p : pkgs) names.push_back(p.substr(0, p.find('=')));
    for (const auto& name : strings(s.detail, "files")) {
      auto path = cached(name);
      if (!path) return StepResult::failure(path.error());
      const bool deb = c_.distro->package_manager == "apt";
      exec::Command q;
      q.argv = deb ? std::vector<std::string>{"dpkg-deb", "--field", path->string(), "Package"}
                   : std::vector<std::string>{"rpm", "-qp", "--queryformat", "%{NAME}", path->string()};
      auto r = c_.runner->run(q);
      if (!r) return StepResult::failure(r.error());
      const std::string pkg(util::trim(r->output));
      if (!r->ok() || pkg.empty())
        return failed(ErrorKind::build, fmt::format("{}: cannot read the package name of {}", s.id, path->string()),
                      "The pinned file is not a package this distro's tools read; check the component manifest.");
      names.push_back(pkg);
    }
    if (!names.empty())
      if (auto r = c_.packages->hold(names); !r) return StepResult::failure(r.error());
  }
  return StepResult::ok(fmt::format("{} package(s)", pkgs.size() + strings(s.detail, "files").size()));
}

StepResult Actions::headers(const plan::Step& s) {
  std::lock_guard lock(pkg_mu_);
  const std::string kernel = text(s.detail, "kernel");
  auto r = driver::ensure_headers(c_.host, *c_.distro, {kernel}, *c_.packages);
  if (!r) return StepResult::failure(r.error());
  return StepResult::ok(r->empty() ? "already installed" : "installed " + util::join(*r, ", "));
}

Result<fs::path> Actions::cached(const std::string& name) {
  const auto& arts = c_.plan->artifacts;
  auto it = std::find_if(arts.begin(), arts.end(), [&](const auto& a) { return a.artifact.name == name; });
  if (it == arts.end())
    return fail(ErrorKind::internal, fmt::format("artifact {} is not in the plan", name));
  auto jobs = fetch::jobs_for({*it}, c_.sha256_overrides, fetch::Unpinned::refuse);
  if (!jobs) return std::unexpected(jobs.error());
  Quiet quiet;
  fetch::Cache cache(c_.fetch.cache_dir);
  auto rep = c_.bundle.empty() ? fetch::download(*jobs, c_.fetch, quiet)
                               : fetch::fetch_from_bundle(c_.bundle, *jobs, cache, quiet);
  if (!rep) return std::unexpected(rep.error());
  const auto& r = rep->results.front();
  if (!r.ok)
    return fail(ErrorKind::fetch, fmt::format("{}: {}", name, r.error),
                c_.bundle.empty() ? "Check the network or pass --bundle; a re-run resumes the partial download."
                                  : "Rebuild the bundle with 'hpcbake bundle create' for this size and distro.");
  return r.path;
}

StepResult Actions::artifact(const plan::Step& s) {
  auto p = cached(text(s.detail, "name"));
  if (!p) return StepResult::failure(p.error());
  return StepResult::ok(p->string());
}

StepResult Actions::config(const plan::Step& s) {
  const std::string host_path = text(s.detail, "path");
  const std::string content = text(s.detail, "content");
  if (host_path.empty() || host_path.front() != '/')
    return failed(ErrorKind::internal, fmt::format("{}: the plan gives no absolute path", s.id));
  const fs::path file = c_.host.resolve(host_path);
  if (auto cur = c_.host.read(host_path); cur && *cur == content) return StepResult::ok("unchanged");
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return failed(ErrorKind::internal, fmt::format("{}: cannot create {}: {}", s.id, file.parent_path().string(), ec.message()));
  if (auto w = util::write_file_atomic(file, content, 0644); !w) return StepResult::failure(w.error());
  return StepResult::ok("wrote " + host_path);
}

Result<driver::DkmsOptions> Actions::dkms_options() {
  std::lock_guard lock(sign_mu_);
  if (!c_.sign || signing_ready_) return c_.dkms;
  if (c_.sign_key.empty() != c_.sign_cert.empty())
    return fail(ErrorKind::usage, "--sign-key and --sign-cert go together");
  auto key = c_.sign_key.empty() ? driver::ensure_signing_key(c_.key_dir) : driver::load_signing_key(c_.sign_key, c_.sign_cert);
  if (!key) return std::unexpected(key.error());
  for (const auto& k : c_.plan->kernels) {
    auto sf = driver::find_sign_file(c_.host, k);
    if (!sf)
      return fail(ErrorKind::unsupported, fmt::format("modules must be signed but kernel {} has no sign-file", k),
                  fmt::format("install the headers of {} (they ship scripts/sign-file)", k));
    c_.dkms.sign_file = *sf;
  }
  c_.dkms.signing = *key;
  signing_ready_ = true;
  return c_.dkms;
}

StepResult Actions::driver(const plan::Step& s) {
  const std::string component = text(s.detail, "component");
  const driver::Recipe* recipe = nullptr;
  // The component's kind names its recipe.
  if (c_.recipes)
    for (const auto& [kind, r] : c_.recipes->by_kind)
      if (text(s.detail, "kind") == kind) recipe = &r;
  const std::string installer = recipe ? recipe->installer : text(s.detail, "installer");
  const std::vector<std::string> kernels = c_.plan->kernels;
  if (kernels.empty())
    return failed(ErrorKind::unsupported, fmt::format("{}: no target kernel known on this host", s.id),
                  "Run install on the machine being baked (hpcbake detect shows its kernels).");

  if (installer == "nvidia-run") {
    const auto argv0 = strings(s.detail, "installer_argv");
    if (argv0.empty()) return failed(ErrorKind::internal, fmt::format("{}: no installer in the plan", s.id));
    auto run = cached(argv0.front());
    if (!run) return StepResult::failure(run.error());
    for (const auto& k : kernels) {
      driver::RunRequest rq;
      rq.run_file = *run;
      rq.kernel = k;
      rq.flavour = text(s.detail, "module_flavour").empty() ? "open" : text(s.detail, "module_flavour");
      auto dk = dkms_options();
      if (!dk) return StepResult::failure(dk.error());
      if (dk->signing) {
        rq.signing_key = dk->signing->key;
        rq.signing_cert = dk->signing->cert_der;
      }
      auto argv = driver::run_installer_argv(*recipe, rq);
      if (!argv) return StepResult::failure(argv.error());
      argv->insert(argv->begin(), "sh"); // the cache keeps files read-only and non-executable
      if (auto r = command(s, *argv); r.kind != StepResult::Kind::done) return r;
    }
    return StepResult::ok(fmt::format("installed for {}", util::join(kernels, ", ")));
  }
  if (installer == "dkms") {
    const auto files = strings(s.detail, "files");
    if (files.empty()) return failed(ErrorKind::internal, fmt::format("{}: no module source in the plan", s.id));
    auto src = cached(files.front());
    if (!src) return StepResult::failure(src.error());
    driver::BuildRequest rq;
    rq.source = *src;
    rq.subdir = text(s.detail, "subdir");
    rq.spec.name = text(s.detail, "dkms_name");
    rq.spec.version = text(s.detail, "version");
    rq.spec.modules = strings(s.detail, "modules");
    rq.kernels = kernels;
    rq.work_dir = c_.work_dir;
    auto dk = dkms_options();
    if (!dk) return StepResult::failure(dk.error());
    driver::Dkms dkms(*c_.runner, *dk);
    auto builds = driver::build_module(rq, dkms, c_.dkms_conf_template);
    if (!builds) return StepResult::failure(builds.error());
    if (auto st = driver::overall(rq.spec, *builds); !st) {
      std::string tail;
      for (const auto& b : *builds)
        if (!b.ok() && !b.make_log_tail.empty()) tail = b.make_log_tail;
      return StepResult::failure(st.error(), tail);
    }
    return StepResult::ok(fmt::format("{} {} for {}", rq.spec.name, rq.spec.version, util::join(kernels, ", ")));
  }
  if (installer == "packages" || installer.empty()) {
    std::lock_guard lock(pkg_mu_);
    // DOCA: the doca-host repository package first, then the meta package from it.
    if (const std::string repo = text(s.detail, "repository_package"); !repo.empty()) {
      if (auto r = package_file(s, repo); r.kind != StepResult::Kind::done) return r;
      if (auto r = c_.packages->refresh(); !r) return StepResult::failure(r.error());
    }
    const auto pkgs = strings(s.detail, "packages");
    if (!pkgs.empty())
      if (auto r = c_.packages->install(pkgs); !r) return StepResult::failure(r.error());
    return StepResult::ok(fmt::format("{} package(s)", pkgs.size()));
  }
  if (installer == "modules-load") return StepResult::ok("nothing to install");
  return failed(ErrorKind::unsupported, fmt::format("{}: unknown installer '{}' for {}", s.id, installer, component),
                "Check drivers/*.yaml: installer is nvidia-run, packages, dkms or modules-load.");
}

StepResult Actions::dkms_check(const plan::Step& s) {
  const std::string kernel = text(s.detail, "kernel");
  const fs::path dir = c_.host.resolve("/lib/modules/" + kernel);
  std::vector<std::string> missing;
  for (const auto& m : strings(s.detail, "modules")) {
    auto ko = driver::find_module(c_.host, kernel, m);
    if (!ko) {
      missing.push_back(m);
      continue;
    }
    const std::optional<std::string> signer =
        c_.dkms.signing ? std::optional<std::string>(c_.dkms.signing->subject) : std::nullopt;
    if (auto st = driver::check_module(*ko, kernel, signer); !st) return StepResult::failure(st.error());
  }
  if (!missing.empty())
    return failed(ErrorKind::build,
                  fmt::format("{}: not installed for {}: {} (looked under {})", s.id, kernel, util::join(missing, ", "),
                              dir.string()),
                  fmt::format("Run 'dkms status' and read /var/lib/dkms/{}/{}/build/make.log.", text(s.detail, "module"),
                              text(s.detail, "version")));
  return StepResult::ok(fmt::format("{} present for {}", util::join(strings(s.detail, "modules"), ", "), kernel));
}

StepResult Actions::service(const plan::Step& s) {
  const std::string unit = text(s.detail, "unit");
  if (unit.empty()) return failed(ErrorKind::internal, fmt::format("{}: the plan names no unit", s.id));
  return command(s, {"systemctl", "enable", "--now", unit});
}

} // namespace hpcbake::install
