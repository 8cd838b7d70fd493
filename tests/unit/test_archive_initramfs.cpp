// The modules an initramfs holds, read natively: against `lsinitramfs` on the real Debian
// initramfs of this machine's kernel (scripts/deps installs linux-image-amd64), and on initramfs
// files made here the way update-initramfs and dracut lay them out, with the real `cpio -H newc`
// and compressors: an uncompressed early archive (microcode), NUL padding, then the main archive
// compressed. Anything cut short or unknown is an error, never a guess.
#include "archive/initramfs.hpp"
#include "helpers.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using namespace hpcbake::archive;

namespace {

// Runs a command line with its own redirections; stderr is dropped.
int sh(const std::string& cmd) {
  return std::system(("set -e; { " + cmd + "; } 2>/dev/null").c_str());
}

void require_tools() {
  const bool found = std::system("command -v cpio && command -v zstd && command -v xz >/dev/null 2>&1") == 0;
  REQUIRE_MESSAGE(found, "cpio, zstd and xz are needed: scripts/deps installs them");
}

// A tree of files (the content does not matter) packed as a newc archive into `out`, through
// `filter` ("cat", "zstd -q -c", "gzip -c", "xz -c", "bzip2 -c").
void pack(const fs::path& dir, const std::vector<std::string>& files, const std::string& filter, const fs::path& out) {
  for (const auto& f : files)
    test::write(dir / f, "x");
  REQUIRE(sh("cd '" + dir.string() + "' && find . | LC_ALL=C sort | cpio -o -H newc --quiet | " + filter + " >> '" +
             out.string() + "'") == 0);
}

void pad512(const fs::path& file) {
  const auto size = fs::file_size(file);
  if (size % 512 != 0) fs::resize_file(file, size + (512 - size % 512));
}

const std::vector<std::string> kMain = {
    "usr/lib/modules/6.1.0-56-amd64/kernel/drivers/gpu/drm/nouveau/nouveau.ko",
    "usr/lib/modules/6.1.0-56-amd64/kernel/drivers/net/ethernet/nvidia/forcedeth.ko.zst",
    "usr/lib/modules/6.1.0-56-amd64/updates/dkms/nvidia-drm.ko.xz",
    "usr/lib/modules/6.1.0-56-amd64/kernel/drivers/block/virtio_blk.ko",
    "usr/lib/modules/6.1.0-56-amd64/modules.dep",
    "usr/bin/busybox",
};

} // namespace

TEST_CASE("initramfs: the modules of this machine's real Debian initramfs are what lsinitramfs lists") {
  std::vector<fs::path> images;
  for (const auto& e : fs::directory_iterator("/boot"))
    if (e.path().filename().string().starts_with("initrd.img-")) images.push_back(e.path());
  REQUIRE_MESSAGE(!images.empty(), "no /boot/initrd.img-*: scripts/deps installs linux-image-amd64, which makes one");
  REQUIRE_MESSAGE(std::system("command -v lsinitramfs >/dev/null 2>&1") == 0,
                  "lsinitramfs (initramfs-tools) is missing");
  const fs::path dir = test::scratch("initramfs-real");
  for (const auto& image : images) {
    CAPTURE(image);
    const fs::path list = dir / "list";
    REQUIRE(sh("lsinitramfs '" + image.string() + "' > '" + list.string() + "'") == 0);
    std::set<std::string> want;
    std::ifstream in(list);
    for (std::string line; std::getline(in, line);) {
      const std::string base = fs::path(line).filename().string();
      for (const std::string ext : {".ko", ".ko.gz", ".ko.xz", ".ko.zst"})
        if (base.size() > ext.size() && base.ends_with(ext)) want.insert(base.substr(0, base.size() - ext.size()));
    }
    auto got = initramfs_modules(image);
    REQUIRE_MESSAGE(got.has_value(), (got ? "" : got.error().message));
    const std::set<std::string> have(got->modules.begin(), got->modules.end());
    for (const auto& m : want)
      CHECK_MESSAGE(have.contains(m), m << " is listed by lsinitramfs but was not read");
    for (const auto& m : have)
      CHECK_MESSAGE(want.contains(m), m << " was read but lsinitramfs does not list it");
    CHECK(got->modules.size() > 100); // MODULES=most: hundreds
    MESSAGE(image.string() << ": " << got->modules.size() << " modules in " << got->archives << " archive(s)");
  }
}

TEST_CASE("initramfs: an early cpio, padding, then the main archive in each compression") {
  require_tools();
  for (const std::string filter : {"zstd -q -c", "gzip -c", "xz -c", "bzip2 -c", "cat"}) {
    CAPTURE(filter);
    const fs::path dir = test::scratch("initramfs-" + filter.substr(0, filter.find(' ')));
    const fs::path image = dir / "initrd.img";
    pack(dir / "early", {"kernel/x86/microcode/GenuineIntel.bin"}, "cat", image);
    pad512(image);
    pack(dir / "main", kMain, filter, image);
    auto got = initramfs_modules(image);
    REQUIRE_MESSAGE(got.has_value(), (got ? "" : got.error().message));
    CHECK(got->modules == std::vector<std::string>{"forcedeth", "nouveau", "nvidia-drm", "virtio_blk"});
    CHECK(got->archives == 2);
    CHECK(initramfs_matches(*got, {"nouveau", "nvidia"}) == std::vector<std::string>{"nouveau", "nvidia-drm"});
  }
}

TEST_CASE("initramfs: without nouveau or nvidia modules nothing matches, and a family matches its members only") {
  require_tools();
  const fs::path dir = test::scratch("initramfs-none");
  const fs::path image = dir / "initrd.img";
  pack(dir / "main", {"lib/modules/K/kernel/drivers/block/virtio_blk.ko", "lib/modules/K/kernel/fs/ext4/ext4.ko"},
       "zstd -q -c", image);
  auto got = initramfs_modules(image);
  REQUIRE(got.has_value());
  CHECK(got->archives == 1);
  CHECK(initramfs_matches(*got, {"nouveau", "nvidia"}).empty());
  InitramfsModules held{{"nvidia", "nvidia_uvm", "nvidiafb", "nvidia-peermem", "nouveau2"}, 1, {}};
  CHECK(initramfs_matches(held, {"nouveau", "nvidia"}) ==
        std::vector<std::string>{"nvidia", "nvidia_uvm", "nvidia-peermem"});
}

TEST_CASE("initramfs: every archive inside the compressed part is read, and nothing after it is ignored") {
  require_tools();
  const fs::path dir = test::scratch("initramfs-inner");
  // Two archives in one zstd stream, nouveau only in the second: the kernel unpacks both.
  const fs::path image = dir / "two-inside.img";
  const fs::path inner = dir / "inner.cpio";
  pack(dir / "a", {"usr/lib/modules/K/kernel/drivers/block/virtio_blk.ko"}, "cat", inner);
  pack(dir / "b", {"usr/lib/modules/K/kernel/drivers/gpu/drm/nouveau/nouveau.ko"}, "cat", inner);
  REQUIRE(sh("zstd -q -c '" + inner.string() + "' > '" + image.string() + "'") == 0);
  auto got = initramfs_modules(image);
  REQUIRE_MESSAGE(got.has_value(), (got ? "" : got.error().message));
  CHECK(got->modules == std::vector<std::string>{"nouveau", "virtio_blk"});
  CHECK(got->archives == 2);

  // A second compressed part after the first (zstd, then gzip holding nouveau): read, or refused;
  // never "no nouveau".
  const fs::path two = dir / "two-compressed.img";
  pack(dir / "c", {"usr/lib/modules/K/kernel/drivers/block/virtio_blk.ko"}, "zstd -q -c", two);
  pack(dir / "d", {"usr/lib/modules/K/kernel/drivers/gpu/drm/nouveau/nouveau.ko"}, "gzip -c", two);
  auto second = initramfs_modules(two);
  if (second) CHECK(initramfs_matches(*second, {"nouveau"}) == std::vector<std::string>{"nouveau"});
  MESSAGE("zstd, then gzip: " << (second ? "both read" : "refused: " + second.error().message));

  // Bytes after the compressed part that are no archive at all: refused.
  const fs::path tail = dir / "tail.img";
  pack(dir / "e", {"usr/lib/modules/K/kernel/drivers/block/virtio_blk.ko"}, "gzip -c", tail);
  std::ofstream(tail, std::ios::app) << "trailing bytes that are not an archive";
  CHECK_FALSE(initramfs_modules(tail).has_value());
}

TEST_CASE("initramfs: a file cut short, an unknown compression or an empty file is an error") {
  require_tools();
  const fs::path dir = test::scratch("initramfs-bad");
  const fs::path good = dir / "good.img";
  pack(dir / "early", {"kernel/x86/microcode/AuthenticAMD.bin"}, "cat", good);
  pad512(good);
  const auto early_size = fs::file_size(good);
  pack(dir / "main", kMain, "zstd -q -c", good);
  const auto size = fs::file_size(good);

  auto cut = [&](const std::string& name, std::uintmax_t n) {
    const fs::path p = dir / name;
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    fs::resize_file(p, n);
    return p;
  };
  SUBCASE("inside the early archive") {
    auto r = initramfs_modules(cut("early-cut.img", 200));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("early-cut.img") != std::string::npos);
  }
  SUBCASE("inside the compressed archive") {
    CHECK_FALSE(initramfs_modules(cut("main-cut.img", size - 100)).has_value());
  }
  SUBCASE("garbage where the compressed archive starts") {
    const fs::path p = cut("garbage.img", early_size);
    std::ofstream(p, std::ios::app) << "this is not a compressed archive at all, and not a cpio header either";
    CHECK_FALSE(initramfs_modules(p).has_value());
  }
  SUBCASE("a header whose name size is out of range") {
    const fs::path p = cut("badname.img", early_size);
    std::string h = "070701" + std::string(8 * 11, '0') + "FFFFFFFF" + "00000000";
    std::ofstream(p, std::ios::app) << h << std::string(64, 'x');
    auto r = initramfs_modules(p);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("bad size field") != std::string::npos);
  }
  SUBCASE("empty, all padding, missing") {
    CHECK_FALSE(initramfs_modules(cut("empty.img", 0)).has_value());
    const fs::path zeros = dir / "zeros.img";
    test::write(zeros, std::string(4096, '\0'));
    CHECK_FALSE(initramfs_modules(zeros).has_value());
    CHECK_FALSE(initramfs_modules(dir / "absent.img").has_value());
  }
}

// Issue 40, item 2: an initramfs that is a FIFO made `nouveau disable` hang in open(2). A reader
// blocked there is let go after a grace period, and the test says it had to.
TEST_CASE("initramfs: a FIFO is named at once, never waited on") {
  const fs::path root = test::scratch("initramfs-fifo");
  fs::create_directories(root / "boot");
  REQUIRE(::mkfifo((root / "boot/initrd.img-6.1.0-56-amd64").c_str(), 0644) == 0);
  std::atomic<bool> done{false}, hung{false};
  // Every 3 s a writer opens without blocking: it can only when a reader holds the FIFO open,
  // i.e. is blocked in open(2) (the fixed reader holds it for microseconds); that lets it go.
  std::thread guard([&] {
    for (int i = 1; !done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (i % 300 != 0) continue;
      const int w = ::open((root / "boot/initrd.img-6.1.0-56-amd64").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (w >= 0) {
        hung = true;
        ::close(w);
      }
    }
  });
  const hpcbake::util::HostFs host(root);
  auto r = initramfs_modules(host, "/boot/initrd.img-6.1.0-56-amd64");
  done = true;
  guard.join();
  CHECK_FALSE(hung.load());
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("initrd.img-6.1.0-56-amd64: a FIFO, not a regular file") != std::string::npos);
  auto check = check_initramfs(host, "/boot/initrd.img-6.1.0-56-amd64", {"nouveau"});
  CHECK(check.needed()); // any doubt rebuilds
  fs::create_directories(root / "boot/dir.img");
  auto dir = initramfs_modules(host, "/boot/dir.img");
  REQUIRE_FALSE(dir.has_value());
  CHECK(dir.error().message.find("a directory") != std::string::npos);
}

// Issue 40, item 13: a compressed part that unpacks to 64 GiB cost 50 s per kernel. The bound is
// injected small here, so the streams made at test time stay small and the test fast.
TEST_CASE("initramfs: decompressed bytes, cpio entries and the file's size are bounded, and named") {
  require_tools();
  const fs::path dir = test::scratch("initramfs-bomb");
  const fs::path root = dir / "root";
  fs::create_directories(root / "boot");
  const hpcbake::util::HostFs host(root);
  InitramfsLimits small;
  small.max_bytes = 1 << 20;
  SUBCASE("zeros that unpack past the bound, through zstd, xz and gzip") {
    for (const std::string filter : {"zstd -q -c", "xz -c", "gzip -c"}) {
      CAPTURE(filter);
      const fs::path img = root / "boot/bomb.img";
      fs::remove(img);
      REQUIRE(sh("head -c 8388608 /dev/zero | " + filter + " > '" + img.string() + "'") == 0);
      REQUIRE(fs::file_size(img) < small.max_bytes); // small on disk, 8 MiB unpacked
      auto r = initramfs_modules(host, "/boot/bomb.img", small);
      REQUIRE_FALSE(r.has_value());
      CHECK(r.error().message.find("bomb.img") != std::string::npos);
      CHECK(r.error().message.find("unpacks to more than 1.0 MiB") != std::string::npos);
      CHECK(check_initramfs(host, "/boot/bomb.img", {"nouveau"}, small).needed());
    }
  }
  SUBCASE("the same archive within the default bound is read") {
    const fs::path img = root / "boot/ok.img";
    pack(dir / "main", kMain, "zstd -q -c", img);
    auto r = initramfs_modules(host, "/boot/ok.img");
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
    CHECK(initramfs_matches(*r, {"nouveau"}) == std::vector<std::string>{"nouveau"});
  }
  SUBCASE("more cpio entries than the bound") {
    const fs::path img = root / "boot/many.img";
    pack(dir / "many", kMain, "cat", img);
    InitramfsLimits few;
    few.max_entries = 3;
    auto r = initramfs_modules(host, "/boot/many.img", few);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("more than 3 cpio entries") != std::string::npos);
  }
  SUBCASE("a file larger than the bound is not read at all") {
    const fs::path img = root / "boot/big.img";
    test::write(img, "");
    fs::resize_file(img, small.max_bytes + 1); // sparse
    auto r = initramfs_modules(host, "/boot/big.img", small);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("more than 1.0 MiB") != std::string::npos);
  }
}
