#include "cli/driver_cmds.hpp"
#include "cli/report.hpp"
#include "cli/test_runner.hpp"
#include "util/paths.hpp"
#include "util/preflight.hpp"

#include "archive/extract.hpp"
#include "archive/makeself.hpp"
#include "detect/kernels.hpp"
#include "detect/os_release.hpp"
#include "detect/platform.hpp"
#include "driver/dkms.hpp"
#include "driver/headers.hpp"
#include "driver/module_build.hpp"
#include "driver/mok.hpp"
#include "driver/nouveau.hpp"
#include "driver/out_of_tree.hpp"
#include "driver/signing.hpp"
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "pkg/manager.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hpcbake::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* default_key_dir = paths::kKeyDir;

// What was checked of a makeself payload: the checksums its header carries, or none.
std::string makeself_note(const std::vector<std::string>& verified) {
  if (verified.empty()) return " (makeself payload; its header carries no checksums, so nothing was checked)";
  std::string names = verified.front();
  for (std::size_t i = 1; i < verified.size(); ++i)
    names += (i + 1 == verified.size() ? " and " : ", ") + verified[i];
  return fmt::format(" (makeself payload, {} verified)", names);
}

int cmd_extract(const DriverOptions& o, std::ostream& out, std::ostream& err) {
  archive::ExtractOptions xo;
  xo.limits = o.limits;
  xo.strip_components = o.strip_components;
  xo.allow_devices = o.allow_devices;
  xo.allow_setuid = o.allow_setuid;
  const bool run_file = driver::source_kind(o.archive) == driver::SourceKind::makeself;
  auto stats =
      run_file ? archive::extract_makeself(o.archive, o.dest, xo) : archive::extract_file(o.archive, o.dest, xo);
  if (!stats) return report(stats.error(), err);
  if (o.json)
    out << util::dump_json(nlohmann::json{{"archive", o.archive},
                                          {"dest", o.dest},
                                          {"entries", stats->entries},
                                          {"bytes", stats->bytes},
                                          {"makeself", run_file},
                                          {"checksums", stats->verified}},
                           2)
        << "\n";
  else
    out << fmt::format("{}: {} entries, {} bytes into {}{}\n", o.archive, stats->entries, stats->bytes, o.dest,
                       run_file ? makeself_note(stats->verified) : "");
  return 0;
}

// The kernels to build for: named ones, every installed one, or running + next boot.
Result<std::vector<std::string>> target_kernels(const DriverOptions& o, const util::HostFs& host) {
  if (!o.kernels.empty()) return o.kernels;
  const auto k = detect::detect_kernels(host);
  std::vector<std::string> out = o.all_kernels ? k.installed : k.targets();
  if (o.all_kernels && out.empty()) out = k.module_dirs;
  if (out.empty())
    return fail(ErrorKind::unsupported, "no target kernel found (no running kernel, nothing in /boot or /lib/modules)",
                "name the kernels with --kernel");
  return out;
}

// The distro manifest for --distro, or for this host's os-release.
Result<manifest::DistroManifest> host_distro(const std::string& id, const util::HostFs& host,
                                             const std::string& manifests_dir) {
  HPCBAKE_TRY_ASSIGN(auto m, manifest::load_manifests(manifest::manifest_dir_or_default(manifests_dir)));
  const manifest::DistroManifest* distro = nullptr;
  if (!id.empty())
    distro = m.find_distro_named(id);
  else if (auto os = detect::read_os_release(host))
    distro = m.match_distro(os->id(), os->version_id());
  if (!distro)
    return fail(ErrorKind::unsupported, id.empty() ? "this host's distro has no manifest" : "no distro manifest " + id,
                "pass --distro ID (hpcbake manifest lint lists them)");
  return *distro;
}

// With Secure Boot on, whether the kernel will load what was just signed: the certificate must be
// an enrolled MOK. Said, never fixed here: enrolling needs a password typed on the console.
void report_enrollment(const util::HostFs& host, const fs::path& cert_der, std::ostream& out, std::ostream& err) {
  driver::MokState moks;
  auto e = driver::enrollment_of_file(host, cert_der, &moks);
  if (!e) {
    err << "module: warning: " << e.error().message << "\n";
    return;
  }
  out << "Secure Boot is on; the certificate is " << driver::to_string(*e)
      << (*e == driver::Enrollment::enrolled ? ": the kernel will load these modules\n" : "\n");
  if (!moks.error.empty()) err << "module: warning: " << moks.error << "\n";
  if (*e != driver::Enrollment::enrolled)
    err << "module: warning: the kernel will refuse these modules until their certificate is trusted: "
        << driver::enrollment_advice(cert_der.string()) << "\n";
}

nlohmann::json module_json(const DriverOptions& o, const std::vector<driver::KernelBuild>& builds,
                           const driver::SigningKey* signing) {
  nlohmann::json kernels_json = nlohmann::json::array();
  for (const auto& b : builds) {
    nlohmann::json mods = nlohmann::json::array();
    for (const auto& m : b.modules)
      mods.push_back(m.string());
    kernels_json.push_back({{"kernel", b.kernel},
                            {"ok", b.ok()},
                            {"outcome", driver::to_string(b.outcome)},
                            {"message", b.message},
                            {"modules", mods}});
  }
  nlohmann::json j = {{"name", o.name}, {"version", o.version}, {"kernels", kernels_json}};
  if (signing) j["signing"] = {{"subject", signing->subject}, {"certificate", signing->cert_der.string()}};
  return j;
}

int cmd_module_install(const DriverOptions& o, const std::string& root, const std::string& manifests_dir,
                       std::ostream& out, std::ostream& err) {
  const util::HostFs host(root);
  {
    // The recipe's dkms.conf template, the distro manifest (header package names) and the key
    // directory decide what runs as root and what signs modules (docs/security.md).
    std::vector<util::TrustedPath> paths = {manifest::drivers_trust(manifests_dir)};
    if (o.install_headers) paths.push_back(manifest::manifest_trust(manifests_dir));
    if (o.sign != "off" && o.sign_key.empty())
      paths.push_back(
          {o.key_dir.empty() ? host.resolve(default_key_dir) : fs::path(o.key_dir), "signing key directory", 1, {}});
    if (auto s = util::preflight("module install", host, paths); !s) return report(s.error(), err);
  }
  auto kernels = target_kernels(o, host);
  if (!kernels) return report(kernels.error(), err);
  auto runner = make_runner(host);
  if (o.install_headers) {
    auto distro = host_distro(o.distro, host, manifests_dir);
    if (!distro) return report(distro.error(), err);
    pkg::PkgOptions po;
    po.on_status = [&](const std::string& s) { err << "module: " << s << "\n"; };
    auto pm = pkg::make_package_manager(pkg::family_of(distro->package_manager), *runner, host, po);
    auto installed = driver::ensure_headers(host, *distro, *kernels, *pm);
    if (!installed) return report(installed.error(), err);
    for (const auto& p : *installed)
      err << "module: installed " << p << "\n";
  }

  // Signing is decided before anything is built: with Secure Boot on, an unsigned module
  // would build fine and then be refused by the kernel at boot.
  const auto sb = detect::detect_secure_boot(host);
  const bool secure_boot = sb.state == detect::SecureBoot::enabled;
  auto mode = driver::parse_sign_mode(o.sign);
  if (!mode) return report(mode.error(), err);
  auto signing = driver::decide_signing(
      {*mode, o.sign_key, o.sign_cert, o.key_dir.empty() ? host.resolve(default_key_dir) : fs::path(o.key_dir)},
      sb.state, sb.source);
  if (!signing) return report(signing.error(), err);
  driver::DkmsOptions dopt;
  dopt.trees = {o.dkmstree, o.sourcetree, o.installtree};
  if (!host.is_real_root()) { // DKMS's trees inside a fixture machine (--root), as install puts them
    if (dopt.trees.dkms_tree.empty()) dopt.trees.dkms_tree = host.resolve("/var/lib/dkms");
    if (dopt.trees.source_tree.empty()) dopt.trees.source_tree = host.resolve("/usr/src");
    if (dopt.trees.install_tree.empty()) dopt.trees.install_tree = host.resolve("/lib/modules");
  }
  dopt.depmod = !o.no_depmod && host.is_real_root(); // dkms's depmod acts on this machine's /lib/modules
  dopt.kernel_modules_dir = host.resolve("/lib/modules");
  // A DKMS tree of its own (a test, a staging area) keeps its failure logs beside it (not in it:
  // `dkms status` reads every directory there as a module).
  dopt.log_dir = o.dkmstree.empty() ? host.resolve(paths::kDkmsLogDir) : fs::path(o.dkmstree + ".hpcbake-logs");
  if (signing->enabled) {
    auto key = driver::signing_key(*signing);
    if (!key) return report(key.error(), err);
    for (const auto& k : *kernels) {
      auto sf = driver::find_sign_file(host, k);
      if (!sf)
        return report(Error{ErrorKind::unsupported,
                            fmt::format("signing is needed{} but kernel {} has no sign-file",
                                        secure_boot ? " (Secure Boot is on)" : "", k),
                            fmt::format("install the headers of {} (they ship scripts/sign-file)", k)},
                      err);
      dopt.sign_file = *sf; // sign-file is the same program for every kernel of a release
    }
    dopt.signing = *key;
  }

  driver::Dkms dkms(*runner, dopt);
  driver::BuildRequest req;
  req.source = o.source;
  req.subdir = o.subdir;
  req.spec = {o.name, o.version, o.modules, o.directives};
  req.kernels = *kernels;
  req.work_dir = dkms.dkms_tree() / ".hpcbake-work";
  const fs::path tmpl_file =
      manifest::recipes_dir(manifest::manifest_dir_or_default(manifests_dir)) / "dkms" / "dkms.conf.in";
  const std::string tmpl = util::read_file(tmpl_file).value_or("");
  if (tmpl.empty())
    return report(Error{ErrorKind::internal, fmt::format("{}: dkms.conf template missing", tmpl_file.string()),
                        "pass --manifests naming hpcbake's manifests/, with drivers/ beside it"},
                  err);
  err << fmt::format("module: building {} {} for {}\n", o.name, o.version, util::join(*kernels, ", "));
  auto builds = driver::build_module(req, dkms, tmpl);
  if (!builds) return report(builds.error(), err);
  if (auto s = driver::overall(req.spec, *builds); !s) return report(s.error(), err); // it lists every kernel
  if (o.json) {
    out << util::dump_json(module_json(o, *builds, dopt.signing ? &*dopt.signing : nullptr), 2) << "\n";
    return 0;
  }
  out << driver::summarize(*builds);
  if (dopt.signing) {
    out << fmt::format("signed by '{}'; certificate to trust: {}\n", dopt.signing->subject,
                       dopt.signing->cert_der.string());
    if (secure_boot) report_enrollment(host, dopt.signing->cert_der, out, err);
  }
  return 0;
}

// module trust: what the kernel checks a module's signature against, read under the root.
struct TrustKeys {
  std::optional<driver::KernelKey> kernel_key;
  driver::MokState moks;
  bool platform = false, ca_only = false;
  std::optional<driver::PackagedModulesKey> packaged; // the distro's key for its precompiled modules
  std::string platform_note;                          // why the platform keyring is not counted, when it is not known
};

TrustKeys trust_keys(const DriverOptions& o, const util::HostFs& host, const std::string& manifests_dir,
                     const std::string& kernel) {
  TrustKeys k;
  k.kernel_key = driver::kernel_signing_key(host, kernel);
  k.moks = driver::read_mok_state(host);
  k.ca_only = driver::ca_only_machine_keyring(host, kernel);
  if (auto d = host_distro(o.distro, host, manifests_dir)) {
    k.platform = d->module_keyrings.platform;
    if (const auto& cs = d->canonical_signed_nvidia; cs && !cs->module_signer.empty())
      k.packaged = driver::packaged_modules_key(cs->module_signer, cs->module_signer_serials, cs->modules_package,
                                                kernel, "distros/" + d->id + ".yaml");
  } else
    k.platform_note = d.error().message + ": the UEFI db (platform keyring) is not counted; pass --distro ID";
  return k;
}

nlohmann::json trust_json(const driver::ModuleTreeScan& scan, const std::string& owners, const TrustKeys& keys,
                          const std::vector<driver::ModuleTrust>& verdicts, const detect::SecureBootFacts& sb,
                          bool kernel_is_next_boot) {
  nlohmann::json mods = nlohmann::json::array();
  for (std::size_t i = 0; i < scan.modules.size(); ++i) {
    const auto& m = scan.modules[i];
    const auto& t = verdicts[i];
    auto opt = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
    mods.push_back({{"path", m.path},
                    {"name", m.error.empty() ? m.info.name : fs::path(m.path).filename().string()},
                    {"signer", opt(m.info.signer)},
                    {"serial", opt(m.info.sig_key.empty() ? "" : driver::serial_key(m.info.sig_key))},
                    {"package", opt(m.package)},
                    {"loads_with_secure_boot", t.loads},
                    {"trust", t.how},
                    {"fix", opt(t.fix)},
                    {"error", opt(m.error)}});
  }
  return {{"kernel", scan.kernel},
          {"next_boot", kernel_is_next_boot},
          {"secure_boot", detect::to_string(sb.state)},
          {"kernel_key", keys.kernel_key ? nlohmann::json{{"signer", keys.kernel_key->signer},
                                                          {"serial", keys.kernel_key->serial},
                                                          {"source", keys.kernel_key->source}}
                                         : nlohmann::json(nullptr)},
          {"mok_list", keys.moks.found ? nlohmann::json(keys.moks.source) : nlohmann::json(nullptr)},
          {"platform_keyring", keys.platform},
          {"package_owners", owners.empty() ? nlohmann::json(nullptr) : nlohmann::json(owners)},
          {"entries", scan.entries},
          {"module_files", scan.module_files},
          {"truncated", scan.truncated},
          {"error", scan.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(scan.error)},
          {"modules", std::move(mods)}};
}

void trust_text(const driver::ModuleTreeScan& scan, const std::vector<driver::ModuleTrust>& verdicts,
                const detect::SecureBootFacts& sb, bool next_boot, std::size_t refused, std::ostream& out) {
  out << fmt::format("kernel {}{}: {} out-of-tree module{} of {} module files; Secure Boot is {} ({})\n", scan.kernel,
                     next_boot ? " (next boot)" : "", scan.modules.size(), scan.modules.size() == 1 ? "" : "s",
                     scan.module_files, detect::to_string(sb.state), sb.source);
  for (std::size_t i = 0; i < scan.modules.size(); ++i) {
    const auto& m = scan.modules[i];
    const auto& t = verdicts[i];
    out << fmt::format("  {} {}{}\n      {}\n", t.loads ? "loads  " : "REFUSED", m.path,
                       m.package.empty() ? "" : " (package " + m.package + ")", t.how);
    if (!t.fix.empty()) out << "      fix: " << t.fix << "\n";
  }
  out << fmt::format("{} of {} would be refused with Secure Boot on\n", refused, scan.modules.size());
}

int cmd_module_trust(const DriverOptions& o, const std::string& root, const std::string& manifests_dir,
                     std::ostream& out, std::ostream& err) {
  const util::HostFs host(root);
  const auto kernels = detect::detect_kernels(host);
  const std::string kernel = o.trust_kernel.empty() ? kernels.next_boot : o.trust_kernel;
  if (kernel.empty())
    return report(Error{ErrorKind::unsupported, "the next-boot kernel is unknown (nothing in /boot or /lib/modules)",
                        "name the kernel with --kernel"},
                  err);
  auto scan = driver::out_of_tree_modules(host, kernel);
  if (!scan.found)
    return report(Error{ErrorKind::unsupported, fmt::format("/lib/modules/{} does not exist", kernel),
                        "name an installed kernel with --kernel (ls /lib/modules)"},
                  err);
  const std::string owners = driver::owning_packages(host, scan.modules);
  const TrustKeys keys = trust_keys(o, host, manifests_dir, kernel);
  if (!keys.platform_note.empty()) err << "module: warning: " << keys.platform_note << "\n";
  if (!keys.moks.error.empty()) err << "module: warning: " << keys.moks.error << "\n";
  std::vector<driver::ModuleTrust> verdicts;
  std::size_t refused = 0;
  for (const auto& m : scan.modules) {
    verdicts.push_back(m.error.empty()
                           ? driver::module_trust(m.info, keys.kernel_key, keys.moks, keys.platform, keys.ca_only,
                                                  keys.packaged ? &*keys.packaged : nullptr, m.package)
                           : driver::ModuleTrust{false, "not readable as a module: " + m.error, {}});
    if (!verdicts.back().loads) ++refused;
  }
  const auto sb = detect::detect_secure_boot(host);
  const bool next_boot = kernel == kernels.next_boot;
  if (o.json)
    out << util::dump_json(trust_json(scan, owners, keys, verdicts, sb, next_boot), 2) << "\n";
  else
    trust_text(scan, verdicts, sb, next_boot, refused, out);
  if (scan.truncated)
    err << fmt::format("module: /lib/modules/{} holds more than {} entries: the rest was not read\n", kernel,
                       driver::kMaxModuleTreeEntries);
  if (!scan.error.empty()) err << "module: " << scan.error << "\n";
  // 6, as for a failed verify check: some module would not load (or was not read) with Secure Boot on.
  return refused > 0 || scan.truncated || !scan.error.empty() ? static_cast<int>(ExitCode::smoke_test) : 0;
}

nlohmann::json unread_json(const std::vector<std::pair<std::string, std::string>>& unread) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [k, why] : unread)
    j.push_back({{"kernel", k}, {"reason", why}});
  return j;
}

int cmd_nouveau_disable(const DriverOptions& o, const std::string& root, const std::string& manifests_dir,
                        std::ostream& out, std::ostream& err) {
  const util::HostFs host(root);
  // The distro manifest names the blacklist file and the initramfs command run as root.
  if (auto s = util::preflight("nouveau disable", host, {manifest::manifest_trust(manifests_dir)}); !s)
    return report(s.error(), err);
  auto d = host_distro(o.distro, host, manifests_dir);
  if (!d) return report(d.error(), err);
  const manifest::DistroManifest* distro = &*d;
  auto kernels = target_kernels(DriverOptions{o}, host);
  if (!kernels) return report(kernels.error(), err);
  auto runner = make_runner(host);
  auto r = driver::disable_nouveau(host, *distro, *kernels, *runner, o.force_initramfs);
  if (!r) return report(r.error(), err);
  if (o.json)
    out << util::dump_json(nlohmann::json{{"blacklist", host.resolve(distro->nouveau_blacklist_file).string()},
                                          {"changed", r->changed},
                                          {"initramfs_rebuilt", r->initramfs_rebuilt},
                                          {"initramfs_skipped", r->initramfs_skipped},
                                          {"initramfs_current", r->initramfs_current},
                                          {"initramfs_unread", unread_json(r->initramfs_unread)},
                                          {"reboot_required", r->reboot_required}},
                           2)
        << "\n";
  else {
    out << fmt::format("nouveau: {} {}\n", host.resolve(distro->nouveau_blacklist_file).string(),
                       r->changed ? "written" : "already in place");
    for (const auto& [k, why] : r->initramfs_unread)
      err << fmt::format("nouveau: initramfs of {} not read ({}): rebuilt as if it held nouveau\n", k, why);
    for (const auto& k : r->initramfs_rebuilt)
      out << fmt::format("nouveau: initramfs of {} rebuilt\n", k);
    for (const auto& k : r->initramfs_skipped)
      out << fmt::format("nouveau: initramfs of {} holds no nouveau: not rebuilt (--force-initramfs rebuilds it)\n", k);
    for (const auto& k : r->initramfs_current)
      out << fmt::format("nouveau: initramfs of {} already carries the blacklist: not rebuilt (--force-initramfs "
                         "rebuilds it)\n",
                         k);
  }
  if (r->reboot_required) {
    err << "hpcbake: nouveau is loaded now: reboot, then run again\n";
    return static_cast<int>(ExitCode::reboot_required);
  }
  return 0;
}

} // namespace

DriverCommands add_driver_commands(CLI::App& app, DriverOptions& o) {
  DriverCommands c;
  c.extract = app.add_subcommand(
      "extract", "extract a tarball, zip or makeself .run safely (no escapes, no devices, no setuid, bomb limits)");
  c.extract->add_option("ARCHIVE", o.archive, "tar, tar.gz/xz/zst/bz2, zip, or a makeself .run")->required();
  c.extract->add_option("DEST", o.dest, "directory to create (must not exist, or be empty)")->required();
  // The limits' defaults come from archive::Limits, so --help cannot drift from them.
  const archive::Limits defaults;
  c.extract->add_option("--max-bytes", o.limits.max_total_bytes,
                        fmt::format("refuse archives whose files hold more than N bytes in all (default {}, {})",
                                    defaults.max_total_bytes, util::human_bytes(defaults.max_total_bytes)));
  c.extract->add_option("--max-entry-bytes", o.limits.max_entry_bytes,
                        fmt::format("refuse a file of more than N bytes (default {}, {})", defaults.max_entry_bytes,
                                    util::human_bytes(defaults.max_entry_bytes)));
  c.extract->add_option("--max-entries", o.limits.max_entries,
                        fmt::format("refuse archives with more than N entries (default {})", defaults.max_entries));
  c.extract->add_option("--max-ratio", o.limits.max_ratio,
                        fmt::format("refuse archives whose files hold more than N times the archive bytes read, once "
                                    "past {} (default {}; 0: no ratio check)",
                                    util::human_bytes(defaults.ratio_floor_bytes), defaults.max_ratio));
  c.extract->add_option("--strip-components", o.strip_components, "drop N leading path components");
  c.extract->add_flag("--allow-devices", o.allow_devices, "create device nodes and FIFOs");
  c.extract->add_flag("--allow-setuid", o.allow_setuid, "keep setuid/setgid bits");

  auto* module = app.add_subcommand("module", "kernel modules: build them through DKMS, check who signed them");
  module->require_subcommand(1);
  c.module_install = module->add_subcommand(
      "install",
      "register module sources with DKMS, build, sign and install them for every target kernel, and check each module");
  auto* mi = c.module_install;
  mi->add_option("SOURCE", o.source, "module sources: a directory, a tarball or a makeself .run")->required();
  mi->add_option("--name", o.name, "DKMS package name")->option_text("NAME")->required();
  mi->add_option("--version", o.version, "DKMS package version")->required();
  mi->add_option("--module", o.modules,
                 "a module the sources build (repeat); not needed when SOURCE ships a dkms.conf");
  mi->add_option("--subdir", o.subdir, "the directory inside SOURCE that holds the module sources")->option_text("DIR");
  mi->add_option("--kernel", o.kernels, "target kernel (repeat; default: the running and the next-boot kernel)")
      ->option_text("VERSION");
  mi->add_flag("--all-kernels", o.all_kernels, "every installed kernel");
  mi->add_option("--directive", o.directives,
                 "an extra dkms.conf line, e.g. BUILD_EXCLUSIVE_KERNEL=\"^6\\.\" (repeat)");
  mi->add_option("--dkmstree", o.dkmstree, "DKMS tree (default /var/lib/dkms)")->option_text("DIR");
  mi->add_option("--sourcetree", o.sourcetree, "where sources are registered (default /usr/src)")->option_text("DIR");
  mi->add_option("--installtree", o.installtree, "where modules are installed (default /lib/modules)")
      ->option_text("DIR");
  mi->add_flag("--no-depmod", o.no_depmod, "do not run depmod (for trees outside /lib/modules)");
  mi->add_flag("--install-headers", o.install_headers,
               "install the headers package of each target kernel that lacks them");
  mi->add_option("--distro", o.distro, "distro manifest id, for --install-headers (default: this host's)")
      ->option_text("ID-VERSION");
  mi->add_option("--sign", o.sign, "auto (when Secure Boot is on or a key is given), on, off")
      ->option_text("auto|on|off");
  mi->add_option("--sign-key", o.sign_key, "PEM private key to sign with")->option_text("FILE");
  mi->add_option("--sign-cert", o.sign_cert, "its certificate (DER or PEM)")->option_text("FILE");
  mi->add_option("--key-dir", o.key_dir, "where a generated key lives (default /var/lib/hpcbake/signing under --root)")
      ->option_text("DIR");

  c.module_trust = module->add_subcommand(
      "trust", "list a kernel's out-of-tree modules, each one's signer, and whether the kernel would load it with "
               "Secure Boot on (read-only; exit 6 when one would be refused)");
  c.module_trust->add_option("--kernel", o.trust_kernel, "the kernel release (default: the next-boot kernel)")
      ->option_text("VERSION");
  c.module_trust
      ->add_option("--distro", o.distro,
                   "distro manifest id, for whether the kernel trusts the UEFI db (default: this host's)")
      ->option_text("ID-VERSION");

  auto* nouveau = app.add_subcommand("nouveau", "the in-kernel nouveau driver");
  nouveau->require_subcommand(1);
  c.nouveau_disable =
      nouveau->add_subcommand("disable", "blacklist nouveau and rebuild the initramfs of the target kernels");
  c.nouveau_disable->add_option("--distro", o.distro, "distro manifest id (default: this host's)")
      ->option_text("ID-VERSION");
  c.nouveau_disable->add_option("--kernel", o.kernels, "target kernel (repeat; default: running and next-boot)")
      ->option_text("VERSION");
  c.nouveau_disable->add_flag("--force-initramfs", o.force_initramfs,
                              "rebuild the initramfs even when the blacklist was in place");
  return c;
}

std::optional<int> run_driver_command(const DriverCommands& c, const DriverOptions& o, const std::string& root,
                                      const std::string& manifests, std::ostream& out, std::ostream& err) {
  if (c.extract->parsed()) return cmd_extract(o, out, err);
  if (c.module_install->parsed()) return cmd_module_install(o, root, manifests, out, err);
  if (c.module_trust->parsed()) return cmd_module_trust(o, root, manifests, out, err);
  if (c.nouveau_disable->parsed()) return cmd_nouveau_disable(o, root, manifests, out, err);
  return std::nullopt;
}

} // namespace hpcbake::cli
