#pragma once
// The command runner of the verbs that run host commands (install, seal): exec::SystemRunner,
// or, for tests only, a runner that records commands instead of running them.
//
// HPCBAKE_TEST_RUNNER=record:FILE selects the recording one: every command is appended to FILE
// as a JSON line ({"argv": [...]}) and succeeds with no output, except
//   - programs named in HPCBAKE_TEST_FAIL_COMMANDS (comma-separated argv[0] base names), which
//     "fail" with exit 1 and the output "simulated failure of NAME";
//   - programs named in HPCBAKE_TEST_REAL_COMMANDS (dkms, depmod, dpkg-query), which really run;
//   - `systemctl reboot` when HPCBAKE_TEST_REBOOT names a program: that program runs instead,
//     with no arguments, so that a test can make the reboot visible to whoever drives the
//     machine (the Packer test drops the SSH session and changes the fixture's boot id).
// Nothing else runs.
#include "exec/runner.hpp"

#include <memory>

namespace hpcbake::cli {

std::unique_ptr<exec::Runner> make_runner();

// True for the test runner: commands are recorded, so a verb working on a fixture --root may
// name commands (restart the agent, deprovision) that would otherwise act on this machine
// rather than on the tree.
bool records_commands(const exec::Runner& runner);

} // namespace hpcbake::cli
