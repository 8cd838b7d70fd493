#include "detect/host.hpp"

#include <sys/utsname.h>

#include <algorithm>

namespace hpcbake::detect {

int HostFacts::count(PciRole role) const {
  return static_cast<int>(std::count_if(pci.begin(), pci.end(), [&](const auto& d) { return d.role == role; }));
}

int HostFacts::infiniband_ports() const {
  return static_cast<int>(
      std::count_if(ib_ports.begin(), ib_ports.end(), [](const auto& p) { return p.link_layer == "InfiniBand"; }));
}

HostFacts detect_host(const util::HostFs& host, util::HttpClient& http, const ImdsOptions& imds,
                      const manifest::Manifests* manifests) {
  HostFacts f;
  f.root = host.root().string();
  if (auto os = read_os_release(host)) {
    f.os = *os;
    if (manifests)
      if (const auto* d = manifests->match_distro(os->id(), os->version_id())) f.distro_id = d->id;
  } else {
    f.os_error = os.error().message;
  }
  f.kernels = detect_kernels(host);
  // The kernel's architecture: /proc/sys/kernel/arch (what uname -m prints) under the root, so a
  // fixture machine says its own; this process's uname only on the real root.
  if (auto a = host.read_attr("/proc/sys/kernel/arch"); a && !a->empty()) {
    f.arch = *a;
    f.arch_source = "/proc/sys/kernel/arch";
  } else if (struct utsname u{}; host.is_real_root() && ::uname(&u) == 0) {
    f.arch = u.machine;
    f.arch_source = "uname(2)";
  }
  f.imds = query_imds(http, imds);
  if (manifests && f.imds.on_azure)
    if (const auto* s = manifests->find_size(f.imds.vm_size)) f.size_id = s->id;
  f.pci = scan_pci(host);
  f.ib_ports = scan_ib_ports(host);
  f.secure_boot = detect_secure_boot(host);
  f.modules = detect_modules(host);
  f.waagent = detect_waagent(host);
  f.package_manager = detect_package_manager(host);
  f.container = detect_container(host);
  return f;
}

} // namespace hpcbake::detect
