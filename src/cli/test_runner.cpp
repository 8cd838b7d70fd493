#include "cli/test_runner.hpp"

#include <atomic>

namespace hpcbake::cli {

namespace {
std::atomic<const RunnerFactory*> g_factory{nullptr};
} // namespace

void install_test_runner(const RunnerFactory* factory) {
  g_factory = factory;
}

std::unique_ptr<exec::Runner> make_runner() {
  if (const RunnerFactory* f = g_factory)
    if (auto runner = f->make()) return runner;
  return std::make_unique<exec::SystemRunner>();
}

} // namespace hpcbake::cli
