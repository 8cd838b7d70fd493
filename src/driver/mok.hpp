#pragma once
// Whether the kernel will load a module under Secure Boot, answered from files only (so it
// works under --root and on the image's next-boot kernel, not just the running one):
//   - a module signed by the kernel's own build key (the signer of the kernel's in-tree
//     modules, whose certificate is built into the kernel) loads;
//   - a module signed by a Machine Owner Key loads when shim has handed the MOK list to the
//     kernel (MokListRT, which shim mirrors from its boot-services MokList at every boot) and
//     has not marked it untrusted (MokListTrustedRT: shim sets it unless `mokutil
//     --untrusted-mok`; without it the kernel puts MOKs on the .platform keyring, which it
//     does not use for modules);
//   - on kernels that also check the platform keyring (Ubuntu's and RHEL's: the distro
//     manifest's module_keyrings), a module signed by a certificate in the UEFI db, or by any
//     enrolled MOK, loads too;
//   - anything else, and every unsigned module, is refused ("Key was rejected by service").
// The MOK list is the one shim gives the running kernel: /sys/firmware/efi/mok-variables/
// (shim's MOK configuration table, whole) or efivarfs' MokListRT, MokListRT1, ... (shim splits
// a long list). MokNew is an enrollment `mokutil --import` queued and MokManager has not
// confirmed yet. All of them live in the machine's UEFI variables, not on its disk: an image
// made from the disk does not carry them.
#include "driver/modinfo.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::driver {

inline constexpr const char* kShimLockGuid = "605dab50-e046-4300-abb6-3dd810dd8b23";

struct Certificate {
  std::string subject; // the subject's CN (the whole one-line subject when it has no CN)
  std::string issuer;  // likewise; a module's `signer` (modinfo) is its signing certificate's issuer CN
  std::string serial;  // lowercase hex, no separators, no leading zeros: as serial_key() spells sig_key
  std::string der;
  bool ca = false; // a CA certificate (basicConstraints CA:TRUE), as X509_check_ca says
};

// A DER X.509 certificate, parsed (OpenSSL). Errors: not a certificate.
Result<Certificate> parse_certificate(std::string_view der);

// A DER or PEM certificate file.
Result<Certificate> read_certificate(const std::filesystem::path& file);

// EFI_SIGNATURE_LISTs, as in db, MokList and their RT mirrors (UEFI 2.10, 32.4.1): the X.509
// entries; SHA-256 and other hash entries are counted. `what` names the data in errors
// (malformed: a list that overruns the data, or an entry that is not a certificate).
struct SignatureLists {
  std::vector<Certificate> certificates;
  int hashes = 0;
};
Result<SignatureLists> parse_signature_lists(std::string_view data, std::string_view what);

// modinfo's sig_key ("1C:5B:..." for a PKCS#7 signature: the signing certificate's serial) in
// Certificate::serial's spelling.
std::string serial_key(std::string_view sig_key);

struct MokState {
  bool found = false;   // shim handed the kernel a MOK list (it may be empty)
  std::string source;   // what was read
  std::string error;    // a list that could not be parsed (then `enrolled` is empty)
  bool trusted = false; // MokListTrustedRT = 1: the kernel uses MOKs for modules
  std::vector<Certificate> enrolled;
  std::vector<Certificate> pending; // MokNew: queued by `mokutil --import`, not yet confirmed
  std::vector<Certificate> db;      // the firmware's db (efivarfs), for kernels that use .platform
};
MokState read_mok_state(const util::HostFs& host);

// The certificate's place: enrolled (and trusted), pending confirmation, or neither.
enum class Enrollment { enrolled, enrolled_untrusted, pending, not_enrolled, no_mok_list };
Enrollment enrollment_of(const Certificate& cert, const MokState& moks);
const char* to_string(Enrollment e);

// The enrollment of the certificate in `cert_file` (DER or PEM) on this machine; an error when
// the file is not a certificate. `moks` is filled with what was read (its error, if any).
Result<Enrollment> enrollment_of_file(const util::HostFs& host, const std::filesystem::path& cert_file,
                                      MokState* moks = nullptr);

// What to tell a user whose certificate is not enrolled: the one-time `mokutil --import`
// with the console confirmation, which hpcbake never runs itself (it would wait for a
// password), and what an image needs.
std::string enrollment_advice(const std::string& cert_path);

struct KernelKey {
  std::string signer, serial; // the kernel's in-tree modules' signer and serial ("" when unsigned)
  std::string source;         // the module read
};
// The kernel's own module-signing key, from its in-tree modules (kernel/fs, crypto, lib, net,
// ... under /lib/modules/<kernel>; never drivers/, where a dkms.conf may install); nullopt when
// they are unsigned, absent, or two of them disagree.
std::optional<KernelKey> kernel_signing_key(const util::HostFs& host, const std::string& kernel);

struct ModuleTrust {
  bool loads = false;
  std::string how; // which key vouches for it, or why none does: one phrase
  std::string fix; // what to do, where it is not "enroll the certificate"; may be empty
};

// Whether `kernel` (its /boot/config-<kernel>) keeps MOKs that are not CA certificates off its
// machine keyring (CONFIG_INTEGRITY_CA_MACHINE_KEYRING=y, Linux 6.4 on).
bool ca_only_machine_keyring(const util::HostFs& host, const std::string& kernel);

// A distribution's own key for its precompiled modules, compiled into its kernels' built-in
// keyring beside the per-build key (Canonical's "Kernel Module Signing" key: the distro's
// canonical_signed_nvidia.module_signer). It vouches only for a module that dpkg's lists say a
// package named <prefix>...<suffix> installed (linux-modules-nvidia-...-<kernel>): a module that
// merely names that signer, installed by hand or by another package, is not trusted by the name.
struct PackagedModulesKey {
  std::string signer;               // the certificate's subject CN, as the module signature names it
  std::vector<std::string> serials; // its serial numbers (serial_key form): one must match
  std::string package_prefix;       // "linux-modules-nvidia-"
  std::string package_suffix;       // "<kernel>" (the package of exactly the module's kernel)
  std::string source;               // where the signer and serial are published (for messages)
};

// The key for `kernel` from a modules-package pattern ("linux-modules-nvidia-{branch}-...-{kernel}",
// or with the branch resolved): the prefix is the text before the first '{', the suffix the
// kernel and what follows "{kernel}".
PackagedModulesKey packaged_modules_key(std::string signer, std::vector<std::string> serials,
                                        const std::string& modules_package, const std::string& kernel,
                                        std::string source);

// `platform_keyring`: the kernel also checks .platform (DistroManifest::module_keyrings);
// `ca_only_machine_keyring`: see above; `packaged`: the distro's key for its own precompiled
// modules, trusted for a module `package` (its dpkg owner; empty when none or unknown) owns.
ModuleTrust module_trust(const ModuleInfo& info, const std::optional<KernelKey>& kernel_key, const MokState& moks,
                         bool platform_keyring = false, bool ca_only_machine_keyring = false,
                         const PackagedModulesKey* packaged = nullptr, const std::string& package = {});

} // namespace hpcbake::driver
