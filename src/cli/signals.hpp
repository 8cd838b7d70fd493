#pragma once
// SIGINT, SIGTERM and SIGHUP end every hpcbake run with exit 130, "interrupted" (docs/manual.md,
// EXIT STATUS), from the first instruction of hpcbake's own on: exit_on_stop_signals is installed
// before main (a .preinit_array entry of each binary's main.cpp) and again by entry(). Until a
// verb takes over, a signal ends the process at once (_exit(130)): what it does not finish is what
// a kill would not finish. The long-running verbs (install, fetch) take over with StopSignals:
// the first signal sets a flag the library polls, so the run stops at a consistent point and says
// what was kept; a second one ends the process at once, as the user means it, also with 130.
// A signal the process was started with ignored (nohup, a shell's background job) stays ignored;
// one it was started with blocked is unblocked (and, if it came already, delivered then).
#include "util/error.hpp"

#include <atomic>
#include <csignal>

namespace hpcbake::cli {

// The exit code of an interrupted run.
inline constexpr int kInterruptedExit = static_cast<int>(ExitCode::interrupted);

// Installs the at-once handler for SIGINT, SIGTERM and SIGHUP (each one not ignored) and unblocks
// them: a signal ends the process with _exit(130). Safe to call more than once, from one thread;
// the .preinit_array signature, so main.cpp can name it there.
void exit_on_stop_signals(int argc = 0, char** argv = nullptr, char** envp = nullptr);

class StopSignals {
public:
  StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals();
  const std::atomic<bool>* flag() const;
  bool stopped() const { return flag()->load(); }

private:
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{};
};

} // namespace hpcbake::cli
