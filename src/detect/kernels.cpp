#include "detect/kernels.hpp"

#include "util/strings.hpp"
#include "util/version.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace hpcbake::detect {

std::vector<std::string> KernelFacts::targets() const {
  std::vector<std::string> out;
  if (!running.empty()) out.push_back(running);
  if (!next_boot.empty() && next_boot != running) out.push_back(next_boot);
  return out;
}

namespace {

// dracut's rescue image (/boot/vmlinuz-0-rescue-<machine id>, its BLS entry <machine id>-0-rescue,
// made by dracut's 51-dracut-rescue.install on RHEL-family systems): a copy of some kernel with a
// generic initramfs, not a kernel anything builds modules for.
bool is_rescue_image(std::string_view release) {
  return release.starts_with("0-rescue-");
}

void newest_first(std::vector<std::string>& v) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return util::compare_versions(a, b) > 0; });
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// grubenv is "# GRUB Environment Block" then KEY=VALUE lines, padded with '#'.
std::map<std::string, std::string> read_grubenv(const util::HostFs& host, std::string& where) {
  std::map<std::string, std::string> env;
  for (const char* path : {"/boot/grub2/grubenv", "/boot/grub/grubenv"}) {
    auto text = host.read(path, util::host_file::grubenv);
    if (!text) continue;
    where = path;
    for (auto line : util::split(*text, '\n')) {
      if (line.empty() || line.front() == '#') continue;
      auto eq = line.find('=');
      if (eq != std::string_view::npos) env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    break;
  }
  return env;
}

std::string grub_default(const util::HostFs& host) {
  auto text = host.read("/etc/default/grub", util::host_file::config);
  if (!text) return {};
  std::string value;
  for (auto raw : util::split(*text, '\n')) {
    auto line = util::trim(raw);
    if (!line.starts_with("GRUB_DEFAULT=")) continue;
    std::string v(util::trim(line.substr(13)));
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    value = v; // the last assignment wins, as in the shell
  }
  return value;
}

// A kernel release named inside a GRUB entry title or id ("...>gnulinux-6.8.0-1015-azure-advanced-...").
std::string kernel_named_in(std::string_view entry, const std::vector<std::string>& installed) {
  std::string best;
  for (const auto& k : installed)
    if (entry.find(k) != std::string_view::npos && k.size() > best.size()) best = k;
  return best;
}

struct BlsEntry {
  std::string id; // file stem
  std::string version;
};

// An entry that cannot be read (too large, a FIFO) is a warning naming it, not a kernel.
std::vector<BlsEntry> read_bls(const util::HostFs& host, std::vector<std::string>& warnings) {
  std::vector<BlsEntry> entries;
  for (const auto& name : host.list("/boot/loader/entries")) {
    if (!name.ends_with(".conf")) continue;
    auto text = host.read_checked("/boot/loader/entries/" + name, util::host_file::bls_entry);
    if (!text) warnings.push_back(text.error().message);
    if (!text || !*text) continue;
    BlsEntry e{name.substr(0, name.size() - 5), {}};
    for (auto raw : util::split(**text, '\n')) {
      auto line = util::trim(raw);
      if (line.starts_with("version "))
        e.version = std::string(util::trim(line.substr(8)));
      else if (e.version.empty() && line.starts_with("linux ")) {
        auto path = util::trim(line.substr(6));
        if (auto pos = path.find("vmlinuz-"); pos != std::string_view::npos)
          e.version = std::string(path.substr(pos + 8));
      }
    }
    if (!e.version.empty() && !is_rescue_image(e.version)) entries.push_back(std::move(e));
  }
  return entries;
}

} // namespace

KernelFacts detect_kernels(const util::HostFs& host) {
  KernelFacts k;
  if (auto rel = host.read_attr("/proc/sys/kernel/osrelease"); rel && !rel->empty()) {
    k.running = *rel;
    k.running_source = "/proc/sys/kernel/osrelease";
  } else {
    k.warnings.push_back("running kernel unknown: /proc/sys/kernel/osrelease is not readable");
  }
  for (const auto& name : host.list("/lib/modules"))
    if (host.is_dir("/lib/modules/" + name)) k.module_dirs.push_back(name);
  newest_first(k.module_dirs);
  for (const auto& name : host.list("/boot"))
    if (name.starts_with("vmlinuz-") && name.size() > 8 && !is_rescue_image(name.substr(8)))
      k.installed.push_back(name.substr(8));
  newest_first(k.installed);
  k.installed_source = "/boot/vmlinuz-*";
  if (k.installed.empty() && !k.module_dirs.empty()) {
    k.installed = k.module_dirs;
    k.installed_source = "/lib/modules/* (no /boot/vmlinuz-* found)";
  }
  for (const auto& inst : k.installed)
    if (!host.is_dir("/lib/modules/" + inst))
      k.warnings.push_back(fmt::format("kernel {} has /boot/vmlinuz-{} but no /lib/modules/{}", inst, inst, inst));

  std::string env_path;
  const auto env = read_grubenv(host, env_path);
  auto env_value = [&](const char* key) -> std::pair<std::string, std::string> {
    for (const char* k2 : {"next_entry", key}) {
      auto it = env.find(k2);
      if (it != env.end() && !it->second.empty()) return {k2, it->second};
    }
    return {};
  };

  if (const auto bls = read_bls(host, k.warnings); !bls.empty()) {
    auto [key, saved] = env_value("saved_entry");
    if (!saved.empty()) {
      for (const auto& e : bls)
        if (e.id == saved) {
          k.next_boot = e.version;
          k.next_boot_rule = fmt::format("BLS entry '{}' named by {} in {}", e.id, key, env_path);
        }
      if (k.next_boot.empty())
        k.warnings.push_back(
            fmt::format("{} in {} names '{}', which has no /boot/loader/entries file", key, env_path, saved));
    }
    if (k.next_boot.empty()) {
      std::vector<std::string> versions;
      for (const auto& e : bls)
        versions.push_back(e.version);
      newest_first(versions);
      k.next_boot = versions.front();
      k.next_boot_rule = "newest BLS entry in /boot/loader/entries (no saved_entry)";
    }
  } else if (host.exists("/etc/default/grub")) {
    const std::string def = grub_default(host);
    if (def == "saved") {
      auto [key, saved] = env_value("saved_entry");
      if (!saved.empty()) {
        k.next_boot = kernel_named_in(saved, k.installed);
        if (!k.next_boot.empty())
          k.next_boot_rule = fmt::format("GRUB_DEFAULT=saved; {} in {} names {}", key, env_path, k.next_boot);
        else
          k.warnings.push_back(fmt::format("GRUB_DEFAULT=saved but {} '{}' names no installed kernel", key, saved));
      }
    } else if (!def.empty() && def != "0") {
      k.next_boot = kernel_named_in(def, k.installed);
      if (!k.next_boot.empty())
        k.next_boot_rule = fmt::format("GRUB_DEFAULT in /etc/default/grub names {}", k.next_boot);
      else
        k.warnings.push_back(fmt::format("GRUB_DEFAULT='{}' in /etc/default/grub is not resolved by hpcbake", def));
    }
    if (k.next_boot.empty() && !k.installed.empty()) {
      k.next_boot = k.installed.front();
      k.next_boot_rule = fmt::format("GRUB_DEFAULT={} in /etc/default/grub: newest installed kernel (grub-mkconfig "
                                     "lists kernels newest first)",
                                     def.empty() ? "0 (unset)" : def);
    }
  }
  if (k.next_boot.empty() && !k.installed.empty()) {
    k.next_boot = k.installed.front();
    k.next_boot_rule = "newest installed kernel (no boot loader configuration found)";
  }
  if (!k.running.empty() && !k.next_boot.empty() && k.running != k.next_boot)
    k.warnings.push_back(fmt::format("the next boot uses kernel {}, not the running {}: modules must be built for both",
                                     k.next_boot, k.running));
  return k;
}

} // namespace hpcbake::detect
