// Level 0 checks read from host files: kernel modules for every target kernel, whether
// nvidia-peermem is loaded, and the Azure agent's OS.EnableRDMA.
#include "verify/checks.hpp"

#include "driver/dkms.hpp"
#include "driver/modinfo.hpp"
#include "util/strings.hpp"
#include "waagent/config.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::verify {

namespace fs = std::filesystem;

namespace {

// A container sees the host's running kernel (/proc) but not its /lib/modules: the modules can only
// be seen loaded. All loaded passes (the kernel checked their vermagic when it loaded them); any
// not loaded is a skip, since whether its file exists cannot be seen from here.
Check loaded_modules_check(const util::HostFs& host, const std::string& id, const std::string& title,
                           const std::string& expected, const std::string& kernel,
                           const std::vector<std::string>& mods) {
  std::vector<std::string> loaded, not_loaded;
  for (const auto& mod : mods)
    (module_loaded(host, mod) ? loaded : not_loaded).push_back(mod);
  const std::string absent = fmt::format(
      "/lib/modules/{} is not in this file system (a container sees the host's kernel, not its module files)", kernel);
  std::string observed = not_loaded.empty()
                             ? fmt::format("loaded (/proc/modules): {}; {}", util::join(loaded, ", "), absent)
                             : fmt::format("{}; not loaded: {}{}", absent, util::join(not_loaded, ", "),
                                           loaded.empty() ? "" : "; loaded: " + util::join(loaded, ", "));
  return make_check(id, 0, title, expected, observed, not_loaded.empty() ? Verdict::pass : Verdict::skip,
                    not_loaded.empty() ? "" : "run `hpcbake verify` on the host itself to check the module files",
                    "plan: dkms steps, target kernels (running and next boot); /proc/modules");
}

// DKMS's autoinstall switched off by an install that never finished: a driver package's
// postinst then builds nothing, and no later kernel update does either. Only hpcbake's own file
// (its first line is the marker) is reported; an administrator's is their choice.
void autoinstall_check(Recorder& rec, const util::HostFs& host) {
  auto text = host.read(driver::kNoAutoinstall, util::host_file::config);
  if (!text || text->substr(0, text->find('\n')) != driver::kAutoinstallOffMark) return;
  rec.add(make_check("dkms.autoinstall", 0, "DKMS builds modules for new kernels", "on",
                     fmt::format("off: {} was left by an hpcbake install stopped while a driver's packages went in",
                                 driver::kNoAutoinstall),
                     Verdict::fail,
                     fmt::format("run `hpcbake install` again (it takes the file over and removes it), or remove {}; "
                                 "until then no kernel update rebuilds the modules",
                                 driver::kNoAutoinstall),
                     "driver/dkms.hpp AutoinstallOff; /usr/lib/dkms/common.postinst"));
}

// Out-of-tree modules the running kernel loaded without checking a signature it trusts: their
// taint letters in /proc/modules hold `E` (TAINT_UNSIGNED_MODULE, bit 13: "unsigned module was
// loaded", torvalds/linux Documentation/admin-guide/tainted-kernels.rst; kernel/module/procfs.c
// prints each module's letters in parentheses). With Secure Boot on such a module cannot load
// unless the kernel's signature enforcement is off, so that is a failure; with it off the kernel
// loads anything, and the check says which modules an image of this machine would need signed.
void signature_check(Recorder& rec, const util::HostFs& host) {
  auto text = host.read("/proc/modules", util::host_file::proc_modules);
  if (!text) return;
  const auto unverified = unverified_modules(*text);
  const auto sb = rec.request().host->secure_boot.state;
  const bool on = sb == detect::SecureBoot::enabled;
  std::vector<std::string> names;
  for (const auto& m : unverified)
    names.push_back(fmt::format("{} ({})", m.name, m.taints));
  // /sys/module/module/parameters/sig_enforce exists only in a kernel built with CONFIG_MODULE_SIG
  // (kernel/module/signing.c): without it no module is ever checked, and E never shows.
  const auto enforce = host.read("/sys/module/module/parameters/sig_enforce", util::host_file::attribute);
  const std::string checking =
      enforce ? fmt::format("the kernel checks module signatures (sig_enforce {})", util::trim(*enforce))
              : "this kernel does not check module signatures at all (no /sys/module/module/parameters/sig_enforce: "
                "built without CONFIG_MODULE_SIG), so E cannot show";
  std::string observed = names.empty()
                             ? fmt::format("none of the loaded modules is tainted E (/proc/modules); {}", checking)
                             : fmt::format("loaded without a trusted signature (taint E): {}; Secure Boot is {}",
                                           util::join(names, ", "), detect::to_string(sb));
  if (!names.empty() && !on)
    observed += ": the kernel loads them now, but under Secure Boot each needs a signature the VM's kernel "
                "trusts (`hpcbake module trust`, `hpcbake seal` check the files)";
  const bool fail = on && !names.empty();
  rec.add(make_check("kernel.module_signatures", 0, "loaded modules carry a signature the kernel trusts",
                     on ? "no module tainted E" : "no module tainted E (Secure Boot off: reported, not required)",
                     observed, fail ? Verdict::fail : Verdict::pass,
                     fail ? "Secure Boot is on and the kernel still loaded unverified modules: check "
                            "/sys/kernel/security/lockdown and module.sig_enforce"
                          : "",
                     "/proc/modules taint letters (Documentation/admin-guide/tainted-kernels.rst: E, bit 13)"));
}

} // namespace

std::vector<TaintedModule> unverified_modules(std::string_view proc_modules) {
  std::vector<TaintedModule> out;
  for (auto line : util::split(proc_modules, '\n')) {
    // NAME SIZE REFS DEPS STATE ADDRESS [(TAINTS)]
    const auto open = line.rfind('(');
    if (open == std::string_view::npos || line.back() != ')') continue;
    const std::string_view taints = line.substr(open + 1, line.size() - open - 2);
    if (taints.find('E') == std::string_view::npos) continue;
    out.push_back({std::string(line.substr(0, line.find(' '))), std::string(taints)});
  }
  return out;
}

bool module_loaded(const util::HostFs& host, const std::string& name) {
  const std::string want = driver::module_name(name);
  if (auto mods = host.read("/proc/modules", util::host_file::proc_modules)) {
    for (auto line : util::split(*mods, '\n'))
      if (line.substr(0, line.find(' ')) == want) return true;
    return false;
  }
  return host.is_dir("/sys/module/" + want);
}

bool rdma_switch_on(const std::optional<std::string>& value) {
  return value && (*value == "y" || *value == "Y");
}

void host_checks(Recorder& rec, const Expectations& e, bool hardware) {
  const util::HostFs& host = *rec.request().fs;
  // One check per kernel the machine runs or boots next: each module present under
  // /lib/modules/K (updates/ first, as modprobe picks) with K's vermagic.
  auto modules_check = [&](const std::string& id_prefix, const std::string& what,
                           const std::vector<std::string>& mods) {
    for (const auto& k : e.kernels) {
      const bool next_boot = k == rec.request().host->kernels.next_boot && k != rec.request().host->kernels.running;
      const std::string title = fmt::format("{} for kernel {}{}", what, k, next_boot ? " (next boot)" : "");
      const std::string expected = fmt::format("{}: vermagic {}", util::join(mods, ", "), k);
      if (k == rec.request().host->kernels.running && !host.is_dir("/lib/modules/" + k)) {
        rec.add(loaded_modules_check(host, id_prefix + k, title, expected, k, mods));
        continue;
      }
      std::vector<std::string> missing, wrong, dirs;
      for (const auto& mod : mods) {
        auto path = driver::find_module(host, k, mod);
        if (!path) {
          missing.push_back(mod);
          continue;
        }
        if (auto s = driver::check_module(*path, k, std::nullopt); !s)
          wrong.push_back(s.error().message);
        else {
          const std::string dir = path->parent_path().lexically_relative(host.resolve("/lib/modules/" + k)).string();
          if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
        }
      }
      std::string observed;
      if (!missing.empty()) observed = "missing: " + util::join(missing, ", ");
      if (!wrong.empty()) observed += (observed.empty() ? "" : "; ") + util::join(wrong, "; ");
      const bool ok = missing.empty() && wrong.empty();
      if (ok) observed = fmt::format("vermagic {} (in {})", k, util::join(dirs, ", "));
      rec.add(make_check(
          id_prefix + k, 0, title, expected, observed, ok ? Verdict::pass : Verdict::fail,
          ok ? ""
             : fmt::format("build them for {}: `hpcbake install` again (or `hpcbake module install` with --kernel "
                           "{}, or `dkms autoinstall -k {}`); the headers of {} must be installed",
                           k, k, k, k),
          "plan: dkms steps, target kernels (running and next boot)"));
    }
  };
  autoinstall_check(rec, host);
  signature_check(rec, host);
  if (e.nvidia && !e.modules.empty()) modules_check("kernel.modules.", "NVIDIA modules", e.modules);
  for (const auto& [name, mods] : e.dkms_modules)
    if (!mods.empty()) modules_check("kernel." + name + ".", name + " modules (DKMS)", mods);
  if (hardware && e.ib_ports > 0 && e.peermem) {
    const bool loaded = module_loaded(host, "nvidia-peermem");
    rec.add(make_check("ib.nvidia_peermem", 0, "nvidia-peermem loaded (GPUDirect RDMA)", "loaded",
                       loaded ? "loaded (/proc/modules)" : "not loaded", loaded ? Verdict::pass : Verdict::fail,
                       loaded
                           ? ""
                           : "`modprobe nvidia-peermem`; to load it at boot, /etc/modules-load.d/nvidia-peermem.conf "
                             "must hold `nvidia-peermem` (`hpcbake install` writes it)",
                       e.size_file + " infiniband.gpudirect"));
  }
  if (e.ib_ports > 0 && e.ipoib) {
    auto text = host.read(e.waagent_config, util::host_file::config);
    std::optional<std::string> value;
    if (text) value = waagent::effective_value(*text, "OS.EnableRDMA");
    const bool on = rdma_switch_on(value);
    std::string observed = !text   ? fmt::format("{} not found", e.waagent_config)
                           : value ? fmt::format("OS.EnableRDMA={}", *value)
                                   : "unset (the agent's default is off)";
    rec.add(make_check("waagent.enable_rdma", 0, "Azure agent sets up IPoIB (OS.EnableRDMA)", "OS.EnableRDMA=y",
                       observed, on ? Verdict::pass : Verdict::fail,
                       on ? ""
                          : fmt::format("set `OS.EnableRDMA=y` in {} and `systemctl restart {}`", e.waagent_config,
                                        e.waagent_service.empty() ? "walinuxagent" : e.waagent_service),
                       e.size_file + " infiniband.ipoib"));
  }
}

} // namespace hpcbake::verify
