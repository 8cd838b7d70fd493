#pragma once
// The health units `seal` writes into the image and enables, so that every VM made from it checks
// itself (docs/health.md):
//   hpcbake-verify-boot.service      `verify --boot --level 1` once per boot; WantedBy=multi-user.target
//   hpcbake-verify-periodic.service  `verify --boot --level 0` (XID scan included), started by the timer
//   hpcbake-verify.timer             every 15 minutes; WantedBy=timers.target
// Their one definition is packaging/systemd/ (embedded at build time). What varies is the
// executable: ExecStart names the hpcbake seal runs as (where the install put it, as the resume
// unit does: install/resume_unit.hpp), with --root for a tree, quoted the way systemd parses a
// command line. Enabled as `systemctl enable` does, by symlinks in the [Install] target's .wants/
// directory under /etc/systemd/system, so it also works under --root.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <string>
#include <vector>

namespace hpcbake::seal {

struct HealthUnit {
  std::string name;       // hpcbake-verify-boot.service
  std::string path;       // host path: /etc/systemd/system/<name>
  std::string wants_link; // host path of the enablement link; empty: not enabled itself (the timer starts it)
  std::string exec_start; // the ExecStart= value written; empty for the timer
  std::string text;       // the unit file as written
};

// The units for the executable `exe` (absolute; empty: /usr/bin/hpcbake). Errors: usage, for a path
// systemd cannot run (install::systemd_exec_line).
Result<std::vector<HealthUnit>> health_units(const util::HostFs& fs, const std::string& exe);

// Writes each unit (atomically, when its content differs) and its enablement link.
Status write_health_units(const util::HostFs& fs, const std::vector<HealthUnit>& units);

} // namespace hpcbake::seal
