#pragma once
// `hpcbake sizes [FILTER] [--gpu MODEL] [--ib] [--json]`: the VM sizes hpcbake knows, with what
// each promises (GPUs, InfiniBand, driver kind). The selection is manifest/catalog.hpp's.
#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>

namespace hpcbake::cli {

struct SizesCliOptions {
  std::string filter; // substring of the size (any spelling) or family
  std::string gpu;    // GPU model, or "none"
  bool infiniband = false;
  bool json = false;
};

CLI::App* add_sizes_command(CLI::App& app, SizesCliOptions& o);

// Runs `sizes` if it was parsed. `manifests` is the global option.
std::optional<int> run_sizes_command(const CLI::App* cmd, const SizesCliOptions& o, const std::string& manifests,
                                     std::ostream& out, std::ostream& err);

} // namespace hpcbake::cli
