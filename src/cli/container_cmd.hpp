#pragma once
// CLI verbs for the NVIDIA runtime in the container engines: container configure | status, and the
// InfiniBand HCAs' CDI spec: container cdi --rdma (container/cdi_rdma.hpp).
// The behaviour lives in container/runtime.hpp; this file parses flags and prints.
#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

struct ContainerCliOptions {
  std::vector<std::string> engines; // docker, containerd; empty: both
  std::string docker_config;        // default /etc/docker/daemon.json
  std::string containerd_config;    // default /etc/containerd/config.toml
  std::string binary;               // the runtime's binary
  bool no_restart = false;
  bool kubernetes = false; // configure: containerd's default runtime nvidia, CDI enabled
  bool rdma = false;       // configure: Docker's default memlock unlimited; cdi: the HCAs' spec
  std::string cdi_output;  // cdi: default /var/run/cdi/hpcbake-rdma.yaml
  bool dry_run = false;    // cdi: print the spec, write nothing
  bool json = false;
};

struct ContainerCommands {
  CLI::App* configure = nullptr;
  CLI::App* status = nullptr;
  CLI::App* cdi = nullptr;
};

ContainerCommands add_container_commands(CLI::App& app, ContainerCliOptions& o);

// Runs the parsed container verb, if one was parsed. `root` is the global option.
std::optional<int> run_container_command(const ContainerCommands& cmds, const ContainerCliOptions& o,
                                         const std::string& root, std::ostream& out, std::ostream& err);

} // namespace hpcbake::cli
