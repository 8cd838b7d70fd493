#include "verify/dynlib.hpp"

#include <fmt/format.h>

#include <dlfcn.h>
#include <link.h>

#include <utility>

namespace hpcbake::verify {

Result<DynLib> DynLib::open(const std::string& soname, const std::string& install_hint) {
  // RTLD_NODELETE: libcuda and libnvidia-ml start threads and register exit handlers;
  // unmapping them under those would crash at exit.
  dlerror();
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) {
    const char* why = dlerror();
    return fail(ErrorKind::smoke_test, fmt::format("{} could not be loaded: {}", soname, why ? why : "unknown error"),
                install_hint);
  }
  return DynLib(soname, h);
}

DynLib::DynLib(DynLib&& other) noexcept
    : soname_(std::move(other.soname_)), handle_(std::exchange(other.handle_, nullptr)),
      entry_points_(std::move(other.entry_points_)) {}

DynLib& DynLib::operator=(DynLib&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    soname_ = std::move(other.soname_);
    handle_ = std::exchange(other.handle_, nullptr);
    entry_points_ = std::move(other.entry_points_);
  }
  return *this;
}

DynLib::~DynLib() {
  if (handle_) dlclose(handle_);
}

std::string DynLib::path() const {
  link_map* map = nullptr;
  if (handle_ && dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return soname_;
}

bool LibraryProbe::ok() const {
  if (error) return false;
  for (const auto& e : entry_points)
    if (e.required && !e.found) return false;
  return true;
}

void* DynLib::symbol(const char* name) const {
  return handle_ ? dlsym(handle_, name) : nullptr;
}

std::unexpected<Error> DynLib::missing(const char* name) const {
  return fail(ErrorKind::smoke_test,
              fmt::format("{} does not export {}: the library is older than hpcbake needs", soname_, name),
              "update the package that provides " + soname_);
}

} // namespace hpcbake::verify
