#pragma once
// Module signing for Secure Boot. With Secure Boot on, the kernel loads only modules
// signed by a key it trusts: the distro's (in the UEFI db or the shim) or a Machine Owner
// Key. hpcbake signs what it builds with a key the user gives or one it generates, and
// exports the DER certificate that must be trusted: enrolled as a MOK (`mokutil --import`,
// which asks for a password at the next boot, so hpcbake never runs it itself) or, for
// images, added to the image's UEFI db. Nothing here ever waits for a password.
#include "detect/secure_boot.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::driver {

struct SigningKey {
  std::filesystem::path key;      // PEM private key, mode 0600
  std::filesystem::path cert_der; // DER X.509 certificate: what gets enrolled
  std::string subject;            // the certificate's CN: `modinfo -F signer` prints it
};

// The key in `dir` (signing.key, signing.der), generated on first use: RSA 3072, a
// self-signed certificate valid 10 years with the module-signing extended key usage.
// `dir` is created 0700; the key is written 0600 (set with fchmod before the first byte, so
// the umask does not matter), atomically. An existing pair is reused, so every module of an
// image carries the same signer; an existing key that group or others can read or change, or
// that another user owns, is refused (ErrorKind::permission), never reused or replaced.
Result<SigningKey> ensure_signing_key(const std::filesystem::path& dir,
                                      const std::string& common_name = "hpcbake module signing key");

// A key the user supplies: both files must exist; the certificate may be PEM or DER and is
// reported as DER (converted next to the key when needed). The key must be 0600 or stricter and
// owned by root or the effective uid (util::check_private_file), as ssh demands of its keys.
Result<SigningKey> load_signing_key(const std::filesystem::path& key, const std::filesystem::path& cert);

// The kernel's sign-file for `kernel`, where distributions put it: Debian's
// /usr/lib/linux-kbuild-<major.minor>/scripts/sign-file, then the headers' scripts/sign-file.
// Host paths, resolved under `host`'s root.
std::optional<std::filesystem::path> find_sign_file(const util::HostFs& host, const std::string& kernel);

// The one signing policy (plan, install and `module install` use it): `on` signs, `off`
// never does and is refused while Secure Boot is on (the kernel would reject every module
// built), `auto` signs when Secure Boot is on or the user gave a key.
enum class SignMode { automatic, on, off };
Result<SignMode> parse_sign_mode(std::string_view text); // auto | on | off
const char* to_string(SignMode mode);

struct SigningRequest {
  SignMode mode = SignMode::automatic;
  std::filesystem::path key, cert; // the user's (--sign-key, --sign-cert), or empty
  std::filesystem::path key_dir;   // where a generated key lives (already under --root)
};

// The start of a precaution's `why` (decide_signing): the stored plan keeps `why`, not `precaution`,
// so a plan read back (plan_json) knows a precaution by it.
inline constexpr std::string_view kPrecautionWhy = "Secure Boot may be on: its state is unknown";

struct SigningPlan {
  bool enabled = false;
  bool generate = false;           // the key in key_dir is generated on first use
  bool precaution = false;         // enabled only because the Secure Boot state is unknown
  std::filesystem::path key, cert; // what signs and what is enrolled
  std::string why;                 // one sentence
};

// Decides for a host whose Secure Boot state is `secure_boot` ("enabled", "disabled",
// "unknown", ...; `source` says where it was read). On `this_host`, `auto` also signs when the
// state is unknown (UEFI, variable unreadable); for a plan made elsewhere, unknown means "decided
// on the target". Errors: a key without its certificate (usage), signing off with Secure Boot on
// (unsupported, with what to do).
Result<SigningPlan> decide_signing(const SigningRequest& request, detect::SecureBoot secure_boot,
                                   std::string_view source, bool this_host = true);

// The key of a decided plan: generated (ensure_signing_key) or loaded (load_signing_key).
Result<SigningKey> signing_key(const SigningPlan& plan);

} // namespace hpcbake::driver
