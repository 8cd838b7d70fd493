// Rendering of HostFacts: JSON (stable keys, documented in docs/manual.md, "hpcbake detect")
// and a human table.
#include "detect/host.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

namespace hpcbake::detect {

namespace {

std::string hex4(std::uint16_t v) {
  return fmt::format("0x{:04x}", v);
}

nlohmann::json or_null(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

} // namespace

nlohmann::json to_json(const HostFacts& f) {
  using nlohmann::json;
  json j;
  j["schema"] = 1;
  j["root"] = f.root;
  json distro = {{"source", f.os ? f.os->source : std::string()}, {"manifest", or_null(f.distro_id)}};
  if (f.os) {
    distro["id"] = f.os->id();
    distro["version_id"] = f.os->version_id();
    distro["id_like"] = f.os->id_like();
    distro["pretty_name"] = f.os->pretty_name();
  } else {
    distro["error"] = f.os_error;
  }
  j["distro"] = distro;
  j["kernel"] = {{"running", or_null(f.kernels.running)},      {"running_source", f.kernels.running_source},
                 {"installed", f.kernels.installed},           {"installed_source", f.kernels.installed_source},
                 {"module_dirs", f.kernels.module_dirs},       {"next_boot", or_null(f.kernels.next_boot)},
                 {"next_boot_rule", f.kernels.next_boot_rule}, {"warnings", f.kernels.warnings}};
  j["azure"] = {{"on_azure", f.imds.on_azure},
                {"status", f.imds.status},
                {"source", f.imds.source},
                {"vm_size", or_null(f.imds.vm_size)},
                {"size_manifest", or_null(f.size_id)},
                {"location", or_null(f.imds.location)},
                {"vm_id", or_null(f.imds.vm_id)},
                {"zone", or_null(f.imds.zone)},
                {"security_profile", f.imds.security_profile ? *f.imds.security_profile : json(nullptr)}};
  json devices = json::array();
  for (const auto& d : f.pci)
    devices.push_back({{"address", d.address},
                       {"vendor", hex4(d.vendor)},
                       {"device", hex4(d.device)},
                       {"class", fmt::format("0x{:06x}", d.class_code)},
                       {"subsystem_vendor", hex4(d.subsystem_vendor)},
                       {"subsystem_device", hex4(d.subsystem_device)},
                       {"role", to_string(d.role)}});
  j["pci"] = {{"source", pci_devices_dir},
              {"nvidia_gpus", f.count(PciRole::nvidia_gpu)},
              {"nvswitches", f.count(PciRole::nvswitch)},
              {"amd_gpus", f.count(PciRole::amd_gpu)},
              {"mellanox_infiniband", f.count(PciRole::mellanox_ib)},
              {"mellanox_ethernet", f.count(PciRole::mellanox_eth)},
              {"devices", devices}};
  json ports = json::array();
  for (const auto& p : f.ib_ports)
    ports.push_back({{"device", p.device},
                     {"port", p.port},
                     {"state", p.state},
                     {"state_code", p.state_code},
                     {"phys_state", p.phys_state},
                     {"phys_state_code", p.phys_state_code},
                     {"rate_gbps", p.rate_gbps ? json(*p.rate_gbps) : json(nullptr)},
                     {"rate", p.rate_text},
                     {"link_layer", p.link_layer}});
  j["infiniband"] = {{"source", ib_class_dir}, {"infiniband_ports", f.infiniband_ports()}, {"ports", ports}};
  j["arch"] = f.arch.empty() ? json(nullptr) : json(f.arch);
  j["secure_boot"] = {{"state", to_string(f.secure_boot.state)},
                      {"setup_mode", f.secure_boot.setup_mode},
                      {"source", f.secure_boot.source}};
  j["nouveau"] = {{"loaded", f.modules.nouveau_loaded}, {"source", f.modules.source}};
  j["waagent"] = {{"installed", f.waagent.installed},
                  {"binary", or_null(f.waagent.binary)},
                  {"config", or_null(f.waagent.config)},
                  {"os_enable_rdma", f.waagent.enable_rdma ? json(*f.waagent.enable_rdma) : json(nullptr)},
                  {"config_error", or_null(f.waagent.config_error)}};
  j["package_manager"] = {{"name", or_null(f.package_manager.name)}, {"binary", or_null(f.package_manager.binary)}};
  j["container"] = {{"engine", or_null(f.container.engine)}, {"source", or_null(f.container.source)}};
  return j;
}

std::string render_text(const HostFacts& f) {
  std::string out;
  auto row = [&](std::string_view fact, const std::string& value, const std::string& source) {
    out += fmt::format("  {:<16} {}", fact, value);
    if (!source.empty()) out += fmt::format("   [{}]", source);
    out += '\n';
  };
  out += fmt::format("Host facts (root {})\n", f.root);
  if (f.os)
    row("distro",
        // Host bytes: a Latin-1 PRETTY_NAME is shown with U+FFFD, never as raw bytes.
        fmt::format("{} (ID={} VERSION_ID={}) -> {}", util::replace_invalid_utf8(f.os->pretty_name()),
                    util::replace_invalid_utf8(f.os->id()), util::replace_invalid_utf8(f.os->version_id()),
                    f.distro_id.empty() ? "no manifest: unsupported" : f.distro_id),
        f.os->source);
  else
    row("distro", "unknown: " + f.os_error, "");
  row("running kernel", f.kernels.running.empty() ? "unknown" : f.kernels.running, f.kernels.running_source);
  std::string installed;
  for (const auto& k : f.kernels.installed)
    installed += (installed.empty() ? "" : ", ") + k;
  row("installed", installed.empty() ? "none found" : installed, f.kernels.installed_source);
  row("next boot", f.kernels.next_boot.empty() ? "unknown" : f.kernels.next_boot, f.kernels.next_boot_rule);
  row("azure",
      f.imds.on_azure ? fmt::format("{} in {} -> {}", f.imds.vm_size, f.imds.location,
                                    f.size_id.empty() ? "no size manifest" : f.size_id)
                      : f.imds.status,
      f.imds.source);
  row("gpus",
      fmt::format("{} NVIDIA, {} NVSwitch, {} AMD", f.count(PciRole::nvidia_gpu), f.count(PciRole::nvswitch),
                  f.count(PciRole::amd_gpu)),
      pci_devices_dir);
  row("mellanox",
      fmt::format("{} InfiniBand, {} Ethernet", f.count(PciRole::mellanox_ib), f.count(PciRole::mellanox_eth)),
      pci_devices_dir);
  if (f.ib_ports.empty()) row("rdma ports", "none", ib_class_dir);
  for (const auto& p : f.ib_ports)
    row("rdma port",
        fmt::format("{}/{} {} {} {} {}", p.device, p.port, p.state, p.phys_state, p.rate_text, p.link_layer),
        ib_class_dir);
  row("arch", f.arch.empty() ? "unknown" : f.arch, f.arch_source);
  row("secure boot", to_string(f.secure_boot.state), f.secure_boot.source);
  row("nouveau", f.modules.nouveau_loaded ? "loaded (a reboot is needed after blacklisting)" : "not loaded",
      f.modules.source);
  row("waagent",
      f.waagent.installed ? fmt::format("installed, OS.EnableRDMA={}", f.waagent.enable_rdma.value_or("(default)"))
                          : "not installed",
      f.waagent.installed ? f.waagent.binary + (f.waagent.config.empty() ? "" : ", " + f.waagent.config) : "");
  row("package manager", f.package_manager.name.empty() ? "none found" : f.package_manager.name,
      f.package_manager.binary);
  row("container",
      f.container.engine.empty()
          ? "no"
          : fmt::format("yes, {} (install refuses here: it installs on the VM itself)", f.container.engine),
      f.container.source);
  for (const auto& w : f.kernels.warnings)
    out += fmt::format("  warning: {}\n", w);
  if (!f.waagent.config_error.empty()) out += fmt::format("  warning: {}\n", f.waagent.config_error);
  return out;
}

} // namespace hpcbake::detect
