#include "driver/modinfo.hpp"

#include <fmt/format.h>
#include <libkmod.h>

#include <cstring>
#include <memory>

namespace hpcbake::driver {

Result<ModuleInfo> read_module_info(const std::filesystem::path& ko) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(ko, ec))
    return fail(ErrorKind::build, fmt::format("{}: module file not found", ko.string()));
  // No module directory is read: the context only decodes the file we name.
  const char* null_config = nullptr;
  std::unique_ptr<kmod_ctx, decltype(&kmod_unref)> ctx(kmod_new("/nonexistent", &null_config), &kmod_unref);
  if (!ctx) return fail(ErrorKind::internal, "kmod_new failed");
  kmod_module* raw = nullptr;
  if (int rc = kmod_module_new_from_path(ctx.get(), ko.c_str(), &raw); rc < 0)
    return fail(ErrorKind::build, fmt::format("{}: not a kernel module: {}", ko.string(), std::strerror(-rc)));
  std::unique_ptr<kmod_module, decltype(&kmod_module_unref)> mod(raw, &kmod_module_unref);
  kmod_list* list = nullptr;
  if (int rc = kmod_module_get_info(mod.get(), &list); rc < 0)
    return fail(ErrorKind::build, fmt::format("{}: cannot read the module's .modinfo: {}", ko.string(), std::strerror(-rc)));
  ModuleInfo info;
  info.name = kmod_module_get_name(mod.get());
  for (kmod_list* it = list; it; it = kmod_list_next(list, it)) {
    const std::string key = kmod_module_info_get_key(it);
    const char* v = kmod_module_info_get_value(it);
    const std::string value = v ? v : "";
    if (key == "vermagic") info.vermagic = value;
    else if (key == "version") info.version = value;
    else if (key == "signer") info.signer = value;
    else if (key == "sig_hashalgo") info.sig_hashalgo = value;
  }
  kmod_module_info_free_list(list);
  return info;
}

Status check_module(const std::filesystem::path& ko, const std::string& kernel, const std::optional<std::string>& signer) {
  auto info = read_module_info(ko);
  if (!info) return std::unexpected(info.error());
  const std::string built_for = info->vermagic.substr(0, info->vermagic.find(' '));
  if (built_for != kernel)
    return fail(ErrorKind::build,
                fmt::format("{}: built for kernel {} (vermagic '{}'), not for {}", ko.string(), built_for, info->vermagic, kernel),
                fmt::format("rebuild against the headers of {} (/lib/modules/{}/build)", kernel, kernel));
  if (signer && info->signer != *signer)
    return fail(ErrorKind::build,
                info->signer.empty()
                    ? fmt::format("{}: not signed, but Secure Boot needs it signed by '{}'", ko.string(), *signer)
                    : fmt::format("{}: signed by '{}', expected '{}'", ko.string(), info->signer, *signer),
                "check the signing key given to hpcbake and the sign-file of this kernel");
  return {};
}

} // namespace hpcbake::driver
