// Rendering of a Plan: JSON for machines (stable, golden-tested) and a table for people.
#include "container/cdi_rdma.hpp"
#include "plan/plan.hpp"
#include "util/overload.hpp"

#include "exec/runner.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

namespace hpcbake::plan {

using nlohmann::json;

json to_json(const Plan& plan, Urls urls) {
  json steps = json::array();
  for (const auto& s : plan.steps)
    steps.push_back({{"id", s.id}, {"kind", s.kind()}, {"title", s.title}, {"after", s.after}, {"detail", s.detail()}});
  json signing = {
      {"enabled", plan.signing.enabled}, {"why", plan.signing.why}, {"route", to_string(plan.signing_route())}};
  if (plan.signing.enabled) {
    signing["key"] = plan.signing.key.string();
    signing["cert"] = plan.signing.cert.string();
    signing["generate"] = plan.signing.generate;
  }
  json out = {{"schema", kPlanSchema},
              {"size", plan.size},
              {"size_manifest", plan.size_id},
              {"family", plan.family},
              {"distro", plan.distro_id},
              {"distro_name", plan.distro_name},
              {"arch", plan.arch},
              {"profile", plan.profile.empty() ? json(nullptr) : json(plan.profile)},
              {"kernels", plan.kernels},
              {"kernels_source", plan.kernels_source},
              {"signing", signing},
              {"package_manager", manifest::to_string(plan.package_manager)},
              {"module_platform_keyring", plan.platform_keyring},
              {"steps", steps},
              {"notes", plan.notes}};
  if (!plan.overrides.empty()) {
    json list = json::array();
    for (const auto& o : plan.overrides)
      list.push_back({{"what", o.what}, {"value", o.value}, {"file", o.file}, {"line", o.line}});
    out["overrides"] = list;
  }
  // Only where a route decides how the driver's modules are trusted: the plans of every other
  // route read as before.
  if (plan.route != SigningRoute::none) {
    out["route"] = to_string(plan.route);
    out["route_reason"] = plan.route_reason;
  }
  if (urls == Urls::full) {
    json artifacts = json::array();
    for (const auto& a : plan.artifacts)
      artifacts.push_back({{"component", a.component},
                           {"version", a.version},
                           {"name", a.artifact.name},
                           {"urls", a.artifact.urls},
                           {"sha256", a.artifact.sha256 ? json(*a.artifact.sha256) : json(nullptr)},
                           {"size", a.artifact.size ? json(*a.artifact.size) : json(nullptr)}});
    out["artifacts"] = std::move(artifacts);
    out["artifacts_redacted"] = plan.artifacts_redacted;
  }
  return out;
}

namespace {

// The expectations worth a line: set values only, without where they come from (said below them).
json shown(json checks) {
  for (const char* key : {"size_file", "driver_source", "ib_write_bw_source", "nvidia"})
    checks.erase(key);
  for (auto it = checks.begin(); it != checks.end();) {
    const auto& v = it.value();
    const bool unset = v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v == 0) ||
                       (v.is_string() && v.get<std::string>().empty()) || (v.is_structured() && v.empty());
    it = unset ? checks.erase(it) : std::next(it);
  }
  return checks;
}

std::string checks_lines(const json& checks) {
  std::string out, line;
  for (const auto& [k, v] : checks.items()) {
    const std::string c = fmt::format("{}={}", k, util::dump_json(v));
    if (!line.empty() && line.size() + c.size() > 100) {
      out += fmt::format("      {}\n", line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + c;
  }
  if (!line.empty()) out += fmt::format("      {}\n", line);
  return out;
}

} // namespace

// Each target kernel of a prebuilt-modules offer: used (`checked` says what install compares
// first), or built with DKMS and why.
std::string prebuilt_lines(const PrebuiltUse& p, std::string_view checked) {
  std::string out;
  for (const auto& [k, why] : p.kernels)
    out += why.empty() ? fmt::format("      {}: prebuilt modules from {}, {}checked, then dkms install "
                                     "(nothing compiled)\n",
                                     k, p.file, checked)
                       : fmt::format("      {}: dkms build (prebuilt modules not used: {})\n", k, why);
  return out;
}

// Who signs a step's modules, in words.
std::string signed_by_line(SignedBy by) {
  switch (by) {
  case SignedBy::hpcbake_key:
    return "      signed by: hpcbake's key (the plan's certificate); each module's signer checked against it\n";
  case SignedBy::dkms_mok:
    return "      signed by: DKMS's own MOK (its framework.conf: the distribution's, or /var/lib/dkms/mok.key)\n";
  case SignedBy::unsigned_modules:
    return "      signed by: nobody (unsigned: they load only with Secure Boot off)\n";
  }
  return {};
}

std::string packages_lines(const PackagesStep& p) {
  std::string out;
  for (const auto& f : p.files)
    out += fmt::format("      {} {}\n",
                       p.manager == manifest::PackageManager::apt    ? "dpkg -i"
                       : p.manager == manifest::PackageManager::tdnf ? "tdnf install"
                                                                     : "dnf install",
                       f);
  if (!p.packages.empty())
    out += fmt::format("      packages: {} ({})\n", util::join(p.packages, " "), manifest::to_string(p.manager));
  if (refreshes_index(p))
    out += p.repository.empty() && p.files.empty()
               ? "      package index refreshed first if a package is missing (once per run)\n"
               : "      package index refreshed first (once per run, again after a source change)\n";
  if (p.hold) out += fmt::format("      hold {}\n", util::join(p.packages, " "));
  if (p.dkms && (p.dkms->prebuilt || p.dkms->sign)) {
    if (p.dkms->discovered())
      out += "      DKMS autoinstall off while they install (/etc/dkms/no-autoinstall); then every DKMS module "
             "they added (/usr/src/NAME-VERSION/dkms.conf) built by hpcbake's DKMS call for each target kernel\n";
    else
      out += fmt::format("      DKMS autoinstall off while they install (/etc/dkms/no-autoinstall); then "
                         "{}/{} (modules {}){}\n",
                         p.dkms->dkms_name, p.dkms->version, util::join(p.dkms->modules, ", "),
                         p.dkms->prebuilt ? ":" : " built by hpcbake's DKMS call for each target kernel");
    if (p.dkms->prebuilt) out += prebuilt_lines(*p.dkms->prebuilt, "the package's sources compared once unpacked, ");
  }
  if (p.dkms) out += signed_by_line(*signed_by(*p.dkms));
  return out;
}

std::string unpack_lines(const UnpackStep& u) {
  return fmt::format("      extract {} into {}{} (all or nothing)\n", u.artifact, u.dest,
                     u.strip ? fmt::format(", dropping {} leading path component{}", u.strip, u.strip == 1 ? "" : "s")
                             : "");
}

std::string git_source_lines(const GitSourceStep& g) {
  if (g.bundle)
    return fmt::format("      copy    {} ({}, sha256 {}) from the bundle: {} at {}\n"
                       "      git clone it {}; checkout {} (HEAD must be that commit)\n",
                       g.bundle->path, util::human_bytes(g.bundle->size), g.bundle->sha256, util::redact_url(g.url),
                       g.commit, g.dest, g.commit);
  return fmt::format("      git clone {} {}; checkout {} (HEAD must be that commit)\n", util::redact_url(g.url), g.dest,
                     g.commit);
}

std::string build_lines(const BuildStep& b) {
  std::string out = fmt::format("      in {}{} (make and cmake: one job per CPU of the machine)\n", b.dir,
                                b.env.empty() ? "" : " with " + util::join(b.env, " "));
  for (const auto& argv : b.commands)
    out += fmt::format("      {}\n", exec::shell_quote(argv));
  return out + fmt::format("      then {} must exist\n", b.creates);
}

std::string artifact_lines(const ArtifactStep& a) {
  std::string out;
  for (const auto& u : a.urls)
    out += fmt::format("      url     {}\n", u);
  out += fmt::format("      sha256  {}\n", a.sha256 ? *a.sha256 : "UNKNOWN (refused at install without --sha256)");
  if (a.size) out += fmt::format("      size    {} bytes\n", *a.size);
  return out;
}

std::string container_runtime_lines(const ContainerRuntimeStep& c) {
  std::string out;
  for (const auto& [engine, config] : c.engines)
    out += fmt::format("      {}: runtime {} = {} (every other byte kept); try-restart {}.service\n", config, c.runtime,
                       c.binary, engine);
  if (c.kubernetes)
    out +=
        fmt::format("      kubernetes: containerd's default runtime {}, CDI enabled (enable_cdi = true)\n", c.runtime);
  if (c.rdma)
    out += fmt::format("      rdma: docker default-ulimits memlock unlimited; the HCAs' CDI spec {} ({}) rewritten by "
                       "verify --boot at every boot\n",
                       container::kRdmaCdiSpec, container::kRdmaCdiKind);
  return out;
}

namespace {

// The repository's trust mode in a sentence (plan text; JSON has `trust`).
std::string trust_text(const RepositoryStep& r) {
  if (r.manager == manifest::PackageManager::apt)
    return "metadata: the signed InRelease lists each index's and package's checksum";
  if (r.signed_packages)
    return r.signed_metadata ? "metadata+packages: repomd.xml.asc and each package's signature (repo_gpgcheck=1, "
                               "gpgcheck=1)"
                             : "packages: each package's signature (gpgcheck=1)";
  return fmt::format("metadata: repomd.xml.asc, and each package by the checksum the signed metadata lists "
                     "(repo_gpgcheck=1, gpgcheck=0; the vendor signs no package: {})",
                     r.trust_source);
}

// A repository step's lines: where from, the pinned key, its trust, what is written.
std::string repository_lines(const RepositoryStep& r) {
  std::string out;
  if (!r.mirror_dir.empty()) {
    std::uint64_t bytes = 0;
    for (const auto& f : r.mirror)
      bytes += f.size;
    out += fmt::format("      copy    {} files ({:.1f} MiB) from the bundle to {}/\n", r.mirror.size(),
                       static_cast<double>(bytes) / (1 << 20), r.mirror_dir);
  }
  out += fmt::format("      from    {}\n", util::redact_url(r.uri));
  for (const auto& u : r.key_urls)
    out += fmt::format("      key     {}\n", util::redact_url(u));
  out += fmt::format("      pinned  fingerprint {}\n", r.fingerprint);
  out += fmt::format("      trust   {}\n", trust_text(r));
  out += fmt::format("      write   {} and {}\n", r.key_path, r.source_path);
  return out;
}

} // namespace

std::string step_lines(const Step& s) {
  return std::visit(
      util::Overload{
          [](const ArtifactStep& a) { return artifact_lines(a); },
          [](const PackagesStep& p) { return packages_lines(p); },
          [](const RepositoryStep& r) { return repository_lines(r); },
          [](const HeadersStep& h) { return fmt::format("      {} (then check {})\n", h.package, h.check); },
          [](const ConfigStep& c) { return fmt::format("      write {}\n", c.path); },
          [](const ModulesLoadStep& m) {
            return fmt::format("      write {} ({})\n", m.path, util::join(m.modules, ", "));
          },
          [](const CommandStep& c) {
            if (c.initramfs.empty()) return fmt::format("      {}\n", exec::shell_quote(c.argv));
            return fmt::format("      {} (only if {} holds a {} module)\n", exec::shell_quote(c.argv), c.initramfs,
                               util::join(c.only_if_holds, " or "));
          },
          [](const KernelHoldStep& h) { return fmt::format("      hold {}\n", util::join(h.packages, " ")); },
          [](const SigningKeyStep& k) {
            return fmt::format("      key {}, certificate {}\n", k.signing.key.string(), k.signing.cert.string());
          },
          [](const RunInstallerStep& r) {
            std::string out;
            for (const auto& [k, argv] : r.commands)
              out += fmt::format("      {}\n", exec::shell_quote(argv));
            return out + signed_by_line(r.signed_by);
          },
          [](const DkmsBuildStep& d) {
            std::string out = fmt::format("      dkms add/build/install {}/{} (modules {}){}\n", d.dkms_name, d.version,
                                          util::join(d.modules, ", "), d.signing.enabled ? ", signed" : "");
            if (!d.source_dir.empty())
              out += fmt::format("      from {}{}\n", d.source_dir, d.subdir.empty() ? "" : "/" + d.subdir);
            for (const auto& line : d.directives)
              out += fmt::format("      dkms.conf: {}\n", line);
            if (d.prebuilt) out += prebuilt_lines(*d.prebuilt, "");
            return out + signed_by_line(signed_by(d));
          },
          [](const DkmsCheckStep& d) { return fmt::format("      modules {}\n", util::join(d.modules, ", ")); },
          [](const ServiceStep& sv) { return fmt::format("      {}\n", exec::shell_quote(sv.argv)); },
          [](const WaagentStep& w) {
            std::vector<std::string> set;
            for (const auto& [k, v] : w.settings)
              set.push_back(k + "=" + v);
            return fmt::format("      {}: {}; restart {} only if it runs and the file changed\n", w.config,
                               util::join(set, ", "), w.unit);
          },
          [](const ContainerRuntimeStep& c) { return container_runtime_lines(c); },
          [](const RebootStep&) { return std::string(); },
          [](const UnpackStep& u) { return unpack_lines(u); },
          [](const GitSourceStep& g) { return git_source_lines(g); },
          [](const BuildStep& b) { return build_lines(b); },
          [](const VerifyStep& v) {
            return checks_lines(shown(to_json(v.expect))) +
                   fmt::format("      thresholds from {}\n", v.thresholds_source) +
                   (v.defer_hardware ? "      hardware checks: deferred (run at the first boot on the size: "
                                       "hpcbake-verify-boot.service, enabled by seal)\n"
                                     : "");
          },
          [](const CanonicalDriverStep& c) {
            std::string out;
            for (const auto& k : c.kernels)
              out += fmt::format("      check   {} is in the archive index (else stop before installing)\n",
                                 c.modules_for(k));
            out +=
                fmt::format("      check   {} holds fingerprint {}\n", c.keyring, util::join(c.fingerprints, " or "));
            out += fmt::format("      install {} at the index's candidate versions, held, versions recorded\n",
                               util::join(c.packages, " "));
            if (!c.flavour_package.empty())
              out += fmt::format("      install {} at its candidate, not held: kernel updates bring their modules\n",
                                 c.flavour_package);
            out += fmt::format("      signed  by '{}' (serial {}): {}\n", c.module_signer,
                               util::join(c.signer_serials, " or "), c.signer);
            return out;
          },
      },
      s.action);
}

std::string download_summary(const Plan& plan, const std::function<bool(const std::string&)>& cached) {
  std::uint64_t bytes = 0, cached_bytes = 0;
  std::size_t unsized = 0, n_cached = 0;
  for (const auto& a : plan.artifacts) {
    const bool hit = a.artifact.sha256 && cached && cached(*a.artifact.sha256);
    n_cached += hit;
    if (!a.artifact.size) {
      ++unsized;
      continue;
    }
    bytes += static_cast<std::uint64_t>(*a.artifact.size);
    if (hit) cached_bytes += static_cast<std::uint64_t>(*a.artifact.size);
  }
  const std::size_t n = plan.artifacts.size();
  std::string out = fmt::format("  download: {} artifact{}", n, n == 1 ? "" : "s");
  if (n > unsized) out += ", " + util::human_bytes(bytes) + (unsized ? " known" : "");
  if (unsized) out += fmt::format(" ({} without a published size)", unsized);
  out += n_cached ? fmt::format("; {} already cached{}", n_cached,
                                cached_bytes ? " (" + util::human_bytes(cached_bytes) + ")" : "")
                  : std::string(n ? "; none cached" : "");
  std::vector<std::string> repos;
  for (const auto& s : plan.steps)
    if (const auto* p = std::get_if<PackagesStep>(&s.action); p && !p->repository.empty())
      if (std::find(repos.begin(), repos.end(), p->repository) == repos.end()) repos.push_back(p->repository);
  if (!repos.empty())
    out += fmt::format("; packages from {} are sized by the package manager", util::join(repos, ", "));
  return out + "\n";
}

std::string render_text(const Plan& plan) {
  std::string out = fmt::format("Plan for {} ({}) on {}, {}{}\n", plan.size, plan.family, plan.distro_name,
                                plan.arch.empty() ? "x86_64" : plan.arch,
                                plan.profile.empty() ? std::string() : ", profile " + plan.profile);
  out += fmt::format("  kernels: {}  [{}]\n",
                     plan.kernels.empty() ? std::string("(at install time)") : util::join(plan.kernels, ", "),
                     plan.kernels_source);
  if (plan.route != SigningRoute::none)
    out += fmt::format("  route: {} ({})\n", to_string(plan.route), plan.route_reason);
  if (plan.signing.enabled)
    out += fmt::format("  signing: {}: key {}, certificate {} (trusted through MOK or the image's UEFI db)\n",
                       to_string(plan.signing_route()), plan.signing.key.string(), plan.signing.cert.string());
  int n = 0;
  for (const auto& s : plan.steps)
    out += fmt::format("  {:>2}. {:<15} {}\n", ++n, s.kind(), s.title) + step_lines(s);
  for (const auto& o : plan.overrides)
    out += fmt::format("  override: {} = {} (from {}:{})\n", o.what, o.value, o.file, o.line);
  for (const auto& note : plan.notes)
    out += fmt::format("  note: {}\n", note);
  return out;
}

} // namespace hpcbake::plan
