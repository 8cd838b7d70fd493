// Signing keys: generated once with safe modes, reused, checked against their certificate.
#include "driver/signing.hpp"
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

using namespace hpcbake;

namespace {
unsigned mode_of(const std::filesystem::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 0777;
}
} // namespace

TEST_CASE("signing: a generated key is private, reused, and matches its DER certificate") {
  const auto dir = test::scratch("signing") / "keys";
  auto k = driver::ensure_signing_key(dir, "test signer");
  REQUIRE_MESSAGE(k.has_value(), (k ? "" : k.error().message));
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(k->key) == 0600);
  CHECK(k->subject == "test signer");
  const std::string der = test::slurp(k->cert_der);
  REQUIRE(der.size() > 100);
  CHECK(static_cast<unsigned char>(der[0]) == 0x30); // a DER SEQUENCE
  auto again = driver::ensure_signing_key(dir, "another name");
  REQUIRE(again.has_value());
  CHECK(again->subject == "test signer"); // the same pair, not a new one
  CHECK(test::slurp(again->cert_der) == der);

  // A certificate that belongs to another key is refused by name.
  const auto other = driver::ensure_signing_key(test::scratch("signing-other"), "other");
  REQUIRE(other.has_value());
  auto mismatch = driver::load_signing_key(k->key, other->cert_der);
  REQUIRE_FALSE(mismatch.has_value());
  CHECK(mismatch.error().message.find("does not belong to the key") != std::string::npos);
  auto missing = driver::load_signing_key(dir / "nope.key", k->cert_der);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find("nope.key") != std::string::npos);
}

TEST_CASE("signing: sign-file where Debian and the headers put it, under --root") {
  const auto root = test::scratch("signfile-root");
  util::HostFs host(root);
  CHECK_FALSE(driver::find_sign_file(host, "6.1.0-56-amd64").has_value());
  test::write(root / "lib/modules/6.1.0-56-amd64/build/scripts/sign-file", "");
  CHECK(driver::find_sign_file(host, "6.1.0-56-amd64") == root / "lib/modules/6.1.0-56-amd64/build/scripts/sign-file");
  test::write(root / "usr/lib/linux-kbuild-6.1/scripts/sign-file", "");
  CHECK(driver::find_sign_file(host, "6.1.0-56-amd64") == root / "usr/lib/linux-kbuild-6.1/scripts/sign-file");
}

TEST_CASE("signing: the generated key is 0600 whatever the umask, and never written through a stale temp file") {
  const auto dir = test::scratch("signing-umask") / "keys";
  std::filesystem::create_directories(dir);
  // A temp file left at the name the write uses (a crash of an earlier process with this pid),
  // readable by everyone: O_TRUNC would have kept its mode.
  const auto stale = dir / ("signing.key.tmp." + std::to_string(::getpid()));
  test::write(stale, "stale");
  REQUIRE(::chmod(stale.c_str(), 0644) == 0);
  const mode_t old = ::umask(0);
  auto k = driver::ensure_signing_key(dir, "umask signer");
  ::umask(old);
  REQUIRE_MESSAGE(k.has_value(), (k ? "" : k.error().message));
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(k->key) == 0600);
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(test::slurp(k->key).starts_with("-----BEGIN PRIVATE KEY-----"));
}

TEST_CASE("signing: a key others can read is refused, generated or given, and never silently replaced") {
  const auto dir = test::scratch("signing-open") / "keys";
  auto k = driver::ensure_signing_key(dir, "open signer");
  REQUIRE(k.has_value());
  const std::string key_text = test::slurp(k->key);
  REQUIRE(::chmod(k->key.c_str(), 0644) == 0);
  auto again = driver::ensure_signing_key(dir);
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().kind == ErrorKind::permission);
  CHECK(again.error().message.find(k->key.string() + " can be read or changed by its group and others (mode 0644") !=
        std::string::npos);
  CHECK(again.error().hint.find("chmod 600 " + k->key.string()) != std::string::npos);
  CHECK(test::slurp(k->key) == key_text); // kept, for the operator to judge
  auto given = driver::load_signing_key(k->key, k->cert_der);
  REQUIRE_FALSE(given.has_value());
  CHECK(given.error().kind == ErrorKind::permission);
  // Only the key left behind, readable by others: refused too, not replaced by a new pair.
  std::filesystem::remove(k->cert_der);
  CHECK_FALSE(driver::ensure_signing_key(dir).has_value());
  REQUIRE(::chmod(k->key.c_str(), 0600) == 0);
  auto fresh = driver::ensure_signing_key(dir); // a private key without its certificate: a new pair
  REQUIRE(fresh.has_value());
  CHECK(mode_of(fresh->key) == 0600);
}

TEST_CASE("signing: the policy: auto signs with Secure Boot on, and on this host when its state is unknown") {
  const driver::SigningRequest automatic{driver::SignMode::automatic, {}, {}, "/var/lib/hpcbake/signing"};
  auto on = driver::decide_signing(automatic, detect::SecureBoot::enabled, "efivars");
  REQUIRE(on.has_value());
  CHECK(on->enabled);
  CHECK_FALSE(on->precaution);
  CHECK(on->cert == "/var/lib/hpcbake/signing/signing.der");
  auto off = driver::decide_signing(automatic, detect::SecureBoot::disabled, "efivars");
  CHECK_FALSE(off->enabled);
  // UEFI with SecureBoot unreadable (efivarfs not mounted): sign, as a precaution.
  auto unknown = driver::decide_signing(automatic, detect::SecureBoot::unknown, "efivars (unreadable)");
  CHECK(unknown->enabled);
  CHECK(unknown->precaution);
  CHECK(unknown->why.find("unknown") != std::string::npos);
  // A plan for another machine: decided on the target.
  auto elsewhere = driver::decide_signing(automatic, detect::SecureBoot::unknown, "not this host", false);
  CHECK_FALSE(elsewhere->enabled);
  // --sign off with Secure Boot on is refused; with the state unknown it is the user's call.
  driver::SigningRequest never = automatic;
  never.mode = driver::SignMode::off;
  auto refused = driver::decide_signing(never, detect::SecureBoot::enabled, "efivars");
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().kind == ErrorKind::unsupported);
  CHECK_FALSE(driver::decide_signing(never, detect::SecureBoot::unknown, "efivars (unreadable)")->enabled);
}
