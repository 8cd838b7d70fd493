#pragma once
// A vendor library opened at run time (dlopen), so one hpcbake binary runs on hosts with
// and without the NVIDIA driver or rdma-core: a missing library becomes a failed check
// that names the library and the package to install, never a link error or a crash.
// The handle is move-only and closed on destruction; symbols are looked up by name.
#include "util/error.hpp"

#include <string>

namespace hpcbake::verify {

class DynLib {
public:
  // dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE), searched the loader's way (LD_LIBRARY_PATH,
  // ld.so.cache, /lib, /usr/lib). `install_hint` says what provides the library.
  static Result<DynLib> open(const std::string& soname, const std::string& install_hint);

  DynLib(DynLib&& other) noexcept;
  DynLib& operator=(DynLib&& other) noexcept;
  DynLib(const DynLib&) = delete;
  DynLib& operator=(const DynLib&) = delete;
  ~DynLib();

  const std::string& soname() const { return soname_; }
  // The symbol's address, or nullptr when the library does not export it.
  void* symbol(const char* name) const;
  // Looks `name` up into `fn`; false (and fn = nullptr) when it is missing.
  template <typename F> bool bind(F*& fn, const char* name) const {
    fn = reinterpret_cast<F*>(symbol(name));
    return fn != nullptr;
  }
  // Like bind, but a missing symbol is an error naming the library (an ABI too old).
  template <typename F> Status require(F*& fn, const char* name) const {
    if (bind(fn, name)) return {};
    return missing(name);
  }

private:
  DynLib(std::string soname, void* handle) : soname_(std::move(soname)), handle_(handle) {}
  std::unexpected<Error> missing(const char* name) const;

  std::string soname_;
  void* handle_ = nullptr;
};

} // namespace hpcbake::verify
