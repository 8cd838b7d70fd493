#pragma once
// Runs what was added, in reverse order, when it goes out of scope: for C APIs whose handles
// are released one by one (a CUDA context and its allocations, verbs objects), whatever path
// the caller leaves by.
#include <functional>
#include <utility>
#include <vector>

namespace hpcbake::util {

class Cleanup {
public:
  Cleanup() = default;
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  ~Cleanup() {
    for (auto it = fns_.rbegin(); it != fns_.rend(); ++it)
      (*it)();
  }
  void add(std::function<void()> fn) { fns_.push_back(std::move(fn)); }

private:
  std::vector<std::function<void()>> fns_;
};

} // namespace hpcbake::util
