#pragma once
// Driver recipes (drivers/<kind>.yaml, beside manifests/): what installing one kind of
// component means, as data, and part of the manifest set: loaded and linted with it,
// overridden with it (--manifests DIR reads DIR/../drivers), carried in bundles, and read by
// the planner only, which turns them into typed plan steps (so they are covered by the step
// digests). The NVIDIA installer's flags, the module list of each driver, the service it
// runs and the modules loaded at boot live here and nowhere else.
#include "manifest/kinds.hpp"
#include "manifest/yaml_reader.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::manifest {

enum class Installer { nvidia_run, packages, modules_load, dkms };
const char* to_string(Installer installer);

struct RunInstaller {
  std::vector<std::string> args;
  std::map<std::string, std::vector<std::string>> flavour_args; // open | proprietary
  std::vector<std::string> kernel_args;                         // {kernel}
  std::vector<std::string> signing_args;                        // {key}, {cert}
};

struct Recipe {
  ComponentKind kind = ComponentKind::nvidia_driver; // the components it installs; the file is named after it
  std::string file;
  std::string description;
  Installer installer = Installer::packages;
  std::optional<RunInstaller> run;       // installer nvidia-run
  std::string dkms_name;                 // the DKMS package the installer registers (nvidia)
  std::vector<std::string> modules;      // modules that must exist for every target kernel afterwards
  std::vector<std::string> modules_load; // written to /etc/modules-load.d/<component>.conf
  std::string service;                   // enabled and started after the install
  std::string service_unit;              // its unit file, written when the installer ships none (.run)
  // Installing from a signed repository (a component variant with `repository`): the packages
  // for each kernel module flavour, after the variant's own (its version pin).
  std::map<std::string, std::vector<std::string>> repository_packages;
  bool hold = false; // the component's packages are held at their version
};

// Where the recipes of the manifest set in `manifest_dir` live: its sibling drivers/.
std::filesystem::path recipes_dir(const std::filesystem::path& manifest_dir);

// Reads every *.yaml of `dir`; problems are appended to `diags` as file:line:column.
std::map<ComponentKind, Recipe> read_recipes(const std::filesystem::path& dir, std::vector<Diagnostic>& diags,
                                             int* files = nullptr);

} // namespace hpcbake::manifest
