#pragma once
// `seal`: the last step on a build VM before its disk becomes an image. It refuses, listing
// every reason at once, unless the machine is in a state worth capturing:
//   journal.*   the install journal (/var/lib/hpcbake/state.json) exists and is complete
//   plan.*      the plan the install ran (/var/lib/hpcbake/plan.json) is there, and is the one
//               the journal records: modules, packages and the signing key are the plan's
//   reboot.*    no step waits for a reboot, and the distro asks for none (/run/reboot-required)
//   verify.*    `hpcbake verify` passed in this boot (/var/lib/hpcbake/verify.json, boot id); a
//               verify that deferred the hardware checks (a bake on another machine) only with
//               VerifyMode::deferred: the image then records the hardware verdict as pending, and
//               its boot unit runs those checks at the first boot on the size
//   module.*    every DKMS module of the plan is installed for the next-boot kernel, with
//               that kernel's vermagic (libkmod); with Secure Boot on, signed by a key that
//               kernel trusts (its own, or an enrolled MOK: driver/mok.hpp). With Secure Boot
//               off here but on for the image (the db body is asked for, or the plan signs
//               modules and not as a precaution): module.image-secure-boot, judged as the
//               image's VMs will (the kernel's key, the db certificate where the distro's
//               kernel trusts db, what this VM's db and MOK list hold)
//   package.*   the packages the plan holds (Fabric Manager; driver packages, where a
//               variant has any) are installed and held (dpkg status / dnf versionlock list)
//   secret.*    no private key, SAS token, Authorization/bearer header or storage account key
//               in /var/lib/hpcbake, /var/cache/hpcbake, /var/log/hpcbake* or the install's
//               signing key directory (--key-dir) (file and line, never the secret)
//   signing.*   the module-signing private key the plan used (its key, and any private key in
//               its key directory) is not left on the disk: refused, or removed with
//               SigningKey::remove (the certificate stays)
//   waagent.*   with Deprovision::yes, the Azure Linux Agent is installed
//   units.*     the health units can name the hpcbake executable (systemd runs its path)
// Then `seal` removes the signing key (when asked), empties hpcbake's cache, disables
// hpcbake-resume.service (removes its .wants/ links, so no VM made from the image re-runs
// install at boot), writes and enables the health units (hpcbake-verify-boot.service,
// hpcbake-verify.timer: every VM made from the image checks itself; seal/health_units.hpp), writes
// /var/lib/hpcbake/image-manifest.json (components, versions, SHA-256s, kernel, size
// family, the verify summary) and, from the same record, /var/lib/hpcbake/image-sbom.spdx.json
// (SPDX 2.3: seal/sbom.hpp), and with Deprovision::yes runs `waagent -force
// -deprovision+user` last. Every host path goes through util::HostFs, every command through
// exec::Runner.
#include "detect/host.hpp"
#include "exec/runner.hpp"
#include "install/journal.hpp"
#include "install/plan_file.hpp"
#include "plan/plan.hpp"
#include "seal/health_units.hpp"
#include "seal/secrets.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/paths.hpp"
#include "verify/record.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::seal {

inline constexpr const char* kImageManifestPath = paths::kImageManifest;
inline constexpr const char* kStateDir = paths::kStateDir;
inline constexpr const char* kCacheDir = paths::kCacheDir;
inline constexpr const char* kSigningDir = paths::kKeyDir;           // install's default --key-dir
inline constexpr const char* kResumeUnit = "hpcbake-resume.service"; // packaging/systemd
// 2: "plan" (the stored plan's digest); 3: "out_of_tree_modules" (every out-of-tree module of the
// next-boot kernel, its signer and why it loads with Secure Boot on); 4: "health_units" (the boot
// check, its timer and periodic service seal wrote and enabled: seal/health_units.hpp).
inline constexpr int kImageManifestSchema = 5;

enum class SigningKey { refuse, remove };
enum class Deprovision { no, yes };

struct Refusal {
  std::string id;      // stable: "journal.incomplete", "module.missing", "secret.sas-token", ...
  std::string message; // what, and where (path, path:line, step id); never a secret's value
  std::string hint;    // what to do next
};

struct ModuleCheck {
  std::string kernel, name;
  std::string path; // host path; empty when missing
  std::string vermagic, signer, sha256;
  std::string trust; // with Secure Boot on: why the kernel loads it, or why not (driver::module_trust)
  bool ok = false;
};

// An out-of-tree module of the next-boot kernel (driver/out_of_tree.hpp): the plan's DKMS modules
// and every other one (DOCA-OFED's, gdrcopy, anything a package put under updates/ or extra/).
struct OutOfTreeCheck {
  std::string path, name;
  std::string signer, serial; // empty when unsigned
  std::string package;        // the owning package, when known (dpkg); empty otherwise
  std::string trust;          // why the kernel loads it with Secure Boot on, or why not (driver::module_trust)
  bool loads = false;         // the kernel would load it with Secure Boot on
  std::string error;          // it could not be read as a module
};

struct PackageCheck {
  std::string component, name;
  std::string version; // installed version; empty when not installed or unknown
  bool installed = false;
  bool held = false;
};

struct SealRequest {
  const util::HostFs* fs = nullptr;        // required
  const detect::HostFacts* host = nullptr; // required: kernels, os-release
  exec::Runner* runner = nullptr;          // required: rpm queries, the deprovision
  SigningKey signing_key = SigningKey::refuse;
  Deprovision deprovision = Deprovision::no;
  std::string hpcbake_version; // recorded in the image manifest
  // The hpcbake executable the health units run (absolute; where the install put it: the one seal
  // runs as). Empty: /usr/bin/hpcbake, the package's.
  std::string hpcbake_exe;
  // The image's UEFI db body is asked for (seal --uefi-db-json): the modules are judged as a VM made
  // from the image judges them, with Secure Boot on and `uefi_db_cert` (default: the stored plan's
  // certificate) in db where the distro's kernel trusts db for modules.
  bool uefi_db = false;
  std::filesystem::path uefi_db_cert; // --cert, a path on this machine (not under the root); empty: the plan's
  // --verify deferred: a verify record whose hardware checks were deferred is accepted (no check may
  // have failed); the image manifest says the hardware verdict is pending, for the plan's size.
  bool verify_deferred = false;
};

struct SealReport {
  std::vector<Refusal> refusals; // every reason, in the order of the list above
  bool ok() const { return refusals.empty(); }
  install::Journal journal;
  std::optional<verify::Record> verify;
  std::string boot_id;
  std::string next_boot_kernel;
  std::optional<install::StoredPlan> stored; // the plan the install ran (plan.json), with its options
  std::optional<plan::Plan> plan;            // stored->plan, when it is the journal's
  std::vector<ModuleCheck> modules;
  std::vector<OutOfTreeCheck> out_of_tree; // every out-of-tree module of the next-boot kernel
  std::string owners;                      // "dpkg" when `package` was looked up; "" when unknown (rpm)
  std::vector<PackageCheck> packages;
  ScanResult scan;
  std::string key_dir;                   // the install's signing key directory (its --key-dir)
  std::vector<std::string> signing_keys; // host paths of module-signing private keys left on the disk
  std::vector<HealthUnit> health_units;  // what seal writes and enables (units.*)
};

// Checks without changing anything. Errors only for a bad request; every condition that
// blocks sealing is a Refusal in the report.
Result<SealReport> check(const SealRequest& request);

// Host path of the certificate the image's UEFI db or MOK list must trust: the stored plan's
// signing certificate (its --sign-cert, or signing.der in its --key-dir), else signing.der in
// the report's key directory. It may not exist (nothing was signed).
std::string signing_certificate(const util::HostFs& fs, const SealReport& report);

struct SealResult {
  SealReport report;
  bool sealed = false;       // false: refused, nothing was changed (report.refusals says why)
  std::string manifest_path; // host path of the image manifest written
  std::string sbom_path;     // host path of the image SBOM written beside it (seal/sbom.hpp)
  nlohmann::json manifest;
  std::vector<std::string> removed_keys;   // host paths
  std::vector<std::string> disabled_units; // enablement links of kResumeUnit removed (host paths)
  int cache_files_removed = 0;
  std::uintmax_t cache_bytes_freed = 0;
  bool deprovisioned = false;
};

// check(), then (only when nothing refuses): signing key removal, cache cleanup, the image
// manifest, and the deprovision as the very last command. Errors: a host write failed, or
// waagent could not run or failed (the manifest is written by then; the error says so).
Result<SealResult> seal(const SealRequest& request);

// The deprovision command, as run: {"waagent", "-force", "-deprovision+user"}.
std::vector<std::string> deprovision_argv();

} // namespace hpcbake::seal
