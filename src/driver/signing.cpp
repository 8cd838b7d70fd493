#include "driver/signing.hpp"

#include "util/atomic_file.hpp"
#include "util/cleanup.hpp"
#include "util/hostfs.hpp"
#include "util/trust.hpp"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace hpcbake::driver {

namespace fs = std::filesystem;

namespace {

using PKey = util::Owned<EVP_PKEY, EVP_PKEY_free>;
using Cert = util::Owned<X509, X509_free>;
using Bio = util::Owned<BIO, BIO_free_all>;

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  if (!e) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

std::string bio_contents(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return n > 0 ? std::string(data, static_cast<std::size_t>(n)) : std::string();
}

bool add_ext(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

Result<std::string> subject_cn(X509* cert) {
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) < 0) return std::string();
  return std::string(cn);
}

} // namespace

Result<SigningKey> ensure_signing_key(const fs::path& dir, const std::string& common_name) {
  SigningKey out{dir / "signing.key", dir / "signing.der", common_name};
  std::error_code ec;
  if (fs::exists(out.key, ec) && fs::exists(out.cert_der, ec)) return load_signing_key(out.key, out.cert_der);
  // Only the certificate left (or only the key): a new pair replaces it below. A stray key that
  // others could read is refused rather than silently replaced: it may have been copied.
  HPCBAKE_TRY(util::check_private_file(out.key, ::geteuid(), "the module-signing key"));
  fs::create_directories(dir, ec);
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot create the signing key directory: {}", dir.string(), ec.message()));
  if (::chmod(dir.c_str(), 0700) != 0)
    return fail(ErrorKind::internal, fmt::format("{}: chmod 0700 failed: {}", dir.string(), std::strerror(errno)));

  PKey pkey(EVP_RSA_gen(3072));
  if (!pkey) return fail(ErrorKind::internal, "RSA key generation failed: " + openssl_error());
  Cert cert(X509_new());
  if (!cert) return fail(ErrorKind::internal, "X509_new failed: " + openssl_error());
  X509_set_version(cert.get(), 2); // v3: extensions
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f; // a positive INTEGER
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), pkey.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                             -1, 0);
  X509_set_issuer_name(cert.get(), name);
  // The kernel's own signing certificates carry these; 1.3.6.1.4.1.2312.16.1.2 is the
  // "module signing only" usage that shim and mokutil recognise.
  if (!add_ext(cert.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !add_ext(cert.get(), NID_key_usage, "critical,digitalSignature") ||
      !add_ext(cert.get(), NID_ext_key_usage, "codeSigning,1.3.6.1.4.1.2312.16.1.2") ||
      !add_ext(cert.get(), NID_subject_key_identifier, "hash") ||
      !add_ext(cert.get(), NID_authority_key_identifier, "keyid"))
    return fail(ErrorKind::internal, "adding certificate extensions failed: " + openssl_error());
  if (X509_sign(cert.get(), pkey.get(), EVP_sha256()) == 0)
    return fail(ErrorKind::internal, "signing the certificate failed: " + openssl_error());

  Bio key_bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(key_bio.get(), pkey.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return fail(ErrorKind::internal, "writing the private key failed: " + openssl_error());
  unsigned char* der = nullptr;
  const int der_len = i2d_X509(cert.get(), &der);
  if (der_len <= 0) return fail(ErrorKind::internal, "encoding the certificate failed: " + openssl_error());
  const std::string der_bytes(reinterpret_cast<const char*>(der), static_cast<std::size_t>(der_len));
  OPENSSL_free(der);

  // The certificate first: a key without its certificate would be regenerated next time.
  HPCBAKE_TRY(util::write_file_atomic(out.cert_der, der_bytes, 0644));
  util::AtomicWriteOptions private_file;
  private_file.mode = 0600;
  private_file.exact_mode = true; // 0600 before the first byte, whatever the umask
  HPCBAKE_TRY(util::write_file_atomic(out.key, bio_contents(key_bio.get()), private_file));
  return out;
}

Result<SigningKey> load_signing_key(const fs::path& key, const fs::path& cert) {
  // Like ssh with an identity file: a private key others can read or change is refused.
  HPCBAKE_TRY(util::check_private_file(key, ::geteuid(), "the module-signing key"));
  const std::string key_text = util::read_file(key).value_or("");
  if (key_text.empty())
    return fail(ErrorKind::usage, fmt::format("{}: signing key missing or unreadable", key.string()),
                "pass a PEM private key, or omit it to let hpcbake generate one");
  Bio kb(BIO_new_mem_buf(key_text.data(), static_cast<int>(key_text.size())));
  PKey pkey(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!pkey)
    return fail(ErrorKind::usage, fmt::format("{}: not a PEM private key (or it is encrypted)", key.string()),
                "hpcbake never prompts for a passphrase: give an unencrypted key in a root-only directory");
  const std::string cert_bytes = util::read_file(cert).value_or("");
  if (cert_bytes.empty())
    return fail(ErrorKind::usage, fmt::format("{}: certificate missing or unreadable", cert.string()));
  const auto* p = reinterpret_cast<const unsigned char*>(cert_bytes.data());
  Cert x(d2i_X509(nullptr, &p, static_cast<long>(cert_bytes.size())));
  bool was_pem = false;
  if (!x) {
    Bio cb(BIO_new_mem_buf(cert_bytes.data(), static_cast<int>(cert_bytes.size())));
    x.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
    was_pem = true;
  }
  if (!x) return fail(ErrorKind::usage, fmt::format("{}: not an X.509 certificate (DER or PEM)", cert.string()));
  if (X509_check_private_key(x.get(), pkey.get()) != 1)
    return fail(ErrorKind::usage, fmt::format("{} does not belong to the key {}", cert.string(), key.string()),
                "pass the certificate that was made with this key");
  SigningKey out{key, cert, subject_cn(x.get()).value_or("")};
  if (was_pem) {
    unsigned char* der = nullptr;
    const int n = i2d_X509(x.get(), &der);
    if (n <= 0) return fail(ErrorKind::internal, "encoding the certificate failed: " + openssl_error());
    out.cert_der = key.parent_path() / (key.stem().string() + ".der");
    auto s = util::write_file_atomic(out.cert_der,
                                     std::string(reinterpret_cast<const char*>(der), static_cast<std::size_t>(n)));
    OPENSSL_free(der);
    if (!s) return std::unexpected(s.error());
  }
  return out;
}

std::optional<fs::path> find_sign_file(const util::HostFs& host, const std::string& kernel) {
  // "6.1.0-56-amd64" -> "6.1"
  std::string major_minor;
  if (auto dot = kernel.find('.'); dot != std::string::npos) {
    auto end = kernel.find_first_not_of("0123456789", dot + 1);
    major_minor = kernel.substr(0, end);
  }
  for (const std::string& candidate : {fmt::format("/usr/lib/linux-kbuild-{}/scripts/sign-file", major_minor),
                                       fmt::format("/usr/src/linux-headers-{}/scripts/sign-file", kernel),
                                       fmt::format("/lib/modules/{}/build/scripts/sign-file", kernel)}) {
    if (major_minor.empty() && candidate.starts_with("/usr/lib/linux-kbuild-/")) continue;
    if (host.exists(candidate)) return host.resolve(candidate);
  }
  return std::nullopt;
}

Result<SignMode> parse_sign_mode(std::string_view text) {
  if (text == "auto") return SignMode::automatic;
  if (text == "on") return SignMode::on;
  if (text == "off") return SignMode::off;
  return fail(ErrorKind::usage, fmt::format("--sign {}: expected auto, on or off", text));
}

const char* to_string(SignMode mode) {
  switch (mode) {
  case SignMode::automatic:
    return "auto";
  case SignMode::on:
    return "on";
  case SignMode::off:
    return "off";
  }
  return "auto";
}

Result<SigningPlan> decide_signing(const SigningRequest& rq, detect::SecureBoot secure_boot, std::string_view source,
                                   bool this_host) {
  if (rq.key.empty() != rq.cert.empty()) return fail(ErrorKind::usage, "--sign-key and --sign-cert go together");
  const bool sb = secure_boot == detect::SecureBoot::enabled;
  // A UEFI machine whose SecureBoot variable cannot be read (efivarfs not mounted) may well have
  // it on: a signed module loads either way, an unsigned one only if it is off.
  const bool maybe = this_host && secure_boot == detect::SecureBoot::unknown;
  SigningPlan p;
  p.enabled = rq.mode == SignMode::on || (rq.mode == SignMode::automatic && (sb || maybe || !rq.key.empty()));
  if (sb && !p.enabled)
    return fail(
        ErrorKind::unsupported,
        fmt::format("Secure Boot is enabled on this host ({}) and module signing is off: the kernel would refuse every "
                    "module built",
                    source),
        "drop --sign off (hpcbake generates a key, or pass --sign-key/--sign-cert), or turn Secure Boot off "
        "in the VM's security profile");
  if (!p.enabled) {
    p.why = rq.mode == SignMode::off
                ? "--sign off"
                : fmt::format("Secure Boot is {} and no key was given", detect::to_string(secure_boot));
    return p;
  }
  p.precaution = maybe && rq.mode == SignMode::automatic && rq.key.empty();
  p.generate = rq.key.empty();
  p.key = p.generate ? rq.key_dir / "signing.key" : rq.key;
  p.cert = p.generate ? rq.key_dir / "signing.der" : rq.cert;
  p.why = rq.mode == SignMode::on ? "--sign on"
          : sb                    ? fmt::format("Secure Boot is enabled ({})", source)
          : maybe                 ? fmt::format("{} ({}); signed modules load either way", kPrecautionWhy, source)
                                  : "--sign-key given";
  return p;
}

Result<SigningKey> signing_key(const SigningPlan& p) {
  if (!p.enabled) return fail(ErrorKind::internal, "signing_key: signing is off in this plan");
  return p.generate ? ensure_signing_key(p.key.parent_path()) : load_signing_key(p.key, p.cert);
}

} // namespace hpcbake::driver
