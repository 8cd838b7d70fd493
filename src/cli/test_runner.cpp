#include "cli/test_runner.hpp"
#include "exec/fixture_root.hpp"

#include <atomic>

namespace hpcbake::cli {

namespace {
std::atomic<const RunnerFactory*> g_factory{nullptr};
} // namespace

void install_test_runner(const RunnerFactory* factory) {
  g_factory = factory;
}

std::unique_ptr<exec::Runner> make_runner(const util::HostFs& host) {
  std::unique_ptr<exec::Runner> runner;
  if (const RunnerFactory* f = g_factory) runner = f->make();
  if (!runner) runner = std::make_unique<exec::SystemRunner>();
  return exec::for_root(host, std::move(runner));
}

} // namespace hpcbake::cli
