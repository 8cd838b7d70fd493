#pragma once
// A vendor library opened at run time (dlopen), so one hpcbake binary runs on hosts with
// and without the NVIDIA driver or rdma-core: a missing library becomes a failed check
// that names the library and the package to install, never a link error or a crash.
// The handle is move-only and closed on destruction; symbols are looked up by name.
#include "util/error.hpp"

#include <optional>
#include <string>
#include <vector>

namespace hpcbake::verify {

// Whether verify can use a library without an entry point (the `need` column of the entry-point
// tables, nvml_entry_points.def and cuda_entry_points.def).
enum class Need { required, optional };

// One symbol the binding code asked for, and whether the library had it.
struct EntryPoint {
  std::string name;
  bool required = false; // verify cannot use the library without it
  bool found = false;
};

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
  // The file the loader chose for the soname (its link map name); the soname when unknown.
  std::string path() const;
  // The symbol's address, or nullptr when the library does not export it.
  void* symbol(const char* name) const;
  // Looks `name` up into `fn`; false (and fn = nullptr) when it is missing. Recorded in
  // entry_points() as optional.
  template <typename F> bool bind(F*& fn, const char* name) {
    fn = reinterpret_cast<F*>(symbol(name));
    entry_points_.push_back({name, false, fn != nullptr});
    return fn != nullptr;
  }
  // Like bind, but a missing symbol is an error naming the library (an ABI too old).
  template <typename F> Status require(F*& fn, const char* name) {
    fn = reinterpret_cast<F*>(symbol(name));
    entry_points_.push_back({name, true, fn != nullptr});
    if (fn) return {};
    return missing(name);
  }
  // require or bind, as `need` says; a missing optional symbol is not an error.
  template <typename F> Status look_up(F*& fn, const char* name, Need need) {
    if (need == Need::required) return require(fn, name);
    bind(fn, name);
    return {};
  }
  // Every symbol bind and require were asked for, in order.
  const std::vector<EntryPoint>& entry_points() const { return entry_points_; }

private:
  DynLib(std::string soname, void* handle) : soname_(std::move(soname)), handle_(handle) {}
  std::unexpected<Error> missing(const char* name) const;

  std::string soname_;
  void* handle_ = nullptr;
  std::vector<EntryPoint> entry_points_;
};

// The first failed require() of a binding, or success: bindings look every symbol up first
// (optional ones too, so a too-old library is reported whole), then call this.
inline Status all_found(const std::vector<Status>& required) {
  for (const auto& s : required)
    if (!s) return std::unexpected(s.error());
  return {};
}

// A vendor library as `verify --libraries` reports it: where the loader found it and which of
// the entry points verify declares it exports. Nothing in it is called (no nvmlInit, no cuInit).
struct LibraryProbe {
  std::string soname;
  std::string path;           // empty when it did not load
  std::optional<Error> error; // dlopen failed (message and install hint)
  std::vector<EntryPoint> entry_points;
  bool ok() const; // loaded, and every required entry point found
};

// Opens `soname` and runs `bind(lib)` (the same binding the checks use), keeping what it looked up.
template <typename Bind> LibraryProbe probe_library(const std::string& soname, const std::string& hint, Bind bind) {
  LibraryProbe p;
  p.soname = soname;
  auto lib = DynLib::open(soname, hint);
  if (!lib) {
    p.error = lib.error();
    return p;
  }
  p.path = lib->path();
  (void)bind(*lib);
  p.entry_points = lib->entry_points();
  return p;
}

} // namespace hpcbake::verify
