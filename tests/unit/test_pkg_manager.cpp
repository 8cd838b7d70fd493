// Package managers over a RecordingRunner and a scratch HostFs root: the exact commands,
// waiting for (and timing out on) a dpkg/rpm lock held by another process, failure messages,
// and installed-version parsing.
#include "exec/runner.hpp"
#include "helpers.hpp"
#include "pkg/lock.hpp"
#include "pkg/manager.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <csignal>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace hpcbake;
using namespace hpcbake::pkg;
using exec::exited;
using exec::RecordingRunner;
using Argvs = std::vector<std::vector<std::string>>;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A scratch machine root with the lock files dpkg and rpm create.
std::filesystem::path machine(const std::string& name) {
  const auto root = test::scratch(name);
  for (const char* f :
       {"var/lib/dpkg/lock-frontend", "var/lib/dpkg/lock", "var/lib/apt/lists/lock", "var/lib/rpm/.rpm.lock"})
    test::write(root / f, "");
  return root;
}

// A child process holding an fcntl write lock on `file` until release() (fcntl locks are per
// process, so the test's own lock would be invisible to its own F_GETLK).
class LockHolderProcess {
public:
  explicit LockHolderProcess(const std::filesystem::path& file) {
    int ready[2], release[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(release) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      // Child: async-signal-safe calls only.
      ::close(ready[0]);
      ::close(release[1]);
      const int fd = ::open(file.c_str(), O_RDWR);
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      const char ok = (fd >= 0 && ::fcntl(fd, F_SETLK, &fl) == 0) ? 'L' : 'E';
      [[maybe_unused]] auto w = ::write(ready[1], &ok, 1);
      char c;
      [[maybe_unused]] auto r = ::read(release[0], &c, 1); // returns at EOF: released
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(release[0]);
    release_ = release[1];
    char c = 0;
    const auto n = ::read(ready[0], &c, 1);
    ::close(ready[0]);
    REQUIRE(n == 1);
    REQUIRE(c == 'L');
  }
  LockHolderProcess(const LockHolderProcess&) = delete;
  LockHolderProcess& operator=(const LockHolderProcess&) = delete;
  ~LockHolderProcess() { release(); }

  pid_t pid() const { return pid_; }
  // Ends the child (and with it the lock) and reaps it.
  void release() {
    if (release_ >= 0) {
      ::close(release_);
      release_ = -1;
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }

private:
  pid_t pid_ = -1;
  int release_ = -1;
};

const std::vector<std::string> kAptInstallPrefix = {"apt-get",
                                                    "install",
                                                    "-y",
                                                    "-q",
                                                    "--no-install-recommends",
                                                    "-o",
                                                    "Dpkg::Options::=--force-confdef",
                                                    "-o",
                                                    "Dpkg::Options::=--force-confold",
                                                    "-o",
                                                    "DPkg::Lock::Timeout=600"};

std::vector<std::string> apt_install(std::vector<std::string> pkgs) {
  auto argv = kAptInstallPrefix;
  argv.insert(argv.end(), pkgs.begin(), pkgs.end());
  return argv;
}

} // namespace

TEST_CASE("pkg apt: exact commands and environment") {
  const util::HostFs fs(machine("pkg-apt-argv"));
  RecordingRunner runner;
  auto apt = make_package_manager(Family::apt, runner, fs);

  REQUIRE(apt->refresh());
  REQUIRE(apt->install({"cuda-drivers-550", "nvidia-fabricmanager-550=550.54.15-1"}));
  REQUIRE(apt->hold({"cuda-drivers-550", "nvidia-fabricmanager-550=550.54.15-1"}));
  REQUIRE(apt->install({})); // nothing to do: runs nothing

  CHECK(runner.argvs() == Argvs{
                              {"apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=600"},
                              apt_install({"cuda-drivers-550", "nvidia-fabricmanager-550=550.54.15-1"}),
                              {"apt-mark", "hold", "cuda-drivers-550", "nvidia-fabricmanager-550"},
                          });
  for (const auto& call : runner.calls) {
    CHECK(std::ranges::count(call.env, std::string("DEBIAN_FRONTEND=noninteractive")) == 1);
    CHECK(call.input.empty());
  }
}

TEST_CASE("pkg dnf: exact commands, versionlock plugin installed when missing") {
  const util::HostFs fs(machine("pkg-dnf-argv"));
  RecordingRunner runner;
  runner.on({"dnf", "-q", "versionlock"}, exited(1, "No such command: versionlock."), 1);
  auto dnf = make_package_manager(Family::dnf, runner, fs);

  REQUIRE(dnf->refresh());
  REQUIRE(dnf->install({"nvidia-driver-550", "kmod-nvidia-open-dkms-550.54.15-1.el9"}));
  REQUIRE(dnf->hold({"nvidia-driver-550"}));
  REQUIRE(dnf->hold({"kmod-nvidia-open-dkms"})); // the plugin is known present now: no probe

  CHECK(runner.argvs() == Argvs{
                              {"dnf", "-y", "makecache"},
                              {"dnf", "-y", "install", "nvidia-driver-550", "kmod-nvidia-open-dkms-550.54.15-1.el9"},
                              {"dnf", "-q", "versionlock", "list"},
                              {"dnf", "-y", "install", "python3-dnf-plugin-versionlock"},
                              {"dnf", "-y", "versionlock", "add", "nvidia-driver-550"},
                              {"dnf", "-y", "versionlock", "add", "kmod-nvidia-open-dkms"},
                          });
}

TEST_CASE("pkg dnf: versionlock present: no plugin install") {
  const util::HostFs fs(machine("pkg-dnf-vl"));
  RecordingRunner runner; // every command succeeds
  auto dnf = make_package_manager(Family::dnf, runner, fs);
  REQUIRE(dnf->hold({"nvidia-driver-550"}));
  CHECK(runner.argvs() ==
        Argvs{{"dnf", "-q", "versionlock", "list"}, {"dnf", "-y", "versionlock", "add", "nvidia-driver-550"}});
}

TEST_CASE("pkg tdnf: dnf's commands, holds as names in /etc/tdnf/locks.d (each once, other lines kept)") {
  const auto root = machine("pkg-tdnf");
  const util::HostFs fs(root);
  test::write(root / "etc/tdnf/locks.d/hpcbake.conf", "cuda"); // an earlier line, no newline at the end
  RecordingRunner runner;
  auto tdnf = make_package_manager(Family::tdnf, runner, fs);
  REQUIRE(tdnf->refresh());
  REQUIRE(tdnf->install({"nvidia-fabricmanager-580.126.20-1"}));
  REQUIRE(tdnf->hold({"nvidia-fabricmanager", "cuda"}));
  REQUIRE(tdnf->hold({"nvidia-fabricmanager"}));
  CHECK(runner.argvs() ==
        Argvs{{"tdnf", "-y", "makecache"}, {"tdnf", "-y", "install", "nvidia-fabricmanager-580.126.20-1"}});
  CHECK(test::read(root / "etc/tdnf/locks.d/hpcbake.conf") == "cuda\nnvidia-fabricmanager\n");
  CHECK(family_of(manifest::PackageManager::tdnf) == Family::tdnf);
}

TEST_CASE("pkg apt: install waits for the dpkg lock and goes on once it is released") {
  const auto root = machine("pkg-apt-wait");
  const util::HostFs fs(root);
  LockHolderProcess holder(root / "var/lib/dpkg/lock-frontend");

  // Ground truth first: the lock is visible from here, with the child's pid.
  auto seen = lock_holder(root / "var/lib/dpkg/lock-frontend");
  REQUIRE(seen);
  CHECK(seen->pid == holder.pid());
  CHECK_FALSE(lock_holder(root / "var/lib/dpkg/lock"));
  CHECK_FALSE(lock_holder(root / "var/lib/dpkg/missing-file"));

  RecordingRunner runner;
  std::vector<std::string> statuses;
  std::size_t calls_while_waiting = 0;
  PkgOptions opt;
  opt.lock_timeout = 60s;
  opt.poll = 20ms;
  opt.on_status = [&](const std::string& msg) {
    statuses.push_back(msg);
    if (msg.starts_with("waiting for")) {
      calls_while_waiting = runner.calls.size();
      holder.release(); // the wait is observed: let it end
    }
  };
  auto apt = make_package_manager(Family::apt, runner, fs, opt);
  REQUIRE(apt->install({"nvidia-driver-550"}));

  REQUIRE_FALSE(statuses.empty());
  CHECK(contains(statuses.front(), "waiting for the dpkg lock"));
  CHECK(contains(statuses.front(), fmt::format("pid {}", holder.pid())));
  CHECK(calls_while_waiting == 0); // nothing ran while the lock was held
  REQUIRE(runner.calls.size() == 1);
  CHECK(runner.calls[0].argv[1] == "install");
  CHECK(runner.calls[0].argv.back() == "nvidia-driver-550");
}

TEST_CASE("pkg apt: a lock held past the timeout fails naming the holder") {
  const auto root = machine("pkg-apt-timeout");
  const util::HostFs fs(root);
  LockHolderProcess holder(root / "var/lib/dpkg/lock");

  RecordingRunner runner;
  PkgOptions opt;
  opt.lock_timeout = 1s;
  opt.poll = 50ms;
  auto apt = make_package_manager(Family::apt, runner, fs, opt);
  auto s = apt->install({"nvidia-driver-550"});
  REQUIRE_FALSE(s);
  CHECK(s.error().kind == ErrorKind::lock_held);
  CHECK(contains(s.error().message, "dpkg lock"));
  CHECK(contains(s.error().message, fmt::format("pid {}", holder.pid())));
  CHECK(contains(s.error().message, "/var/lib/dpkg/lock"));
  CHECK(contains(s.error().hint, std::to_string(holder.pid())));
  CHECK(runner.calls.empty());
}

TEST_CASE("pkg apt: refresh also waits for the apt lists lock") {
  const auto root = machine("pkg-apt-lists");
  const util::HostFs fs(root);
  LockHolderProcess holder(root / "var/lib/apt/lists/lock");
  RecordingRunner runner;
  PkgOptions opt;
  opt.lock_timeout = 1s;
  opt.poll = 50ms;
  auto apt = make_package_manager(Family::apt, runner, fs, opt);
  auto s = apt->refresh();
  REQUIRE_FALSE(s);
  CHECK(contains(s.error().message, "apt lists lock"));
  CHECK(runner.calls.empty());
  holder.release();
  CHECK(apt->refresh());
  CHECK(runner.calls.size() == 1);
}

TEST_CASE("pkg dnf: waits for the rpm lock") {
  const auto root = machine("pkg-dnf-lock");
  const util::HostFs fs(root);
  LockHolderProcess holder(root / "var/lib/rpm/.rpm.lock");
  RecordingRunner runner;
  PkgOptions opt;
  opt.lock_timeout = 1s;
  opt.poll = 50ms;
  auto dnf = make_package_manager(Family::dnf, runner, fs, opt);
  auto s = dnf->install({"nvidia-driver"});
  REQUIRE_FALSE(s);
  CHECK(s.error().kind == ErrorKind::lock_held);
  CHECK(contains(s.error().message, "rpm lock"));
  CHECK(contains(s.error().message, fmt::format("pid {}", holder.pid())));
  CHECK(runner.calls.empty());
}

TEST_CASE("pkg: a failing command reports the quoted command and its output tail") {
  const util::HostFs fs(machine("pkg-fail"));
  RecordingRunner runner;
  std::string output;
  for (int i = 1; i <= 100; ++i)
    output += fmt::format("line {}\n", i);
  output += "E: Unable to locate package nvidia-driver-999\n";
  runner.on({"apt-get", "install"}, exited(100, output));
  auto apt = make_package_manager(Family::apt, runner, fs);

  auto s = apt->install({"nvidia-driver-999", "a b"});
  REQUIRE_FALSE(s);
  CHECK(s.error().kind == ErrorKind::build);
  const auto& msg = s.error().message;
  CHECK(contains(msg, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends"));
  CHECK(contains(msg, "nvidia-driver-999 'a b' exited with 100"));
  CHECK(contains(msg, "E: Unable to locate package nvidia-driver-999"));
  CHECK(contains(msg, "line 100\n"));
  CHECK(contains(msg, "line 62\n"));
  CHECK_FALSE(contains(msg, "line 61\n")); // only the last 40 lines
  CHECK_FALSE(s.error().hint.empty());

  RecordingRunner dnf_runner;
  dnf_runner.on({"dnf", "-y", "makecache"}, exited(1, "Curl error (6): Couldn't resolve host name"));
  auto dnf = make_package_manager(Family::dnf, dnf_runner, fs);
  auto r = dnf->refresh();
  REQUIRE_FALSE(r);
  CHECK(contains(r.error().message, "dnf -y makecache exited with 1"));
  CHECK(contains(r.error().message, "Couldn't resolve host name"));
}

TEST_CASE("pkg apt: installed_version") {
  const util::HostFs fs(machine("pkg-apt-version"));
  RecordingRunner runner;
  runner.on({"dpkg-query", "-W", "-f=${Status}\\t${Version}\\n", "nvidia-driver-550"},
            exited(0, "install ok installed\t550.54.15-0ubuntu1\n"));
  runner.on({"dpkg-query", "-W", "-f=${Status}\\t${Version}\\n", "held"}, exited(0, "hold ok installed\t1.2-3\n"));
  runner.on({"dpkg-query", "-W", "-f=${Status}\\t${Version}\\n", "removed"},
            exited(0, "deinstall ok config-files\t9.9-1\n"));
  runner.on({"dpkg-query", "-W", "-f=${Status}\\t${Version}\\n", "multiarch"},
            exited(0, "unknown ok not-installed\t\ninstall ok installed\t2.0-1\n"));
  runner.on({"dpkg-query", "-W", "-f=${Status}\\t${Version}\\n", "missing"},
            exited(1, "dpkg-query: no packages found matching missing\n"));
  runner.on({"dpkg-query", "-W", "-f=${Status}\\t${Version}\\n", "broken"}, exited(2, "dpkg-query: error: parse\n"));
  auto apt = make_package_manager(Family::apt, runner, fs);

  auto v = apt->installed_version("nvidia-driver-550");
  REQUIRE(v);
  CHECK(*v == std::optional<std::string>("550.54.15-0ubuntu1"));
  CHECK(*apt->installed_version("held") == std::optional<std::string>("1.2-3"));
  CHECK(*apt->installed_version("multiarch") == std::optional<std::string>("2.0-1"));
  CHECK_FALSE(apt->installed_version("removed")->has_value());
  CHECK_FALSE(apt->installed_version("missing")->has_value());
  auto broken = apt->installed_version("broken");
  REQUIRE_FALSE(broken);
  CHECK(contains(broken.error().message, "dpkg-query"));
}

TEST_CASE("pkg dnf: installed_version") {
  const util::HostFs fs(machine("pkg-dnf-version"));
  RecordingRunner runner;
  runner.on({"rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}\\n", "nvidia-driver"}, exited(0, "550.54.15-1.el9\n"));
  runner.on({"rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}\\n", "missing"},
            exited(1, "package missing is not installed\n"));
  auto dnf = make_package_manager(Family::dnf, runner, fs);
  CHECK(*dnf->installed_version("nvidia-driver") == std::optional<std::string>("550.54.15-1.el9"));
  CHECK_FALSE(dnf->installed_version("missing")->has_value());
}

TEST_CASE("pkg apt: installed_version against the real dpkg-query") {
  if (!std::filesystem::exists("/usr/bin/dpkg-query") || !std::filesystem::exists("/var/lib/dpkg/status")) return;
  const util::HostFs fs("/");
  exec::SystemRunner runner;
  auto apt = make_package_manager(Family::apt, runner, fs);
  auto dpkg = apt->installed_version("dpkg");
  REQUIRE(dpkg);
  REQUIRE(dpkg->has_value());
  CHECK(std::isdigit(static_cast<unsigned char>((**dpkg)[0])));
  auto missing = apt->installed_version("hpcbake-no-such-package-xyz");
  REQUIRE(missing);
  CHECK_FALSE(missing->has_value());
}
