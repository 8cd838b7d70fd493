// driver/out_of_tree: the out-of-tree modules of a kernel, found by walking /lib/modules/<kernel>
// under a fixture root and reading each module's .modinfo with libkmod (modules written by
// kofile.hpp, signed as sign-file signs), and their owning packages from dpkg's file lists.
#include "driver/out_of_tree.hpp"

#include "driver/mok.hpp"
#include "driver/signing.hpp"

#include "helpers.hpp"
#include "kofile.hpp"

#include <doctest/doctest.h>
#include <lzma.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

constexpr const char* kKernel = "6.8.0-1015-azure";

std::vector<std::string> paths_of(const driver::ModuleTreeScan& scan) {
  std::vector<std::string> out;
  for (const auto& m : scan.modules)
    out.push_back(m.path);
  return out;
}

const driver::OutOfTreeModule* find(const driver::ModuleTreeScan& scan, const std::string& path) {
  for (const auto& m : scan.modules)
    if (m.path == path) return &m;
  return nullptr;
}

// The module at `ko`, compressed as `xz` does (a .ko.xz as Ubuntu and RHEL kernels ship them).
void xz_compress(const fs::path& ko, const fs::path& out) {
  const std::string in = test::slurp(ko);
  std::string buf(lzma_stream_buffer_bound(in.size()), '\0');
  std::size_t pos = 0;
  REQUIRE(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC32, nullptr, reinterpret_cast<const uint8_t*>(in.data()), in.size(),
                                  reinterpret_cast<uint8_t*>(buf.data()), &pos, buf.size()) == LZMA_OK);
  buf.resize(pos);
  test::write(out, buf);
  fs::remove(ko);
}

struct Tree {
  fs::path root;
  util::HostFs host;
  fs::path dir;
  explicit Tree(const std::string& name)
      : root(test::scratch("oot-" + name) / "root"), host(root), dir(root / "lib/modules" / kKernel) {
    // In-tree modules (intree=Y), where the kernel package puts them.
    test::write_ko(dir / "kernel/fs/ext4/ext4.ko", "ext4", kKernel, true);
    test::write_ko(dir / "kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko", "mlx5_ib", kKernel, true);
    // Out-of-tree: DKMS's, and a vendor package's copy of an in-tree driver under updates/.
    test::write_ko(dir / "updates/dkms/nvidia.ko", "nvidia", kKernel);
    test::write_ko(dir / "updates/dkms/nvidia-peermem.ko", "nvidia-peermem", kKernel);
    test::write_ko(dir / "updates/mlnx-ofa_kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko", "mlx5_ib", kKernel);
    // build/ and source/ hold the headers (and, here, a module that must not be read).
    test::write_ko(root / "usr/src/linux-headers" / kKernel / "stray.ko", "stray", kKernel);
    fs::create_directory_symlink("/usr/src/linux-headers-" + std::string(kKernel), dir / "build");
    fs::create_directories(dir / "source");
    test::write_ko(dir / "source/other.ko", "other", kKernel);
  }
};

} // namespace

TEST_CASE("out-of-tree modules: every module without intree, wherever it is, and nothing in-tree") {
  Tree t("basic");
  // A module built outside the tree but installed under kernel/drivers (a dkms.conf may say so).
  test::write_ko(t.dir / "kernel/drivers/misc/gdrdrv.ko", "gdrdrv", kKernel);
  // Compressed: .ko.xz is read too.
  test::write_ko(t.dir / "extra/knem.ko", "knem", kKernel);
  xz_compress(t.dir / "extra/knem.ko", t.dir / "extra/knem.ko.xz");
  const auto scan = driver::out_of_tree_modules(t.host, kKernel);
  CHECK(scan.found);
  CHECK_FALSE(scan.truncated);
  CHECK(scan.error.empty());
  const std::string d = "/lib/modules/" + std::string(kKernel);
  CHECK(paths_of(scan) ==
        std::vector<std::string>{d + "/extra/knem.ko.xz", d + "/kernel/drivers/misc/gdrdrv.ko",
                                 d + "/updates/dkms/nvidia-peermem.ko", d + "/updates/dkms/nvidia.ko",
                                 d + "/updates/mlnx-ofa_kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko"});
  CHECK(scan.module_files == 7); // the two in-tree ones read and left out; build/ and source/ never read
  for (const auto& m : scan.modules) {
    INFO(m.path);
    CHECK(m.error.empty());
    CHECK_FALSE(m.info.intree);
  }
  CHECK(find(scan, d + "/extra/knem.ko.xz")->info.name == "knem");
}

TEST_CASE("out-of-tree modules: the signer and serial of each, as sign-file signed it") {
  Tree t("signed");
  auto key = driver::ensure_signing_key(t.root / "keys", "hpcbake module signing key");
  REQUIRE(key.has_value());
  REQUIRE(test::sign_ko(t.dir / "updates/dkms/nvidia.ko", key->key, key->cert_der));
  const auto scan = driver::out_of_tree_modules(t.host, kKernel);
  const auto* nvidia = find(scan, "/lib/modules/" + std::string(kKernel) + "/updates/dkms/nvidia.ko");
  REQUIRE(nvidia);
  CHECK(nvidia->info.signer == "hpcbake module signing key");
  auto cert = driver::read_certificate(key->cert_der);
  REQUIRE(cert.has_value());
  CHECK(driver::serial_key(nvidia->info.sig_key) == cert->serial);
  const auto* peermem = find(scan, "/lib/modules/" + std::string(kKernel) + "/updates/dkms/nvidia-peermem.ko");
  REQUIRE(peermem);
  CHECK(peermem->info.signer.empty());
}

TEST_CASE("out-of-tree modules: symlinks are followed inside the root only, and a loop cannot hold the walk") {
  Tree t("links");
  // RHEL's weak-updates/: a link to another kernel's module, resolved inside the root.
  test::write_ko(t.root / "lib/modules/6.8.0-1010-azure/extra/gdrdrv.ko", "gdrdrv", "6.8.0-1010-azure");
  fs::create_directories(t.dir / "weak-updates");
  fs::create_symlink("/lib/modules/6.8.0-1010-azure/extra/gdrdrv.ko", t.dir / "weak-updates/gdrdrv.ko");
  // A dangling link, and a directory link back up the tree (a loop, were it followed).
  fs::create_symlink("/lib/modules/gone/knem.ko", t.dir / "weak-updates/knem.ko");
  fs::create_directory_symlink("..", t.dir / "updates/loop");
  const auto scan = driver::out_of_tree_modules(t.host, kKernel);
  const std::string d = "/lib/modules/" + std::string(kKernel);
  const auto* weak = find(scan, d + "/weak-updates/gdrdrv.ko");
  REQUIRE(weak);
  CHECK(weak->info.name == "gdrdrv");
  const auto* dangling = find(scan, d + "/weak-updates/knem.ko");
  REQUIRE(dangling);
  CHECK(dangling->error.find("a link to nothing") != std::string::npos);
  CHECK(scan.modules.size() == 5);
}

TEST_CASE("out-of-tree modules: the walk stops at its bound and says so") {
  Tree t("bound");
  const auto whole = driver::out_of_tree_modules(t.host, kKernel);
  CHECK_FALSE(whole.truncated);
  REQUIRE(whole.entries > 4);
  const auto cut = driver::out_of_tree_modules(t.host, kKernel, 4);
  CHECK(cut.truncated);
  CHECK(cut.entries == 5);
  CHECK(cut.modules.size() < whole.modules.size());
}

TEST_CASE("out-of-tree modules: a file that is not a module is listed with the reason") {
  Tree t("garbage");
  test::write(t.dir / "updates/broken.ko", "not an ELF file");
  const auto scan = driver::out_of_tree_modules(t.host, kKernel);
  const auto* broken = find(scan, "/lib/modules/" + std::string(kKernel) + "/updates/broken.ko");
  REQUIRE(broken);
  INFO(broken->error);
  CHECK(broken->error.find(".modinfo") != std::string::npos);
  CHECK(broken->error.find("broken.ko") != std::string::npos);
}

TEST_CASE("out-of-tree modules: no module directory for the kernel") {
  Tree t("none");
  const auto scan = driver::out_of_tree_modules(t.host, "6.9.9-gone");
  CHECK_FALSE(scan.found);
  CHECK(scan.modules.empty());
}

TEST_CASE("out-of-tree modules: the owning package from dpkg's file lists, under /lib or /usr/lib") {
  Tree t("owners");
  const std::string d = "/lib/modules/" + std::string(kKernel);
  test::write(t.root / "var/lib/dpkg/info/mlnx-ofed-kernel-modules:amd64.list",
              "/.\n/usr\n/usr/lib/modules/" + std::string(kKernel) +
                  "/updates/mlnx-ofa_kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko\n");
  test::write(t.root / ("var/lib/dpkg/info/linux-modules-" + std::string(kKernel) + ".list"),
              d + "/kernel/fs/ext4/ext4.ko\n");
  test::write(t.root / "var/lib/dpkg/info/bash.list", "/bin/bash\n");
  auto scan = driver::out_of_tree_modules(t.host, kKernel);
  CHECK(driver::owning_packages(t.host, scan.modules) == "dpkg");
  CHECK(find(scan, d + "/updates/mlnx-ofa_kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko")->package ==
        "mlnx-ofed-kernel-modules");
  CHECK(find(scan, d + "/updates/dkms/nvidia.ko")->package.empty()); // DKMS's: no list names it

  // No dpkg database (an rpm system): unknown, not "none".
  fs::remove_all(t.root / "var/lib/dpkg");
  scan = driver::out_of_tree_modules(t.host, kKernel);
  CHECK(driver::owning_packages(t.host, scan.modules).empty());
}
