#pragma once
// Owning C handles: Owned (one object, freed by its library's function), and Cleanup, which runs
// what was added, in reverse order, when it goes out of scope: for C APIs whose handles are
// released one by one (a CUDA context and its allocations, verbs objects), whatever path the
// caller leaves by.
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace hpcbake::util {

// A C library's object owned like any other, freed by its own function:
// `util::Owned<X509, X509_free> cert(d2i_X509(...));`
template <auto Free> struct FreeWith {
  template <typename T> void operator()(T* p) const { Free(p); }
};
template <typename T, auto Free> using Owned = std::unique_ptr<T, FreeWith<Free>>;

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
