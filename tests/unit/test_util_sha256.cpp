// util::Sha256 and sha256_file: known vectors, streaming in pieces equals hashing at once, and
// failures are Results naming the file, never an empty digest.
#include "helpers.hpp"
#include "util/sha256.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

using namespace hpcbake;

TEST_CASE("sha256: FIPS 180-2 vectors, whole and streamed") {
  // FIPS 180-2, appendix B.1 ("abc") and the empty message.
  CHECK(util::sha256_of("abc") == std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK(util::sha256_of("") == std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  util::Sha256 h;
  REQUIRE(h.update("a", 1).has_value());
  REQUIRE(h.update("bc", 2).has_value());
  CHECK(h.hex() == std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  REQUIRE(h.reset().has_value()); // reusable after reset
  CHECK(h.hex() == std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
}

TEST_CASE("sha256: a moved-from digester reports an error until reset") {
  util::Sha256 a;
  util::Sha256 b(std::move(a));
  CHECK_FALSE(a.update("x", 1).has_value()); // NOLINT(bugprone-use-after-move): the contract under test
  CHECK_FALSE(a.hex().has_value());
  REQUIRE(a.reset().has_value());
  REQUIRE(a.update("abc", 3).has_value());
  CHECK(a.hex() == std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK(b.hex() == std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
}

TEST_CASE("sha256_file: the digest and size of a file, and an error naming a missing or unreadable one") {
  const auto dir = test::scratch("sha256-file");
  test::write(dir / "abc", "abc");
  std::uint64_t bytes = 0;
  CHECK(util::sha256_file(dir / "abc", &bytes) ==
        std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK(bytes == 3);

  auto missing = util::sha256_file(dir / "missing");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find((dir / "missing").string()) != std::string::npos);
  CHECK_FALSE(missing.error().hint.empty());

  // A directory opens but cannot be read: the read error, not a digest of nothing.
  auto directory = util::sha256_file(dir);
  REQUIRE_FALSE(directory.has_value());
  CHECK(directory.error().message.find("read failed") != std::string::npos);

  // Unreadable by mode (root reads anything, so this part needs another uid).
  test::write(dir / "secret", "x");
  ::chmod((dir / "secret").c_str(), 0);
  if (::geteuid() != 0) {
    auto unreadable = util::sha256_file(dir / "secret");
    REQUIRE_FALSE(unreadable.has_value());
    CHECK(unreadable.error().message.find("secret") != std::string::npos);
  }
}

TEST_CASE("sha256: update_from_fd hashes from the current offset to EOF") {
  const auto dir = test::scratch("sha256-fd");
  test::write(dir / "f", "xxabc");
  const int fd = ::open((dir / "f").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::lseek(fd, 2, SEEK_SET) == 2);
  util::Sha256 h;
  CHECK(h.update_from_fd(fd, "f") == std::uint64_t{3});
  CHECK(h.hex() == std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  ::close(fd);
}
