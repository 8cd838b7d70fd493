#include "cli/signals.hpp"

#include <unistd.h>

namespace hpcbake::cli {

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_signal_exit(int) {
  ::_exit(kInterruptedExit);
}

extern "C" void on_stop_signal(int) {
  if (g_stop.exchange(true)) ::_exit(kInterruptedExit);
}

// Sets `handler` for `sig` unless the process was started with `sig` ignored; `old` gets what
// was there.
void take(int sig, void (*handler)(int), struct sigaction* old) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  if (old) *old = now;
  if (now.sa_handler == SIG_IGN) return;
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

} // namespace

void exit_on_stop_signals(int, char**, char**) {
  sigset_t stop;
  sigemptyset(&stop);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    take(sig, on_signal_exit, nullptr);
    sigaddset(&stop, sig);
  }
  // Started with them blocked (a parent that blocked them around fork and exec): one that came
  // before this point is delivered now, and later ones as they come.
  sigprocmask(SIG_UNBLOCK, &stop, nullptr);
}

StopSignals::StopSignals() {
  g_stop = false;
  take(SIGINT, on_stop_signal, &old_int_);
  take(SIGTERM, on_stop_signal, &old_term_);
  take(SIGHUP, on_stop_signal, &old_hup_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
}

const std::atomic<bool>* StopSignals::flag() const {
  return &g_stop;
}

} // namespace hpcbake::cli
