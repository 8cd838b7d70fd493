// A git source carried in an offline bundle (fetch::carry_git_source), with the real git: the
// file holds one ref at the pin and the pin's history only, lands in the cache by its SHA-256,
// and clones back to the pin; a commit the repository lacks is refused naming it.
#include "exec/runner.hpp"
#include "fetch/git_bundle.hpp"
#include "helpers.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

// Runs git in `dir`; its trimmed output (the test fails on a non-zero exit).
std::string git(exec::Runner& runner, const fs::path& dir, std::vector<std::string> args) {
  exec::Command cmd;
  cmd.argv = {"git", "-C", dir.string()};
  cmd.argv.insert(cmd.argv.end(), args.begin(), args.end());
  cmd.env = {"GIT_CONFIG_NOSYSTEM=1",           "HOME=" + dir.string(), "GIT_AUTHOR_NAME=t",
             "GIT_AUTHOR_EMAIL=t@test.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@test.invalid"};
  auto r = runner.run(cmd);
  REQUIRE(r.has_value());
  REQUIRE_MESSAGE(r->ok(), r->output);
  return std::string(util::trim(r->output));
}

bool have_git(exec::Runner& runner) {
  exec::Command cmd;
  cmd.argv = {"git", "--version"};
  auto r = runner.run(cmd);
  return r && r->ok();
}

} // namespace

TEST_CASE("a git source is carried as a git bundle of the pinned commit, by its SHA-256") {
  exec::SystemRunner runner;
  if (!have_git(runner)) {
    MESSAGE("SKIPPED: git is missing (scripts/deps installs it)");
    return;
  }
  const fs::path dir = test::scratch("hpcbake-git-bundle");
  const fs::path src = dir / "src";
  fs::create_directories(src);
  git(runner, src, {"init", "-q"});
  test::write(src / "a", "pinned\n");
  git(runner, src, {"add", "a"});
  git(runner, src, {"commit", "-q", "-m", "pin"});
  const std::string pin = git(runner, src, {"rev-parse", "HEAD"});
  test::write(src / "b", "later\n");
  git(runner, src, {"add", "b"});
  git(runner, src, {"commit", "-q", "-m", "later"});
  const std::string tip = git(runner, src, {"rev-parse", "HEAD"});
  const fetch::Cache cache(dir / "cache");
  const fs::path scratch = dir / "scratch";
  fs::create_directories(scratch);

  const fetch::GitPin good{"src-test", "file://" + src.string(), pin};
  auto file = fetch::carry_git_source(good, runner, cache, scratch);
  REQUIRE_MESSAGE(file.has_value(), (file ? "" : file.error().message));
  CHECK(file->name == "git/src-test-" + pin + ".bundle");
  REQUIRE(cache.has(file->sha256));
  std::uint64_t size = 0;
  CHECK(util::sha256_file(cache.entry(file->sha256), &size).value() == file->sha256);
  CHECK(size == file->size);
  CHECK(git(runner, dir, {"bundle", "list-heads", cache.entry(file->sha256).string()}) ==
        pin + " refs/heads/hpcbake-pin");
  // Cloned back: the pin, and nothing past it.
  git(runner, dir, {"clone", "-q", "--no-checkout", cache.entry(file->sha256).string(), (dir / "node").string()});
  git(runner, dir / "node", {"checkout", "-q", "--detach", pin});
  CHECK(git(runner, dir / "node", {"rev-parse", "HEAD"}) == pin);
  exec::Command has_tip;
  has_tip.argv = {"git", "-C", (dir / "node").string(), "cat-file", "-e", tip};
  CHECK_FALSE(runner.run(has_tip).value().ok());

  const std::string missing(40, 'a');
  auto refused =
      fetch::carry_git_source({"src-test", "file://" + src.string(), missing}, runner, cache, scratch / "again");
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().kind == ErrorKind::fetch);
  CHECK(refused.error().message.find("git source of src-test") != std::string::npos);
  CHECK(refused.error().message.find(missing) != std::string::npos);
  CHECK(refused.error().hint.find("no longer has the pinned commit") != std::string::npos);
  fs::remove_all(dir);
}
