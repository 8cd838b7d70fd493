#include "repo/openpgp.hpp"

#include "helpers.hpp"
#include "util/strings.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

namespace {

std::string fixture(const std::string& name) {
  return test::read(test::source_dir() / "tests/fixtures/openpgp" / name);
}

constexpr const char* kTestKey = "C607052566F81BB2813915641787F05C5250046E";
constexpr const char* kTestSubkey = "DC0B1652FF62942B8572AE823F0AECA0A9852171";
constexpr const char* kOtherKey = "D1A1E1300C9B3C70215509350C556B44D3B9DCA4";

} // namespace

TEST_CASE("openpgp: fingerprints of armored and binary keys are gpg's") {
  auto armored = repo::read_key_file(fixture("test-key.asc"), "test-key.asc");
  REQUIRE(armored);
  CHECK(armored->armored);
  REQUIRE(armored->keys.size() == 1);
  CHECK(armored->keys[0].fingerprint == kTestKey);
  CHECK(armored->keys[0].version == 4);
  CHECK(armored->keys[0].subkeys == std::vector<std::string>{kTestSubkey});
  REQUIRE(armored->keys[0].user_ids.size() == 1);
  CHECK(armored->keys[0].user_ids[0] == "hpcbake test repository <repo@test.invalid>");
  // De-armoring gives gpg --export's bytes exactly.
  CHECK(armored->binary == fixture("test-key.gpg"));

  auto binary = repo::read_key_file(fixture("test-key.gpg"), "test-key.gpg");
  REQUIRE(binary);
  CHECK_FALSE(binary->armored);
  CHECK(binary->keys[0].fingerprint == kTestKey);

  auto ed = repo::read_key_file(fixture("other-key.asc"), "other-key.asc");
  REQUIRE(ed);
  CHECK(ed->keys[0].fingerprint == kOtherKey);
}

TEST_CASE("openpgp: the pinned key is accepted in any spelling of its fingerprint") {
  CHECK(repo::verify_pinned_key(fixture("test-key.asc"), kTestKey, "k"));
  CHECK(repo::verify_pinned_key(fixture("test-key.asc"), "c607 0525 66f8 1bb2 8139  1564 1787 f05c 5250 046e", "k"));
  CHECK(repo::verify_pinned_key(fixture("test-key.gpg"), std::string("0x") + kTestKey, "k"));
  CHECK(util::normalize_fingerprint("EB69 3B30 35CD 5710 E231 E123 A4B4 6996 3BF8 63CC") ==
        "EB693B3035CD5710E231E123A4B469963BF863CC");
  CHECK(util::normalize_fingerprint("3BF863CC").empty()); // a key id is not a pin
}

TEST_CASE("openpgp: another key, a second key, a subkey's fingerprint or a damaged file is refused") {
  auto other = repo::verify_pinned_key(fixture("other-key.asc"), kTestKey, "other-key.asc");
  REQUIRE_FALSE(other);
  CHECK(other.error().kind == ErrorKind::fetch);
  CHECK(other.error().message.find(kOtherKey) != std::string::npos);
  CHECK(other.error().message.find(kTestKey) != std::string::npos);

  auto two = repo::verify_pinned_key(fixture("two-keys.asc"), kTestKey, "two-keys.asc");
  REQUIRE_FALSE(two);
  CHECK(two.error().message.find("2 primary keys") != std::string::npos);

  CHECK_FALSE(repo::verify_pinned_key(fixture("test-key.asc"), kTestSubkey, "k"));
  CHECK(repo::verify_pinned_key(fixture("test-key.asc"), "3BF863CC", "k").error().kind == ErrorKind::manifest);

  std::string text = fixture("test-key.asc");
  const auto mid = text.find('\n', text.size() / 2) + 1;
  text[mid] = text[mid] == 'A' ? 'B' : 'A'; // one base64 character: the CRC-24 no longer matches
  auto damaged = repo::read_key_file(text, "damaged.asc");
  REQUIRE_FALSE(damaged);
  CHECK(damaged.error().message.find("checksum") != std::string::npos);

  const std::string bin = fixture("test-key.gpg");
  CHECK_FALSE(repo::read_key_file(bin.substr(0, bin.size() - 10), "cut.gpg"));
  CHECK_FALSE(repo::read_key_file("<html>Not Found</html>", "404.html"));
  CHECK_FALSE(repo::read_key_file("", "empty"));
}

// Found while writing fuzz_openpgp (issue 40): a file was read as armored whenever the armor's
// BEGIN line appeared anywhere in it, so a binary key whose user ID held another key's armor was
// read as that other key. A packet header's high bit says binary (RFC 4880 4.2); armor is text.
TEST_CASE("openpgp: a binary key is read as binary even when a user ID holds another key's armor") {
  const std::string armor = fixture("other-key.asc");
  REQUIRE(armor.size() >= 192);
  REQUIRE(armor.size() < 8384);
  const std::size_t n = armor.size() - 192; // a two-octet new-format length (RFC 4880 4.2.2.2)
  std::string uid = {static_cast<char>(0xC0 | 13), static_cast<char>((n >> 8) + 192), static_cast<char>(n & 0xff)};
  uid += armor;
  auto k = repo::read_key_file(fixture("test-key.gpg") + uid, "test-key.gpg");
  REQUIRE(k);
  CHECK_FALSE(k->armored);
  REQUIRE(k->keys.size() == 1);
  CHECK(k->keys[0].fingerprint == kTestKey);
  CHECK(k->keys[0].user_ids.back() == armor);
  CHECK_FALSE(repo::verify_pinned_key(fixture("test-key.gpg") + uid, kOtherKey, "test-key.gpg"));
}
