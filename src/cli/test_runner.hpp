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
  virtual std::unique_ptr<exec::Runner> make() const = 0;
  // Whether `runner` (one that make() returned) records commands instead of running them.
  virtual bool records(const exec::Runner& runner) const = 0;
};

// Called by a test binary's main, before any thread starts; `factory` outlives every use.
void install_test_runner(const RunnerFactory* factory);

std::unique_ptr<exec::Runner> make_runner();

// True for a test runner that records commands: a verb working on a fixture --root may then
// name commands (restart the agent, deprovision) that would otherwise act on this machine
// rather than on the tree.
bool records_commands(const exec::Runner& runner);

} // namespace hpcbake::cli
