#pragma once
// CLI verbs for drivers and kernel modules: extract, module install, module trust, nouveau disable.
#include "archive/extract.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

struct DriverOptions {
  // extract
  std::string archive, dest;
  archive::Limits limits; // --max-bytes, --max-entry-bytes, --max-entries, --max-ratio
  unsigned strip_components = 0;
  bool allow_devices = false, allow_setuid = false;
  // module install
  std::string source, subdir, name, version;
  std::vector<std::string> modules, kernels, directives;
  bool all_kernels = false, no_depmod = false, install_headers = false;
  std::string dkmstree, sourcetree, installtree;
  std::string sign = "auto"; // auto | on | off
  std::string sign_key, sign_cert, key_dir;
  // module trust
  std::string trust_kernel;
  // nouveau disable (and module trust's --distro)
  std::string distro;
  bool force_initramfs = false;
  bool json = false; // the global --json
};

struct DriverCommands {
  CLI::App* extract = nullptr;
  CLI::App* module_install = nullptr;
  CLI::App* module_trust = nullptr;
  CLI::App* nouveau_disable = nullptr;
};

DriverCommands add_driver_commands(CLI::App& app, DriverOptions& o);

// Runs the parsed driver verb, if one was parsed. `root` and `manifests` are the global options.
std::optional<int> run_driver_command(const DriverCommands& cmds, const DriverOptions& o, const std::string& root,
                                      const std::string& manifests, std::ostream& out, std::ostream& err);

} // namespace hpcbake::cli
