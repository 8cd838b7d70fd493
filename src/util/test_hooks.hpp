#pragma once
// Test hooks: the few points where a test makes hpcbake do what a real machine never should (a
// SIGKILL at a chosen point, the host's CA certificates looked for elsewhere, the userspace
// resolver forced). The library holds only this interface. What turns hooks on is linked into
// the test binaries alone (tests/seams/: hpcbake-test and the unit tests read them from
// HPCBAKE_TEST_* variables) and installed by their main. The shipped hpcbake installs nothing:
// in it every hook is off and no hook variable is read, or named (tests/release checks).
#include <string>
#include <vector>

namespace hpcbake::util {

enum class TestHook {
  crash_point,        // util::crash_point: SIGKILL at the named point
  crash_after_writes, // install engine: SIGKILL after the Nth journal write
  tls_root,           // util::host_tls_root: the tree the host's CA certificates are looked for in
  rootfs_walk,        // util::open_in_root: "1" forces the userspace walk
};

class TestHooks {
public:
  virtual ~TestHooks() = default;
  // The hook's value; empty: off.
  virtual std::string value(TestHook hook) const = 0;
  // Every hook that is on, as people set it (the variable's name), the runner's included: a
  // test hook on a real machine is refused (preflight.hpp).
  virtual std::vector<std::string> active() const = 0;
};

// Called by a test binary's main, before any thread starts; `hooks` outlives every use.
void install_test_hooks(const TestHooks* hooks);
// The installed hooks' value of `hook`; empty when off or when none are installed.
std::string test_hook(TestHook hook);
// The installed hooks that are on; empty when none are installed.
std::vector<std::string> active_test_hooks();

} // namespace hpcbake::util
