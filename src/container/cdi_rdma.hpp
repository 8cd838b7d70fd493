#pragma once
// A CDI specification for the InfiniBand HCAs, written by hpcbake (NVIDIA's nvidia-ctk writes only
// the GPUs). CDI: cncf-tags/container-device-interface@05ae4b5bb730a036cb3f79477bd6676eea4a8c83
// SPEC.md ("Kind", "CDI Devices", "OCI Edits"; schema/schema.json, schema/defs.json).
//
// One device per HCA, named as the kernel names it ("mlx5_ib0": Azure's persistent RDMA naming),
// whose edits are its verbs device (/dev/infiniband/uverbsN) and, where the host has them, its
// management devices (umadN, issmN); a device "all" with every HCA's; and, at the top level (made
// whenever any device of the spec is asked for), the RDMA connection manager /dev/infiniband/rdma_cm.
// `podman run --device hpcbake/rdma=all`, containerd's CRI with enable_cdi, or Docker with its CDI
// support enabled give the container those nodes; the memlock limit RDMA needs is not CDI's (it has no
// rlimit edit): the engine's default ulimit or the run options give it (docs/containers.md).
//
// The kind is "hpcbake/rdma": CDI's `vendor/class` form, vendor "hpcbake" (the writer, a plain DNS
// label: no domain is claimed that hpcbake does not own), class "rdma". Not NVIDIA's: nvidia-ctk's
// "nvidia.com/gpu" names GPUs, and Mellanox's k8s-rdma-shared-dev-plugin writes "nvidia.com/net-rdma"
// (Mellanox/k8s-rdma-shared-dev-plugin@410b0f3262b8df521f55dfb925637a8a28ebdda0
// pkg/resources/server.go cdiResourcePrefix, cdiResourceKind), whose devices are PCI addresses: two
// specs of one kind naming the same device would conflict in a CDI registry. The file is
// /var/run/cdi/hpcbake-rdma.yaml, the "vendor-class" name CDI's own writer gives a spec
// (pkg/cdi GenerateSpecName), in the dynamic directory nvidia-cdi-refresh uses too: it is rewritten
// at every boot by `verify --boot` (hpcbake-verify-boot.service, which seal writes with the path of
// the hpcbake it ran as), because the HCAs exist only on the booted size: an image baked on a VM
// without InfiniBand (seal --verify deferred) gets the booted VM's HCAs.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::container {

inline constexpr const char* kRdmaCdiKind = "hpcbake/rdma";
inline constexpr const char* kRdmaCdiSpec = "/var/run/cdi/hpcbake-rdma.yaml";
// The oldest CDI version whose rules this spec meets (device names may start with a digit from
// 0.5.0; nothing newer is used: no annotations, intelRdt, netDevices), so older engines read it.
inline constexpr const char* kRdmaCdiVersion = "0.5.0";

struct Hca {
  std::string name;               // mlx5_ib0
  std::vector<std::string> nodes; // /dev/infiniband/uverbs0, umad0, issm0 (those present)
};

// What sysfs and /dev under the root show.
struct RdmaDevices {
  std::vector<Hca> hcas;             // InfiniBand HCAs with their verbs device present, by name
  std::vector<std::string> shared;   // /dev/infiniband/rdma_cm when present
  std::vector<std::string> left_out; // "mlx5_an0: link layer Ethernet, not InfiniBand", ...
};

// Reads /sys/class/infiniband/<hca>/ports/*/link_layer, /sys/class/infiniband_verbs/uverbsN/ibdev,
// /sys/class/infiniband_mad/{umad,issm}N/ibdev and /dev/infiniband under the root. An HCA none of
// whose ports is InfiniBand (Azure's accelerated-networking VF, Ethernet) or without its verbs
// device node is left out, saying why.
RdmaDevices discover_rdma(const util::HostFs& fs);

// The spec as YAML (CDI accepts YAML and JSON); deterministic. Errors: no HCA (a CDI spec must
// name at least one device).
Result<std::string> render_rdma_spec(const RdmaDevices& devices);

struct RdmaSpecWrite {
  std::string path; // host path
  RdmaDevices devices;
  std::string text;     // the spec (what is or would be written)
  bool changed = false; // written now (or, dry run: would be)
  bool removed = false; // no HCA: a stale spec was removed (or would be)
};
// Writes the spec atomically at `path` (host path, resolved under the root) when its content
// differs; `dry_run` only says what would change. With no HCA the spec cannot be made: a spec left
// from another boot is removed (its devices are not there), and the error says so.
Result<RdmaSpecWrite> write_rdma_spec(const util::HostFs& fs, const std::string& path, bool dry_run);

// A spec read back (verify): its kind, device names, and every device node path it names.
struct RdmaSpecRead {
  std::string cdi_version, kind;
  std::vector<std::string> devices;
  std::vector<std::string> nodes; // device and top-level edits, each once, in order
};
// Errors: not YAML, or not a CDI spec (no kind, no devices list); `where` names the file.
Result<RdmaSpecRead> read_rdma_spec(std::string_view text, const std::string& where);

} // namespace hpcbake::container
