#pragma once
// The `install` verb's command line: its options, the prompt, Ctrl-C, rendering and exit codes.
// What an install is lives in the library (install/run.hpp).
#include "cli/ui.hpp"
#include "install/run.hpp"

#include <CLI/CLI.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

struct InstallOptions {
  bool yes = false;
  bool dry_run = false;
  bool resume_unit = false;
  bool resume = false;         // continue the stored plan (install/plan_file.hpp)
  std::string reboot = "exit"; // exit | auto | never
  long lock_timeout_s = 600;
  int jobs = 4;
  int verify_level = 1;
  std::vector<std::string> ib_devices; // passed to verify (soft-RoCE: rxe0)
  double ib_seconds = 10;              // passed to verify
  long fabric_wait_s = 60;
  std::string sign_key, sign_cert, key_dir;
};

void add_install_options(CLI::App& install, InstallOptions& o);

// The install options given with --resume that the stored plan's options would otherwise set.
std::vector<std::string> resume_conflicts(const InstallOptions& o);

// `rq` comes with what the global and shared options say (app.cpp): manifests, the resolve
// request, artifacts. This adds install's own options and runs it.
int run_install(const InstallOptions& o, const Ui& ui, install::InstallRequest rq, std::ostream& out,
                std::ostream& err);

} // namespace hpcbake::cli
