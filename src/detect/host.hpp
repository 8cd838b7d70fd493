#pragma once
// detect_host: every fact hpcbake needs about a machine, each with where it came
// from. Pure reading: no fact here changes the host.
#include "detect/imds.hpp"
#include "detect/infiniband.hpp"
#include "detect/kernels.hpp"
#include "detect/os_release.hpp"
#include "detect/pci.hpp"
#include "detect/platform.hpp"
#include "manifest/manifests.hpp"
#include "util/hostfs.hpp"
#include "util/http.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace hpcbake::detect {

struct HostFacts {
  std::string root;
  std::optional<OsRelease> os;
  std::string os_error;
  std::string distro_id; // manifest id the os-release maps to; empty when unsupported
  KernelFacts kernels;
  std::string arch;        // x86_64, aarch64 (the kernel's, as uname -m); empty when unknown
  std::string arch_source; // where it was read
  ImdsFacts imds;
  std::string size_id; // manifest id matching the IMDS vmSize; empty when unknown
  std::vector<PciDevice> pci;
  std::vector<IbPort> ib_ports;
  SecureBootFacts secure_boot;
  ModuleFacts modules;
  WaagentFacts waagent;
  PackageManagerFacts package_manager;
  ContainerFacts container;

  int count(PciRole role) const;
  // Ports whose link layer is InfiniBand (Azure's Ethernet NIC is listed there too).
  int infiniband_ports() const;
};

HostFacts detect_host(const util::HostFs& host, util::HttpClient& http, const ImdsOptions& imds,
                      const manifest::Manifests* manifests);

nlohmann::json to_json(const HostFacts& facts);
std::string render_text(const HostFacts& facts);

} // namespace hpcbake::detect
