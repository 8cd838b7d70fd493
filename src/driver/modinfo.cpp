#include "driver/modinfo.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <libkmod.h>

#include <cstring>
#include <memory>

namespace hpcbake::driver {

struct ModuleReader::Context {
  std::unique_ptr<kmod_ctx, decltype(&kmod_unref)> ctx{nullptr, &kmod_unref};
};

ModuleReader::ModuleReader() : context_(std::make_unique<Context>()) {
  // No module directory is read: the context only decodes the files we name.
  const char* null_config = nullptr;
  context_->ctx.reset(kmod_new("/nonexistent", &null_config));
}

ModuleReader::~ModuleReader() = default;

Result<ModuleInfo> ModuleReader::read(const std::filesystem::path& ko) const {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(ko, ec))
    return fail(ErrorKind::build, fmt::format("{}: module file not found", ko.string()));
  if (!context_->ctx) return fail(ErrorKind::internal, "kmod_new failed");
  kmod_module* raw = nullptr;
  // libkmod keeps one module of a name in its context (another path of that name is -EEXIST while
  // it lives): each is released before the next is read, so updates/x.ko and kernel/.../x.ko both are.
  if (int rc = kmod_module_new_from_path(context_->ctx.get(), ko.c_str(), &raw); rc < 0)
    return fail(ErrorKind::build, fmt::format("{}: not a kernel module: {}", ko.string(), std::strerror(-rc)));
  std::unique_ptr<kmod_module, decltype(&kmod_module_unref)> mod(raw, &kmod_module_unref);
  kmod_list* list = nullptr;
  if (int rc = kmod_module_get_info(mod.get(), &list); rc < 0)
    return fail(ErrorKind::build,
                fmt::format("{}: cannot read the module's .modinfo: {}", ko.string(), std::strerror(-rc)));
  ModuleInfo info;
  info.name = kmod_module_get_name(mod.get());
  for (kmod_list* it = list; it; it = kmod_list_next(list, it)) {
    const std::string key = kmod_module_info_get_key(it);
    const char* v = kmod_module_info_get_value(it);
    const std::string value = v ? v : "";
    if (key == "vermagic")
      info.vermagic = value;
    else if (key == "version")
      info.version = value;
    else if (key == "signer")
      info.signer = value;
    else if (key == "sig_key")
      info.sig_key = value;
    else if (key == "sig_hashalgo")
      info.sig_hashalgo = value;
    else if (key == "intree")
      info.intree = true; // the kernel asks only whether the key is there
  }
  kmod_module_info_free_list(list);
  return info;
}

Result<ModuleInfo> read_module_info(const std::filesystem::path& ko) {
  return ModuleReader().read(ko);
}

Status check_module(const std::filesystem::path& ko, const std::string& kernel,
                    const std::optional<std::string>& signer) {
  HPCBAKE_TRY_ASSIGN(auto info, read_module_info(ko));
  const std::string built_for = info.vermagic.substr(0, info.vermagic.find(' '));
  if (built_for != kernel)
    return fail(ErrorKind::build,
                fmt::format("{}: built for kernel {} (vermagic '{}'), not for {}", ko.string(), built_for,
                            info.vermagic, kernel),
                fmt::format("rebuild against the headers of {} (/lib/modules/{}/build)", kernel, kernel));
  if (signer && info.signer != *signer)
    return fail(ErrorKind::build,
                info.signer.empty()
                    ? fmt::format("{}: not signed, but Secure Boot needs it signed by '{}'", ko.string(), *signer)
                    : fmt::format("{}: signed by '{}', expected '{}'", ko.string(), info.signer, *signer),
                "check the signing key given to hpcbake and the sign-file of this kernel");
  return {};
}

std::string module_name(std::string_view name) {
  std::string s(name);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

namespace {

// "nvidia_uvm.ko.xz" -> "nvidia_uvm"; empty when not a module file.
std::string module_stem(const std::string& file) {
  for (const std::string_view ext : {".ko", ".ko.xz", ".ko.zst", ".ko.gz"})
    if (file.size() > ext.size() && file.ends_with(ext)) return module_name(file.substr(0, file.size() - ext.size()));
  return {};
}

} // namespace

std::optional<std::filesystem::path> find_module(const util::HostFs& host, const std::string& kernel,
                                                 const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = host.resolve("/lib/modules/" + kernel);
  const std::string want = module_name(name);
  std::optional<fs::path> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const auto& p = it->path();
    // build/ and source/ point at the headers: never descend into them.
    if (it.depth() == 0 && it->is_directory(ec) && (p.filename() == "build" || p.filename() == "source")) {
      it.disable_recursion_pending();
      continue;
    }
    if (module_stem(p.filename().string()) != want) continue;
    const bool in_updates = p.lexically_relative(dir).string().starts_with("updates/");
    // A link (RHEL's weak-updates/) is followed inside the root, never on this machine.
    if (!found || in_updates) found = host.resolve("/" + p.lexically_relative(host.root()).generic_string());
    if (in_updates) break;
  }
  return found;
}

} // namespace hpcbake::driver
