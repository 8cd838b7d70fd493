#include "detect/platform.hpp"

#include "detect/os_release.hpp"
#include "util/strings.hpp"
#include "waagent/config.hpp"
#include "waagent/rdma.hpp"

#include <algorithm>
#include <string_view>

namespace hpcbake::detect {

namespace {
constexpr const char* efi_global_guid = "8be4df61-93ca-11d2-aa0d-00e098032b8c";

std::optional<unsigned char> efivar_byte(const util::HostFs& host, const std::string& name) {
  auto data = host.read(std::string("/sys/firmware/efi/efivars/") + name + "-" + efi_global_guid,
                        util::host_file::efi_variable);
  if (!data || data->size() < 5) return std::nullopt;
  return static_cast<unsigned char>((*data)[4]);
}
} // namespace

const char* to_string(SecureBoot state) {
  switch (state) {
  case SecureBoot::enabled:
    return "enabled";
  case SecureBoot::disabled:
    return "disabled";
  case SecureBoot::not_uefi:
    return "not-uefi";
  case SecureBoot::unknown:
    break;
  }
  return "unknown";
}

std::optional<SecureBoot> parse_secure_boot(std::string_view text) {
  for (const auto s : {SecureBoot::enabled, SecureBoot::disabled, SecureBoot::not_uefi, SecureBoot::unknown})
    if (text == to_string(s)) return s;
  return std::nullopt;
}

SecureBootFacts detect_secure_boot(const util::HostFs& host) {
  SecureBootFacts f;
  if (!host.is_dir("/sys/firmware/efi")) {
    f.state = SecureBoot::not_uefi;
    f.source = "/sys/firmware/efi (absent: legacy BIOS boot)";
    return f;
  }
  f.source = std::string("/sys/firmware/efi/efivars/SecureBoot-") + efi_global_guid;
  auto sb = efivar_byte(host, "SecureBoot");
  if (!sb) {
    f.state = SecureBoot::unknown;
    f.source += " (unreadable: is efivarfs mounted there?)";
    return f;
  }
  f.state = *sb == 1 ? SecureBoot::enabled : SecureBoot::disabled;
  f.setup_mode = efivar_byte(host, "SetupMode").value_or(0) == 1;
  return f;
}

ModuleFacts detect_modules(const util::HostFs& host) {
  ModuleFacts f;
  auto mods = host.read_checked("/proc/modules", util::host_file::proc_modules);
  if (mods && *mods) {
    f.source = "/proc/modules";
    for (auto line : util::split(**mods, '\n'))
      if (line.starts_with("nouveau ")) f.nouveau_loaded = true;
    return f;
  }
  // Unreadable (too large, not a file): said in the source, and /sys/module asked instead.
  f.source = mods ? "/sys/module/nouveau" : "/sys/module/nouveau (" + mods.error().message + ")";
  f.nouveau_loaded = host.is_dir("/sys/module/nouveau");
  return f;
}

WaagentFacts detect_waagent(const util::HostFs& host) {
  WaagentFacts f;
  for (const char* bin : {"/usr/sbin/waagent", "/usr/bin/waagent", "/usr/local/sbin/waagent"})
    if (host.exists(bin)) {
      f.installed = true;
      f.binary = bin;
      break;
    }
  auto text = host.read_checked(waagent::default_config, util::host_file::config);
  if (!text)
    f.config_error = text.error().message; // a directory, a FIFO, unreadable: said, not fatal
  else if (*text) {
    f.config = waagent::default_config;
    f.enable_rdma = waagent::effective_value(**text, "OS.EnableRDMA");
  }
  return f;
}

std::string agent_unit(const util::HostFs& host, const manifest::DistroManifest* distro) {
  if (auto unit = waagent::installed_agent_unit(host, distro)) return *unit;
  if (auto os = read_os_release(host)) {
    const std::string family = " " + os->id() + " " + os->id_like() + " ";
    if (family.find(" debian ") != std::string::npos || family.find(" ubuntu ") != std::string::npos)
      return "walinuxagent";
  }
  return "waagent";
}

ContainerFacts detect_container(const util::HostFs& host) {
  if (auto name = host.read_attr("/run/systemd/container"); name && !name->empty())
    return {*name, "/run/systemd/container"};
  if (auto env = host.read("/proc/1/environ", util::host_file::proc_environ)) { // readable by root only
    for (std::size_t at = 0; at < env->size();) {
      const std::size_t end = std::min(env->find('\0', at), env->size());
      const std::string_view var(env->data() + at, end - at);
      if (var.starts_with("container=") && var.size() > 10)
        return {std::string(var.substr(10)), "/proc/1/environ (container=)"};
      at = end + 1;
    }
  }
  if (host.exists("/run/.containerenv")) return {"podman", "/run/.containerenv"};
  if (host.exists("/.dockerenv")) return {"docker", "/.dockerenv"};
  if (host.is_dir("/var/run/secrets/kubernetes.io/serviceaccount"))
    return {"kubernetes", "/var/run/secrets/kubernetes.io/serviceaccount"};
  return {};
}

PackageManagerFacts detect_package_manager(const util::HostFs& host) {
  for (auto [name, bin] :
       {std::pair{"apt", "/usr/bin/apt-get"}, std::pair{"dnf", "/usr/bin/dnf"}, std::pair{"zypper", "/usr/bin/zypper"}})
    if (host.exists(bin)) return {name, bin};
  return {};
}

} // namespace hpcbake::detect
