#include "util/test_hooks.hpp"

#include <atomic>

namespace hpcbake::util {

namespace {
std::atomic<const TestHooks*> g_hooks{nullptr};
} // namespace

void install_test_hooks(const TestHooks* hooks) {
  g_hooks = hooks;
}

std::string test_hook(TestHook hook) {
  const TestHooks* h = g_hooks;
  return h ? h->value(hook) : std::string();
}

std::vector<std::string> active_test_hooks() {
  const TestHooks* h = g_hooks;
  return h ? h->active() : std::vector<std::string>();
}

} // namespace hpcbake::util
