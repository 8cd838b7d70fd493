#include "detect/pci.hpp"

#include "util/strings.hpp"

namespace hpcbake::detect {

namespace {
constexpr std::uint16_t vendor_nvidia = 0x10de;
constexpr std::uint16_t vendor_mellanox = 0x15b3;
constexpr std::uint16_t vendor_amd = 0x1002;
} // namespace

const char* to_string(PciRole role) {
  switch (role) {
  case PciRole::nvidia_gpu:
    return "nvidia-gpu";
  case PciRole::nvswitch:
    return "nvswitch";
  case PciRole::amd_gpu:
    return "amd-gpu";
  case PciRole::mellanox_ib:
    return "mellanox-infiniband";
  case PciRole::mellanox_eth:
    return "mellanox-ethernet";
  case PciRole::other:
    return "other";
  }
  return "other";
}

PciRole classify(std::uint16_t vendor, std::uint32_t class_code) {
  const auto base = (class_code >> 16) & 0xff;
  const auto sub = (class_code >> 8) & 0xff;
  if (vendor == vendor_nvidia) {
    if (base == 0x03) return PciRole::nvidia_gpu;              // VGA (0x0300) or 3D controller (0x0302)
    if (base == 0x06 && sub == 0x80) return PciRole::nvswitch; // bridge, "other"
  }
  if (vendor == vendor_amd && base == 0x03) return PciRole::amd_gpu; // MI200/MI300X: display controller (0x0380)
  if (vendor == vendor_mellanox && base == 0x02) {
    if (sub == 0x07) return PciRole::mellanox_ib;
    if (sub == 0x00) return PciRole::mellanox_eth;
  }
  return PciRole::other;
}

std::vector<PciDevice> scan_pci(const util::HostFs& host) {
  std::vector<PciDevice> out;
  const std::string dir = pci_devices_dir;
  for (const auto& addr : host.list(dir)) {
    const std::string base = dir + "/" + addr + "/";
    auto hex = [&](const char* attr) -> std::int64_t {
      auto v = host.read_attr(base + attr);
      if (!v) return -1;
      return util::parse_int(*v, 16).value_or(-1);
    };
    const auto vendor = hex("vendor"), device = hex("device"), cls = hex("class");
    if (vendor < 0 || device < 0 || cls < 0) continue; // not a device directory
    PciDevice d;
    d.address = addr;
    d.vendor = static_cast<std::uint16_t>(vendor);
    d.device = static_cast<std::uint16_t>(device);
    d.class_code = static_cast<std::uint32_t>(cls);
    d.subsystem_vendor = static_cast<std::uint16_t>(std::max<std::int64_t>(hex("subsystem_vendor"), 0));
    d.subsystem_device = static_cast<std::uint16_t>(std::max<std::int64_t>(hex("subsystem_device"), 0));
    d.role = classify(d.vendor, d.class_code);
    out.push_back(d);
  }
  return out;
}

} // namespace hpcbake::detect
