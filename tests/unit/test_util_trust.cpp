// util/trust: which paths hpcbake may act on as root (owner root or the effective uid, no
// group/other write bit on the path or any directory above it, sticky directories above it
// allowed), and private key files (0600 or stricter).
#include "helpers.hpp"
#include "util/trust.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

// A scratch tree whose directories are all 0755, whatever the umask and the scratch parent.
fs::path tree(const std::string& name) {
  ::umask(022); // what the test creates gets the modes it sets, whatever umask ran the suite
  const fs::path dir = test::scratch(name);
  for (fs::path p = dir; p != p.parent_path() && p != "/tmp"; p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 022))
      ::chmod(p.c_str(), st.st_mode & ~022);
  }
  return dir;
}

void mode(const fs::path& p, unsigned m) {
  REQUIRE(::chmod(p.c_str(), m) == 0);
}

util::TrustOptions opts(int depth = -1) {
  util::TrustOptions o;
  o.trusted_uid = ::geteuid();
  o.depth = depth;
  o.what = "manifest directory";
  o.remedy = "or pass --manifests DIR";
  return o;
}

std::string message(const Status& s) {
  return s ? std::string() : s.error().message + "\n" + s.error().hint;
}

} // namespace

TEST_CASE("trust: a tree only its owner can write is trusted, at any depth") {
  const auto dir = tree("trust-ok") / "manifests";
  test::write(dir / "sizes" / "a.yaml", "x");
  test::write(dir / "distros" / "b.yaml", "y");
  mode(dir / "sizes" / "a.yaml", 0644);
  mode(dir / "distros" / "b.yaml", 0600);
  CHECK_MESSAGE(util::check_trusted_path(dir, opts()).has_value(), message(util::check_trusted_path(dir, opts())));
  // Not there yet: who could create it is what counts, and the directories above are fine.
  CHECK(util::check_trusted_path(dir / "not" / "yet", opts()).has_value());
}

TEST_CASE("trust: a group- or world-writable directory is refused with its path, owner, mode and the chmod") {
  const auto dir = tree("trust-dir") / "manifests";
  fs::create_directories(dir);
  mode(dir, 0777);
  auto s = util::check_trusted_path(dir, opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().kind == ErrorKind::permission);
  CHECK(exit_code_for(s.error().kind) == ExitCode::permission);
  CHECK(s.error().message.find("refusing the manifest directory " + dir.string()) != std::string::npos);
  CHECK(s.error().message.find("is writable by group and others") != std::string::npos);
  CHECK(s.error().message.find("mode 0777, owner uid " + std::to_string(::geteuid())) != std::string::npos);
  CHECK(s.error().hint.find("chmod go-w " + dir.string()) != std::string::npos);
  CHECK(s.error().hint.find("or pass --manifests DIR") != std::string::npos);
  mode(dir, 0775);
  s = util::check_trusted_path(dir, opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find("is writable by its group") != std::string::npos);
  mode(dir, 0757);
  s = util::check_trusted_path(dir, opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find("is writable by others") != std::string::npos);
  // Sticky is no excuse for the directory itself: others can still add files to it.
  mode(dir, 01777);
  CHECK_FALSE(util::check_trusted_path(dir, opts()).has_value());
}

TEST_CASE("trust: a writable file inside is found to the depth asked, links are followed to their target") {
  const auto dir = tree("trust-inside") / "manifests";
  test::write(dir / "sizes" / "deep" / "a.yaml", "x");
  test::write(dir / "top.yaml", "x");
  mode(dir / "sizes" / "deep" / "a.yaml", 0666);
  auto s = util::check_trusted_path(dir, opts(-1));
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find((dir / "sizes" / "deep" / "a.yaml").string() + " is writable") != std::string::npos);
  CHECK(util::check_trusted_path(dir, opts(0)).has_value()); // the directory alone
  CHECK(util::check_trusted_path(dir, opts(2)).has_value()); // sizes/ and sizes/deep/, not what is in deep/
  CHECK_FALSE(util::check_trusted_path(dir, opts(3)).has_value());
  mode(dir / "sizes" / "deep" / "a.yaml", 0644);
  REQUIRE(util::check_trusted_path(dir, opts()).has_value());

  // A link inside leads to a file in a directory anyone can write: the target's chain is checked.
  const auto open_dir = tree("trust-inside-open");
  test::write(open_dir / "elsewhere.yaml", "x");
  mode(open_dir, 0777);
  fs::create_symlink(open_dir / "elsewhere.yaml", dir / "linked.yaml");
  s = util::check_trusted_path(dir, opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find(open_dir.string() + " is writable by group and others") != std::string::npos);
  fs::remove(dir / "linked.yaml");
  CHECK(util::check_trusted_path(dir, opts()).has_value());
  mode(open_dir, 0755);
}

TEST_CASE("trust: directories above: world-writable refused unless sticky, a link to the path is resolved") {
  const auto base = tree("trust-above");
  const auto parent = base / "shared";
  const auto dir = parent / "manifests";
  test::write(dir / "a.yaml", "x");
  mode(parent, 0777); // anyone could rename manifests/ away and put their own in its place
  auto s = util::check_trusted_path(dir, opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find(": " + parent.string() + " is writable by group and others") != std::string::npos);
  // Not there yet, under such a directory: anyone could create it first.
  CHECK_FALSE(util::check_trusted_path(parent / "cache", opts()).has_value());
  mode(parent, 01777); // like /tmp: others cannot rename or remove what is not theirs
  CHECK(util::check_trusted_path(dir, opts()).has_value());
  mode(parent, 0755);

  // The path named through a link: both the link's chain and the resolved chain are checked.
  const auto open_dir = tree("trust-above-open") / "real";
  test::write(open_dir / "a.yaml", "x");
  mode(open_dir.parent_path(), 0777);
  fs::create_symlink(open_dir, base / "link");
  s = util::check_trusted_path(base / "link", opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find(open_dir.parent_path().string() + " is writable") != std::string::npos);
  mode(open_dir.parent_path(), 0755);
  CHECK(util::check_trusted_path(base / "link", opts()).has_value());

  // "link/.." is where the kernel goes (the parent of the link's target), not the directory
  // holding the link: a lexical fold would check base/ and load open_dir's parent.
  mode(open_dir.parent_path(), 0777);
  s = util::check_trusted_path(base / "link" / ".." / "real", opts(0));
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find(open_dir.parent_path().string() + " is writable") != std::string::npos);
  mode(open_dir.parent_path(), 0755);
}

TEST_CASE("trust: a dangling link inside is checked where it points: whoever can create that decides") {
  const auto dir = tree("trust-dangling") / "manifests";
  test::write(dir / "a.yaml", "x");
  const auto open_dir = tree("trust-dangling-open");
  mode(open_dir, 0777);
  fs::create_symlink(open_dir / "later.yaml", dir / "later.yaml");
  auto s = util::check_trusted_path(dir, opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find(open_dir.string() + " is writable by group and others") != std::string::npos);
  mode(open_dir, 0755);
  CHECK(util::check_trusted_path(dir, opts()).has_value());
}

TEST_CASE("trust: a path another user owns is refused (root only: chown)") {
  if (::geteuid() != 0) {
    MESSAGE("SKIPPED: needs root to give a file to another user");
    return;
  }
  const auto dir = tree("trust-owner") / "manifests";
  test::write(dir / "a.yaml", "x");
  REQUIRE(::chown((dir / "a.yaml").c_str(), 65534, 65534) == 0);
  auto s = util::check_trusted_path(dir, opts());
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().kind == ErrorKind::permission);
  CHECK(s.error().message.find((dir / "a.yaml").string() + " is not owned by root") != std::string::npos);
  CHECK(s.error().message.find("owner uid 65534") != std::string::npos);
  CHECK(s.error().hint.find("chown root " + (dir / "a.yaml").string()) != std::string::npos);
  // Owned by the uid hpcbake runs as (a test suite's fixture tree): trusted.
  auto as_nobody = opts();
  as_nobody.trusted_uid = 65534;
  CHECK(util::check_trusted_path(dir, as_nobody).has_value());
}

TEST_CASE("trust: private key files are 0600 or stricter and owned by root or the effective uid") {
  const auto dir = tree("trust-key");
  const auto key = dir / "signing.key";
  CHECK(util::check_private_file(key, ::geteuid(), "the key").has_value()); // missing: the caller says so
  test::write(key, "-----BEGIN PRIVATE KEY-----\n");
  mode(key, 0600);
  CHECK(util::check_private_file(key, ::geteuid(), "the key").has_value());
  mode(key, 0400);
  CHECK(util::check_private_file(key, ::geteuid(), "the key").has_value());
  mode(key, 0640);
  auto s = util::check_private_file(key, ::geteuid(), "the key");
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().kind == ErrorKind::permission);
  CHECK(s.error().message.find("can be read or changed by its group (mode 0640") != std::string::npos);
  CHECK(s.error().hint.find("chmod 600 " + key.string()) != std::string::npos);
  mode(key, 0604);
  s = util::check_private_file(key, ::geteuid(), "the key");
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message.find("by others") != std::string::npos);
  mode(key, 0600);
  if (::geteuid() == 0) {
    REQUIRE(::chown(key.c_str(), 65534, 65534) == 0);
    s = util::check_private_file(key, 0, "the key");
    REQUIRE_FALSE(s.has_value());
    CHECK(s.error().message.find("is not owned by root") != std::string::npos);
  }
}
