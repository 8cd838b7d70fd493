// nouveau: the blacklist file and the initramfs commands, with a recording runner so the
// test machine's initramfs is never touched; the exact argv per distro is asserted.
#include "driver/nouveau.hpp"
#include "exec/runner.hpp"
#include "helpers.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

using namespace hpcbake;

namespace {
manifest::DistroManifest distro(const std::string& id) {
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m.has_value());
  const auto* d = m->find_distro(id);
  REQUIRE(d != nullptr);
  return *d;
}
} // namespace

TEST_CASE("nouveau: blacklist written once, initramfs rebuilt for each target kernel (Debian)") {
  const auto root = test::scratch("nouveau-debian");
  util::HostFs host(root);
  exec::RecordingRunner runner;
  auto r = driver::disable_nouveau(host, distro("debian-12"), {"6.1.0-56-amd64", "6.1.0-56-cloud-amd64"}, runner);
  REQUIRE(r.has_value());
  CHECK(r->changed);
  CHECK_FALSE(r->reboot_required);
  CHECK(test::slurp(root / "etc/modprobe.d/blacklist-nouveau.conf") ==
        "# Written by hpcbake: NVIDIA's driver needs the GPU, so nouveau must not bind it.\n"
        "blacklist nouveau\noptions nouveau modeset=0\n");
  CHECK(runner.argvs() ==
        std::vector<std::vector<std::string>>{{"update-initramfs", "-u", "-k", "6.1.0-56-amd64"},
                                              {"update-initramfs", "-u", "-k", "6.1.0-56-cloud-amd64"}});
  // A second run finds the file in place and leaves the initramfs alone.
  exec::RecordingRunner again;
  auto r2 = driver::disable_nouveau(host, distro("debian-12"), {"6.1.0-56-amd64"}, again);
  REQUIRE(r2.has_value());
  CHECK_FALSE(r2->changed);
  CHECK(again.calls.empty());
}

TEST_CASE("nouveau: dracut on RHEL, reboot required when nouveau is loaded, a failing command is reported") {
  const auto root = test::scratch("nouveau-rhel");
  test::write(root / "sys/module/nouveau/initstate", "live\n");
  test::write(root / "proc/modules", "nouveau 2490368 0 - Live 0x0000000000000000\n");
  util::HostFs host(root);
  exec::RecordingRunner runner;
  auto r = driver::disable_nouveau(host, distro("rhel-9"), {"5.14.0-427.el9.x86_64"}, runner);
  REQUIRE(r.has_value());
  CHECK(runner.argvs() == std::vector<std::vector<std::string>>{
                              {"dracut", "-f", "/boot/initramfs-5.14.0-427.el9.x86_64.img", "5.14.0-427.el9.x86_64"}});
  CHECK(r->reboot_required);

  const auto root2 = test::scratch("nouveau-fail");
  util::HostFs host2(root2);
  exec::RecordingRunner failing;
  failing.on({"update-initramfs"},
             exec::exited(1, "update-initramfs: failed for /boot/initrd.img: No space left on device\n"));
  auto bad = driver::disable_nouveau(host2, distro("ubuntu-24.04"), {"6.8.0-1021-azure"}, failing);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().kind == ErrorKind::build);
  CHECK(bad.error().message.find("`update-initramfs -u -k 6.8.0-1021-azure` exited with 1") != std::string::npos);
  CHECK(bad.error().message.find("No space left on device") != std::string::npos);
}

TEST_CASE("nouveau: an initramfs read and holding no nouveau is not rebuilt unless forced, and one holding it is") {
  REQUIRE_MESSAGE(std::system("command -v cpio >/dev/null && command -v zstd >/dev/null") == 0,
                  "cpio and zstd are needed: scripts/deps installs them");
  const auto root = test::scratch("nouveau-initramfs");
  // Two kernels' initramfs files made with the real cpio and zstd: nouveau in the second only.
  auto make = [&](const std::string& kernel, const std::string& module_path) {
    const auto tree = root.parent_path() / ("nouveau-initramfs-tree-" + kernel);
    test::write(tree / module_path, "x");
    const auto image = root / "boot" / ("initrd.img-" + kernel);
    std::filesystem::create_directories(image.parent_path());
    const std::string cmd =
        "cd '" + tree.string() + "' && find . | cpio -o -H newc --quiet | zstd -q -c > '" + image.string() + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  };
  make("6.1.0-56-amd64", "usr/lib/modules/6.1.0-56-amd64/kernel/drivers/block/virtio_blk.ko");
  make("6.1.0-56-cloud-amd64", "usr/lib/modules/6.1.0-56-cloud-amd64/kernel/drivers/gpu/drm/nouveau/nouveau.ko");
  util::HostFs host(root);
  exec::RecordingRunner runner;
  auto r = driver::disable_nouveau(host, distro("debian-12"), {"6.1.0-56-amd64", "6.1.0-56-cloud-amd64"}, runner);
  REQUIRE(r.has_value());
  CHECK(r->initramfs_skipped == std::vector<std::string>{"6.1.0-56-amd64"});
  CHECK(r->initramfs_rebuilt == std::vector<std::string>{"6.1.0-56-cloud-amd64"});
  CHECK(runner.argvs() ==
        std::vector<std::vector<std::string>>{{"update-initramfs", "-u", "-k", "6.1.0-56-cloud-amd64"}});
  exec::RecordingRunner forced;
  auto f = driver::disable_nouveau(host, distro("debian-12"), {"6.1.0-56-amd64"}, forced, true);
  REQUIRE(f.has_value());
  CHECK(f->initramfs_skipped.empty());
  CHECK(forced.argvs() == std::vector<std::vector<std::string>>{{"update-initramfs", "-u", "-k", "6.1.0-56-amd64"}});
}

// Issue 40, item 2: an initramfs that is a FIFO made `nouveau disable` hang. It is named at once,
// and rebuilt as if it held nouveau (any doubt rebuilds).
TEST_CASE("nouveau: an initramfs that is a FIFO is reported as not read and rebuilt, never waited on") {
  const auto root = test::scratch("nouveau-fifo");
  std::filesystem::create_directories(root / "boot");
  REQUIRE(::mkfifo((root / "boot/initrd.img-6.1.0-56-amd64").c_str(), 0644) == 0);
  util::HostFs host(root);
  exec::RecordingRunner runner;
  auto r = driver::disable_nouveau(host, distro("debian-12"), {"6.1.0-56-amd64"}, runner);
  REQUIRE(r.has_value());
  CHECK(runner.argvs() == std::vector<std::vector<std::string>>{{"update-initramfs", "-u", "-k", "6.1.0-56-amd64"}});
  REQUIRE(r->initramfs_unread.size() == 1);
  CHECK(r->initramfs_unread.front().first == "6.1.0-56-amd64");
  CHECK(r->initramfs_unread.front().second.find("a FIFO") != std::string::npos);
}

// A rebuild that failed left the blacklist written and nouveau in the initramfs without it; the
// re-run used to find the file in place and exit 0 with nothing done. The image itself tells: a
// re-run rebuilds an initramfs that holds nouveau without the blacklist, and leaves alone one that
// carries it as written.
TEST_CASE("nouveau: a re-run after a failed rebuild rebuilds the initramfs that still lacks the blacklist") {
  REQUIRE_MESSAGE(std::system("command -v cpio >/dev/null && command -v zstd >/dev/null") == 0,
                  "cpio and zstd are needed: scripts/deps installs them");
  const auto root = test::scratch("nouveau-rerun");
  const std::string kernel = "6.1.0-56-amd64";
  const auto image = root / "boot" / ("initrd.img-" + kernel);
  auto make = [&](const std::string& name, bool with_blacklist) {
    const auto tree = root.parent_path() / ("nouveau-rerun-tree-" + name);
    test::write(tree / ("usr/lib/modules/" + kernel + "/kernel/drivers/gpu/drm/nouveau/nouveau.ko"), "x");
    if (with_blacklist) test::write(tree / "etc/modprobe.d/blacklist-nouveau.conf", driver::kNouveauBlacklist);
    std::filesystem::create_directories(image.parent_path());
    const std::string cmd =
        "cd '" + tree.string() + "' && find . | cpio -o -H newc --quiet | zstd -q -c > '" + image.string() + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  };
  make("without", false);
  util::HostFs host(root);
  exec::RecordingRunner failing;
  failing.on({"update-initramfs"}, exec::exited(1, "update-initramfs: No space left on device\n"));
  REQUIRE_FALSE(driver::disable_nouveau(host, distro("debian-12"), {kernel}, failing).has_value());
  REQUIRE(test::slurp(root / "etc/modprobe.d/blacklist-nouveau.conf") == driver::kNouveauBlacklist);

  exec::RecordingRunner again;
  auto r = driver::disable_nouveau(host, distro("debian-12"), {kernel}, again);
  REQUIRE(r.has_value());
  CHECK_FALSE(r->changed);
  CHECK(r->initramfs_rebuilt == std::vector<std::string>{kernel});
  CHECK(again.argvs() == std::vector<std::vector<std::string>>{{"update-initramfs", "-u", "-k", kernel}});

  // Once the image carries the blacklist as written, a re-run changes nothing.
  make("with", true);
  exec::RecordingRunner done;
  auto d = driver::disable_nouveau(host, distro("debian-12"), {kernel}, done);
  REQUIRE(d.has_value());
  CHECK(done.calls.empty());
  CHECK(d->initramfs_current == std::vector<std::string>{kernel});
}
