#include "manifest/kinds.hpp"

#include <cstddef>
#include <utility>

namespace hpcbake::manifest {

namespace {
constexpr std::pair<DriverKind, const char*> kDriverKinds[] = {
    {DriverKind::cuda, "cuda"}, {DriverKind::grid, "grid"}, {DriverKind::rocm, "rocm"}};
constexpr std::pair<ComponentKind, const char*> kComponentKinds[] = {
    {ComponentKind::nvidia_driver, "nvidia-driver"},
    {ComponentKind::grid_driver, "grid-driver"},
    {ComponentKind::fabric_manager, "fabric-manager"},
    {ComponentKind::dcgm, "dcgm"},
    {ComponentKind::ofed, "ofed"},
    {ComponentKind::peermem, "peermem"},
    {ComponentKind::dkms_module, "dkms-module"},
    {ComponentKind::imex, "imex"},
    {ComponentKind::container_toolkit, "container-toolkit"},
    {ComponentKind::cuda_toolkit, "cuda-toolkit"},
    {ComponentKind::userspace, "userspace"}};
constexpr std::pair<Arch, const char*> kArches[] = {{Arch::x86_64, "x86_64"}, {Arch::aarch64, "aarch64"}};

template <typename E, std::size_t N> const char* name_of(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return "?";
}

template <typename E, std::size_t N>
std::optional<E> value_of(const std::pair<E, const char*> (&table)[N], std::string_view text) {
  for (const auto& [e, name] : table)
    if (text == name) return e;
  return std::nullopt;
}
template <typename E, std::size_t N> std::vector<std::string> names_of(const std::pair<E, const char*> (&table)[N]) {
  std::vector<std::string> out;
  for (const auto& entry : table)
    out.emplace_back(entry.second);
  return out;
}
} // namespace

std::vector<std::string> driver_kind_names() {
  return names_of(kDriverKinds);
}

std::vector<std::string> component_kind_names() {
  return names_of(kComponentKinds);
}

const char* to_string(DriverKind k) {
  return name_of(kDriverKinds, k);
}

std::optional<DriverKind> parse_driver_kind(std::string_view text) {
  return value_of(kDriverKinds, text);
}

const char* to_string(ComponentKind k) {
  return name_of(kComponentKinds, k);
}

std::optional<ComponentKind> parse_component_kind(std::string_view text) {
  return value_of(kComponentKinds, text);
}

const char* to_string(Arch a) {
  return name_of(kArches, a);
}

std::optional<Arch> parse_arch(std::string_view text) {
  return value_of(kArches, text);
}

std::vector<std::string> arch_names() {
  return names_of(kArches);
}

} // namespace hpcbake::manifest
