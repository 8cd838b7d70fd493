#pragma once
// PCI devices from sysfs (/sys/bus/pci/devices/*/{vendor,device,class,
// subsystem_vendor,subsystem_device}; Documentation/ABI/testing/sysfs-bus-pci),
// classified into the roles hpcbake cares about.
#include "util/hostfs.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace hpcbake::detect {

enum class PciRole { nvidia_gpu, nvswitch, amd_gpu, mellanox_ib, mellanox_eth, other };
const char* to_string(PciRole role);

struct PciDevice {
  std::string address; // 0001:00:00.0
  std::uint16_t vendor = 0;
  std::uint16_t device = 0;
  std::uint32_t class_code = 0; // 24-bit: base class, subclass, prog-if
  std::uint16_t subsystem_vendor = 0;
  std::uint16_t subsystem_device = 0;
  PciRole role = PciRole::other;
};

inline constexpr const char* pci_devices_dir = "/sys/bus/pci/devices";

PciRole classify(std::uint16_t vendor, std::uint32_t class_code);
std::vector<PciDevice> scan_pci(const util::HostFs& host);

} // namespace hpcbake::detect
