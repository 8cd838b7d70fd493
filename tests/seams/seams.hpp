#pragma once
// The test hooks of the test binaries: hpcbake-test (the CLI the CLI, chaos and Packer tests run
// when they set a hook) and the unit tests install them from their main. The shipped hpcbake
// links none of this (docs/security.md, "Test hooks").
//
// Each hook is an environment variable; empty means unset. With --root "/" (or none) any of them
// set makes every command refuse to run (util::refuse_test_hooks_on_real_root).
//   HPCBAKE_TEST_CRASH_POINT=NAME       SIGKILL at util::crash_point(NAME)
//   HPCBAKE_TEST_CRASH_AFTER_WRITES=N   install SIGKILLs itself after its Nth journal write
//   HPCBAKE_TEST_TLS_ROOT=DIR           the host's CA certificates are looked for under DIR
//   HPCBAKE_TEST_ROOTFS_WALK=1          host paths resolved by the userspace walk, not openat2
//   HPCBAKE_TEST_RUNNER=record:FILE     install, seal and bundle modules record each command to
//                                       FILE as a JSON line ({"argv": [...]}) and take it as
//                                       succeeded with no output, except:
//   HPCBAKE_TEST_FAIL_COMMANDS=a,b      programs (argv[0] base names) that "fail" with exit 1 and
//                                       the output "simulated failure of NAME";
//   HPCBAKE_TEST_REAL_COMMANDS=a,b      dkms, depmod, dpkg-query or git, which really run;
//   HPCBAKE_TEST_REBOOT=PROGRAM         `systemctl reboot` runs PROGRAM instead, with no
//                                       arguments (the Packer test's reboot: a new boot id, the
//                                       SSH session dropped).
#include <string>
#include <vector>

namespace hpcbake::test {

// Every hook variable, in the order above.
const std::vector<std::string>& hook_variables();

// Installs the hooks (util::install_test_hooks) and the recording runner's factory
// (cli::install_test_runner); at the start of main, before any thread.
void install_test_seams();

} // namespace hpcbake::test
