#pragma once
// The resume unit: a oneshot systemd unit that continues an install on the next boot. Its one
// definition is packaging/systemd/hpcbake-resume.service (embedded at build time); what
// varies per install is the ExecStart of a drop-in, quoted the way systemd parses a command
// line (systemd.service(5) "Command lines", systemd.syntax(7)):
//   - every word in double quotes, with \" and \\ escaped C-style;
//   - % is a specifier and is written %%; $ in an argument starts a variable and is written $$
//     (the executable is not expanded: its $ stays as it is);
//   - control characters in an argument are written as \xNN escapes;
//   - systemd refuses an executable path holding a quote, a backslash or a control character
//     ("Executable name contains special characters"), so such a path is refused here too.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace hpcbake::install {

// The ExecStart= value for argv (argv[0] absolute). Errors: usage, for an executable path
// systemd cannot run (see above), naming the path and what to do.
Result<std::string> systemd_exec_line(const std::vector<std::string>& argv);

// Writes the unit (when its content differs), the drop-in with ExecStart=argv, and the
// enablement symlink (what `systemctl enable` makes, so it also works under --root), each
// atomically. The unit never reboots by itself: argv should carry --reboot=exit.
Status write_resume_unit(const util::HostFs& host, const std::vector<std::string>& argv);

// Removes enablement, drop-in and unit: the install is complete.
void remove_resume_unit(const util::HostFs& host);

} // namespace hpcbake::install
