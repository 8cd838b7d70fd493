#include "fetch/git_bundle.hpp"

#include "util/sha256.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <system_error>
#include <vector>

namespace hpcbake::fetch {

namespace fs = std::filesystem;

std::string git_bundle_name(const GitPin& pin) {
  return fmt::format("git/{}-{}.bundle", pin.component, pin.commit);
}

namespace {

// git with no system or terminal configuration in the way: never a prompt, never a helper.
Result<exec::Completed> git(exec::Runner& runner, std::vector<std::string> args) {
  exec::Command cmd;
  cmd.argv = {"git"};
  cmd.argv.insert(cmd.argv.end(), args.begin(), args.end());
  cmd.env = {"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1"};
  return runner.run(cmd);
}

Status git_ok(exec::Runner& runner, const GitPin& pin, std::vector<std::string> args, const std::string& hint) {
  HPCBAKE_TRY_ASSIGN(auto r, git(runner, args));
  if (r.ok()) return {};
  std::vector<std::string> shown = {"git"};
  for (const auto& a : args)
    shown.push_back(util::redact_url(a));
  return fail(ErrorKind::fetch,
              fmt::format("bundle: git source of {} ({} at {}): {} {}: {}", pin.component, util::redact_url(pin.url),
                          pin.commit, exec::shell_quote(shown), r.describe(), util::last_lines(r.output, 5)),
              hint);
}

} // namespace

Result<GitBundleFile> carry_git_source(const GitPin& pin, exec::Runner& runner, const Cache& cache,
                                       const fs::path& scratch) {
  const fs::path repo = scratch / (pin.component + ".git");
  HPCBAKE_TRY(git_ok(runner, pin, {"clone", "--quiet", "--bare", pin.url, repo.string()},
                     "check that the URL is reachable from this machine, then run 'bundle create' again"));
  HPCBAKE_TRY(git_ok(runner, pin, {"-C", repo.string(), "cat-file", "-e", pin.commit + "^{commit}"},
                     "the repository no longer has the pinned commit: the manifest's pin must change"));
  HPCBAKE_TRY(git_ok(runner, pin, {"-C", repo.string(), "update-ref", kGitBundleRef, pin.commit}, {}));
  HPCBAKE_TRY(cache.ensure_layout());
  // Written into the cache's partial/ (the file system of the entry: publishing is a rename).
  const fs::path file = cache.dir() / "partial" / fmt::format("git-{}-{}.bundle", pin.component, pin.commit);
  std::error_code ec;
  fs::remove(file, ec);
  auto drop = [&](Error e) {
    fs::remove(file, ec);
    return std::unexpected(std::move(e));
  };
  if (auto s =
          git_ok(runner, pin, {"-C", repo.string(), "bundle", "create", "--quiet", file.string(), kGitBundleRef}, {});
      !s)
    return drop(s.error());
  // What the node will clone: exactly the one ref, at the pin.
  auto heads = git(runner, {"bundle", "list-heads", file.string()});
  if (!heads) return drop(heads.error());
  const std::string want = fmt::format("{} {}", pin.commit, kGitBundleRef);
  if (!heads->ok() || util::trim(heads->output) != want)
    return drop(Error{ErrorKind::fetch,
                      fmt::format("bundle: the git bundle of {} lists '{}' where '{}' was written", pin.component,
                                  util::trim(heads->output), want),
                      "run 'bundle create' again; if it repeats, check the git on this machine"});
  std::uint64_t size = 0;
  auto sha = util::sha256_file(file, &size);
  if (!sha) return drop(sha.error());
  fs::rename(file, cache.part(*sha), ec);
  if (ec)
    return drop(
        Error{ErrorKind::fetch,
              fmt::format("bundle: cannot move {} to {}: {}", file.string(), cache.part(*sha).string(), ec.message()),
              {}});
  HPCBAKE_TRY(cache.publish(*sha));
  return GitBundleFile{git_bundle_name(pin), *sha, size};
}

} // namespace hpcbake::fetch
