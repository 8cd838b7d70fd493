#pragma once
// The command runner of every verb that runs a program (install, module install, nouveau disable,
// rdma, container configure, seal, verify, bundle): exec::SystemRunner, unless a test binary
// installed a factory at start. hpcbake-test (the test suite's build of the CLI, tests/seams/)
// installs one whose runner records commands instead of running them
// (HPCBAKE_TEST_RUNNER=record:FILE, tests/seams/seams.hpp). Under a --root other than / either
// is wrapped in exec::FixtureRootRunner (exec/fixture_root.hpp): a command that would act on
// this machine instead of the tree never runs. No verb constructs a runner of its own.
#include "exec/runner.hpp"
#include "util/hostfs.hpp"

#include <memory>

namespace hpcbake::cli {

class RunnerFactory {
public:
  virtual ~RunnerFactory() = default;
  // The runner for this process; null: the SystemRunner.
  // A runner that records commands instead of running them says so
  // (exec::Runner::records_machine_commands, the fixture-root rule's exception).
  virtual std::unique_ptr<exec::Runner> make() const = 0;
};

// Called by a test binary's main, before any thread starts; `factory` outlives every use.
void install_test_runner(const RunnerFactory* factory);

// The runner for a verb working on `host` (its --root).
std::unique_ptr<exec::Runner> make_runner(const util::HostFs& host);

} // namespace hpcbake::cli
