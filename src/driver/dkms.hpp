#pragma once
// DKMS, driven for every kernel that will boot. The commonest GPU-image failure is a
// module built for the running kernel while the VM boots another, so hpcbake builds for
// each target kernel, reads DKMS's exit status instead of trusting its chatter, and checks
// every module it installed (driver/modinfo.hpp).
//
// DKMS 3.x exit statuses (dkms(8) and /usr/sbin/dkms): 0 done; 77 BUILD_EXCLUSIVE_* left
// this kernel out; 1 with "kernel headers ... cannot be found" when /lib/modules/K/build
// is missing; 10 the module's make failed (make.log in <dkmstree>/NAME/VERSION/build);
// 5 already installed for that kernel; 6 install aborted (no such kernel, depmod failed).
//
// Signing: DKMS signs what it builds when it finds a sign-file; with no key configured it
// quietly generates /var/lib/dkms/mok.key. hpcbake always decides: it passes its own key
// (sign_file, mok_signing_key, mok_certificate in DKMS's environment) or points sign_file
// at nothing, so DKMS neither signs nor makes keys behind the user's back.
//
// DKMS 2.8 (Ubuntu 22.04's: dkms 2.8.7-2ubuntu2, jammy-updates 2.8.7-2ubuntu2.2, on the upstream
// 2.8.7 tarball; https://packages.ubuntu.com/source/jammy/dkms) reads none of those three: it
// signs with `sign_tool`, a program it runs as `sign_tool KERNELVER MODULE` on each built module
// before copying it out, taken from the environment or /etc/dkms/framework.conf (dell/dkms@5c5d557
// (v2.8.7) dkms: run_sign_tool, do_build). 3.0 has no sign_tool and reads sign_file/mok_* through
// read_framework_conf (dell/dkms@3f72c9b (v3.0.10) dkms.in). So with a key, hpcbake passes both: DKMS 3.0
// signs through sign_file/mok_*, DKMS 2.8 through sign_tool (sign_tool_script). The installed
// modules' signer is checked either way (check_installed): DKMS 2.8's sign_build re-signs with
// Ubuntu's MOK where kmodsign and /var/lib/shim-signed/mok/ exist, and that is refused there.
#include "driver/signing.hpp"
#include "exec/runner.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::driver {

struct DkmsTrees {
  std::filesystem::path dkms_tree;    // --dkmstree; empty: DKMS's /var/lib/dkms
  std::filesystem::path source_tree;  // --sourcetree; empty: /usr/src
  std::filesystem::path install_tree; // --installtree; empty: /lib/modules
};

struct DkmsOptions {
  DkmsTrees trees;
  bool depmod = true;
  std::optional<SigningKey> signing; // sign with this key; nullopt: do not sign
  std::filesystem::path sign_file;   // required with signing (find_sign_file)
  std::filesystem::path sign_tool;   // DKMS 2.8's sign_tool with signing (sign_tool_script); empty: not passed
  // Signing left to DKMS's own configuration (framework.conf, the distribution's MOK), as the
  // package whose modules these are would have it; otherwise DKMS signs only with `signing`.
  bool dkms_signs = false;
  std::filesystem::path kernel_modules_dir = "/lib/modules"; // where headers are looked for (root-resolved)
  // Where a failed build's make.log is kept (NAME-VERSION-KERNEL.make.log), root-resolved. Set,
  // each kernel's log outlives DKMS's build directory and a failure is rolled back (roll_back);
  // empty: the log stays where DKMS left it (the next kernel's build replaces it), nothing undone.
  std::filesystem::path log_dir;
};

struct ModuleSpec {
  std::string name;                    // DKMS PACKAGE_NAME, e.g. "hpcbake-fixture"
  std::string version;                 // PACKAGE_VERSION
  std::vector<std::string> modules;    // built module names, e.g. {"hpcbake_fixture"}
  std::vector<std::string> directives; // extra dkms.conf lines, e.g. BUILD_EXCLUSIVE_KERNEL="^6\."
};

enum class BuildOutcome { installed, already_installed, excluded, missing_headers, build_failed, install_failed };
const char* to_string(BuildOutcome outcome);

struct KernelBuild {
  std::string kernel;
  BuildOutcome outcome = BuildOutcome::build_failed;
  std::string command;                        // the dkms command line, quoted
  std::string message;                        // what happened, in a sentence
  std::filesystem::path make_log;             // build_failed: where the full log is
  std::string make_log_tail;                  // build_failed: its last lines
  std::string first_error;                    // build_failed: the compiler's first error line
  bool dkms_installed = false;                // `dkms install` succeeded (its modules may still fail the checks)
  std::vector<std::filesystem::path> modules; // installed .ko files, checked
  bool prebuilt = false;                      // installed from prebuilt modules: nothing was compiled
  std::string note;                           // where the modules came from, or why prebuilt ones were not used
  bool ok() const { return outcome == BuildOutcome::installed || outcome == BuildOutcome::already_installed; }
};

// The first line of a build log that reports an error: a compiler diagnostic
// ("nv-pci.c:223:13: error: too few arguments ..."), else a linker, make or kbuild one.
// Empty when the log has none.
std::string first_error(std::string_view log);

// DKMS 2.8's sign_tool for `signing`: a shell script DKMS runs as `SCRIPT KERNELVER MODULE`, which
// signs MODULE with sign-file (sha512, the hash DKMS 2.8's own sign_build and Ubuntu's kernels use).
std::string sign_tool_script(const std::filesystem::path& sign_file, const SigningKey& signing);

// dkms.conf from `conf_template` (drivers/dkms/dkms.conf.in): @NAME@, @VERSION@, @MODULES@, @DIRECTIVES@.
std::string render_dkms_conf(const std::string& conf_template, const ModuleSpec& spec);

class Dkms {
public:
  Dkms(exec::Runner& runner, DkmsOptions options);

  // Copies the module sources in `dir` to <source_tree>/<name>-<version> (replacing an
  // earlier copy) and writes its dkms.conf, unless `dir` ships its own.
  Status register_source(const std::filesystem::path& dir, const ModuleSpec& spec, const std::string& conf_template);

  // `dkms install` (build, sign, install) for one kernel, then checks each module:
  // present, vermagic naming `kernel`, signer when signing. Never throws; the outcome says.
  KernelBuild install(const ModuleSpec& spec, const std::string& kernel);

  // Modules built elsewhere for `kernel` (driver/prebuilt.hpp; the caller has checked them):
  // the sources registered (`dkms add`, so that a later kernel is built from them), the files put
  // where `dkms build` leaves its modules (<dkms_tree>/NAME/VERSION/KERNEL/ARCH/module/), then
  // `dkms install`, which finds them built and compiles nothing (DKMS's own binaries-only
  // tarballs, `dkms ldtarball`, load the same place). The installed modules are checked as
  // install() checks them. A failure removes what was placed, so that install() can build.
  // A version already built for the kernel in the DKMS tree is installed as it is.
  KernelBuild install_prebuilt(const ModuleSpec& spec, const std::string& kernel, const std::string& arch,
                               const std::vector<std::filesystem::path>& files);

  // Deletes <dkms_tree>/NAME/VERSION/KERNEL/ARCH when it lacks a built module (a `dkms install`
  // killed mid-way): DKMS would refuse to build there again. install() calls it first. Only the
  // spec's module names are looked for (any .ko when it names none): a shipped dkms.conf with
  // other DEST_MODULE_NAMEs costs a rebuild, never a wrong result. True when it removed one.
  bool remove_half_built(const ModuleSpec& spec, const std::string& kernel) const;

  // After a failed build_module (install() has kept each failed kernel's make.log in log_dir):
  // removes what this run installed (`dkms remove -k` for each kernel DKMS installed it for),
  // and, when no kernel keeps an install of this version (found installed by this run, or built
  // for another kernel in the DKMS tree), unregisters it (`dkms remove --all`) and deletes its
  // sources: the machine is as before the build, with the logs.
  // A no-op when log_dir is empty. Errors: a removal failed (what is left is named).
  // keep_source: the sources are a package's, used in place in the source tree (its dkms.conf and
  // files are dpkg's or rpm's): never removed.
  Status roll_back(const ModuleSpec& spec, const std::vector<KernelBuild>& builds, bool keep_source = false);

  std::filesystem::path source_dir(const ModuleSpec& spec) const;
  std::filesystem::path dkms_tree() const;
  std::filesystem::path install_tree() const;

private:
  std::vector<std::string> tree_args() const;
  std::vector<std::string> install_argv(const ModuleSpec& spec, const std::string& kernel) const;
  void run_install(KernelBuild& kb, const ModuleSpec& spec);
  bool place_prebuilt(KernelBuild& kb, const ModuleSpec& spec, const std::string& arch,
                      const std::vector<std::filesystem::path>& files);
  void check_installed(KernelBuild& kb, const ModuleSpec& spec) const;
  void check_built(KernelBuild& kb, const ModuleSpec& spec, const std::optional<std::string>& signer) const;
  void record_build_failure(KernelBuild& kb, const ModuleSpec& spec, const exec::Completed& c) const;
  exec::Runner& runner_;
  DkmsOptions opt_;
};

// One line per kernel for people, and the error (build, with hints) when any kernel failed.
std::string summarize(const std::vector<KernelBuild>& builds);
Status overall(const ModuleSpec& spec, const std::vector<KernelBuild>& builds);

// DKMS's autoinstall held off while packages whose postinst would build their modules go in:
// /etc/dkms/no-autoinstall, which /usr/lib/dkms/common.postinst (the dkms postinst of Debian
// and Ubuntu packages, dh_dkms) reads first and then exits 0 ("autoinstall for dkms modules has
// been disabled"). Removed when this object goes, if this made it; a file an administrator put
// there is left alone, and one a killed run left (its first line is kAutoinstallOffMark) is
// taken over and removed.
inline constexpr const char* kNoAutoinstall = "/etc/dkms/no-autoinstall";
inline constexpr const char* kAutoinstallOffMark = "# hpcbake: DKMS autoinstall off while a driver's packages install";

class AutoinstallOff {
public:
  static Result<AutoinstallOff> hold(const util::HostFs& host);
  AutoinstallOff(AutoinstallOff&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  AutoinstallOff& operator=(AutoinstallOff&&) = delete;
  AutoinstallOff(const AutoinstallOff&) = delete;
  ~AutoinstallOff();
  bool ours() const { return !path_.empty(); } // false: an administrator's file, left in place

private:
  explicit AutoinstallOff(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_; // the file to remove; empty when it is not ours
};

// A package's DKMS sources in /usr/src/DIR: its dkms.conf's name, version and BUILD_DEPENDS.
struct DkmsSource {
  std::string dir, name, version;
  std::vector<std::string> depends;
};

// BUILD_DEPENDS of a dkms.conf (dkms(8): "BUILD_DEPENDS[#]= ... this module can not be built
// until the modules it depends on are built"): the DKMS names, literal values only.
std::vector<std::string> dkms_build_depends(const std::string& conf);

// The sources in build order: each after those it names in BUILD_DEPENDS (DOCA's fwctl, iser,
// mlnx-nvme, ... after mlnx-ofed-kernel, whose ib_core they build against), else in the given
// order; a dependency not among them is DKMS's to find, and a cycle keeps the remaining order.
std::vector<DkmsSource> dkms_build_order(std::vector<DkmsSource> sources);

} // namespace hpcbake::driver
