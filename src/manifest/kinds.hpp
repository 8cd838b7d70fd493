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
enum class ComponentKind { nvidia_driver, grid_driver, fabric_manager, dcgm, ofed, peermem, dkms_module };
const char* to_string(ComponentKind k);
std::optional<ComponentKind> parse_component_kind(std::string_view text);
std::vector<std::string> component_kind_names();

} // namespace hpcbake::manifest
