#pragma once
// Driver recipes (drivers/<kind>.yaml): what installing one kind of driver means, as data.
// A component manifest names its kind; the recipe says which installer runs it (an NVIDIA
// .run, distro packages, or only modules-load.d), with which arguments, which modules must
// exist afterwards for every target kernel, and whether the packages are held.
#include "manifest/yaml_reader.hpp"
#include "util/error.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::driver {

struct RunInstaller {
  std::vector<std::string> args;
  std::map<std::string, std::vector<std::string>> flavour_args; // open | proprietary
  std::vector<std::string> kernel_args;  // {kernel}
  std::vector<std::string> signing_args; // {key}, {cert}
};

struct Recipe {
  std::string kind;
  std::string file;
  std::string description;
  std::string installer; // nvidia-run | packages | modules-load
  std::optional<RunInstaller> run;
  std::string dkms_name;
  std::vector<std::string> modules;
  std::vector<std::string> modules_load;
  std::map<std::string, std::vector<std::string>> packages; // apt | dnf
  bool packages_from_component = false;
  bool hold = false;
  std::string service;
};

struct Recipes {
  std::map<std::string, Recipe> by_kind;
  const Recipe* find(const std::string& kind) const;
};

// Reads every drivers/*.yaml; problems come back as file:line:column diagnostics.
Result<Recipes> load_recipes(const std::filesystem::path& dir, std::vector<manifest::Diagnostic>* diagnostics = nullptr);

struct RunRequest {
  std::filesystem::path run_file;
  std::string kernel;
  std::string flavour = "open";     // open | proprietary
  std::filesystem::path signing_key; // empty: unsigned
  std::filesystem::path signing_cert;
};

// The installer command line for one kernel: sh-free, `<run_file> <args...>`. An error
// when the recipe has no .run installer or does not offer the flavour.
Result<std::vector<std::string>> run_installer_argv(const Recipe& recipe, const RunRequest& request);

} // namespace hpcbake::driver
