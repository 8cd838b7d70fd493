#include "verify/topology.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <system_error>

namespace hpcbake::verify::topology {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

std::optional<int> small_number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  int v = 0;
  const auto* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, v);
  if (ec != std::errc() || ptr != end || v < 0) return std::nullopt;
  return v;
}

} // namespace

std::string normalise_bus_id(std::string_view bus_id) {
  std::string id = lower(util::trim(bus_id));
  // domain:bus:device.function
  const auto colon = id.find(':');
  if (colon == std::string::npos || colon == 0) return id;
  const std::string_view domain = std::string_view(id).substr(0, colon);
  const std::string_view rest = std::string_view(id).substr(colon + 1);
  if (!hex(domain) || rest.size() != 7 || rest[2] != ':' || rest[5] != '.') return id;
  std::string_view digits = domain;
  while (digits.size() > 4 && digits.front() == '0')
    digits.remove_prefix(1);
  return fmt::format("{:0>4}:{}", digits, rest);
}

int pcie_generation(std::string_view link_speed) {
  // GT/s per lane of each generation (PCIe 1.0 to 6.0), as pci_speed_string writes them; kernels
  // before 5.6 wrote "5 GT/s" and no " PCIe" (NCCL's kvDictPciGen reads both forms).
  static constexpr std::pair<std::string_view, int> table[] = {
      {"2.5 GT/s", 1}, {"5.0 GT/s", 2},  {"5 GT/s", 2},  {"8.0 GT/s", 3},  {"8 GT/s", 3}, {"16.0 GT/s", 4},
      {"16 GT/s", 4},  {"32.0 GT/s", 5}, {"32 GT/s", 5}, {"64.0 GT/s", 6}, {"64 GT/s", 6}};
  const std::string_view s = util::trim(link_speed);
  for (const auto& [text, gen] : table)
    if (s == text || (s.starts_with(text) && s.substr(text.size()) == " PCIe")) return gen;
  return 0;
}

std::optional<PcieLink> sysfs_pcie_link(const util::HostFs& fs, std::string_view bdf) {
  const std::string dir = fmt::format("/sys/bus/pci/devices/{}/", bdf);
  const auto speed = fs.read_attr(dir + "current_link_speed");
  const auto width = fs.read_attr(dir + "current_link_width");
  if (!speed && !width) return std::nullopt;
  PcieLink link;
  link.speed = speed.value_or("");
  link.max_speed = fs.read_attr(dir + "max_link_speed").value_or("");
  link.gen = pcie_generation(link.speed);
  link.max_gen = pcie_generation(link.max_speed);
  link.width = small_number(width).value_or(0);
  link.max_width = small_number(fs.read_attr(dir + "max_link_width")).value_or(0);
  return link;
}

Result<PcieLink> gpu_pcie_link(const nvml::Session& s, nvml::Device dev) {
  const auto& a = s.api();
  PcieLink link;
  std::string first_error;
  int answered = 0;
  const auto ask = [&](nvml::Return (*fn)(nvml::Device, unsigned*), int& into) {
    if (!fn) return;
    unsigned v = 0;
    if (const auto rc = fn(dev, &v); rc == nvml::success) {
      into = static_cast<int>(v);
      ++answered;
    } else if (first_error.empty()) {
      first_error = s.error(rc);
    }
  };
  ask(a.device_get_curr_pcie_link_generation, link.gen);
  ask(a.device_get_max_pcie_link_generation, link.max_gen);
  ask(a.device_get_curr_pcie_link_width, link.width);
  ask(a.device_get_max_pcie_link_width, link.max_width);
  if (answered == 0)
    return fail(ErrorKind::smoke_test,
                first_error.empty() ? "this NVML has no nvmlDeviceGet*PcieLink* entry points" : first_error,
                "`nvidia-smi -q -d PCIE` shows what the driver knows of the link");
  return link;
}

std::vector<IbDevice> infiniband_devices(const util::HostFs& fs) {
  std::vector<IbDevice> out;
  for (const auto& name : fs.list("/sys/class/infiniband")) {
    IbDevice d;
    d.name = name;
    // The link's target names the PCI function last ("../../../0101:00:00.0"); read as it is, so
    // a --root fixture's relative link reads like the host's.
    std::error_code ec;
    const auto target =
        std::filesystem::read_symlink(fs.resolve_entry(fmt::format("/sys/class/infiniband/{}/device", name)), ec);
    if (!ec) d.bus_id = normalise_bus_id(target.filename().string());
    for (const auto& port : fs.list(fmt::format("/sys/class/infiniband/{}/ports", name))) {
      d.link_layer = fs.read_attr(fmt::format("/sys/class/infiniband/{}/ports/{}/link_layer", name, port)).value_or("");
      if (!d.link_layer.empty()) break;
    }
    out.push_back(std::move(d));
  }
  return out;
}

bool is_gpu(const plan::PciTopologyEntry& entry) {
  return entry.pci_class.starts_with("0x0302") || entry.pci_class.starts_with("0x0300");
}

bool is_nic(const plan::PciTopologyEntry& entry) {
  return entry.pci_class.starts_with("0x0207") || entry.pci_class.starts_with("0x0200");
}

std::vector<GpuHcaPair> gpu_hca_pairs(const std::vector<plan::PciTopologyEntry>& layout) {
  std::vector<GpuHcaPair> out;
  for (const auto& gpu : layout) {
    if (!is_gpu(gpu) || gpu.bridge.empty()) continue;
    const auto nic = std::find_if(layout.begin(), layout.end(), [&](const plan::PciTopologyEntry& n) {
      return is_nic(n) && n.bridge == gpu.bridge && n.numa == gpu.numa;
    });
    if (nic == layout.end()) continue;
    out.push_back({normalise_bus_id(gpu.bus_id), normalise_bus_id(nic->bus_id), gpu.numa, gpu.bridge});
  }
  return out;
}

std::optional<GpuHcaPair> nearest_hca(const std::vector<plan::PciTopologyEntry>& layout, std::string_view gpu_bus_id) {
  const std::string want = normalise_bus_id(gpu_bus_id);
  for (auto& p : gpu_hca_pairs(layout))
    if (p.gpu_bus_id == want) return p;
  return std::nullopt;
}

} // namespace hpcbake::verify::topology
