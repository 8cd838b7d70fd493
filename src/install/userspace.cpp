// The userspace steps of a plan (plan::UnpackStep, GitSourceStep, BuildStep): a verified artifact
// extracted into its prefix, a source tree at its pinned commit, the build commands run in it.
// Every path is a host path resolved under --root; every program runs through the Runner.
#include "archive/extract.hpp"
#include "fetch/bundle.hpp"
#include "install/actions.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <system_error>

#include <unistd.h>

namespace hpcbake::install {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kTail = 20;

StepResult failed(ErrorKind kind, std::string message, std::string hint = {}, std::string tail = {}) {
  return StepResult::failure(Error{kind, std::move(message), std::move(hint)}, std::move(tail));
}

// `dest` replaced by `fresh` (a complete tree beside it): the old tree moves aside first and is
// removed only once the new one is in place, so an interruption leaves one whole tree.
Status swap_into(const fs::path& fresh, const fs::path& dest) {
  std::error_code ec;
  const fs::path old = dest.string() + ".hpcbake-old";
  fs::remove_all(old, ec);
  const bool had = fs::exists(fs::symlink_status(dest, ec));
  if (had) {
    fs::rename(dest, old, ec);
    if (ec) return fail(ErrorKind::build, fmt::format("cannot move {} aside: {}", dest.string(), ec.message()));
  }
  fs::rename(fresh, dest, ec);
  if (ec) {
    std::error_code back;
    if (had) fs::rename(old, dest, back);
    return fail(ErrorKind::build, fmt::format("cannot put {} in place: {}", dest.string(), ec.message()));
  }
  fs::remove_all(old, ec);
  return {};
}

// make and cmake build with one job per online CPU of the machine that runs the install (not
// the one that planned), unless the component sets its own.
std::vector<std::string> parallel_env(std::vector<std::string> env) {
  const long n = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  auto has = [&](std::string_view key) {
    return std::any_of(env.begin(), env.end(),
                       [&](const std::string& e) { return e.starts_with(std::string(key) + "="); });
  };
  if (!has("MAKEFLAGS")) env.push_back(fmt::format("MAKEFLAGS=-j{}", n));
  if (!has("CMAKE_BUILD_PARALLEL_LEVEL")) env.push_back(fmt::format("CMAKE_BUILD_PARALLEL_LEVEL={}", n));
  return env;
}

class NoEvents final : public fetch::Observer {
public:
  void on_event(const fetch::Event&) override {}
};

} // namespace

// A git source the offline bundle carries: its git bundle file out of the bundle into the cache,
// verified by its SHA-256 (a tampered one is refused by name), held while git clones it.
Result<Actions::Cached> Actions::git_bundle_file(const plan::Step& s, const plan::GitSourceStep& g) {
  if (c_.bundle.empty())
    return fail(ErrorKind::usage,
                fmt::format("{}: the plan clones {} from an offline bundle's git bundle file, and this install has "
                            "no --bundle",
                            s.id, g.bundle->path),
                "run install with the same --bundle (or plan again without it)");
  const fetch::Job job{g.bundle->path, {}, g.bundle->sha256, g.bundle->size};
  NoEvents quiet;
  const fetch::Cache cache(c_.fetch.cache_dir, c_.fetch.quarantine_budget);
  std::unique_lock one_copy(bundle_mu_);
  HPCBAKE_TRY_ASSIGN(auto rep, fetch::fetch_from_bundle(c_.bundle, {job}, cache, quiet));
  one_copy.unlock();
  const auto& r = rep.results.front();
  if (!r.ok)
    return fail(ErrorKind::fetch, fmt::format("{}: {}", s.id, r.error),
                "the bundle is damaged: make it again with 'hpcbake bundle create'");
  HPCBAKE_TRY_ASSIGN(auto lock, cache.lock_entry_shared(r.sha256));
  return Cached{r.path, std::move(lock)};
}

StepResult Actions::unpack(const plan::Step& s, const plan::UnpackStep& u) {
  auto art = cached(u.artifact);
  if (!art) return StepResult::failure(art.error());
  auto dest = c_.host.resolve_checked(u.dest);
  if (!dest) return StepResult::failure(dest.error());
  std::error_code ec;
  fs::create_directories(dest->parent_path(), ec);
  if (ec)
    return failed(ErrorKind::build,
                  fmt::format("{}: cannot create {}: {}", s.id, dest->parent_path().string(), ec.message()));
  // Extracted beside dest (same file system: the swap is a rename), all or nothing.
  const fs::path fresh = dest->string() + ".hpcbake-new";
  fs::remove_all(fresh, ec);
  archive::ExtractOptions opts;
  opts.strip_components = static_cast<unsigned>(u.strip);
  auto stats = archive::extract_file(art->path, fresh, opts);
  if (!stats)
    return failed(stats.error().kind, fmt::format("{}: {}: {}", s.id, u.artifact, stats.error().message),
                  stats.error().hint);
  if (auto r = swap_into(fresh, *dest); !r) return StepResult::failure(r.error());
  return StepResult::ok(fmt::format("{} extracted into {} ({} entries, {})", u.artifact, u.dest, stats->entries,
                                    util::human_bytes(stats->bytes)));
}

// The clone goes into a new directory beside dest; HEAD is checked against the pin before it
// replaces dest. A dest already at the pinned commit with no tracked file changed is kept (a re-run
// after a later step failed).
// From a bundle, the clone reads the bundle's git bundle file (in the cache, verified) instead of
// the URL; git checks every object's hash as it indexes the pack, and HEAD must still be the pin.
StepResult Actions::git_source(const plan::Step& s, const plan::GitSourceStep& g) {
  auto dest = c_.host.resolve_checked(g.dest);
  if (!dest) return StepResult::failure(dest.error());
  auto run = [&](std::vector<std::string> argv, const fs::path& cwd = {}) {
    exec::Command cmd;
    cmd.argv = std::move(argv);
    cmd.cwd = cwd;
    cmd.env = {"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1"};
    return c_.runner->run(cmd);
  };
  auto head_of = [&](const fs::path& dir) -> std::string {
    auto r = run({"git", "-C", dir.string(), "rev-parse", "HEAD^{commit}"});
    return r && r->ok() ? std::string(util::trim(r->output)) : std::string();
  };
  std::error_code ec;
  // Kept only when no tracked file differs from the commit: a tree someone edited is cloned again.
  auto pristine = [&](const fs::path& dir) {
    auto r = run({"git", "-C", dir.string(), "status", "--porcelain", "--untracked-files=no"});
    return r && r->ok() && util::trim(r->output).empty();
  };
  if (fs::is_directory(*dest / ".git", ec) && head_of(*dest) == g.commit && pristine(*dest))
    return StepResult::ok(fmt::format("{} is already at {}", g.dest, g.commit));
  std::optional<Cached> file;
  if (g.bundle) {
    auto got = git_bundle_file(s, g);
    if (!got) return StepResult::failure(got.error());
    file = std::move(*got);
  }
  const std::string from = file ? file->path.string() : g.url;
  fs::create_directories(dest->parent_path(), ec);
  const fs::path fresh = dest->string() + ".hpcbake-new";
  fs::remove_all(fresh, ec);
  const std::vector<std::vector<std::string>> steps = {
      {"git", "clone", "--quiet", "--no-checkout", from, fresh.string()},
      {"git", "-C", fresh.string(), "checkout", "--quiet", "--detach", g.commit}};
  for (const auto& argv : steps) {
    auto r = run(argv);
    if (!r) return StepResult::failure(r.error());
    if (!r->ok()) {
      fs::remove_all(fresh, ec);
      auto shown = argv;
      for (auto& a : shown)
        a = util::redact_url(a);
      return failed(ErrorKind::fetch, fmt::format("{}: {} {}", s.id, exec::shell_quote(shown), r->describe()),
                    file ? "The bundle's git file did not clone (its bytes matched the bundle's index): make the "
                           "bundle again with 'hpcbake bundle create'."
                         : "Check that the URL is reachable and still has the pinned commit; a re-run starts the "
                           "clone again.",
                    util::last_lines(r->output, kTail));
    }
  }
  const auto head = head_of(fresh);
  if (head != g.commit) {
    fs::remove_all(fresh, ec);
    return failed(ErrorKind::fetch,
                  fmt::format("{}: {} checked out {} where the plan pins {}", s.id, util::redact_url(g.url),
                              head.empty() ? "nothing" : head, g.commit),
                  "The source is not the pinned one; nothing was kept.");
  }
  if (auto r = swap_into(fresh, *dest); !r) return StepResult::failure(r.error());
  return StepResult::ok(fmt::format("{} at {} in {}{}", util::redact_url(g.url), g.commit, g.dest,
                                    g.bundle ? ", cloned from " + g.bundle->path + " in the bundle" : ""));
}

StepResult Actions::build(const plan::Step& s, const plan::BuildStep& b) {
  auto dir = c_.host.resolve_checked(b.dir);
  if (!dir) return StepResult::failure(dir.error());
  std::error_code ec;
  fs::create_directories(*dir, ec); // a build with no source tree of its own (an installer) runs in a new one
  if (ec)
    return failed(ErrorKind::build,
                  fmt::format("{}: cannot create the build directory {}: {}", s.id, b.dir, ec.message()));
  for (const auto& argv : b.commands) {
    exec::Command cmd;
    std::vector<util::Fd> held; // the artifacts' shared cache locks, until the command is done
    if (auto r = resolve_argv(argv, cmd.argv, held); !r) return StepResult::failure(r.error());
    cmd.cwd = *dir;
    cmd.env = parallel_env(b.env);
    if (c_.on_output) cmd.on_output = [&](std::string_view line) { c_.on_output(s, std::string(line)); };
    auto r = c_.runner->run(cmd);
    if (!r) return StepResult::failure(r.error());
    if (!r->ok())
      return failed(ErrorKind::build,
                    fmt::format("{}: in {}: {} {}", s.id, b.dir, exec::shell_quote(cmd.argv), r->describe()),
                    "Read the output above; fix the cause and run install again (done steps are skipped).",
                    util::last_lines(r->output, kTail));
  }
  if (!c_.runner->records_machine_commands() && !c_.host.exists(b.creates))
    return failed(ErrorKind::build, fmt::format("{}: the build ran but {} is missing", s.id, b.creates),
                  "Read the build's output (install log); the commands exited 0 without installing.");
  return StepResult::ok(fmt::format("built {} {} ({} commands)", b.component, b.version, b.commands.size()));
}

} // namespace hpcbake::install
