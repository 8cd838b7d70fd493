// PCI, InfiniBand, Secure Boot and nouveau against sysfs fixture trees laid out
// like real hosts (tests/fixtures/hosts, see its README).
#include "detect/infiniband.hpp"
#include "detect/pci.hpp"
#include "detect/platform.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace hpcbake;
using detect::PciRole;

namespace {
int count(const std::vector<detect::PciDevice>& devs, PciRole role) {
  return static_cast<int>(std::count_if(devs.begin(), devs.end(), [&](const auto& d) { return d.role == role; }));
}
util::HostFs host(const char* name) {
  return util::HostFs(test::host_fixture(name));
}
} // namespace

TEST_CASE("ND H100 v5: 8 GPUs, 4 NVSwitches, 8 InfiniBand HCAs at 400 Gb/s") {
  auto pci = detect::scan_pci(host("nd96isr_h100_v5"));
  CHECK(count(pci, PciRole::nvidia_gpu) == 8);
  CHECK(count(pci, PciRole::nvswitch) == 4);
  CHECK(count(pci, PciRole::mellanox_ib) == 8);
  CHECK(count(pci, PciRole::mellanox_eth) == 1);
  auto gpu = std::find_if(pci.begin(), pci.end(), [](const auto& d) { return d.role == PciRole::nvidia_gpu; });
  CHECK(gpu->device == 0x2330);
  CHECK(gpu->class_code == 0x030200);

  auto ports = detect::scan_ib_ports(host("nd96isr_h100_v5"));
  REQUIRE(ports.size() == 9); // 8 InfiniBand + Azure's accelerated-networking NIC
  int ib = 0;
  for (const auto& p : ports) {
    if (p.link_layer != "InfiniBand") {
      CHECK(p.device == "mlx5_an0");
      continue;
    }
    ++ib;
    CHECK(p.state_code == 4);
    CHECK(p.state == "ACTIVE");
    CHECK(p.phys_state == "LinkUp");
    CHECK(p.rate_gbps == doctest::Approx(400));
    CHECK(p.port == 1);
  }
  CHECK(ib == 8);
}

TEST_CASE("NVadsA10 v5: one A10, no InfiniBand, Secure Boot on, nouveau loaded") {
  auto h = host("nv36ads_a10_v5");
  auto pci = detect::scan_pci(h);
  CHECK(count(pci, PciRole::nvidia_gpu) == 1);
  CHECK(detect::scan_ib_ports(h).empty());
  auto sb = detect::detect_secure_boot(h);
  CHECK(detect::to_string(sb.state) == std::string("enabled"));
  CHECK(sb.source.find("SecureBoot-8be4df61") != std::string::npos);
  CHECK(detect::detect_modules(h).nouveau_loaded);
}

TEST_CASE("HBv3: no GPU, one HDR port, legacy BIOS boot") {
  auto h = host("hb120rs_v3");
  auto pci = detect::scan_pci(h);
  CHECK(count(pci, PciRole::nvidia_gpu) == 0);
  CHECK(count(pci, PciRole::mellanox_ib) == 1);
  auto ports = detect::scan_ib_ports(h);
  REQUIRE(ports.size() == 1);
  CHECK(ports[0].rate_gbps == doctest::Approx(200));
  CHECK(ports[0].rate_text == "200 Gb/sec (4X HDR)");
  CHECK(detect::to_string(detect::detect_secure_boot(h).state) == std::string("not-uefi"));
}

TEST_CASE("plain VM: the Hyper-V display adapter is not a GPU, nothing to find") {
  auto h = host("plain");
  auto pci = detect::scan_pci(h);
  CHECK_FALSE(pci.empty());
  for (const auto& d : pci)
    CHECK(d.role == PciRole::other);
  CHECK(detect::scan_ib_ports(h).empty());
  CHECK_FALSE(detect::detect_modules(h).nouveau_loaded);
  CHECK_FALSE(detect::detect_waagent(h).installed);
}

TEST_CASE("Secure Boot off on the ND fixture, waagent found with RDMA commented out as shipped") {
  auto h = host("nd96isr_h100_v5");
  CHECK(detect::to_string(detect::detect_secure_boot(h).state) == std::string("disabled"));
  CHECK_FALSE(detect::detect_modules(h).nouveau_loaded);
  auto wa = detect::detect_waagent(h);
  CHECK(wa.installed);
  CHECK(wa.config == "/etc/waagent.conf");
  CHECK_FALSE(wa.enable_rdma.has_value());
}

TEST_CASE("sysfs value formats") {
  int code = 0;
  std::string name;
  CHECK(detect::parse_coded_value("4: ACTIVE", code, name));
  CHECK(code == 4);
  CHECK(name == "ACTIVE");
  CHECK(detect::parse_coded_value("3: Disabled", code, name));
  CHECK_FALSE(detect::parse_coded_value("ACTIVE", code, name));
  CHECK(detect::parse_rate_gbps("2.5 Gb/sec (1X SDR)") == doctest::Approx(2.5));
  CHECK(detect::parse_rate_gbps("100 Gb/sec (2X HDR)") == doctest::Approx(100));
  CHECK_FALSE(detect::parse_rate_gbps("fast").has_value());
  CHECK(detect::classify(0x10de, 0x030000) == PciRole::nvidia_gpu);
  CHECK(detect::classify(0x10de, 0x068000) == PciRole::nvswitch);
  CHECK(detect::classify(0x15b3, 0x020700) == PciRole::mellanox_ib);
  CHECK(detect::classify(0x1414, 0x030000) == PciRole::other);
}

TEST_CASE("a short or missing SecureBoot variable is 'unknown', not a guess") {
  auto root = test::scratch("efi-short");
  test::write(root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
              std::string("\x06\x00", 2));
  CHECK(detect::to_string(detect::detect_secure_boot(util::HostFs(root)).state) == std::string("unknown"));
}

TEST_CASE("secure boot: every state spells as detect --json always did, and parses back") {
  using detect::SecureBoot;
  const std::pair<SecureBoot, std::string> spelled[] = {{SecureBoot::enabled, "enabled"},
                                                        {SecureBoot::disabled, "disabled"},
                                                        {SecureBoot::not_uefi, "not-uefi"},
                                                        {SecureBoot::unknown, "unknown"}};
  for (const auto& [state, text] : spelled) {
    CHECK(detect::to_string(state) == text);
    CHECK(detect::parse_secure_boot(text) == state);
  }
  CHECK_FALSE(detect::parse_secure_boot("Enabled").has_value());
  CHECK_FALSE(detect::parse_secure_boot("").has_value());
}

TEST_CASE("container: systemd-detect-virt's markers, in its order, under the root") {
  const auto root = test::scratch("container-markers");
  const util::HostFs h(root);
  // The fixture VMs have none of them.
  CHECK(detect::detect_container(host("nd96isr_h100_v5")).engine.empty());
  CHECK(detect::detect_container(h).engine.empty());
  test::write(root / "var/run/secrets/kubernetes.io/serviceaccount/token", "t");
  CHECK(detect::detect_container(h).engine == "kubernetes");
  test::write(root / ".dockerenv", "");
  CHECK(detect::detect_container(h).engine == "docker");
  CHECK(detect::detect_container(h).source == "/.dockerenv");
  test::write(root / "run/.containerenv", "engine=\"podman-4.3.1\"\n");
  CHECK(detect::detect_container(h).engine == "podman");
  test::write(root / "proc/1/environ", std::string("PATH=/usr/bin\0container=lxc\0HOME=/", 34));
  CHECK(detect::detect_container(h).engine == "lxc");
  CHECK(detect::detect_container(h).source == "/proc/1/environ (container=)");
  test::write(root / "run/systemd/container", "systemd-nspawn\n");
  CHECK(detect::detect_container(h).engine == "systemd-nspawn");
  // An empty container= is no answer: the next marker decides.
  std::filesystem::remove(root / "run/systemd/container");
  test::write(root / "proc/1/environ", std::string("container=\0", 11));
  CHECK(detect::detect_container(h).engine == "podman");
}

TEST_CASE("3 GiB sparse sysfs attributes and /proc/modules are refused by name, not read (issue 40 item 8)") {
  auto root = test::scratch("sysfs-huge");
  test::sparse(root / "proc/modules", test::three_gib);
  test::sparse(root / "sys/class/infiniband/mlx5_0/ports/1/state", test::three_gib);
  const util::HostFs host(root);
  const auto mods = detect::detect_modules(host);
  CHECK(mods.source.find((root / "proc/modules").string() + " is 3.0 GiB; /proc/modules is at most 16.0 MiB") !=
        std::string::npos);
  CHECK_FALSE(mods.nouveau_loaded);
  const std::string attr = "/sys/class/infiniband/mlx5_0/ports/1/state";
  CHECK_FALSE(host.read_attr(attr).has_value());
  auto checked = host.read_checked(attr, util::host_file::attribute);
  REQUIRE_FALSE(checked.has_value());
  CHECK(checked.error().message.find("a sysfs or procfs attribute is at most 64.0 KiB") != std::string::npos);
  const auto ports = detect::scan_ib_ports(host); // the port is listed, its state unknown
  REQUIRE(ports.size() == 1);
  CHECK(ports[0].state.empty());
}
