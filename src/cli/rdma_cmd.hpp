#pragma once
// CLI verbs for the Azure agent's RDMA settings: rdma enable | disable | status.
// The behaviour lives in waagent/rdma.hpp; this file parses flags and prints.
#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>

namespace hpcbake::cli {

struct RdmaCliOptions {
  std::string size;   // judge against this VM size's manifest
  std::string distro; // distro manifest id: config path and service name
  bool json = false;
  bool create = false;     // enable: write a config when none exists
  bool no_restart = false; // never restart the agent
};

struct RdmaCommands {
  CLI::App* enable = nullptr;
  CLI::App* disable = nullptr;
  CLI::App* status = nullptr;
};

RdmaCommands add_rdma_commands(CLI::App& app, RdmaCliOptions& o);

// Runs the parsed rdma verb, if one was parsed. `root` and `manifests` are the global options.
std::optional<int> run_rdma_command(const RdmaCommands& cmds, const RdmaCliOptions& o, const std::string& root,
                                    const std::string& manifests, std::ostream& out, std::ostream& err);

} // namespace hpcbake::cli
