// Signing keys: generated once with safe modes, reused, checked against their certificate.
#include "driver/signing.hpp"
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

using namespace hpcbake;

namespace {
unsigned mode_of(const std::filesystem::path& p) {
  struct stat st{};
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
