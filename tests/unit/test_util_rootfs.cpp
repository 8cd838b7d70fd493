// Host paths under --root resolve inside the root: absolute links and '..' never reach this
// machine's files, for reads (HostFs::read and friends) and for the paths writers get
// (HostFs::resolve). Each case runs with the kernel's openat2(RESOLVE_IN_ROOT) and with the
// userspace walk used where openat2 is missing.
#include "util/hostfs.hpp"
#include "util/rootfs.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <string>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

const std::string kRhel = "NAME=\"Red Hat Enterprise Linux\"\nID=\"rhel\"\nVERSION_ID=\"9.4\"\n";

// Runs `body` once per resolver: the kernel's openat2 (where this kernel has it) and the walk.
void each_resolver(const std::function<void()>& body) {
  for (const auto r : {util::InRootResolver::automatic, util::InRootResolver::walk}) {
    const std::string resolver = r == util::InRootResolver::walk ? "walk" : "openat2";
    CAPTURE(resolver);
    util::set_in_root_resolver_for_tests(r);
    body();
  }
  util::set_in_root_resolver_for_tests(util::InRootResolver::automatic);
}

// A root with a RHEL 9 os-release at usr/lib/os-release and `link` at etc/os-release.
fs::path rhel_root(const std::string& name, const fs::path& link) {
  const auto root = test::scratch(name);
  test::write(root / "usr/lib/os-release", kRhel);
  fs::create_directories(root / "etc");
  fs::create_symlink(link, root / "etc/os-release");
  return root;
}

// Whether `p` stays inside `root` once the kernel resolves it the way a writer's open(2) would.
bool inside(const fs::path& root, const fs::path& p) {
  const auto real_root = fs::weakly_canonical(root).string() + "/";
  return (fs::weakly_canonical(p).string() + "/").starts_with(real_root);
}

// Runs `fn` in a child with a watchdog: false when it did not return within `seconds` (a hang).
bool finishes_within(unsigned seconds, const std::function<void()>& fn) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::alarm(seconds);
    fn();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

} // namespace

TEST_CASE("rootfs: an absolute symlink is resolved under the root, not on this machine") {
  const auto root = rhel_root("rootfs-abs", "/usr/lib/os-release");
  each_resolver([&] {
    const util::HostFs host(root);
    CHECK(host.read("/etc/os-release") == kRhel);
    CHECK(host.exists("/etc/os-release"));
    CHECK(host.resolve("/etc/os-release") == root / "usr/lib/os-release");
  });
}

TEST_CASE("rootfs: a relative symlink that climbs above the root stops at the root") {
  const auto root = rhel_root("rootfs-rel", "../../../../../../../../usr/lib/os-release");
  each_resolver([&] {
    const util::HostFs host(root);
    CHECK(host.read("/etc/os-release") == kRhel);
    CHECK(host.resolve("/etc/os-release") == root / "usr/lib/os-release");
  });
}

TEST_CASE("rootfs: '..' in the requested path never leaves the root") {
  const auto root = rhel_root("rootfs-dotdot", "/usr/lib/os-release");
  test::write(root / "etc/hostname", "fixture\n");
  each_resolver([&] {
    const util::HostFs host(root);
    CHECK(host.read("/../../../../etc/hostname") == "fixture\n");
    CHECK(host.read("/etc/../../../usr/lib/os-release") == kRhel);
    CHECK(host.resolve("/../../etc/hostname") == root / "etc/hostname");
    CHECK(host.read_attr("/../etc/hostname") == "fixture");
  });
}

TEST_CASE("rootfs: a symlink loop is an error, not this machine's file") {
  const auto root = test::scratch("rootfs-loop");
  fs::create_directories(root / "etc");
  fs::create_symlink("/etc/b", root / "etc/a");
  fs::create_symlink("a", root / "etc/b");
  // A chain of 41 links: one more than the kernel follows.
  for (int i = 0; i < 41; ++i)
    fs::create_symlink(fmt::format("l{}", i + 1), root / fmt::format("etc/l{}", i));
  test::write(root / "etc/l41", "end\n");
  each_resolver([&] {
    const util::HostFs host(root);
    CHECK_FALSE(host.read("/etc/a"));
    CHECK_FALSE(host.exists("/etc/a"));
    auto r = host.read_checked("/etc/a");
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("too many levels of symbolic links") != std::string::npos);
    CHECK(r.error().message.find((root / "etc/a").string()) != std::string::npos);
    CHECK_FALSE(host.resolve_checked("/etc/a"));
    // resolve() cannot say why: what it returns is under the root, and a writer cannot use it.
    const auto p = host.resolve("/etc/a/x.conf");
    CHECK(p.string().starts_with(root.string() + "/"));
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    CHECK(ec == std::errc::filename_too_long);
    errno = 0;
    CHECK(::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644) < 0);
    CHECK(errno == ENAMETOOLONG);
    CHECK_FALSE(host.read("/etc/l0"));
    CHECK(host.read("/etc/l1") == "end\n"); // 40 links: followed
  });
}

TEST_CASE("rootfs: a symlink to a directory, then a file in it") {
  const auto root = test::scratch("rootfs-dirlink");
  test::write(root / "srv/conf/x.conf", "x=1\n");
  test::write(root / "srv/conf/y.conf", "y=1\n");
  fs::create_directories(root / "etc");
  fs::create_symlink("/srv/conf", root / "etc/modprobe.d");
  fs::create_symlink("../../../../../srv", root / "etc/srv-rel");
  each_resolver([&] {
    const util::HostFs host(root);
    CHECK(host.read("/etc/modprobe.d/x.conf") == "x=1\n");
    CHECK(host.read("/etc/srv-rel/conf/y.conf") == "y=1\n");
    CHECK(host.is_dir("/etc/modprobe.d"));
    CHECK(host.list("/etc/modprobe.d") == std::vector<std::string>{"x.conf", "y.conf"});
    CHECK(host.list("/etc/srv-rel/conf/..") == std::vector<std::string>{"conf"});
    // "link/.." is the parent of the link's target, as the kernel resolves it.
    CHECK(host.read("/etc/modprobe.d/../conf/x.conf") == "x=1\n");
    CHECK_FALSE(host.is_dir("/etc/modprobe.d/x.conf"));
    CHECK_FALSE(host.read("/etc/modprobe.d/x.conf/"));
  });
}

TEST_CASE("rootfs: resolve() gives writers a path inside the root, whatever the links") {
  const auto root = test::scratch("rootfs-writers");
  const auto outside = test::scratch("rootfs-writers-outside");
  fs::create_directories(root / "etc");
  // Links that name a directory of this machine: absolute, relative and climbing, and dangling.
  fs::create_symlink(outside, root / "etc/modprobe.d");
  fs::create_symlink(fs::path("../../../../../..") / outside.relative_path(), root / "etc/climb");
  fs::create_symlink("/var/lib/absent/state.json", root / "etc/dangling");
  each_resolver([&] {
    const util::HostFs host(root);
    const auto a = host.resolve("/etc/modprobe.d/hpcbake.conf");
    CHECK(a == root / outside.relative_path() / "hpcbake.conf");
    CHECK(inside(root, a));
    const auto c = host.resolve("/etc/climb/sub/file");
    CHECK(c == root / outside.relative_path() / "sub/file");
    CHECK(inside(root, c));
    // A dangling link: its target, missing, under the root; '..' in a missing tail stays below it.
    CHECK(host.resolve("/etc/dangling") == root / "var/lib/absent/state.json");
    CHECK(host.resolve("/etc/nope/../../../x") == root / "x");
    auto checked = host.resolve_checked("/etc/modprobe.d/hpcbake.conf");
    REQUIRE(checked);
    CHECK(*checked == a);
  });
  CHECK(fs::is_empty(outside));
}

TEST_CASE("rootfs: a directory or a FIFO where a file is expected: an error naming it, never a hang") {
  const auto root = test::scratch("rootfs-odd");
  fs::create_directories(root / "etc/os-release");
  REQUIRE(::mkfifo((root / "etc/waagent.conf").c_str(), 0644) == 0);
  each_resolver([&] {
    const util::HostFs host(root);
    CHECK_FALSE(host.read("/etc/os-release"));
    auto d = host.read_checked("/etc/os-release");
    REQUIRE_FALSE(d);
    CHECK(d.error().message == (root / "etc/os-release").string() + ": is a directory, not a regular file");
    CHECK(finishes_within(10, [&] {
      if (host.read("/etc/waagent.conf")) ::_exit(2);
      auto f = host.read_checked("/etc/waagent.conf");
      if (f || f.error().message != (root / "etc/waagent.conf").string() + ": is a FIFO, not a regular file")
        ::_exit(3);
    }));
    // Absent is not an error: nullopt.
    auto none = host.read_checked("/etc/absent");
    REQUIRE(none);
    CHECK_FALSE(*none);
  });
}

TEST_CASE("rootfs: the real root reads as before, files that report no size to EOF") {
  // The real root opens host paths directly (its resolution is the in-root one), so no resolver
  // is involved, and an emulator mapping "/" to a sysroot (qemu-user -L) still reads /proc.
  const util::HostFs host("/");
  CHECK(host.resolve("/etc/os-release") == "/etc/os-release");
  auto status = host.read("/proc/self/status"); // st_size 0: read to EOF, not by size
  REQUIRE(status);
  CHECK(status->find("Pid:") != std::string::npos);
  CHECK(host.read_attr("/proc/self/../sys/kernel/osrelease") == host.read_attr("/proc/sys/kernel/osrelease"));
}
