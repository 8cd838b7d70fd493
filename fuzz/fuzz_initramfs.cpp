// The initramfs reader (archive::initramfs_modules, archive::check_initramfs): cpio "newc"
// archives one after another, NUL-padded, the last part possibly compressed (gzip, xz, zstd,
// lz4, bzip2, lzma through libarchive's filters). It decides whether `nouveau disable` and the
// driver's module options rebuild the initramfs. Inputs are capped at 64 KiB so that a
// compression bomb costs the fuzzer seconds, not minutes (the reader's own bound on decompressed
// bytes is what a bigger bomb meets). Properties: a file that reads had at least one archive, and
// its module names are sorted, unique, non-empty and without '/'; reading is deterministic;
// check_initramfs rebuilds exactly when the file does not read or holds a wanted module, and
// what it found is among the modules read; the files asked for by path come back alone, within
// their bound, the same each time; a refusal names the file.
#include "archive/initramfs.hpp"
#include "fuzz_util.hpp"

#include <algorithm>

using namespace hpcbake_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return -1; // not added to the corpus
  const fs::path file = scratch() / "initrd.img";
  write_file(file, as_text(data, size));
  hpcbake::archive::InitramfsLimits limits;
  limits.files = {"/etc/modprobe.d/blacklist-nouveau.conf"};
  auto held = hpcbake::archive::initramfs_modules(file, limits);
  auto again = hpcbake::archive::initramfs_modules(file, limits);
  check(held.has_value() == again.has_value(), "the same initramfs read two ways");
  const std::vector<std::string> wanted = {"nouveau", "nvidia"};
  const hpcbake::util::HostFs host(scratch());
  const auto c = hpcbake::archive::check_initramfs(host, "/initrd.img", wanted, limits);
  if (!held) {
    check(held.error().message.find("initrd.img") != std::string::npos, "a refusal that does not name the file");
    check(held.error().message == again.error().message, "the same initramfs refused two ways");
    check(c.needed(), "an initramfs that does not read, not rebuilt");
    return 0;
  }
  const auto& m = held->modules;
  check(held->archives >= 1, "an initramfs read without an archive");
  check(m == again->modules && held->archives == again->archives, "the same initramfs read as different modules");
  check(std::is_sorted(m.begin(), m.end()) && std::adjacent_find(m.begin(), m.end()) == m.end(),
        "module names not sorted or repeated");
  for (const auto& name : m)
    check(!name.empty() && name.find('/') == std::string::npos, "a malformed module name: " + name);
  check(held->files == again->files, "the same initramfs read as different files");
  for (const auto& [path, content] : held->files)
    check(path == "etc/modprobe.d/blacklist-nouveau.conf" &&
              content.size() <= hpcbake::archive::InitramfsLimits::kMaxWantedFile,
          "a file not asked for, or over its bound: " + path);
  check(c.held.has_value(), "check_initramfs did not read what initramfs_modules read");
  for (const auto& f : c.found)
    check(std::binary_search(m.begin(), m.end(), f), "a match that is not among the modules read: " + f);
  check(c.needed() == !c.found.empty(), "the rebuild decision disagrees with the matches");
  return 0;
}
