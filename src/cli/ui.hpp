#pragma once
// The global output options every verb honours: --json, -q/--quiet, -v/--verbose.
namespace hpcbake::cli {

struct Ui {
  bool json = false;    // machine-readable output on stdout (JSON-lines events for install and fetch)
  bool quiet = false;   // only errors and the final result: no progress, no step lines
  bool verbose = false; // also each command's output and each decision, as install logs them
};

} // namespace hpcbake::cli
