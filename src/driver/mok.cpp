#include "driver/mok.hpp"

#include "util/cleanup.hpp"
#include "util/hostfs.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>

namespace hpcbake::driver {
namespace fs = std::filesystem;

namespace {

using X509Ptr = util::Owned<X509, X509_free>;
using BnPtr = util::Owned<BIGNUM, BN_free>;
using BioPtr = util::Owned<BIO, BIO_free_all>;

// EFI_GUIDs as they are stored (the first three fields little-endian).
constexpr std::array<unsigned char, 16> kCertX509 = {0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a,
                                                     0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72};
constexpr const char* kImageSecurityDatabaseGuid = "d719b2cb-3d3a-4596-a3bc-dad00e67656f"; // db, dbx
constexpr std::size_t kListHeader = 16 + 4 + 4 + 4; // SignatureType, ListSize, HeaderSize, SignatureSize
constexpr std::size_t kOwnerSize = 16;              // EFI_SIGNATURE_DATA.SignatureOwner

std::uint32_t le32(std::string_view d, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(d[at + static_cast<std::size_t>(i)]);
  return v;
}

std::string name_of(X509_NAME* name) {
  const int at = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (at >= 0) {
    const ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at));
    unsigned char* utf8 = nullptr;
    const int n = ASN1_STRING_to_UTF8(&utf8, s);
    if (n >= 0) {
      std::string out(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(n));
      OPENSSL_free(utf8);
      return out;
    }
  }
  std::array<char, 512> buf{};
  X509_NAME_oneline(name, buf.data(), static_cast<int>(buf.size()));
  return buf.data();
}

std::string lower_hex_trimmed(std::string hex) {
  std::string out;
  for (char c : hex)
    if (std::isxdigit(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto nz = out.find_first_not_of('0');
  return nz == std::string::npos ? "0" : out.substr(nz);
}

// efivarfs prefixes a variable's data with its 4 attribute bytes; the MOK configuration table's
// files (mok-variables/) hold the data alone.
std::optional<std::string> read_var(const util::HostFs& host, const std::string& name, std::string* source) {
  if (auto d = host.read("/sys/firmware/efi/mok-variables/" + name, util::host_file::efi_variable)) {
    *source = "/sys/firmware/efi/mok-variables/" + name;
    return d;
  }
  const std::string path = "/sys/firmware/efi/efivars/" + name + "-" + kShimLockGuid;
  auto d = host.read(path, util::host_file::efi_variable);
  if (!d || d->size() < 4) return std::nullopt;
  *source = path;
  return d->substr(4);
}

bool same(const Certificate& a, const Certificate& b) {
  return a.der == b.der;
}

} // namespace

Result<Certificate> parse_certificate(std::string_view der) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  X509Ptr x(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (!x) return fail(ErrorKind::usage, "not a DER X.509 certificate");
  Certificate c;
  c.subject = name_of(X509_get_subject_name(x.get()));
  c.issuer = name_of(X509_get_issuer_name(x.get()));
  BnPtr bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(x.get()), nullptr));
  if (!bn) return fail(ErrorKind::usage, "certificate serial number unreadable");
  char* hex = BN_bn2hex(bn.get());
  c.serial = lower_hex_trimmed(hex ? hex : "");
  OPENSSL_free(hex);
  c.der.assign(der.data(), static_cast<std::size_t>(p - reinterpret_cast<const unsigned char*>(der.data())));
  c.ca = X509_check_ca(x.get()) != 0;
  return c;
}

Result<Certificate> read_certificate(const fs::path& file) {
  auto text = util::read_file(file);
  if (!text) return fail(ErrorKind::usage, fmt::format("{}: cannot read the certificate", file.string()));
  if (text->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    auto c = parse_certificate(*text);
    if (!c) return fail(ErrorKind::usage, fmt::format("{}: {}", file.string(), c.error().message));
    return c;
  }
  BioPtr bio(BIO_new_mem_buf(text->data(), static_cast<int>(text->size())));
  X509Ptr x(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!x) return fail(ErrorKind::usage, fmt::format("{}: not a PEM certificate", file.string()));
  unsigned char* der = nullptr;
  const int n = i2d_X509(x.get(), &der);
  if (n <= 0) return fail(ErrorKind::usage, fmt::format("{}: cannot encode the certificate", file.string()));
  std::string bytes(reinterpret_cast<char*>(der), static_cast<std::size_t>(n));
  OPENSSL_free(der);
  return parse_certificate(bytes);
}

Result<SignatureLists> parse_signature_lists(std::string_view d, std::string_view what) {
  SignatureLists out;
  std::size_t at = 0;
  while (at < d.size()) {
    if (d.size() - at < kListHeader)
      return fail(ErrorKind::usage,
                  fmt::format("{}: {} stray bytes at offset {} (not a signature list)", what, d.size() - at, at));
    const std::uint32_t list = le32(d, at + 16), header = le32(d, at + 20), each = le32(d, at + 24);
    if (list < kListHeader || list > d.size() - at || each <= kOwnerSize ||
        static_cast<std::uint64_t>(header) + kListHeader > list || (list - kListHeader - header) % each != 0)
      return fail(ErrorKind::usage,
                  fmt::format("{}: the signature list at offset {} is malformed (size {}, header {}, entry {} of {} "
                              "bytes left)",
                              what, at, list, header, each, d.size() - at));
    const bool x509 = std::memcmp(d.data() + at, kCertX509.data(), kCertX509.size()) == 0;
    for (std::size_t e = at + kListHeader + header; e < at + list; e += each) {
      if (!x509) {
        ++out.hashes;
        continue;
      }
      auto c = parse_certificate(d.substr(e + kOwnerSize, each - kOwnerSize));
      if (!c) return fail(ErrorKind::usage, fmt::format("{}: entry at offset {}: {}", what, e, c.error().message));
      out.certificates.push_back(std::move(*c));
    }
    at += list;
  }
  return out;
}

std::string serial_key(std::string_view sig_key) {
  return lower_hex_trimmed(std::string(sig_key));
}

MokState read_mok_state(const util::HostFs& host) {
  MokState s;
  std::string source;
  std::string data;
  if (auto d = read_var(host, "MokListRT", &source)) {
    s.found = true;
    s.source = source;
    data = *d;
    // shim splits a list too long for one variable into MokListRT1, MokListRT2, ... (efivarfs only).
    for (int i = 1; source.starts_with("/sys/firmware/efi/efivars/"); ++i) {
      auto more = read_var(host, fmt::format("MokListRT{}", i), &source);
      if (!more) break;
      data += *more;
    }
  }
  if (s.found) {
    if (auto lists = parse_signature_lists(data, s.source))
      s.enrolled = std::move(lists->certificates);
    else
      s.error = lists.error().message;
  }
  std::string tsrc;
  if (auto t = read_var(host, "MokListTrustedRT", &tsrc)) s.trusted = !t->empty() && (*t)[0] == 1;
  if (auto pending = read_var(host, "MokNew", &tsrc))
    if (auto lists = parse_signature_lists(*pending, tsrc)) s.pending = std::move(lists->certificates);
  const std::string db = std::string("/sys/firmware/efi/efivars/db-") + kImageSecurityDatabaseGuid;
  if (auto d = host.read(db, util::host_file::efi_variable); d && d->size() > 4)
    if (auto lists = parse_signature_lists(std::string_view(*d).substr(4), db)) s.db = std::move(lists->certificates);
  return s;
}

Enrollment enrollment_of(const Certificate& cert, const MokState& moks) {
  const auto has = [&](const std::vector<Certificate>& v) {
    return std::any_of(v.begin(), v.end(), [&](const Certificate& c) { return same(c, cert); });
  };
  if (has(moks.enrolled)) return moks.trusted ? Enrollment::enrolled : Enrollment::enrolled_untrusted;
  if (has(moks.pending)) return Enrollment::pending;
  return moks.found ? Enrollment::not_enrolled : Enrollment::no_mok_list;
}

Result<Enrollment> enrollment_of_file(const util::HostFs& host, const fs::path& cert_file, MokState* moks) {
  HPCBAKE_TRY_ASSIGN(auto cert, read_certificate(cert_file));
  const MokState state = read_mok_state(host);
  const Enrollment e = enrollment_of(cert, state);
  if (moks) *moks = state;
  return e;
}

const char* to_string(Enrollment e) {
  switch (e) {
  case Enrollment::enrolled:
    return "enrolled as a MOK";
  case Enrollment::enrolled_untrusted:
    return "enrolled as a MOK that shim marks untrusted (MokListTrustedRT unset): Debian's and upstream kernels do not "
           "use it for modules, Ubuntu's and RHEL's do (docs/secure-boot.md)";
  case Enrollment::pending:
    return "queued for enrollment (MokNew): confirm it in MokManager on the console at the next boot";
  case Enrollment::not_enrolled:
    return "not enrolled";
  case Enrollment::no_mok_list:
    return "not enrolled (shim handed the kernel no MOK list: was this boot through shim?)";
  }
  return "unknown";
}

std::string enrollment_advice(const std::string& cert_path) {
  return fmt::format(
      "enroll it once per machine: `mokutil --import {}` (asks for a one-time password), reboot, and confirm in "
      "MokManager on the console (the Azure serial console on a Trusted Launch VM); hpcbake never runs mokutil "
      "itself, because it waits for a password. A MOK lives in the machine's UEFI variables, not on its disk: "
      "images need it per VM, or Secure Boot off (docs/secure-boot.md)",
      cert_path);
}

std::optional<KernelKey> kernel_signing_key(const util::HostFs& host, const std::string& kernel) {
  // In-tree modules only: directories DKMS never installs into (a dkms.conf may name
  // DEST_MODULE_LOCATION=/kernel/drivers/..., so drivers/ is left out). Two signed modules must
  // agree, or the key is not trusted to be the kernel's.
  std::optional<KernelKey> found;
  int agreeing = 0;
  for (const char* sub : {"fs", "crypto", "lib", "net", "block", "arch", "mm", "security"}) {
    const fs::path dir = host.resolve("/lib/modules/" + kernel + "/kernel/" + sub);
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
    for (int seen = 0; !ec && it != end && seen < 50; it.increment(ec)) {
      if (it->path().string().find(".ko") == std::string::npos) continue;
      const std::string host_path = "/" + it->path().lexically_relative(host.root()).generic_string();
      const fs::path module = host.resolve(host_path); // a link is followed inside the root
      std::error_code type_ec;
      if (!fs::is_regular_file(module, type_ec)) continue;
      ++seen;
      auto info = read_module_info(module);
      if (!info || info->signer.empty()) continue;
      KernelKey k{info->signer, serial_key(info->sig_key), host_path};
      if (!found) {
        found = std::move(k);
      } else if (k.signer != found->signer || k.serial != found->serial) {
        return std::nullopt;
      }
      ++agreeing;
      break; // one module per directory
    }
    if (agreeing >= 2) break;
  }
  return found;
}

bool ca_only_machine_keyring(const util::HostFs& host, const std::string& kernel) {
  auto config = host.read("/boot/config-" + kernel, util::host_file::kernel_config);
  return config && config->find("\nCONFIG_INTEGRITY_CA_MACHINE_KEYRING=y\n") != std::string::npos;
}

namespace {

bool signed_by(const Certificate& c, const ModuleInfo& info, const std::string& serial) {
  return c.issuer == info.signer && c.serial == serial;
}

// An enrolled MOK's verdict: trusted by the platform keyring, by the machine keyring, or not.
ModuleTrust mok_trust(const Certificate& c, const ModuleInfo& info, const MokState& moks, bool platform_keyring,
                      bool ca_only) {
  const std::string mok = fmt::format("signed by '{}', enrolled as a MOK ({})", info.signer, moks.source);
  if (platform_keyring) return {true, mok, {}};
  if (!moks.trusted)
    return {
        false,
        fmt::format("signed by '{}', an enrolled MOK that shim marks untrusted (MokListTrustedRT unset)", info.signer),
        "run `mokutil --trust-mok`, reboot and confirm in MokManager on the console, then seal again"};
  if (ca_only && !c.ca)
    return {false,
            fmt::format("signed by '{}', an enrolled MOK that is not a CA certificate: this kernel keeps such MOKs off "
                        "its machine keyring (CONFIG_INTEGRITY_CA_MACHINE_KEYRING)",
                        info.signer),
            "sign with a CA certificate enrolled as a MOK (--sign-key/--sign-cert), or bake with Secure Boot off"};
  return {true, mok, {}};
}

bool owned_by(const PackagedModulesKey& k, const std::string& package) {
  return !package.empty() && package.size() >= k.package_prefix.size() + k.package_suffix.size() &&
         package.starts_with(k.package_prefix) && package.ends_with(k.package_suffix);
}

// The distro's own key by name, where it does not vouch: why (it vouches only for its packages'
// modules, and only with the published serial).
ModuleTrust packaged_refusal(const ModuleInfo& info, const std::string& serial, const PackagedModulesKey& k,
                             const std::string& package) {
  const std::string pattern = k.package_prefix + "*" + k.package_suffix;
  if (!owned_by(k, package))
    return {false,
            fmt::format("signed by '{}' (serial {}), the name of the key the kernel's built-in keyring holds for the "
                        "modules of {}, but {}: hpcbake trusts that key only for a module such a package installed "
                        "(dpkg's lists)",
                        info.signer, serial, pattern,
                        package.empty() ? std::string("no package owns this module (dpkg's lists)")
                                        : "it is owned by " + package),
            fmt::format("install the module from Ubuntu's archive ({}), or sign it with a key this machine trusts",
                        pattern)};
  return {false,
          fmt::format("signed by '{}' with serial {}, owned by {}, but the key published for those modules has serial "
                      "{} ({}): another key under the same name",
                      info.signer, serial, package, util::join(k.serials, " or "), k.source),
          "reinstall the package from Ubuntu's archive (apt-get install --reinstall " + package +
              "); if Canonical has rotated the key, update the distro manifest's module_signer_serials from a "
              "published source"};
}

} // namespace

PackagedModulesKey packaged_modules_key(std::string signer, std::vector<std::string> serials,
                                        const std::string& modules_package, const std::string& kernel,
                                        std::string source) {
  PackagedModulesKey k{
      std::move(signer), {}, modules_package.substr(0, modules_package.find('{')), {}, std::move(source)};
  for (const auto& s : serials)
    k.serials.push_back(serial_key(s));
  const auto at = modules_package.find("{kernel}");
  k.package_suffix = kernel + (at == std::string::npos ? std::string() : modules_package.substr(at + 8));
  return k;
}

ModuleTrust module_trust(const ModuleInfo& info, const std::optional<KernelKey>& kernel_key, const MokState& moks,
                         bool platform_keyring, bool ca_only_machine_keyring, const PackagedModulesKey* packaged,
                         const std::string& package) {
  if (info.signer.empty()) return {false, "unsigned", {}};
  const std::string serial = serial_key(info.sig_key);
  if (kernel_key && info.signer == kernel_key->signer && serial == kernel_key->serial)
    return {true, fmt::format("signed by the kernel's own key '{}'", info.signer), {}};
  const bool packaged_name = packaged && !packaged->signer.empty() && info.signer == packaged->signer;
  if (packaged_name && owned_by(*packaged, package) &&
      std::find(packaged->serials.begin(), packaged->serials.end(), serial) != packaged->serials.end())
    return {true,
            fmt::format("signed by '{}' (serial {}), the key the kernel's built-in keyring holds for {}'s modules, "
                        "and installed by that package",
                        info.signer, serial, package),
            {}};
  if (platform_keyring)
    for (const auto& c : moks.db)
      if (signed_by(c, info, serial))
        return {true,
                fmt::format("signed by '{}', in the UEFI db (this kernel checks the platform keyring)", info.signer),
                {}};
  for (const auto& c : moks.enrolled)
    if (signed_by(c, info, serial)) return mok_trust(c, info, moks, platform_keyring, ca_only_machine_keyring);
  for (const auto& c : moks.pending)
    if (signed_by(c, info, serial))
      return {false,
              fmt::format("signed by '{}', whose enrollment is queued but not confirmed in MokManager", info.signer),
              "reboot and confirm the enrollment in MokManager on the console (the Azure serial console), then seal "
              "again"};
  if (packaged_name) return packaged_refusal(info, serial, *packaged, package);
  const std::string unread = !moks.error.empty() ? fmt::format(" (the MOK list could not be read: {})", moks.error)
                             : moks.found        ? ""
                                                 : " (no MOK list from shim)";
  return {false,
          fmt::format("signed by '{}' (serial {}), a key this machine's kernel does not trust: neither the kernel's "
                      "own key nor an enrolled MOK{}{}",
                      info.signer, serial, platform_keyring ? " nor in the UEFI db" : "", unread),
          {}};
}

} // namespace hpcbake::driver
