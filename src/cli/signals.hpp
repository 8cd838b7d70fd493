#pragma once
// Ctrl-C and SIGTERM for long-running verbs (install, fetch): the first one sets a flag the
// library polls, so the run stops at a consistent point and says what was kept; a second one
// ends the process at once, as the user means it.
#include <atomic>
#include <csignal>

namespace hpcbake::cli {

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
  }, old_term_{};
};

} // namespace hpcbake::cli
