#include "pkg/manager.hpp"

#include "util/strings.hpp"

#include "pkg/lock.hpp"
#include "util/atomic_file.hpp"

#include <filesystem>

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::pkg {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kTailLines = 40;

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    out.emplace_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// The code both families share: running a command, and turning a failure into an Error.
class Base : public PackageManager {
public:
  Base(exec::Runner& runner, util::HostFs fs, PkgOptions options)
      : runner_(runner), fs_(std::move(fs)), opt_(std::move(options)) {}

protected:
  void say(const std::string& msg) const {
    if (opt_.on_status) opt_.on_status(msg);
  }

  Clock::time_point deadline() const { return Clock::now() + opt_.lock_timeout; }

  Status wait(const std::vector<LockFile>& locks, Clock::time_point until) const {
    return wait_for_locks(fs_, locks, LockWait{until, opt_.poll, opt_.on_status});
  }

  exec::Command command(std::vector<std::string> argv) const {
    exec::Command cmd;
    cmd.argv = std::move(argv);
    cmd.env = env();
    cmd.timeout = opt_.command_timeout;
    cmd.on_output = opt_.on_output;
    return cmd;
  }

  // The command as it could be pasted into a shell, environment included.
  std::string printable(const exec::Command& cmd) const {
    std::string out;
    for (const auto& e : cmd.env)
      out += exec::shell_quote({e}) + " ";
    return out + exec::shell_quote(cmd.argv);
  }

  // Runs without checking the result: an Error only when it could not start.
  Result<exec::Completed> run(const exec::Command& cmd) const {
    auto done = runner_.run(cmd);
    if (!done) {
      Error e = done.error();
      if (e.hint.empty()) e.hint = fmt::format("is {} installed on this host?", cmd.argv.front());
      return std::unexpected(std::move(e));
    }
    return done;
  }

  Status run_checked(std::vector<std::string> argv, std::string_view hint) const {
    const auto cmd = command(std::move(argv));
    say(fmt::format("running: {}", printable(cmd)));
    HPCBAKE_TRY_ASSIGN(auto done, run(cmd));
    if (done.ok()) return {};
    return fail(ErrorKind::build, failure_message(cmd, done), std::string(hint));
  }

  std::string failure_message(const exec::Command& cmd, const exec::Completed& done) const {
    const std::string tail = util::last_lines(done.output, kTailLines);
    if (tail.empty()) return fmt::format("{} {} (no output)", printable(cmd), done.describe());
    return fmt::format("{} {}; last lines of its output:\n{}", printable(cmd), done.describe(), tail);
  }

  virtual std::vector<std::string> env() const { return {}; }

  exec::Runner& runner_;
  util::HostFs fs_;
  PkgOptions opt_;
};

// ---------------------------------------------------------------- apt

const std::vector<LockFile> kDpkgLocks = {
    {"/var/lib/dpkg/lock-frontend", "dpkg lock"},
    {"/var/lib/dpkg/lock", "dpkg lock"},
};

class Apt final : public Base {
public:
  using Base::Base;

  Status refresh() override {
    // apt.systemd.daily refreshes the lists and then upgrades: wait for both to be free.
    auto locks = kDpkgLocks;
    locks.push_back({"/var/lib/apt/lists/lock", "apt lists lock"});
    const auto until = deadline();
    if (auto s = wait(locks, until); !s) return s;
    return run_checked({"apt-get", "update", "-q", "-o", lock_timeout_option(until)},
                       "check network access to the package mirrors in /etc/apt/sources.list(.d) and that they "
                       "serve this distro release; run `apt-get update` by hand to see every failing source");
  }

  Status install(const std::vector<std::string>& packages) override {
    if (packages.empty()) return {};
    const auto until = deadline();
    if (auto s = wait(kDpkgLocks, until); !s) return s;
    std::vector<std::string> argv = {"apt-get",
                                     "install",
                                     "-y",
                                     "-q",
                                     "--no-install-recommends",
                                     "-o",
                                     "Dpkg::Options::=--force-confdef",
                                     "-o",
                                     "Dpkg::Options::=--force-confold",
                                     "-o",
                                     lock_timeout_option(until)};
    argv.insert(argv.end(), packages.begin(), packages.end());
    return run_checked(std::move(argv),
                       "check that each package (and version) exists for this distro release (`apt-cache policy "
                       "NAME`), that the lists are fresh (`apt-get update`) and that the mirror is reachable");
  }

  Status hold(const std::vector<std::string>& packages) override {
    if (packages.empty()) return {};
    if (auto s = wait(kDpkgLocks, deadline()); !s) return s;
    std::vector<std::string> argv = {"apt-mark", "hold"};
    for (const auto& p : packages)
      argv.push_back(p.substr(0, p.find('='))); // apt-mark takes names only
    return run_checked(std::move(argv), "check that the packages are installed (`dpkg -l NAME`)");
  }

  Result<std::optional<std::string>> installed_version(const std::string& package) override {
    // ${Status} rather than ${Version} alone: a package removed with its config files kept
    // ("deinstall ok config-files") still has a version but is not installed.
    auto cmd = command({"dpkg-query", "-W", "-f=${Status}\\t${Version}\\n", package});
    HPCBAKE_TRY_ASSIGN(auto done, run(cmd));
    if (done.exit_code == 1 && !done.timed_out) return std::nullopt; // no such package known to dpkg
    if (!done.ok())
      return fail(ErrorKind::internal, failure_message(cmd, done), "check the dpkg database (`dpkg --audit`)");
    // One line per architecture for multi-arch packages; the first installed one wins.
    for (const auto& line : split_lines(done.output)) {
      const auto tab = line.find('\t');
      if (tab == std::string::npos) continue;
      const std::string_view status = std::string_view(line).substr(0, tab);
      const std::string version = line.substr(tab + 1);
      if (status.ends_with(" installed") && !version.empty()) return version;
    }
    return std::nullopt;
  }

  Result<std::optional<std::string>> candidate_version(const std::string& package) override {
    // apt-cache policy prints nothing (exit 0) for a name the index does not know, and
    // "Candidate: (none)" for one it knows without an installable version.
    auto cmd = command({"apt-cache", "policy", package});
    HPCBAKE_TRY_ASSIGN(auto done, run(cmd));
    if (!done.ok())
      return fail(ErrorKind::internal, failure_message(cmd, done), "check the package lists (`apt-get update`)");
    for (const auto& line : split_lines(done.output)) {
      const std::string_view l = util::trim(line);
      if (!l.starts_with("Candidate:")) continue;
      const std::string v(util::trim(l.substr(10)));
      if (v.empty() || v == "(none)") return std::nullopt;
      return v;
    }
    return std::nullopt;
  }

protected:
  std::vector<std::string> env() const override { return {"DEBIAN_FRONTEND=noninteractive"}; }

private:
  // What is left of the lock timeout goes to apt itself, for the race where another process
  // takes the lock between our check and apt's start.
  static std::string lock_timeout_option(Clock::time_point until) {
    const auto left = std::max(Clock::duration::zero(), until - Clock::now());
    return fmt::format("DPkg::Lock::Timeout={}", std::chrono::ceil<std::chrono::seconds>(left).count());
  }
};

// ---------------------------------------------------------------- dnf

const std::vector<LockFile> kRpmLocks = {{"/var/lib/rpm/.rpm.lock", "rpm lock"}};

class Dnf : public Base {
public:
  using Base::Base;

  Status refresh() override {
    if (auto s = wait(kRpmLocks, deadline()); !s) return s;
    return run_checked(
        {program(), "-y", "makecache"},
        fmt::format("check network access to the repositories in /etc/yum.repos.d and `{} repolist`", program()));
  }

  Status install(const std::vector<std::string>& packages) override {
    if (packages.empty()) return {};
    if (auto s = wait(kRpmLocks, deadline()); !s) return s;
    std::vector<std::string> argv = {program(), "-y", "install"};
    argv.insert(argv.end(), packages.begin(), packages.end());
    return run_checked(std::move(argv),
                       fmt::format("check that each package (and version) exists in this distro's enabled repositories "
                                   "(`{} list --showduplicates NAME`) and that the repositories are reachable",
                                   program()));
  }

  Status hold(const std::vector<std::string>& packages) override {
    if (packages.empty()) return {};
    if (!have_versionlock_) {
      HPCBAKE_TRY_ASSIGN(auto probe, run(command({"dnf", "-q", "versionlock", "list"})));
      if (!probe.ok()) {
        say("dnf versionlock is missing: installing python3-dnf-plugin-versionlock");
        if (auto s = install({"python3-dnf-plugin-versionlock"}); !s) return s;
      }
      have_versionlock_ = true;
    }
    if (auto s = wait(kRpmLocks, deadline()); !s) return s;
    std::vector<std::string> argv = {"dnf", "-y", "versionlock", "add"};
    argv.insert(argv.end(), packages.begin(), packages.end());
    return run_checked(std::move(argv), "check that the packages are installed (`rpm -q NAME`)");
  }

  Result<std::optional<std::string>> installed_version(const std::string& package) override {
    auto cmd = command({"rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}\\n", package});
    HPCBAKE_TRY_ASSIGN(auto done, run(cmd));
    if (done.exit_code == 1 && !done.timed_out) return std::nullopt; // "package X is not installed"
    if (!done.ok()) return fail(ErrorKind::internal, failure_message(cmd, done), "check the rpm database (`rpm -qa`)");
    // Several lines when several versions are installed side by side (kernels): the first.
    for (const auto& line : split_lines(done.output))
      if (!line.empty()) return line;
    return std::nullopt;
  }

protected:
  // The command line: dnf's, which Azure Linux's tdnf shares.
  virtual const char* program() const { return "dnf"; }

private:
  bool have_versionlock_ = false;
};

// ---------------------------------------------------------------- tdnf (Azure Linux)

// tdnf has dnf's command line but no versionlock: it skips the packages named in
// /etc/tdnf/locks.d/*.conf, one name a line (Azure/azhpc-images: "echo cuda >>
// /etc/tdnf/locks.d/nvidia.conf"). hpcbake keeps its names in a file of its own. Installed versions
// are rpm's, read as Dnf reads them.
constexpr const char* kTdnfLocks = "/etc/tdnf/locks.d/hpcbake.conf";

class Tdnf final : public Dnf {
public:
  using Dnf::Dnf;

  Status hold(const std::vector<std::string>& packages) override {
    if (packages.empty()) return {};
    const auto path = fs_.resolve(kTdnfLocks);
    HPCBAKE_TRY_ASSIGN(auto current, fs_.read_checked(kTdnfLocks, util::host_file::config));
    std::string text = std::move(current).value_or("");
    for (const auto& p : packages) {
      const std::string line = p + "\n";
      if (text.find(line) == 0 || text.find("\n" + line) != std::string::npos) continue;
      if (!text.empty() && !text.ends_with('\n')) text += '\n';
      text += line;
    }
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    return util::write_file_atomic(path, text);
  }

protected:
  const char* program() const override { return "tdnf"; }
};

} // namespace

Family family_of(manifest::PackageManager pm) {
  switch (pm) {
  case manifest::PackageManager::apt:
    return Family::apt;
  case manifest::PackageManager::dnf:
    return Family::dnf;
  case manifest::PackageManager::tdnf:
    return Family::tdnf;
  }
  return Family::apt;
}

Result<std::optional<std::string>> PackageManager::candidate_version(const std::string& package) {
  return fail(ErrorKind::unsupported,
              fmt::format("reading the candidate version of {} is implemented for apt only", package));
}

std::unique_ptr<PackageManager> make_package_manager(Family family, exec::Runner& runner, const util::HostFs& fs,
                                                     PkgOptions options) {
  switch (family) {
  case Family::apt:
    return std::make_unique<Apt>(runner, fs, std::move(options));
  case Family::dnf:
    return std::make_unique<Dnf>(runner, fs, std::move(options));
  case Family::tdnf:
    return std::make_unique<Tdnf>(runner, fs, std::move(options));
  }
  return nullptr;
}

} // namespace hpcbake::pkg
