#pragma once
// Small platform facts: Secure Boot (efivars), nouveau, the Azure agent, the
// package manager binary.
#include "detect/secure_boot.hpp"
#include "manifest/manifests.hpp"
#include "util/hostfs.hpp"

#include <optional>
#include <string>

namespace hpcbake::detect {

// The Azure agent's systemd unit: waagent::installed_agent_unit (the distro manifest, then unit
// files under the root); else by os-release ID/ID_LIKE (debian, ubuntu: walinuxagent; others:
// waagent).
std::string agent_unit(const util::HostFs& host, const manifest::DistroManifest* distro);

struct SecureBootFacts {
  SecureBoot state = SecureBoot::unknown;
  std::string source;
  bool setup_mode = false;
};

struct ModuleFacts {
  bool nouveau_loaded = false;
  std::string source;
};

struct WaagentFacts {
  bool installed = false;
  std::string binary;                     // where the agent lives
  std::string config;                     // /etc/waagent.conf when present
  std::optional<std::string> enable_rdma; // effective OS.EnableRDMA
  std::string config_error;               // why /etc/waagent.conf could not be read ("is a FIFO")
};

// Whether this system is a container, as systemd-detect-virt --container decides (its markers,
// under the root): /run/systemd/container (the engine's name, written by systemd-nspawn and
// others), `container=NAME` in PID 1's environment, /run/.containerenv (podman), /.dockerenv
// (docker); then a Kubernetes service account mounted at
// /var/run/secrets/kubernetes.io/serviceaccount (a pod of containerd or CRI-O, which leave none of
// the others). Empty `engine`: none found.
struct ContainerFacts {
  std::string engine; // "docker", "podman", "lxc", "kubernetes", ...
  std::string source; // the marker that said so
};

struct PackageManagerFacts {
  std::string name; // apt | dnf | zypper | empty
  std::string binary;
};

// efivars: SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c is 4 attribute bytes then
// one data byte (1 = on). No /sys/firmware/efi means legacy BIOS boot.
SecureBootFacts detect_secure_boot(const util::HostFs& host);
ModuleFacts detect_modules(const util::HostFs& host);
WaagentFacts detect_waagent(const util::HostFs& host);
PackageManagerFacts detect_package_manager(const util::HostFs& host);
ContainerFacts detect_container(const util::HostFs& host);

} // namespace hpcbake::detect
