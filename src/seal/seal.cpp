#include "seal/seal.hpp"

#include "driver/modinfo.hpp"
#include "driver/mok.hpp"
#include "driver/out_of_tree.hpp"
#include "fetch/cache.hpp"
#include "seal/sbom.hpp"
#include "util/atomic_file.hpp"
#include "util/clock.hpp"
#include "util/json.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <system_error>

namespace hpcbake::seal {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kMaxSecretRefusals = 50;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// "nvidia-fabricmanager=580.126.16-1", "nvidia-fabricmanager-580.126.20-1.x86_64.rpm",
// "nvidia-fabricmanager_580.126.16-1_amd64.deb", and for dnf "nvidia-fabricmanager-580.126.20-1"
// -> "nvidia-fabricmanager".
std::string package_name(std::string spec, const std::string& version, bool dnf) {
  if (const auto eq = spec.find('='); eq != std::string::npos) return spec.substr(0, eq);
  const bool file = spec.ends_with(".rpm") || spec.ends_with(".deb");
  if (dnf && !file && !version.empty()) // dnf's NAME-VERSION[-RELEASE] spec
    if (const auto at = spec.rfind("-" + version); at != std::string::npos && at > 0) {
      const auto rest = std::string_view(spec).substr(at + 1 + version.size());
      if (rest.empty() || rest.starts_with('-')) return spec.substr(0, at);
    }
  if (!file) return spec; // an apt name may end in its version (nvidia-driver-pinning-580.126.16)
  if (!version.empty())
    if (const auto at = spec.find("-" + version); at != std::string::npos && at > 0) return spec.substr(0, at);
  if (file)
    if (const auto us = spec.find('_'); us != std::string::npos) return spec.substr(0, us);
  return spec;
}

// --- package databases, read under the root -------------------------------------------

struct DpkgEntry {
  std::string status, version;
};

std::map<std::string, DpkgEntry> read_dpkg_status(const util::HostFs& fs) {
  std::map<std::string, DpkgEntry> out;
  const auto text = fs.read("/var/lib/dpkg/status", util::host_file::dpkg_status);
  if (!text) return out;
  std::string name;
  DpkgEntry e;
  auto flush = [&] {
    if (name.empty()) return;
    // Multi-arch packages have a stanza per architecture: an installed one wins.
    auto& slot = out[name];
    if (slot.status.empty() || e.status.ends_with(" installed")) slot = e;
    name.clear();
    e = {};
  };
  for (const auto& raw : util::split(*text, '\n')) {
    std::string_view line = raw;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      flush();
      continue;
    }
    auto field = [&](std::string_view key) -> std::optional<std::string> {
      if (!line.starts_with(key)) return std::nullopt;
      return std::string(util::trim(line.substr(key.size())));
    };
    if (auto v = field("Package:"))
      name = *v;
    else if (auto s = field("Status:"))
      e.status = *s;
    else if (auto ver = field("Version:"))
      e.version = *ver;
  }
  flush();
  return out;
}

// dnf's versionlock plugin: one "name-[epoch:]version-release.arch" pattern per line;
// '#' comments, '!' excludes (not locks).
// Azure Linux's tdnf: a name a line in /etc/tdnf/locks.d/*.conf.
bool tdnf_locked(const util::HostFs& fs, const std::string& name) {
  for (const auto& file : fs.list("/etc/tdnf/locks.d")) {
    if (!file.ends_with(".conf")) continue;
    const auto text = fs.read("/etc/tdnf/locks.d/" + file, util::host_file::config);
    if (!text) continue;
    for (const auto& raw : util::split(*text, '\n'))
      if (util::trim(raw) == name) return true;
  }
  return false;
}

bool dnf_locked(const util::HostFs& fs, const std::string& name) {
  for (const char* path : {"/etc/dnf/plugins/versionlock.list", "/etc/yum/pluginconf.d/versionlock.list"}) {
    const auto text = fs.read(path, util::host_file::config);
    if (!text) continue;
    for (const auto& raw : util::split(*text, '\n')) {
      const std::string_view line = util::trim(raw);
      if (line.empty() || line.front() == '#' || line.front() == '!') continue;
      if (line.size() > name.size() + 1 && line.starts_with(name) && line[name.size()] == '-' &&
          std::isdigit(static_cast<unsigned char>(line[name.size() + 1])))
        return true;
    }
  }
  return false;
}

std::optional<std::string> rpm_version(exec::Runner& runner, const util::HostFs& fs, const std::string& name) {
  exec::Command cmd;
  cmd.argv = {"rpm"};
  if (!fs.is_real_root()) {
    cmd.argv.push_back("--root");
    cmd.argv.push_back(fs.root().string());
  }
  for (const char* a : {"-q", "--qf", "%{VERSION}-%{RELEASE}\\n"})
    cmd.argv.emplace_back(a);
  cmd.argv.push_back(name);
  cmd.timeout = std::chrono::seconds(60);
  auto r = runner.run(cmd);
  if (!r || !r->ok()) return std::nullopt;
  const auto lines = util::split(r->output, '\n');
  if (lines.empty() || util::trim(lines.front()).empty()) return std::nullopt;
  return std::string(util::trim(lines.front()));
}

// A path on the machine being sealed as seal reads it (under the root), from a path as install
// was given it (absolute on this machine: a --root tree's own paths are under the root).
std::optional<std::string> host_path_of(const util::HostFs& fs, const fs::path& real) {
  if (real.empty()) return std::nullopt;
  if (fs.is_real_root()) return real.string();
  const auto rel = fs::absolute(real).lexically_normal().lexically_relative(fs::absolute(fs.root()).lexically_normal());
  if (rel.empty() || *rel.begin() == "..") return std::nullopt; // outside the tree: not the image's
  return "/" + rel.string();
}

// --- the checks ------------------------------------------------------------------------

// The plan the install ran, as it stored it: what the modules, packages and the signing key are
// checked against. It must be the journal's.
void check_plan(const SealRequest& rq, SealReport& rep) {
  rep.key_dir = kSigningDir;
  if (rep.journal.steps.empty() && rep.journal.size.empty()) return; // journal.missing says it
  auto stored = install::load_plan_file(rq.fs->resolve(paths::kPlanFile));
  if (!stored) {
    rep.refusals.push_back({"plan.unreadable", stored.error().message, stored.error().hint});
    return;
  }
  if (!*stored) {
    rep.refusals.push_back(
        {"plan.missing",
         fmt::format("no stored plan at {}: the journal says an install ran, but not the plan it ran",
                     paths::kPlanFile),
         "run 'hpcbake install --yes' again (it stores its plan; done steps are not redone), then verify and seal"});
    return;
  }
  if ((*stored)->sha256 != rep.journal.plan_sha256) {
    rep.refusals.push_back(
        {"plan.mismatch",
         fmt::format("{} is plan {}, and the journal records plan {}: they are not the same install", paths::kPlanFile,
                     (*stored)->sha256,
                     rep.journal.plan_sha256.empty() ? std::string("(none)") : rep.journal.plan_sha256),
         "run 'hpcbake install --yes' again, then verify and seal"});
    return;
  }
  rep.stored = std::move(**stored);
  if (const auto dir = host_path_of(*rq.fs, rep.stored->options.key_dir)) rep.key_dir = *dir;
  rep.plan = rep.stored->plan;
}

void check_journal(const SealRequest& rq, SealReport& rep) {
  const auto path = rq.fs->resolve(install::kJournalPath);
  auto j = install::load_journal(path);
  if (!j) {
    rep.refusals.push_back({"journal.unreadable", j.error().message, j.error().hint});
    return;
  }
  rep.journal = std::move(*j);
  const auto& jr = rep.journal;
  if (jr.steps.empty() && jr.size.empty()) {
    rep.refusals.push_back(
        {"journal.missing",
         fmt::format("no install journal at {}: hpcbake install has not run on this machine", install::kJournalPath),
         "run 'hpcbake install --yes' (and again after the reboot it asks for), then verify and seal"});
    return;
  }
  std::vector<std::string> not_done;
  for (const auto& [id, r] : jr.steps)
    if (r.status != install::StepStatus::done && r.status != install::StepStatus::reboot_pending)
      not_done.push_back(fmt::format("{} ({})", id, install::to_string(r.status)));
  if (jr.state == install::RunState::complete && not_done.empty()) return;
  if (jr.state == install::RunState::reboot_required && not_done.empty()) return; // reported under reboot.*
  std::string hint = jr.state == install::RunState::failed
                         ? "read the failed steps' output (the journal keeps its tail), fix the cause and run "
                           "'hpcbake install' again: done steps are skipped"
                         : "run 'hpcbake install' again: it resumes where the last run stopped";
  rep.refusals.push_back({"journal.incomplete",
                          fmt::format("the install journal {} is '{}', not 'complete'{}", install::kJournalPath,
                                      install::to_string(jr.state),
                                      not_done.empty() ? "" : "; steps not done: " + util::join(not_done, ", ")),
                          std::move(hint)});
}

void check_reboot(const SealRequest& rq, SealReport& rep) {
  const auto& jr = rep.journal;
  bool listed = false;
  for (const auto& [id, r] : jr.steps) {
    if (r.status != install::StepStatus::reboot_pending) continue;
    listed = true;
    if (!r.boot_id.empty() && r.boot_id != rep.boot_id)
      rep.refusals.push_back({"reboot.not-resumed",
                              fmt::format("step {} asked for a reboot; the machine has rebooted since, but install has "
                                          "not resumed",
                                          id),
                              "run 'hpcbake install' again (it resumes after the reboot), then verify and seal"});
    else
      rep.refusals.push_back(
          {"reboot.pending",
           fmt::format("step {} asked for a reboot in this boot{}", id, r.message.empty() ? "" : ": " + r.message),
           "reboot the machine, run 'hpcbake install' again to resume, then verify and seal"});
  }
  if (!listed && jr.state == install::RunState::reboot_required)
    rep.refusals.push_back({"reboot.pending", "the install journal says a reboot is required",
                            "reboot the machine, run 'hpcbake install' again to resume, then verify and seal"});
  for (const char* flag : {"/run/reboot-required", "/var/run/reboot-required"}) {
    if (!rq.fs->exists(flag)) continue;
    std::string pkgs;
    if (auto t = rq.fs->read(std::string(flag) + ".pkgs", util::host_file::config)) {
      std::vector<std::string> names;
      for (auto line : util::split(util::trim(*t), '\n'))
        if (!util::trim(line).empty()) names.emplace_back(util::trim(line));
      // A list read from the host, quoted as an excerpt: one short line whatever the file holds.
      if (!names.empty()) pkgs = " (for " + util::excerpt(util::join(names, ", "), 200) + ")";
    }
    rep.refusals.push_back({"reboot.pending",
                            fmt::format("the distribution asks for a reboot: {} exists{}", flag, pkgs),
                            "reboot, run 'hpcbake install' and 'hpcbake verify' again (modules must exist for the "
                            "kernel that boots), then seal"});
    break; // /var/run is /run: report it once
  }
}

void check_verify(const SealRequest& rq, SealReport& rep) {
  auto rec = verify::read_record(*rq.fs);
  if (!rec) {
    rep.refusals.push_back({"verify.unreadable", rec.error().message, rec.error().hint});
    return;
  }
  const char* const again =
      "run 'hpcbake verify' in this boot (the Packer templates run 'verify --junit FILE'), then seal";
  if (!*rec) {
    rep.refusals.push_back({"verify.missing",
                            fmt::format("hpcbake verify has not run on this machine (no {})", verify::kRecordPath),
                            again});
    return;
  }
  rep.verify = **rec;
  const auto& v = *rep.verify;
  if (rep.boot_id.empty())
    rep.refusals.push_back({"verify.boot-unknown",
                            fmt::format("this boot's id is unknown ({} is unreadable), so verify cannot be tied to it",
                                        verify::kBootIdPath),
                            "run seal on the machine itself, with /proc mounted"});
  else if (v.boot_id != rep.boot_id)
    rep.refusals.push_back(
        {"verify.other-boot",
         fmt::format(
             "the last verify ran in another boot (boot id {}, this boot is {}): the machine has rebooted since",
             v.boot_id.empty() ? "unknown" : v.boot_id, rep.boot_id),
         again});
  if (!v.passed) {
    std::vector<std::string> ids(v.failed_checks.begin(),
                                 v.failed_checks.begin() +
                                     static_cast<long>(std::min<std::size_t>(v.failed_checks.size(), 8)));
    rep.refusals.push_back(
        {"verify.failed",
         fmt::format("the last verify failed {} of {} checks{}", v.fail, v.pass + v.fail + v.skip,
                     ids.empty() ? ""
                                 : ": " + util::join(ids, ", ") + (v.failed_checks.size() > ids.size() ? ", ..." : "")),
         "fix what 'hpcbake verify' reports and run it again in this boot"});
  }
  if (v.hardware_deferred && !rq.verify_deferred)
    rep.refusals.push_back(
        {"verify.deferred",
         fmt::format(
             "the last verify deferred {} hardware checks to the first boot on {} (--hardware-checks deferred): "
             "the image's hardware is unverified",
             v.deferred, v.size.empty() ? "the size" : v.size),
         "seal --verify deferred seals with the hardware verdict pending: the image's boot unit runs those checks at "
         "its first boot on the size; or verify on that size (--hardware-checks now)"});
  if (!rep.journal.size.empty() && !v.size.empty() && lower(rep.journal.size) != lower(v.size))
    rep.refusals.push_back(
        {"verify.other-size",
         fmt::format("the last verify checked {}, but the install journal is for {}", v.size, rep.journal.size),
         fmt::format("run 'hpcbake verify --size {}'", rep.journal.size)});
}

// With Secure Boot on, the kernel loads only modules signed by a key it trusts: its own build key
// or an enrolled MOK (driver/mok.hpp). A module it would refuse makes an image whose driver never
// loads, found only on the first VM.
struct SecureBootTrust {
  bool on = false;
  // Secure Boot is off (or absent) here, but the image's VMs boot with it on: the db body is asked
  // for, or the plan signs modules not as a precaution. `image_why` says which.
  bool image = false;
  std::string image_why;
  std::optional<driver::KernelKey> kernel_key;
  driver::MokState moks;
  bool platform_keyring = false; // the distro's kernel also checks .platform (module_keyrings)
  bool ca_only_machine_keyring = false;
  // Canonical's key for its precompiled modules (the plan's canonical-driver step): trusted for
  // the modules its linux-modules-nvidia-*-<kernel> package installed.
  std::optional<driver::PackagedModulesKey> packaged;
  const driver::PackagedModulesKey* packaged_key() const { return packaged ? &*packaged : nullptr; }
};

// What makes a module load on the image's VMs (SecureBootTrust::image).
std::string image_hint(const SealReport& rep, const std::string& signer, const driver::ModuleTrust& t) {
  const std::string key_dir = rep.key_dir.empty() ? std::string(kSigningDir) : rep.key_dir;
  const std::string sign = fmt::format("/lib/modules/{}/build/scripts/sign-file sha256 {}/signing.key {}/signing.der "
                                       "MODULE (on the uncompressed .ko)",
                                       rep.next_boot_kernel, key_dir, key_dir);
  if (!t.fix.empty()) return t.fix;
  if (!rep.plan->platform_keyring)
    return fmt::format("the distro's kernel does not trust the UEFI db for modules (module_keyrings.platform is "
                       "false), so an image's db cannot make {} load: sign it with a key each VM enrols as a MOK "
                       "(docs/secure-boot.md), or turn Secure Boot off for the image; then seal again",
                       signer.empty() ? "an unsigned module" : "it");
  return fmt::format("sign it with the key whose certificate the image's UEFI db will hold: {} (hpcbake install "
                     "--sign on signs what it builds){}; then seal again (docs/secure-boot.md, The image's UEFI db)",
                     sign, signer.empty() ? "" : ", or give --cert the certificate that signed it");
}

std::string secure_boot_hint(const SealRequest& rq, const SealReport& rep, const std::string& signer,
                             const driver::ModuleTrust& t, const SecureBootTrust& trust) {
  if (trust.image) return image_hint(rep, signer, t);
  if (signer.empty())
    return "run 'hpcbake install' again with Secure Boot on (it signs what it builds: --sign auto), enroll the "
           "certificate, then seal";
  if (!t.fix.empty()) return t.fix;
  if (rq.host->secure_boot.state != detect::SecureBoot::enabled)
    return "mount efivarfs (mount -t efivarfs efivarfs /sys/firmware/efi/efivars) so the Secure Boot state, the MOK "
           "list and db can be read, then seal again";
  return driver::enrollment_advice(rep.plan && !rep.plan->signing.cert.empty() ? rep.plan->signing.cert.string()
                                                                               : rep.key_dir + "/signing.der") +
         "; then seal again";
}

bool check_secure_boot(const SealRequest& rq, SealReport& rep, const Result<driver::ModuleInfo>& info, ModuleCheck& mc,
                       const SecureBootTrust& trust) {
  if (!trust.on) return true;
  std::string package; // the dpkg owner, which Canonical's key needs
  if (trust.packaged && !mc.path.empty())
    if (auto o = driver::dpkg_owners(*rq.fs, {mc.path}); o.count(mc.path)) package = o[mc.path];
  const auto t = info ? driver::module_trust(*info, trust.kernel_key, trust.moks, trust.platform_keyring,
                                             trust.ca_only_machine_keyring, trust.packaged_key(), package)
                      : driver::ModuleTrust{false, info.error().message, {}};
  mc.trust = t.how;
  if (t.loads) return true;
  if (trust.image) {
    rep.refusals.push_back(
        {"module.image-secure-boot",
         fmt::format("{}: {}: Secure Boot is off here ({}), but VMs made from the image boot with it on ({}) and "
                     "their kernel would refuse to load it",
                     mc.path, t.how, rq.host->secure_boot.source, trust.image_why),
         image_hint(rep, info ? info->signer : std::string(), t)});
    return false;
  }
  rep.refusals.push_back(
      {"module.secure-boot",
       rq.host->secure_boot.state == detect::SecureBoot::enabled
           ? fmt::format("{}: {}: Secure Boot is on ({}) and the kernel would refuse to load it", mc.path, t.how,
                         rq.host->secure_boot.source)
           : fmt::format("{}: {}: the kernel would refuse to load it if Secure Boot is on, and its state is unknown "
                         "({}: is efivarfs mounted?)",
                         mc.path, t.how, rq.host->secure_boot.source),
       secure_boot_hint(rq, rep, info ? info->signer : std::string(), t, trust)});
  return false;
}

// The plan's own DKMS modules: installed for the next-boot kernel, built for it, and (Secure Boot
// on) signed by a key it trusts.
void check_plan_modules(const SealRequest& rq, SealReport& rep, const std::vector<std::string>& modules,
                        const SecureBootTrust& trust) {
  const auto& k = rep.next_boot_kernel;
  for (const auto& m : modules) {
    ModuleCheck mc;
    mc.kernel = k;
    mc.name = m;
    const auto ko = driver::find_module(*rq.fs, k, m);
    if (!ko) {
      rep.refusals.push_back({"module.missing",
                              fmt::format("kernel module {} is not installed for the next-boot kernel {} (nothing "
                                          "under /lib/modules/{})",
                                          m, k, k),
                              fmt::format("run 'hpcbake install' again: it builds every DKMS module for the running "
                                          "and the next-boot kernel ({})",
                                          rq.host->kernels.next_boot_rule)});
      rep.modules.push_back(std::move(mc));
      continue;
    }
    mc.path = "/" + ko->lexically_relative(rq.fs->root()).generic_string();
    const auto info = driver::read_module_info(*ko); // read once: vermagic, signer, Secure Boot trust
    if (info) {
      mc.vermagic = info->vermagic;
      mc.signer = info->signer;
    }
    auto digest = util::sha256_file(*ko);
    if (!digest) {
      // Never record an empty digest: the image manifest would vouch for a module nobody hashed.
      rep.refusals.push_back({"module.unreadable", fmt::format("{}: {}", mc.path, digest.error().message),
                              "check the file's permissions and the disk, then seal again"});
      rep.modules.push_back(std::move(mc));
      continue;
    }
    mc.sha256 = std::move(*digest);
    if (auto s = driver::check_module(*ko, k, std::nullopt); !s)
      rep.refusals.push_back({"module.vermagic", fmt::format("{}: {}", mc.path, s.error().message),
                              "run 'hpcbake install' again: it rebuilds the module for that kernel"});
    else
      mc.ok = check_secure_boot(rq, rep, info, mc, trust);
    rep.modules.push_back(std::move(mc));
  }
}

// "(package nvidia-dkms-580)", "(no package owns it: DKMS or installed by hand)", or "" (unknown).
std::string owner_phrase(const SealReport& rep, const OutOfTreeCheck& oc) {
  if (!oc.package.empty()) return fmt::format(" (package {})", oc.package);
  if (rep.owners == "dpkg") return " (no package owns it: DKMS or installed by hand)";
  return "";
}

// The three ways to make the kernel trust a module hpcbake did not build.
std::string out_of_tree_hint(const SealReport& rep, const OutOfTreeCheck& oc) {
  const std::string key_dir = rep.key_dir.empty() ? std::string(kSigningDir) : rep.key_dir;
  return fmt::format(
      "sign it with hpcbake's key (/lib/modules/{}/build/scripts/sign-file sha256 {}/signing.key {}/signing.der "
      "MODULE, on the uncompressed .ko), or put {} certificate in the image's UEFI db, or enroll that certificate as "
      "a MOK (`mokutil --import CERT`, confirmed in MokManager) (docs/secure-boot.md); then seal again",
      rep.next_boot_kernel, key_dir, key_dir, oc.signer.empty() ? "the signing" : "its signer's");
}

// hpcbake's own signing certificate (the plan's, or the key directory's), when there is one: a
// module it signed needs that certificate trusted, not another signature.
std::optional<driver::Certificate> hpcbake_certificate(const SealRequest& rq, const SealReport& rep) {
  std::optional<std::string> der = rep.key_dir + "/signing.der";
  if (rep.plan && rep.plan->signing.enabled && !rep.plan->signing.cert.empty())
    der = host_path_of(*rq.fs, rep.plan->signing.cert);
  if (!der || !rq.fs->exists(*der)) return std::nullopt;
  auto cert = driver::read_certificate(rq.fs->resolve(*der));
  if (!cert) return std::nullopt;
  return *cert;
}

// What the kernel checks a module against, read once for the next-boot kernel. Read whatever the
// Secure Boot state (the image manifest says how each out-of-tree module would fare on a Trusted
// Launch VM); `on` says whether a module it would refuse blocks seal. For the image (Secure Boot
// off here, on for its VMs), the certificate going into the image's db counts where the distro's
// kernel trusts db (the platform keyring) for modules; so it does whenever the db body is asked for.
SecureBootTrust secure_boot_trust(const SealRequest& rq, const SealReport& rep, const std::string& kernel) {
  SecureBootTrust trust;
  // Unknown (UEFI, SecureBoot unreadable) is checked too: the modules must load if it is on.
  const bool here = rq.host->secure_boot.state == detect::SecureBoot::enabled ||
                    rq.host->secure_boot.state == detect::SecureBoot::unknown;
  const auto& sig = rep.plan->signing;
  trust.image = !here && (rq.uefi_db || (sig.enabled && !sig.precaution));
  trust.on = here || trust.image;
  trust.image_why = rq.uefi_db ? std::string("the image's UEFI db body is asked for: --uefi-db-json")
                               : fmt::format("the plan signs modules: {}", sig.why);
  trust.kernel_key = driver::kernel_signing_key(*rq.fs, kernel);
  trust.moks = driver::read_mok_state(*rq.fs);
  trust.ca_only_machine_keyring = driver::ca_only_machine_keyring(*rq.fs, kernel);
  trust.platform_keyring = rep.plan->platform_keyring;
  if (trust.platform_keyring && (rq.uefi_db || trust.image)) {
    std::optional<driver::Certificate> cert; // one that cannot be read: the body's own check says so
    if (rq.uefi_db_cert.empty())
      cert = hpcbake_certificate(rq, rep);
    else if (auto c = driver::read_certificate(rq.uefi_db_cert))
      cert = std::move(*c);
    if (cert) trust.moks.db.push_back(std::move(*cert));
  }
  for (const auto& st : rep.plan->steps)
    if (const auto* cd = st.as<plan::CanonicalDriverStep>(); cd && !cd->module_signer.empty())
      trust.packaged =
          driver::packaged_modules_key(cd->module_signer, cd->signer_serials, cd->modules_package, kernel, cd->source);
  return trust;
}

void refuse_out_of_tree(const SealRequest& rq, SealReport& rep, const OutOfTreeCheck& oc, std::string fix,
                        const SecureBootTrust& trust) {
  const std::string who =
      oc.signer.empty() ? std::string("unsigned") : fmt::format("signer '{}', serial {}", oc.signer, oc.serial);
  const std::string why = oc.trust.empty() || oc.trust == who ? "" : ": " + oc.trust; // "unsigned" once
  if (trust.image) {
    rep.refusals.push_back(
        {"module.image-secure-boot",
         fmt::format("{}{}: out-of-tree module of the next-boot kernel, {}{}: Secure Boot is off here ({}), but VMs "
                     "made from the image boot with it on ({}) and their kernel would refuse to load it",
                     oc.path, owner_phrase(rep, oc), who, why, rq.host->secure_boot.source, trust.image_why),
         fix.empty() ? out_of_tree_hint(rep, oc) : std::move(fix)});
    return;
  }
  const std::string state =
      rq.host->secure_boot.state == detect::SecureBoot::enabled
          ? fmt::format("Secure Boot is on ({})", rq.host->secure_boot.source)
          : fmt::format("Secure Boot's state is unknown ({}: is efivarfs mounted?)", rq.host->secure_boot.source);
  rep.refusals.push_back(
      {"module.secure-boot",
       fmt::format("{}{}: out-of-tree module of the next-boot kernel, {}{}: {} and the kernel would refuse to load it",
                   oc.path, owner_phrase(rep, oc), who, why, state),
       fix.empty() ? out_of_tree_hint(rep, oc) : std::move(fix)});
}

// Every out-of-tree module of the next-boot kernel, not only the plan's: what DKMS and vendor
// packages installed (DOCA-OFED's mlx5_*, gdrcopy, ...) loads only if its signer is trusted too.
void check_out_of_tree(const SealRequest& rq, SealReport& rep, const SecureBootTrust& trust) {
  auto scan = driver::out_of_tree_modules(*rq.fs, rep.next_boot_kernel);
  rep.owners = driver::owning_packages(*rq.fs, scan.modules);
  const auto own = hpcbake_certificate(rq, rep);
  std::set<std::string> plan_paths; // checked (and refused, if at all) by check_plan_modules
  for (const auto& mc : rep.modules)
    if (!mc.path.empty()) plan_paths.insert(mc.path);
  for (const auto& m : scan.modules) {
    OutOfTreeCheck oc{
        m.path,    m.info.name, m.info.signer, m.info.sig_key.empty() ? "" : driver::serial_key(m.info.sig_key),
        m.package, {},          false,         m.error};
    std::string fix;
    if (!m.error.empty()) {
      oc.name = fs::path(m.path).filename().string();
      oc.trust = "not readable as a module: " + m.error;
    } else {
      const auto t = driver::module_trust(m.info, trust.kernel_key, trust.moks, trust.platform_keyring,
                                          trust.ca_only_machine_keyring, trust.packaged_key(), m.package);
      oc.trust = t.how;
      oc.loads = t.loads;
      fix = t.fix;
      if (fix.empty() && own && oc.signer == own->issuer && oc.serial == own->serial)
        fix = secure_boot_hint(rq, rep, oc.signer, t, trust); // hpcbake's key: enroll it, or its state unknown
      else if (fix.empty() && trust.image)
        fix = image_hint(rep, oc.signer, t); // signed with the db's key, or not on this distro
    }
    rep.out_of_tree.push_back(oc);
    // A plan module reached through a link (weak-updates/) has its target's path in `modules`.
    const std::string target = "/" + rq.fs->resolve(oc.path).lexically_relative(rq.fs->root()).generic_string();
    if (trust.on && !oc.loads && !plan_paths.count(oc.path) && !plan_paths.count(target))
      refuse_out_of_tree(rq, rep, oc, fix, trust);
  }
  if (!trust.on) return;
  if (scan.truncated)
    rep.refusals.push_back(
        {"module.tree-too-large",
         fmt::format("/lib/modules/{} holds more than {} entries: the walk stopped, and the modules past it were not "
                     "checked",
                     rep.next_boot_kernel, driver::kMaxModuleTreeEntries),
         "remove what does not belong under /lib/modules (copies, backups), then seal again"});
  if (!scan.error.empty())
    rep.refusals.push_back({"module.unreadable", scan.error, "check the directory's permissions, then seal again"});
}

void check_modules(const SealRequest& rq, SealReport& rep) {
  rep.next_boot_kernel = rq.host->kernels.next_boot;
  std::vector<std::string> modules;
  for (const auto& s : rep.plan->steps)
    if (const auto* d = s.as<plan::DkmsCheckStep>())
      for (const auto& m : d->modules)
        if (std::find(modules.begin(), modules.end(), m) == modules.end()) modules.push_back(m);
  const auto& k = rep.next_boot_kernel;
  if (k.empty()) {
    if (!modules.empty())
      rep.refusals.push_back({"module.no-kernel", "the next-boot kernel is unknown (nothing in /boot or /lib/modules)",
                              "run 'hpcbake detect' to see how the next-boot kernel is found"});
    return;
  }
  const SecureBootTrust trust = secure_boot_trust(rq, rep, k);
  check_plan_modules(rq, rep, modules, trust);
  check_out_of_tree(rq, rep, trust);
}

void check_packages(const SealRequest& rq, SealReport& rep, manifest::PackageManager manager) {
  std::vector<std::pair<std::string, std::string>> wanted; // component, name
  auto want = [&](const std::string& component, const std::string& name) {
    for (const auto& w : wanted)
      if (w.second == name) return;
    wanted.emplace_back(component, name);
  };
  // Held packages (Fabric Manager, which must stay equal to the driver) must be installed and held.
  const bool apt = manager == manifest::PackageManager::apt;
  for (const auto& s : rep.plan->steps) {
    const auto* p = s.as<plan::PackagesStep>();
    if (!p || !p->hold) continue;
    for (const auto& pk : p->packages)
      want(p->component, package_name(pk, p->version, !apt));
    for (const auto& f : p->files)
      want(p->component, package_name(f, p->version, !apt));
  }
  if (wanted.empty()) return;
  const auto dpkg = apt ? read_dpkg_status(*rq.fs) : std::map<std::string, DpkgEntry>{};
  for (const auto& [component, name] : wanted) {
    PackageCheck pc{component, name, {}, false, false};
    if (apt) {
      if (const auto it = dpkg.find(name); it != dpkg.end()) {
        const auto words = util::split(it->second.status, ' ');
        pc.installed = it->second.status.ends_with(" installed");
        pc.held = !words.empty() && words.front() == "hold";
        if (pc.installed) pc.version = it->second.version;
      }
    } else {
      if (auto v = rpm_version(*rq.runner, *rq.fs, name)) {
        pc.installed = true;
        pc.version = *v;
      }
      pc.held = manager == manifest::PackageManager::tdnf ? tdnf_locked(*rq.fs, name) : dnf_locked(*rq.fs, name);
    }
    const std::string hold_cmd = apt ? "apt-mark hold " + name
                                 : manager == manifest::PackageManager::tdnf
                                     ? "echo " + name + " >> /etc/tdnf/locks.d/hpcbake.conf"
                                     : "dnf versionlock add " + name;
    if (!pc.installed)
      rep.refusals.push_back({"package.not-installed", fmt::format("package {} ({}) is not installed", name, component),
                              "run 'hpcbake install' again: it installs and holds it"});
    else if (!pc.held)
      rep.refusals.push_back(
          {"package.not-held",
           fmt::format("package {} ({}) {} is installed but not held: an upgrade in the image could move it away from "
                       "the driver",
                       name, component, pc.version),
           fmt::format("run '{}' (hpcbake install holds it), then seal", hold_cmd)});
    rep.packages.push_back(std::move(pc));
  }
}

std::vector<std::string> scanned_paths(const util::HostFs& fs, const std::string& key_dir) {
  std::vector<std::string> paths = {kStateDir, kCacheDir};
  if (!key_dir.empty() && !key_dir.starts_with(std::string(kStateDir) + "/")) paths.push_back(key_dir);
  for (const auto& name : fs.list("/var/log"))
    if (name.starts_with("hpcbake")) paths.push_back("/var/log/" + name);
  return paths;
}

const char* describe_kind(const std::string& kind) {
  if (kind == "private-key") return "a private key (PEM)";
  if (kind == "sas-token") return "a SAS token (sig= in a URL query)";
  if (kind == "authorization") return "an Authorization header or bearer token";
  if (kind == "account-key") return "a storage account key (AccountKey=)";
  return "a secret";
}

void check_secrets(const SealRequest& rq, SealReport& rep) {
  rep.scan = scan_paths(*rq.fs, scanned_paths(*rq.fs, rep.key_dir));
  const std::string signing_prefix = rep.key_dir + "/";
  // The key the install generated, wherever its key directory is (a --sign-key FILE is the user's:
  // the secret scan reports it where it looks, and seal never removes it).
  if (rep.plan && rep.plan->signing.enabled && rep.plan->signing.generate)
    if (const auto key = host_path_of(*rq.fs, rep.plan->signing.key); key && rq.fs->exists(*key))
      rep.signing_keys.push_back(*key);
  std::vector<const SecretFinding*> others;
  for (const auto& f : rep.scan.findings) {
    const bool known = std::find(rep.signing_keys.begin(), rep.signing_keys.end(), f.path) != rep.signing_keys.end();
    if (f.kind == "private-key" && (known || f.path.starts_with(signing_prefix))) {
      if (!known) rep.signing_keys.push_back(f.path);
      continue;
    }
    others.push_back(&f);
  }
  for (std::size_t i = 0; i < others.size() && i < kMaxSecretRefusals; ++i) {
    const auto& f = *others[i];
    rep.refusals.push_back(
        {"secret." + f.kind,
         fmt::format("{}:{}: {} would be captured into the image", f.path, f.line, describe_kind(f.kind)),
         "remove the file or the line (and revoke the credential if it was real), then seal"});
  }
  if (others.size() > kMaxSecretRefusals)
    rep.refusals.push_back({"secret.more",
                            fmt::format("and {} more lines with secrets", others.size() - kMaxSecretRefusals),
                            "remove them, then seal"});
  if (rq.signing_key == SigningKey::refuse)
    for (const auto& k : rep.signing_keys)
      rep.refusals.push_back(
          {"signing.private-key",
           fmt::format("{}: the module-signing private key would be captured into the image (anyone with the image "
                       "could sign modules its Secure Boot trusts)",
                       k),
           "move it off the machine (keep signing.der: it is the certificate to enroll), or pass --remove-signing-key; "
           "modules already built stay signed"});
}

// The signing certificate the image's UEFI db or MOK list must trust, and where the key went.
Result<json> signing_json(const SealRequest& rq, const SealResult& r) {
  const auto& rep = r.report;
  json signing = nullptr;
  const std::string der = signing_certificate(*rq.fs, rep);
  if (rq.fs->exists(der)) {
    auto cert_sha = util::sha256_file(rq.fs->resolve(der));
    if (!cert_sha)
      return fail(ErrorKind::internal,
                  fmt::format("{}: cannot record the signing certificate: {}", der, cert_sha.error().message),
                  "make it readable (or remove it if no module is signed), then seal again");
    signing = {{"certificate", der},
               {"certificate_sha256", *cert_sha},
               {"private_key", r.removed_keys.empty() ? "not on the disk" : "removed by seal"}};
  }

  return signing;
}

// Every out-of-tree module of the next-boot kernel: where, who signed it, and why the kernel loads
// it with Secure Boot on (or why not: recorded whatever the state, as a VM made from the image may
// boot with Secure Boot on).
json out_of_tree_json(const SealReport& rep) {
  json out_of_tree = json::array();
  for (const auto& m : rep.out_of_tree)
    out_of_tree.push_back({{"path", m.path},
                           {"name", m.name},
                           {"signer", m.signer.empty() ? json(nullptr) : json(m.signer)},
                           {"serial", m.serial.empty() ? json(nullptr) : json(m.serial)},
                           {"package", m.package.empty() ? json(nullptr) : json(m.package)},
                           {"loads_with_secure_boot", m.loads},
                           {"secure_boot_trust", m.trust}});

  return {{"kernel", rep.next_boot_kernel},
          {"package_owners", rep.owners.empty() ? json(nullptr) : json(rep.owners)},
          {"modules", std::move(out_of_tree)}};
}

// The health units seal wrote and enabled (an image's VMs run them: docs/health.md).
json health_units_json(const SealReport& rep) {
  json units = json::array();
  for (const auto& u : rep.health_units)
    units.push_back({{"unit", u.name},
                     {"path", u.path},
                     {"enabled", !u.wants_link.empty()},
                     {"wants_link", u.wants_link.empty() ? json(nullptr) : json(u.wants_link)},
                     {"exec_start", u.exec_start.empty() ? json(nullptr) : json(u.exec_start)}});
  return units;
}

// Whether the image's hardware was checked at bake time, or is pending for the first boot on the size.
json hardware_verdict_json(const SealReport& rep, const plan::Plan& p) {
  const bool pending = rep.verify && rep.verify->hardware_deferred;
  return {{"state", pending ? "pending" : "checked"},
          {"size", p.size},
          // The level the first boot runs the deferred checks at, at least (it stops at 2: the load
          // checks are a job's, verify/hardware_verdict.hpp).
          {"level", pending      ? std::min(rep.verify->level, 2)
                    : rep.verify ? rep.verify->level
                                 : 0},
          {"checked_at", pending ? "the first boot on the size (hpcbake-verify-boot.service: verify --boot)"
                                 : "the bake (hpcbake verify on the build VM)"},
          {"deferred_checks", pending ? rep.verify->deferred_checks : std::vector<std::string>{}}};
}

Result<json> manifest_json(const SealRequest& rq, const SealResult& r,
                           const std::vector<fetch::CacheEntry>& cache_entries) {
  const auto& rep = r.report;
  const auto& p = *rep.plan;
  // Components: artifacts (pinned SHA-256), driver versions and packages, by component.
  std::map<std::string, json> comps;
  auto comp = [&](const std::string& id) -> json& {
    auto& c = comps[id];
    if (c.is_null())
      c = {{"component", id}, {"version", nullptr}, {"artifacts", json::array()}, {"packages", json::array()}};
    return c;
  };
  std::set<std::string> cached;
  for (const auto& e : cache_entries)
    cached.insert(e.sha256);
  for (const auto& s : p.steps) {
    const auto ref = plan::component_of(s);
    if (!ref) continue;
    auto& c = comp(ref->component);
    if (!ref->version.empty()) c["version"] = ref->version;
    if (const auto* a = s.as<plan::ArtifactStep>())
      c["artifacts"].push_back({{"name", a->name},
                                {"sha256", a->sha256 ? json(*a->sha256) : json(nullptr)},
                                {"size", a->size ? json(*a->size) : json(nullptr)},
                                {"url", a->urls.empty() ? json(nullptr) : json(a->urls.front())},
                                {"verified_in_cache", a->sha256 && cached.count(*a->sha256) > 0}});
    if (const auto* ri = s.as<plan::RunInstallerStep>()) c["module_flavour"] = ri->flavour;
  }
  for (const auto& pk : rep.packages)
    comp(pk.component.empty() ? pk.name : pk.component)["packages"].push_back(
        {{"name", pk.name}, {"version", pk.version}, {"held", pk.held}});
  json components = json::array();
  for (auto& [id, c] : comps)
    components.push_back(std::move(c));

  json modules = json::array();
  for (const auto& m : rep.modules)
    modules.push_back({{"kernel", m.kernel},
                       {"name", m.name},
                       {"path", m.path},
                       {"vermagic", m.vermagic},
                       {"signer", m.signer.empty() ? json(nullptr) : json(m.signer)},
                       {"secure_boot_trust", m.trust.empty() ? json(nullptr) : json(m.trust)},
                       {"sha256", m.sha256}});

  json steps = json::object();
  for (const auto& [id, s] : rep.journal.steps)
    steps[id] = {{"status", install::to_string(s.status)}, {"finished_at", s.finished_at}, {"attempts", s.attempts}};

  json cache = json::array();
  for (const auto& e : cache_entries)
    cache.push_back({{"sha256", e.sha256}, {"size", e.size}});

  HPCBAKE_TRY_ASSIGN(json signing, signing_json(rq, r));

  const auto& k = rq.host->kernels;
  json os = nullptr;
  if (rq.host->os)
    os = {{"id", rq.host->os->id()},
          {"version_id", rq.host->os->version_id()},
          {"pretty_name", rq.host->os->pretty_name()}};
  return json{
      {"schema", kImageManifestSchema},
      {"created_at", util::record_time()},
      {"hpcbake_version", rq.hpcbake_version},
      {"size", p.size},
      {"size_id", p.size_id},
      {"size_family", p.family},
      {"distro", p.distro_id},
      {"plan", {{"path", paths::kPlanFile}, {"sha256", rep.stored->sha256}}},
      {"os", os},
      {"kernel",
       {{"running", k.running},
        {"next_boot", k.next_boot},
        {"next_boot_rule", k.next_boot_rule},
        {"installed", k.installed}}},
      {"components", std::move(components)},
      {"modules", std::move(modules)},
      {"out_of_tree_modules", out_of_tree_json(rep)},
      {"journal",
       {{"state", install::to_string(rep.journal.state)},
        {"updated_at", rep.journal.updated_at},
        {"steps", std::move(steps)}}},
      {"verify", rep.verify ? verify::to_json(*rep.verify) : json(nullptr)},
      {"hardware_verdict", hardware_verdict_json(rep, p)},
      {"signing", std::move(signing)},
      {"cache",
       {{"entries", std::move(cache)}, {"removed_files", r.cache_files_removed}, {"freed_bytes", r.cache_bytes_freed}}},
      {"health_units", health_units_json(rep)},
      {"secret_scan", {{"files", rep.scan.files_scanned}, {"binary_skipped", rep.scan.binary_skipped}}},
      {"deprovision", rq.deprovision == Deprovision::yes}};
}

// Empties the cache directory (keeps the directory itself).
Status clean_cache(const fs::path& dir, SealResult& r) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return {};
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) {
      ++r.cache_files_removed;
      r.cache_bytes_freed += it->file_size(ec);
    }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (rm)
      return fail(ErrorKind::internal, fmt::format("{}: cannot remove: {}", e.path().string(), rm.message()),
                  "check permissions (seal runs as root); nothing after the cache cleanup was done");
  }
  if (ec) return fail(ErrorKind::internal, fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
  return {};
}

} // namespace

std::vector<std::string> deprovision_argv() {
  return {"waagent", "-force", "-deprovision+user"};
}

Result<SealReport> check(const SealRequest& rq) {
  if (!rq.fs || !rq.host || !rq.runner)
    return fail(ErrorKind::internal, "seal::check: fs, host and runner are required");
  SealReport rep;
  rep.boot_id = verify::current_boot_id(*rq.fs);
  check_journal(rq, rep);
  check_reboot(rq, rep);
  check_verify(rq, rep);
  check_plan(rq, rep);
  if (rep.plan) {
    check_modules(rq, rep);
    check_packages(rq, rep, rep.plan->package_manager);
  }
  check_secrets(rq, rep);
  if (auto units = health_units(*rq.fs, rq.hpcbake_exe))
    rep.health_units = std::move(*units);
  else
    rep.refusals.push_back({"units.exec-path", units.error().message, units.error().hint});
  if (rq.deprovision == Deprovision::yes && !rq.fs->exists("/usr/sbin/waagent") && !rq.fs->exists("/usr/bin/waagent"))
    rep.refusals.push_back(
        {"waagent.missing", "--deprovision needs the Azure Linux Agent, and waagent is not installed",
         "install it (walinuxagent / WALinuxAgent), or seal without --deprovision and generalize the "
         "VM another way"});
  return rep;
}

std::string signing_certificate(const util::HostFs& fs, const SealReport& rep) {
  if (rep.plan && rep.plan->signing.enabled)
    if (const auto cert = host_path_of(fs, rep.plan->signing.cert)) return *cert;
  return rep.key_dir + "/signing.der";
}

Result<SealResult> seal(const SealRequest& rq) {
  HPCBAKE_TRY_ASSIGN(auto rep, check(rq));
  SealResult r;
  r.report = std::move(rep);
  if (!r.report.ok() || !r.report.plan) return r;

  if (rq.signing_key == SigningKey::remove)
    for (const auto& k : r.report.signing_keys) {
      std::error_code ec;
      fs::remove(rq.fs->resolve_entry(k), ec);
      if (ec)
        return fail(ErrorKind::internal, fmt::format("{}: cannot remove the signing key: {}", k, ec.message()),
                    "remove it by hand, then seal again");
      r.removed_keys.push_back(k);
    }

  const fs::path cache_dir = rq.fs->resolve(kCacheDir);
  const auto entries = fetch::Cache(cache_dir).list();
  HPCBAKE_TRY(clean_cache(cache_dir, r));

  // An image must not resume an install at every boot of every VM made from it (possibly of
  // another size): drop the resume unit's enablement links; the unit file itself stays.
  for (const char* wants :
       {"/etc/systemd/system/multi-user.target.wants", "/etc/systemd/system/default.target.wants"}) {
    const std::string link = std::string(wants) + "/" + kResumeUnit;
    std::error_code ec;
    const auto at = rq.fs->resolve_entry(link); // the link itself, not the unit it names
    if (!fs::is_symlink(fs::symlink_status(at, ec)) && !fs::exists(at, ec)) continue;
    fs::remove(at, ec);
    if (ec)
      return fail(ErrorKind::internal, fmt::format("{}: cannot remove: {}", link, ec.message()),
                  fmt::format("run 'systemctl disable {}', then seal again", kResumeUnit));
    r.disabled_units.push_back(link);
  }

  // This VM's own verdicts are not the image's: a VM made from the image starts without them (a
  // build VM made from an earlier image carries that image's first-boot verdict and node state).
  for (const char* state : {paths::kHardwareVerdict, paths::kNodeState}) {
    std::error_code ec;
    fs::remove(rq.fs->resolve(state), ec);
    if (ec)
      return fail(ErrorKind::internal, fmt::format("{}: cannot remove: {}", state, ec.message()),
                  "remove it by hand, then seal again");
  }

  // Every VM made from the image checks itself at boot and every 15 minutes.
  HPCBAKE_TRY(write_health_units(*rq.fs, r.report.health_units));

  HPCBAKE_TRY_ASSIGN(r.manifest, manifest_json(rq, r, entries));
  r.manifest_path = kImageManifestPath;
  const auto path = rq.fs->resolve(kImageManifestPath);
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  // The SBOM first, from the same record: the manifest, written last, is what says "sealed".
  HPCBAKE_TRY(util::write_file_atomic(rq.fs->resolve(kImageSbomPath),
                                      util::dump_json(image_sbom(r.manifest, *r.report.plan), 2) + "\n", 0644));
  r.sbom_path = kImageSbomPath;
  HPCBAKE_TRY(util::write_file_atomic(path, util::dump_json(r.manifest, 2) + "\n", 0644));
  r.sealed = true;

  // Last: after this the VM is generalized (the provisioning user is gone) and must only be
  // shut down and captured.
  if (rq.deprovision == Deprovision::yes) {
    exec::Command cmd;
    cmd.argv = deprovision_argv();
    cmd.timeout = std::chrono::minutes(10);
    auto done = rq.runner->run(cmd);
    if (!done)
      return fail(ErrorKind::internal, done.error().message,
                  fmt::format("{} is written and the cache is clean; run '{}' by hand", kImageManifestPath,
                              exec::shell_quote(cmd.argv)));
    if (!done->ok())
      return fail(
          ErrorKind::internal,
          fmt::format("{} {}: {}", exec::shell_quote(cmd.argv), done->describe(), util::last_lines(done->output, 10)),
          fmt::format("{} is written and the cache is clean; fix the agent and run '{}' by hand", kImageManifestPath,
                      exec::shell_quote(cmd.argv)));
    r.deprovisioned = true;
  }
  return r;
}

} // namespace hpcbake::seal
