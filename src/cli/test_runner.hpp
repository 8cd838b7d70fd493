#pragma once
// The command runner of the verbs that run host commands (install, seal, bundle modules):
// exec::SystemRunner, unless a test binary installed a factory at start. hpcbake-test (the
// test suite's build of the CLI, tests/seams/) installs one whose runner records commands
// instead of running them (HPCBAKE_TEST_RUNNER=record:FILE, tests/seams/seams.hpp). The
// shipped hpcbake installs none, so it always runs what it is asked to.
#include "exec/runner.hpp"

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

std::unique_ptr<exec::Runner> make_runner();

} // namespace hpcbake::cli
