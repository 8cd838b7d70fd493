// driver/mok: EFI signature lists, the MOK state shim hands the kernel (efivarfs and the MOK
// configuration table), and which module signatures the kernel trusts under Secure Boot. The
// certificates are real (made by hpcbake's key generator, tests/fixtures/mok-keys/README.md) and the
// modules carry real PKCS#7 signatures (kofile.hpp), decoded by libkmod as modinfo decodes them.
#include "driver/mok.hpp"

#include "driver/modinfo.hpp"
#include "driver/signing.hpp"
#include "manifest/manifests.hpp"

#include "helpers.hpp"
#include "kofile.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

constexpr const char* kX509Guid = "\xa1\x59\xc0\xa5\xe4\x94\xa7\x4a\x87\xb5\xab\x15\x5c\x2b\xf0\x72";
constexpr const char* kSha256Guid = "\x26\x16\xc4\xc1\x4c\x50\x92\x40\xac\xa9\x41\xf9\x36\x93\x43\x28";
constexpr const char* kShimOwner = "\x50\xab\x5d\x60\x46\xe0\x00\x43\xab\xb6\x3d\xd8\x10\xdd\x8b\x23";

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i)
    s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// One EFI_SIGNATURE_LIST of `type` holding `entries` (each the same size), owned by shim.
std::string esl(const char* type, const std::vector<std::string>& entries) {
  const std::uint32_t each = 16 + static_cast<std::uint32_t>(entries.front().size());
  std::string out(type, 16);
  out += le32(28 + each * static_cast<std::uint32_t>(entries.size())) + le32(0) + le32(each);
  for (const auto& e : entries)
    out += std::string(kShimOwner, 16) + e;
  return out;
}

struct Key {
  driver::SigningKey key;
  std::string der;
};

// The key made for `name` (+ `tag`: a second key with the same name) once, kept as a fixture: a
// 3072-bit RSA key took up to 3 s to generate, 14 of them per run of these tests, four runs per CI.
// Copied with mode 0600 (git keeps 0644, which ensure_signing_key refuses), then loaded as a user's
// existing key is.
Key make_key(const std::string& name, const std::string& tag = "") {
  std::string slug = name + tag;
  std::replace(slug.begin(), slug.end(), ' ', '-');
  const fs::path dir = test::scratch("mok-key-" + slug) / "keys";
  fs::create_directories(dir);
  for (const char* f : {"signing.key", "signing.der"}) {
    fs::copy_file(test::fixtures() / "mok-keys" / slug / f, dir / f);
    fs::permissions(dir / f, fs::perms::owner_read | fs::perms::owner_write);
  }
  auto k = driver::ensure_signing_key(dir, name);
  REQUIRE_MESSAGE(k.has_value(), (k ? "" : k.error().message));
  return {*k, test::slurp(k->cert_der)};
}

// A module for `kernel` at `path`, signed by `key` when given.
driver::ModuleInfo module(const fs::path& path, const std::string& kernel, const Key* key) {
  test::write_ko(path, "hpcbake-fixture", kernel);
  if (key) REQUIRE(test::sign_ko(path, key->key.key, key->key.cert_der));
  auto info = driver::read_module_info(path);
  REQUIRE_MESSAGE(info.has_value(), (info ? "" : info.error().message));
  return *info;
}

void efivar(const fs::path& root, const std::string& name, const std::string& data, std::uint32_t attrs = 6) {
  test::write(root / "sys/firmware/efi/efivars" / (name + "-" + driver::kShimLockGuid), le32(attrs) + data);
}

} // namespace

TEST_CASE("mok: signature lists: X.509 entries parsed, hash entries counted, a truncated list refused") {
  const auto a = make_key("list signer a"), b = make_key("list signer b");
  const std::string data = esl(kX509Guid, {a.der}) + esl(kSha256Guid, {std::string(32, 'x'), std::string(32, 'y')}) +
                           esl(kX509Guid, {b.der});
  auto lists = driver::parse_signature_lists(data, "MokListRT");
  REQUIRE_MESSAGE(lists.has_value(), (lists ? "" : lists.error().message));
  REQUIRE(lists->certificates.size() == 2);
  CHECK(lists->certificates[0].subject == "list signer a");
  CHECK(lists->certificates[0].issuer == "list signer a"); // self-signed
  CHECK(lists->certificates[1].subject == "list signer b");
  CHECK(lists->certificates[0].der == a.der);
  CHECK(lists->hashes == 2);
  CHECK(driver::parse_signature_lists("", "empty")->certificates.empty());

  auto cut = driver::parse_signature_lists(data.substr(0, 100), "MokListRT");
  REQUIRE_FALSE(cut.has_value());
  CHECK(cut.error().message.find("MokListRT: the signature list at offset 0 is malformed") != std::string::npos);
  auto garbage = driver::parse_signature_lists(esl(kX509Guid, {std::string(40, 'z')}), "db");
  REQUIRE_FALSE(garbage.has_value());
  CHECK(garbage.error().message.find("not a DER X.509 certificate") != std::string::npos);
}

TEST_CASE("mok: the serial a module signature names is the certificate's, as libkmod spells it") {
  const auto a = make_key("serial signer");
  const auto dir = test::scratch("mok-serial");
  const auto info = module(dir / "m.ko", "6.1.0-56-amd64", &a);
  CHECK(info.signer == "serial signer");
  CHECK(info.sig_key.find(':') != std::string::npos); // "1C:5B:..."
  auto cert = driver::parse_certificate(a.der);
  REQUIRE(cert.has_value());
  CHECK(driver::serial_key(info.sig_key) == cert->serial);
  CHECK(driver::serial_key("00:0A:ff") == "aff");
}

TEST_CASE("mok: read from efivarfs (attributes stripped, split lists joined) or the MOK configuration table") {
  const auto a = make_key("state a"), b = make_key("state b"), c = make_key("state c");
  const auto root = test::scratch("mok-state") / "root";
  util::HostFs host(root);
  auto none = driver::read_mok_state(host);
  CHECK_FALSE(none.found);
  CHECK(driver::enrollment_of(*driver::parse_certificate(a.der), none) == driver::Enrollment::no_mok_list);

  efivar(root, "MokListRT", esl(kX509Guid, {a.der}));
  efivar(root, "MokListRT1", esl(kX509Guid, {b.der}));
  efivar(root, "MokNew", esl(kX509Guid, {c.der}), 7);
  auto s = driver::read_mok_state(host);
  CHECK(s.found);
  CHECK(s.error.empty());
  REQUIRE(s.enrolled.size() == 2);
  CHECK(s.enrolled[1].subject == "state b");
  CHECK_FALSE(s.trusted); // no MokListTrustedRT: the kernel keeps MOKs off the module keyrings
  CHECK(driver::enrollment_of(*driver::parse_certificate(a.der), s) == driver::Enrollment::enrolled_untrusted);
  CHECK(driver::enrollment_of(*driver::parse_certificate(c.der), s) == driver::Enrollment::pending);

  efivar(root, "MokListTrustedRT", std::string(1, '\x01'));
  s = driver::read_mok_state(host);
  CHECK(s.trusted);
  // The same answer from the certificate's file (what install and module install report).
  CHECK(driver::enrollment_of_file(host, b.key.cert_der) == driver::Enrollment::enrolled);
  CHECK(driver::enrollment_of_file(host, c.key.cert_der) == driver::Enrollment::pending);
  CHECK_FALSE(driver::enrollment_of_file(host, c.key.key).has_value()); // a key, not a certificate
  CHECK(driver::enrollment_of(*driver::parse_certificate(b.der), s) == driver::Enrollment::enrolled);

  // The configuration table, when the kernel exposes it, is the whole list and wins.
  test::write(root / "sys/firmware/efi/mok-variables/MokListRT", esl(kX509Guid, {c.der}));
  s = driver::read_mok_state(host);
  CHECK(s.source == "/sys/firmware/efi/mok-variables/MokListRT");
  REQUIRE(s.enrolled.size() == 1);
  CHECK(s.enrolled[0].subject == "state c");

  // A corrupt list is reported, never read as "nothing enrolled" silently.
  test::write(root / "sys/firmware/efi/mok-variables/MokListRT", "broken");
  s = driver::read_mok_state(host);
  CHECK(s.found);
  CHECK(s.enrolled.empty());
  CHECK(s.error.find("stray bytes at offset 0") != std::string::npos);
}

TEST_CASE("mok: which signatures the kernel loads under Secure Boot") {
  const auto mok = make_key("trust mok"), other = make_key("trust other"), kernel_key = make_key("trust kernel");
  const auto root = test::scratch("mok-trust") / "root";
  util::HostFs host(root);
  const std::string k = "6.1.0-56-amd64";
  // The kernel's in-tree modules carry its build key's signature.
  module(root / "lib/modules" / k / "kernel/fs/ext4/ext4.ko", k, &kernel_key);
  auto kkey = driver::kernel_signing_key(host, k);
  REQUIRE(kkey.has_value());
  CHECK(kkey->signer == "trust kernel");
  CHECK(kkey->source == "/lib/modules/" + k + "/kernel/fs/ext4/ext4.ko");
  CHECK_FALSE(driver::kernel_signing_key(host, "6.9.9-other").has_value());

  efivar(root, "MokListRT", esl(kX509Guid, {mok.der}));
  efivar(root, "MokListTrustedRT", std::string(1, '\x01'));
  const auto moks = driver::read_mok_state(host);
  const auto dir = test::scratch("mok-trust-modules");

  auto t = driver::module_trust(module(dir / "a.ko", k, &mok), kkey, moks);
  CHECK(t.loads);
  CHECK(t.how.find("enrolled as a MOK") != std::string::npos);
  t = driver::module_trust(module(dir / "b.ko", k, &kernel_key), kkey, moks);
  CHECK(t.loads);
  CHECK(t.how.find("the kernel's own key") != std::string::npos);
  t = driver::module_trust(module(dir / "c.ko", k, nullptr), kkey, moks);
  CHECK_FALSE(t.loads);
  CHECK(t.how == "unsigned");
  t = driver::module_trust(module(dir / "d.ko", k, &other), kkey, moks);
  CHECK_FALSE(t.loads);
  CHECK(t.how.find("signed by 'trust other'") != std::string::npos);
  CHECK(t.how.find("does not trust") != std::string::npos);

  // Same name, another key: the serial tells them apart.
  const auto twin = make_key("trust mok", " twin");
  CHECK_FALSE(driver::module_trust(module(dir / "e.ko", k, &twin), kkey, moks).loads);

  auto untrusted = moks;
  untrusted.trusted = false;
  t = driver::module_trust(module(dir / "f.ko", k, &mok), kkey, untrusted);
  CHECK_FALSE(t.loads);
  CHECK(t.how.find("MokListTrustedRT unset") != std::string::npos);
  CHECK(t.fix.find("mokutil --trust-mok") != std::string::npos);

  // A kernel that keeps non-CA MOKs off .machine (6.4+, CONFIG_INTEGRITY_CA_MACHINE_KEYRING=y):
  // hpcbake's certificate is not a CA, so its modules would not load.
  CHECK_FALSE(driver::parse_certificate(mok.der)->ca);
  test::write(root / "boot" / ("config-" + k), "CONFIG_X=y\nCONFIG_INTEGRITY_CA_MACHINE_KEYRING=y\n");
  CHECK(driver::ca_only_machine_keyring(host, k));
  t = driver::module_trust(module(dir / "h.ko", k, &mok), kkey, moks, false, true);
  CHECK_FALSE(t.loads);
  CHECK(t.how.find("CONFIG_INTEGRITY_CA_MACHINE_KEYRING") != std::string::npos);
  CHECK(driver::module_trust(module(dir / "i.ko", k, &mok), kkey, moks, true, true).loads); // .platform takes it

  driver::MokState queued;
  queued.found = true;
  queued.trusted = true;
  queued.pending = moks.enrolled;
  t = driver::module_trust(module(dir / "g.ko", k, &mok), kkey, queued);
  CHECK_FALSE(t.loads);
  CHECK(t.how.find("not confirmed in MokManager") != std::string::npos);
  CHECK(t.fix.find("reboot and confirm") != std::string::npos);

  // The kernel's key is taken from in-tree modules only, and two must agree: a module DKMS put
  // under kernel/drivers/ is never mistaken for the kernel's own.
  module(root / "lib/modules" / k / "kernel/drivers/video/nvidia.ko", k, &other);
  CHECK(driver::kernel_signing_key(host, k)->signer == "trust kernel");
  module(root / "lib/modules" / k / "kernel/crypto/sha.ko", k, &other);
  CHECK_FALSE(driver::kernel_signing_key(host, k).has_value());
}

TEST_CASE("mok: malformed signature lists: every size field checked") {
  const auto a = make_key("malformed");
  const std::string good = esl(kX509Guid, {a.der});
  const auto with = [&](std::size_t at, std::uint32_t v) {
    std::string d = good;
    d.replace(at, 4, le32(v));
    return d;
  };
  for (const auto& [what, data] : std::vector<std::pair<std::string, std::string>>{
           {"list size below the header", with(16, 27)},
           {"list size past the data", with(16, static_cast<std::uint32_t>(good.size() + 1))},
           {"header size past the list", with(20, 0xffffffffu)},
           {"entry no larger than its owner GUID", with(24, 16)},
           {"entries that do not divide the list", with(24, static_cast<std::uint32_t>(a.der.size() + 15))}}) {
    INFO(what);
    auto r = driver::parse_signature_lists(data, "MokListRT");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("MokListRT: the signature list at offset 0 is malformed") != std::string::npos);
  }
  // A header (SignatureHeaderSize > 0) is skipped, not read as an entry.
  std::string headed(kX509Guid, 16);
  const auto each = static_cast<std::uint32_t>(16 + a.der.size());
  headed += le32(28 + 8 + each) + le32(8) + le32(each) + std::string(8, 'h') + std::string(kShimOwner, 16) + a.der;
  auto r = driver::parse_signature_lists(headed, "db");
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
  CHECK(r->certificates.size() == 1);
}

TEST_CASE("mok: a corrupt MOK list is named in the verdict, never read as an empty one") {
  const auto a = make_key("corrupt signer");
  const auto root = test::scratch("mok-corrupt") / "root";
  util::HostFs host(root);
  test::write(root / "sys/firmware/efi/mok-variables/MokListRT", "not a signature list");
  const auto moks = driver::read_mok_state(host);
  const auto t =
      driver::module_trust(module(test::scratch("mok-corrupt-m") / "m.ko", "6.1.0-56-amd64", &a), std::nullopt, moks);
  CHECK_FALSE(t.loads);
  CHECK(t.how.find("the MOK list could not be read") != std::string::npos);
}

TEST_CASE(
    "mok: kernels that check the platform keyring (Ubuntu, RHEL) also load db- and untrusted-MOK-signed modules") {
  const auto mok = make_key("platform mok"), db = make_key("platform db");
  const auto root = test::scratch("mok-platform") / "root";
  util::HostFs host(root);
  const std::string k = "6.8.0-1015-azure";
  efivar(root, "MokListRT", esl(kX509Guid, {mok.der})); // no MokListTrustedRT: MOKs go to .platform
  test::write(root / "sys/firmware/efi/efivars/db-d719b2cb-3d3a-4596-a3bc-dad00e67656f",
              le32(0x27) + esl(kX509Guid, {db.der}));
  const auto moks = driver::read_mok_state(host);
  REQUIRE(moks.db.size() == 1);
  CHECK(moks.db[0].subject == "platform db");
  const auto dir = test::scratch("mok-platform-modules");
  const auto by_mok = module(dir / "a.ko", k, &mok), by_db = module(dir / "b.ko", k, &db);

  CHECK_FALSE(driver::module_trust(by_mok, std::nullopt, moks, false).loads); // upstream, Debian
  CHECK_FALSE(driver::module_trust(by_db, std::nullopt, moks, false).loads);
  CHECK(driver::module_trust(by_mok, std::nullopt, moks, true).loads);
  const auto t = driver::module_trust(by_db, std::nullopt, moks, true);
  CHECK(t.loads);
  CHECK(t.how.find("in the UEFI db") != std::string::npos);
}

TEST_CASE("mok: the shipped distro manifests say which keyrings their kernels check, with a source") {
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m.has_value());
  for (const char* id : {"ubuntu-22.04", "ubuntu-24.04", "rhel-9", "almalinux-9", "rocky-8.10"}) {
    const auto* d = m->find_distro(id);
    REQUIRE(d);
    CHECK_MESSAGE(d->module_keyrings.platform, id);
    CHECK_FALSE(d->module_keyrings.source.empty());
  }
  const auto* debian = m->find_distro("debian-12");
  REQUIRE(debian);
  CHECK_FALSE(debian->module_keyrings.platform);
  CHECK(debian->module_keyrings.source.find("kernel/module/signing.c") != std::string::npos);
}

TEST_CASE("mok: Canonical's module key vouches only for its own package's modules of that kernel, by serial") {
  // Ubuntu's in-tree modules carry the per-build key's signature; Canonical's precompiled NVIDIA
  // modules carry its "Kernel Module Signing" key's, another certificate of the built-in keyring.
  // A test key with the shipped manifests' CN stands for Canonical's (its private key is not ours).
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m.has_value());
  const auto* d = m->find_distro("ubuntu-24.04");
  REQUIRE(d);
  REQUIRE(d->canonical_signed_nvidia);
  const auto& cs = *d->canonical_signed_nvidia;
  CHECK(cs.module_signer == "Canonical Ltd. Kernel Module Signing");
  CHECK(cs.source.find("debian/canonical-certs.pem") != std::string::npos);
  const std::string k = "6.8.0-1020-azure";
  const auto shipped = driver::packaged_modules_key(cs.module_signer, cs.module_signer_serials, cs.modules_package, k,
                                                    "distros/ubuntu-24.04.yaml");
  REQUIRE(shipped.serials.size() == 1);
  CHECK(shipped.serials[0] == "e9df130f9292a9b7"); // as libkmod's sig_key reads, after serial_key
  CHECK(shipped.package_prefix == "linux-modules-nvidia-");
  CHECK(shipped.package_suffix == k);

  const auto canonical = make_key(cs.module_signer), build = make_key("trust kernel");
  const auto root = test::scratch("mok-canonical") / "root";
  util::HostFs host(root);
  module(root / "lib/modules" / k / "kernel/fs/ext4/ext4.ko", k, &build);
  const auto kkey = driver::kernel_signing_key(host, k);
  REQUIRE(kkey.has_value());
  const driver::MokState no_moks;
  const auto dir = test::scratch("mok-canonical-modules");
  const auto nv = module(dir / "nvidia.ko", k, &canonical);
  const std::string owner = "linux-modules-nvidia-580-server-open-" + k;
  // Without the distro's key (as before): refused, though the kernel would load it.
  CHECK_FALSE(driver::module_trust(nv, kkey, no_moks).loads);

  auto key = driver::packaged_modules_key(cs.module_signer, {driver::parse_certificate(canonical.der)->serial},
                                          "linux-modules-nvidia-580-server-open-{kernel}", k, "test");
  auto t = driver::module_trust(nv, kkey, no_moks, true, false, &key, owner);
  CHECK(t.loads);
  CHECK(t.how.find("built-in keyring") != std::string::npos);
  CHECK(t.how.find(owner) != std::string::npos);
  // The name alone vouches for nothing: no owner, another package, another kernel's package.
  t = driver::module_trust(nv, kkey, no_moks, true, false, &key, "");
  CHECK_FALSE(t.loads);
  CHECK(t.how.find("no package owns this module") != std::string::npos);
  CHECK_FALSE(driver::module_trust(nv, kkey, no_moks, true, false, &key, "nvidia-dkms-580-server").loads);
  CHECK_FALSE(driver::module_trust(nv, kkey, no_moks, true, false, &key,
                                   "linux-modules-nvidia-580-server-open-"
                                   "6.8.0-1019-azure")
                  .loads);
  // The package's name but another key under Canonical's CN: the serial tells them apart.
  const auto twin = make_key(cs.module_signer, " twin");
  t = driver::module_trust(module(dir / "twin.ko", k, &twin), kkey, no_moks, true, false, &key, owner);
  CHECK_FALSE(t.loads);
  CHECK(t.how.find("another key under the same name") != std::string::npos);
  // With the shipped serial (Canonical's real certificate), the test key's module is refused too.
  CHECK_FALSE(driver::module_trust(nv, kkey, no_moks, true, false, &shipped, owner).loads);
}
