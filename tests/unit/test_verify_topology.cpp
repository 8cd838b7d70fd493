// verify/topology: bus ids, PCIe generations, sysfs links, InfiniBand devices, and the GPU <-> HCA
// pairs of a size's published layout.
#include "verify/topology.hpp"

#include "helpers.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

using namespace hpcbake;
namespace topo = verify::topology;
namespace fs = std::filesystem;

TEST_CASE("topology: NVML's and sysfs's bus ids are one spelling") {
  CHECK(topo::normalise_bus_id("00000001:00:00.0") == "0001:00:00.0");
  CHECK(topo::normalise_bus_id("0001:00:00.0") == "0001:00:00.0");
  CHECK(topo::normalise_bus_id("0000000A:00:00.0") == "000a:00:00.0");
  CHECK(topo::normalise_bus_id("00000000:4F:00.0") == "0000:4f:00.0");
  CHECK(topo::normalise_bus_id("10001:00:00.0") == "10001:00:00.0");
  CHECK(topo::normalise_bus_id("mlx5_ib0") == "mlx5_ib0");
}

TEST_CASE("topology: link speeds as Linux and NCCL write them are PCIe generations") {
  CHECK(topo::pcie_generation("2.5 GT/s PCIe") == 1);
  CHECK(topo::pcie_generation("8.0 GT/s PCIe") == 3);
  CHECK(topo::pcie_generation("16.0 GT/s PCIe") == 4);
  CHECK(topo::pcie_generation("32.0 GT/s PCIe") == 5);
  CHECK(topo::pcie_generation("64.0 GT/s PCIe") == 6);
  CHECK(topo::pcie_generation("32 GT/s") == 5); // kernels before 5.6
  CHECK(topo::pcie_generation("5 GT/s") == 2);
  CHECK(topo::pcie_generation("Unknown") == 0);
  CHECK(topo::pcie_generation("") == 0);
  CHECK(topo::pcie_generation("32.0 GT/s PCIe garbage") == 0);
}

TEST_CASE("topology: an HCA's link and PCI address come from sysfs") {
  const auto root = test::scratch("topology-sysfs");
  const auto dev = root / "sys/bus/pci/devices/0101:00:00.0";
  test::write(dev / "current_link_speed", "16.0 GT/s PCIe\n");
  test::write(dev / "current_link_width", "8\n");
  test::write(dev / "max_link_speed", "32.0 GT/s PCIe\n");
  test::write(dev / "max_link_width", "16\n");
  fs::create_directories(root / "sys/class/infiniband/mlx5_ib0");
  fs::create_symlink("../../../bus/pci/devices/0101:00:00.0", root / "sys/class/infiniband/mlx5_ib0/device");
  test::write(root / "sys/class/infiniband/mlx5_ib0/ports/1/link_layer", "InfiniBand\n");
  test::write(root / "sys/class/infiniband/rxe0/ports/1/link_layer", "Ethernet\n"); // soft RoCE: no PCI function
  const util::HostFs host(root);

  const auto link = topo::sysfs_pcie_link(host, "0101:00:00.0");
  REQUIRE(link.has_value());
  CHECK(link->gen == 4);
  CHECK(link->max_gen == 5);
  CHECK(link->width == 8);
  CHECK(link->max_width == 16);
  CHECK(link->speed == "16.0 GT/s PCIe");
  CHECK_FALSE(topo::sysfs_pcie_link(host, "0102:00:00.0").has_value());

  const auto ibs = topo::infiniband_devices(host);
  REQUIRE(ibs.size() == 2);
  CHECK(ibs[0].name == "mlx5_ib0");
  CHECK(ibs[0].bus_id == "0101:00:00.0");
  CHECK(ibs[0].link_layer == "InfiniBand");
  CHECK(ibs[1].name == "rxe0");
  CHECK(ibs[1].bus_id.empty());
  CHECK(ibs[1].link_layer == "Ethernet");
}

TEST_CASE("topology: ND H100 v5's layout pairs each GPU with the HCA under its PCIe switch") {
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "ubuntu-22.04";
  const auto p = plan::make_plan(test::shipped_manifests(), r);
  REQUIRE(p.has_value());
  const auto step = std::find_if(p->steps.begin(), p->steps.end(),
                                 [](const plan::Step& s) { return s.as<plan::VerifyStep>() != nullptr; });
  REQUIRE(step != p->steps.end());
  const auto& layout = step->as<plan::VerifyStep>()->expect.pci_topology;
  REQUIRE(layout.size() == 16);
  CHECK(layout[0].bridge == "ffff:ff:01.0");

  const auto pairs = topo::gpu_hca_pairs(layout);
  REQUIRE(pairs.size() == 8);
  // manifests/files/nccl/ndv5-topo.xml: GPU 0001 and NIC 0101 under ffff:ff:01.0 on NUMA 0; GPU
  // 000c and NIC 0108 under ffff:ff:08.0 on NUMA 1.
  CHECK(pairs[0].gpu_bus_id == "0001:00:00.0");
  CHECK(pairs[0].hca_bus_id == "0101:00:00.0");
  CHECK(pairs[0].numa == 0);
  CHECK(pairs[7].gpu_bus_id == "000c:00:00.0");
  CHECK(pairs[7].hca_bus_id == "0108:00:00.0");
  CHECK(pairs[7].numa == 1);
  const auto nearest = topo::nearest_hca(layout, "00000009:00:00.0"); // NVML's spelling
  REQUIRE(nearest.has_value());
  CHECK(nearest->hca_bus_id == "0105:00:00.0");
  CHECK_FALSE(topo::nearest_hca(layout, "0004:00:00.0").has_value());
}

TEST_CASE("topology: a GPU with its own children in the layout keeps the switch above it") {
  const auto entries = plan::parse_nccl_topology(
      "<system><cpu numaid=\"0\"><pci busid=\"ffff:ff:01.0\" class=\"0x060400\">"
      "<pci busid=\"0001:00:00.0\" class=\"0x030200\" link_speed=\"\" link_width=\"0\"><gpu dev=\"0\"/></pci>"
      "<pci busid=\"0101:00:00.0\" class=\"0x020700\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"/>"
      "</pci><pci busid=\"0002:00:00.0\" class=\"0x030200\"/></cpu></system>");
  REQUIRE(entries.has_value());
  REQUIRE(entries->size() == 3);
  CHECK((*entries)[0].bridge == "ffff:ff:01.0");
  CHECK((*entries)[1].bridge == "ffff:ff:01.0");
  CHECK((*entries)[2].bridge.empty()); // after </pci>: directly under the CPU
  const auto pairs = topo::gpu_hca_pairs(*entries);
  REQUIRE(pairs.size() == 1);
  CHECK(pairs[0].hca_bus_id == "0101:00:00.0");
}
