#pragma once
// The `seal` verb: refuse (every reason at once) or clean up, write the image manifest and,
// with --deprovision, generalize the VM last (library: src/seal/).
#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

struct SealOptions {
  bool deprovision = false;
  bool remove_signing_key = false;
  bool check_only = false;
  bool json = false;
  // --uefi-db-json: the gallery image version body with the certificate in its UEFI db.
  std::string uefi_db_json, cert, source_id, location;
  std::vector<std::string> target_regions;
  std::string verify = "passed"; // --verify passed|deferred
};

struct SealCommands {
  CLI::App* seal = nullptr;
};

SealCommands add_seal_commands(CLI::App& app, SealOptions& o);

// Runs `seal` if it was parsed. `root` is the global option; the plan is the one install stored.
std::optional<int> run_seal_command(const SealCommands& cmds, const SealOptions& o, const std::string& root,
                                    std::ostream& out, std::ostream& err);

} // namespace hpcbake::cli
