#pragma once
// The PCI side of a GPU machine: PCIe links (a GPU's through NVML, an HCA's through sysfs), the
// InfiniBand devices and their PCI addresses, and the size's published layout (its NCCL topology
// file, plan::PciTopologyEntry) read as GPU <-> nearest HCA pairs. Used by the topology checks
// (checks_topology.cpp) and by the checks that need a GPU's HCA (GPUDirect RDMA) or a GPU's link
// generation under load (PCIe lowers it at idle).
#include "util/hostfs.hpp"
#include "verify/nvml.hpp"

#include "plan/plan.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::verify::topology {

// A PCI address as sysfs writes it, lower-case with a 4-digit domain: NVML's "00000001:00:00.0"
// and "0001:00:00.0" are both "0001:00:00.0"; a wider domain ("10001:00:00.0") keeps its digits.
// Text that is no PCI address comes back lower-cased, unchanged otherwise.
std::string normalise_bus_id(std::string_view bus_id);

// The PCIe generation of a link speed as Linux writes it in sysfs and NCCL's topology files do
// ("32.0 GT/s PCIe" -> 5; "2.5 GT/s PCIe" -> 1; kernels before 5.6 drop " PCIe"); 0 when unknown.
// Source: torvalds/linux drivers/pci/probe.c pci_speed_string; NVIDIA/nccl src/graph/topo.cc
// kvDictPciGen (the strings NCCL reads from the same files).
int pcie_generation(std::string_view link_speed);

// A PCIe link: current and maximum generation and width (0: not reported).
struct PcieLink {
  int gen = 0, max_gen = 0;
  int width = 0, max_width = 0;
  std::string speed, max_speed; // sysfs text ("32.0 GT/s PCIe"); empty for an NVML link
};

// A PCI device's link from sysfs (/sys/bus/pci/devices/<bdf>/{current,max}_link_{speed,width}),
// or none when the device or its link files are missing.
std::optional<PcieLink> sysfs_pcie_link(const util::HostFs& fs, std::string_view bdf);

// A GPU's link through NVML (nvmlDeviceGet{Curr,Max}PcieLink{Generation,Width}). Fields NVML does
// not report stay 0; errors: none of the four answered (the first error's text).
Result<PcieLink> gpu_pcie_link(const nvml::Session& s, nvml::Device dev);

// The InfiniBand devices of /sys/class/infiniband and the PCI function each is
// (/sys/class/infiniband/<dev>/device, a link to it), sorted by name.
struct IbDevice {
  std::string name;       // "mlx5_ib0"
  std::string bus_id;     // "0101:00:00.0" (normalised); empty when the link cannot be read (a soft device)
  std::string link_layer; // its first port's: "InfiniBand", "Ethernet"; empty when no port says
};
std::vector<IbDevice> infiniband_devices(const util::HostFs& fs);

// A GPU and the HCA nearest it in the size's published layout: the NIC under the same PCIe
// switch (the same `bridge`), in the file's order.
struct GpuHcaPair {
  std::string gpu_bus_id, hca_bus_id; // normalised
  int numa = 0;
  std::string bridge;
};
std::vector<GpuHcaPair> gpu_hca_pairs(const std::vector<plan::PciTopologyEntry>& layout);
// The HCA paired with `gpu_bus_id` (any spelling), or none.
std::optional<GpuHcaPair> nearest_hca(const std::vector<plan::PciTopologyEntry>& layout, std::string_view gpu_bus_id);

// Whether a layout entry is a GPU (PCI class 0x0302xx) or a NIC (0x0207xx InfiniBand, 0x0200xx Ethernet).
bool is_gpu(const plan::PciTopologyEntry& entry);
bool is_nic(const plan::PciTopologyEntry& entry);

} // namespace hpcbake::verify::topology
