#pragma once
// The `verify` verb: smoke tests of a VM size's promises (library: src/verify/).
#include "detect/imds.hpp"
#include "util/paths.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

struct VerifyOptions {
  std::string size, distro;
  std::string profile = "default";
  std::string container_image;
  int level = 1;
  bool json = false;
  bool libraries = false;
  std::string junit;
  long fabric_wait_s = 60;
  std::vector<std::string> ib_devices;
  int gid_index = -1;
  int ib_iterations = 2000;
  double ib_seconds = 10;
  int gpu_bw_mib = 64;
  int p2p_mib = 512;
  double ib_bw_fraction = 0.75;
  bool boot = false;                                          // --boot
  std::string textfile_dir = paths::kNodeExporterTextfileDir; // --textfile-dir
  bool node_state = false;                                    // --node-state
  long wait_s = -1;                                           // --wait; -1: not given
  std::string hardware_checks = "now";                        // --hardware-checks now|deferred
  bool first_boot = false;                                    // --first-boot (with --boot)
};

struct VerifyCommands {
  CLI::App* verify = nullptr;
};

VerifyCommands add_verify_commands(CLI::App& app, VerifyOptions& o);

// Runs `verify` if it was parsed. `root` and `manifests` are the global options; `imds` is
// how the global options say the metadata service may be asked (for the size).
std::optional<int> run_verify_command(const VerifyCommands& cmds, const VerifyOptions& o, const std::string& root,
                                      const std::string& manifests, const detect::ImdsOptions& imds, std::ostream& out,
                                      std::ostream& err);

} // namespace hpcbake::cli
