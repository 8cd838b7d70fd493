#pragma once
// The closed vocabularies manifests choose from, as enums. The YAML spells them in lower case
// with dashes; to_string gives that spelling back (errors, plan text, recipe file names).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::manifest {

// Which driver a size runs: the size's `driver.kind`.
enum class DriverKind { cuda, grid, rocm };
const char* to_string(DriverKind k);
std::optional<DriverKind> parse_driver_kind(std::string_view text);
std::vector<std::string> driver_kind_names();
inline bool is_nvidia(DriverKind k) {
  return k != DriverKind::rocm;
}

// What a component is. Its recipe is drivers/<to_string(kind)>.yaml.
enum class ComponentKind {
  nvidia_driver,
  grid_driver,
  fabric_manager,
  dcgm,
  ofed,
  peermem,
  dkms_module,
  imex,              // NVIDIA IMEX: the NVLink multi-node memory export service (GB200/GB300)
  container_toolkit, // NVIDIA Container Toolkit: the nvidia runtime for Docker and containerd
  cuda_toolkit,      // the CUDA toolkit (nvcc, libraries) from NVIDIA's CUDA repository
  userspace          // the HPC/AI userspace (MPI, NCCL, tools): declared in full by its manifest
};
const char* to_string(ComponentKind k);
std::optional<ComponentKind> parse_component_kind(std::string_view text);
std::vector<std::string> component_kind_names();

// A CPU architecture as uname -m spells it: what a size runs on, what a distro manifest, a
// component variant and a repository variant serve.
enum class Arch { x86_64, aarch64 };
const char* to_string(Arch a);
std::optional<Arch> parse_arch(std::string_view text);
std::vector<std::string> arch_names();

} // namespace hpcbake::manifest
