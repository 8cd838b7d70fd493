#pragma once
// A Runner for unit tests (ninja's FakeCommandRunner): records every command and answers from
// rules; never runs anything. It lives with the tests: the shipped binary has no runner that
// does not run what it is asked to.
#include "exec/runner.hpp"

#include <string>
#include <vector>

namespace hpcbake::exec {

class RecordingRunner final : public Runner {
public:
  bool records_machine_commands() const override { return true; }
  struct Rule {
    std::vector<std::string> argv_prefix;
    Completed result;
    int times = -1; // how many more commands it answers; -1: always
  };

  // The most recently added matching rule wins. A result's output is also passed to the
  // command's on_output, as a real run would.
  void on(std::vector<std::string> argv_prefix, Completed result, int times = -1);
  // Unmatched commands succeed with exit 0 and empty output.
  Result<Completed> run(const Command& cmd) override;

  std::vector<Command> calls; // every command, in order
  std::vector<std::vector<std::string>> argvs() const;

private:
  std::vector<Rule> rules_;
};

} // namespace hpcbake::exec
