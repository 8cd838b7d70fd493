#pragma once
// Running programs. Every command hpcbake executes on the host goes through a `Runner`,
// so the code that decides WHAT to run can be tested with a runner that runs nothing (the
// tests' `exec::RecordingRunner`, tests/seams/recording_runner.hpp) and only `SystemRunner`
// touches processes.
//
// Contract of `Runner::run`:
//   - an Error only when the program could not be started at all (not found in PATH, not
//     executable, `cwd` missing); the message names argv[0] and the errno. A program that
//     starts and then fails is a `Completed` with `ok() == false`, never an Error, so
//     "exec failed" and "exited with 127" stay distinguishable.
//   - stdout and stderr arrive on one pipe, interleaved as the program wrote them.
//   - the program runs in its own process group; a timeout signals the whole group
//     (SIGTERM, then SIGKILL 5 s later) so helpers it spawned die with it.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::exec {

struct Command {
  std::vector<std::string> argv;        // argv[0] looked up in PATH unless it contains a '/'
  std::vector<std::string> env;         // "KEY=VALUE" added to (or replacing in) the inherited
                                        // environment; a bare "KEY" removes KEY
  std::filesystem::path cwd;            // empty: inherit
  std::chrono::milliseconds timeout{0}; // 0: none; on expiry the whole process group gets
                                        // SIGTERM, then SIGKILL after 5 s
  std::string input;                    // written to stdin; stdin is /dev/null when empty
  std::size_t keep_output = 1 << 20;    // keep at most the last N bytes of stdout+stderr
  // Optional: each chunk of output as it arrives (progress), on the calling thread.
  std::function<void(std::string_view)> on_output;
};

struct Completed {
  int exit_code = -1; // -1 when the program did not exit normally
  int signal = 0;     // the signal that ended it, 0 when it exited
  bool timed_out = false;
  std::chrono::milliseconds timeout{0}; // the limit that expired, when timed_out
  // stdout and stderr interleaved, tail-truncated to keep_output; a truncated output
  // starts with "[... N bytes elided ...]\n".
  std::string output;

  bool ok() const; // exited 0, no signal, no timeout
  // "exited with 3", "killed by signal 9", "timed out after 30s".
  std::string describe() const;
};

class Runner {
public:
  virtual ~Runner() = default;
  virtual Result<Completed> run(const Command& cmd) = 0;
  // True when commands that act on the machine are recorded, never run (tests).
  virtual bool records_machine_commands() const { return false; }
};

// The one rule for a fixture --root, for every verb that changes the machine: a command that acts
// on the running machine rather than on files under the root (restarting a service, rebooting,
// deprovisioning the agent) runs only when the root is /, since under another root the services
// that run are this machine's, not the tree's; or when the runner only records such commands.
bool may_act_on_machine(const util::HostFs& host, const Runner& runner);

// fork+exec. The child gets its own process group, stdin from /dev/null or a pipe, and
// stdout+stderr on one pipe; the parent interleaves writing stdin and draining output with
// poll() so neither a large input nor a large output can deadlock. Safe to call from any
// thread (the child only makes async-signal-safe calls before exec).
class SystemRunner final : public Runner {
public:
  Result<Completed> run(const Command& cmd) override;
};

// A Completed with the given exit code and output (for test runners' answers).
Completed exited(int code, std::string output = {});

// For messages only: "apt-get install -y 'a b'". Arguments made only of characters that
// need no quoting stay bare; others are single-quoted.
std::string shell_quote(const std::vector<std::string>& argv);

} // namespace hpcbake::exec
