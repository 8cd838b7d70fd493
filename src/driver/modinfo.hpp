#pragma once
// What a built kernel module says about itself, read with libkmod (the library behind
// modinfo), and the checks hpcbake makes after every build: the module exists for the
// kernel, its vermagic names that kernel, and it is signed by the expected signer when
// signing is on. A module that fails these would be refused by the kernel at load time,
// long after the image was captured.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::driver {

struct ModuleInfo {
  std::string name;
  std::string vermagic; // "6.1.0-56-amd64 SMP preempt mod_unload modversions "
  std::string version;  // MODULE_VERSION, may be empty
  std::string signer;   // empty when unsigned: the signing certificate's issuer CN
  std::string sig_key;  // "1C:5B:...": that certificate's serial (PKCS#7 issuer and serial)
  std::string sig_hashalgo;
  // modinfo's `intree`: modpost writes MODULE_INFO(intree, "Y") into every module built inside the
  // kernel tree and never into an external one (torvalds/linux@11db24b67feaf8d80db73943bf5425369f22ae27
  // scripts/mod/modpost.c, add_intree_flag(&buf, !external_module)); the kernel taints O when the key
  // is absent, whatever its value (torvalds/linux@c550f0055c5ddcbe9a909becb774c37c54c217be
  // kernel/module/main.c, check_modinfo: `if (!get_modinfo(info, "intree"))` -> TAINT_OOT_MODULE).
  bool intree = false;
};

Result<ModuleInfo> read_module_info(const std::filesystem::path& ko);

// The same, for many modules: one libkmod context for all of them (a walk of a kernel's modules).
class ModuleReader {
public:
  ModuleReader();
  ~ModuleReader();
  ModuleReader(const ModuleReader&) = delete;
  ModuleReader& operator=(const ModuleReader&) = delete;
  Result<ModuleInfo> read(const std::filesystem::path& ko) const;

private:
  struct Context;
  std::unique_ptr<Context> context_;
};

// vermagic's first word must be `kernel`; `signer`, when given, must match exactly.
Status check_module(const std::filesystem::path& ko, const std::string& kernel,
                    const std::optional<std::string>& signer);

// The kernel's spelling of a module name: '-' and '_' are the same to it ("nvidia-uvm" ->
// "nvidia_uvm").
std::string module_name(std::string_view name);

// The module file for `name` under /lib/modules/<kernel> (resolved under the HostFs root):
// name.ko, .ko.xz, .ko.zst or .ko.gz, '-' and '_' alike, preferring updates/ (where DKMS
// installs) over the rest; build/ and source/ (the headers) are not searched. The one lookup
// install, verify and seal use.
std::optional<std::filesystem::path> find_module(const util::HostFs& host, const std::string& kernel,
                                                 const std::string& name);

} // namespace hpcbake::driver
