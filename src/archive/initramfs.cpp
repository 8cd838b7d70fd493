#include "archive/initramfs.hpp"

#include "util/fd.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>

namespace hpcbake::archive {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kNewcHeader = 110; // "070701" and 13 fields of 8 hex digits
constexpr std::uint64_t kMaxName = 4096;

struct Reader {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

std::uint64_t align4(std::uint64_t n) { return (n + 3) & ~std::uint64_t{3}; }

// The module a path names ("usr/lib/modules/K/kernel/drivers/gpu/drm/nouveau/nouveau.ko.zst"
// -> "nouveau"), or nothing.
std::optional<std::string> module_of(std::string_view path) {
  const auto slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  for (std::string_view ext : {".ko", ".ko.gz", ".ko.xz", ".ko.zst"})
    if (base.size() > ext.size() && base.ends_with(ext)) return std::string(base.substr(0, base.size() - ext.size()));
  return std::nullopt;
}

Error broken(const fs::path& file, std::uint64_t offset, const std::string& what) {
  return Error{ErrorKind::unsupported, fmt::format("{}: {} at byte {}", file.string(), what, offset), {}};
}

Status read_exact(int fd, std::uint64_t offset, char* buf, std::size_t n, const fs::path& file) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail(ErrorKind::permission, fmt::format("{}: {}", file.string(), std::strerror(errno)));
    if (r == 0) return std::unexpected(broken(file, offset + got, "unexpected end of file"));
    got += static_cast<std::size_t>(r);
  }
  return {};
}

// One uncompressed newc archive from `offset`; returns the offset after its trailer.
Result<std::uint64_t> read_newc(int fd, std::uint64_t offset, std::uint64_t size, const fs::path& file,
                                std::set<std::string>& modules) {
  std::array<char, kNewcHeader> h{};
  std::string name;
  for (;;) {
    if (offset + kNewcHeader > size) return std::unexpected(broken(file, offset, "a cpio header past the end"));
    HPCBAKE_TRY(read_exact(fd, offset, h.data(), h.size(), file));
    const std::string_view hv(h.data(), h.size());
    if (!hv.starts_with("070701") && !hv.starts_with("070702"))
      return std::unexpected(broken(file, offset, "not a cpio newc header"));
    auto field = [&](int i) -> std::optional<std::uint64_t> {
      std::uint64_t v = 0;
      const char* b = h.data() + 6 + 8 * i;
      auto [p, ec] = std::from_chars(b, b + 8, v, 16);
      if (ec != std::errc() || p != b + 8) return std::nullopt;
      return v;
    };
    const auto filesize = field(6), namesize = field(11);
    if (!filesize || !namesize || *namesize == 0 || *namesize > kMaxName)
      return std::unexpected(broken(file, offset, "a cpio header with a bad size field"));
    const std::uint64_t data = align4(offset + kNewcHeader + *namesize);
    if (data > size || *filesize > size - data)
      return std::unexpected(broken(file, offset, "a cpio entry past the end"));
    name.resize(*namesize);
    HPCBAKE_TRY(read_exact(fd, offset + kNewcHeader, name.data(), name.size(), file));
    if (name.back() != '\0') return std::unexpected(broken(file, offset, "a cpio name without its NUL"));
    name.pop_back();
    offset = align4(data + *filesize);
    if (name == "TRAILER!!!") return offset;
    if (auto m = module_of(name)) modules.insert(*m);
  }
}

// The rest of the file from `offset` as one (compressed) cpio archive, through libarchive.
Status read_compressed(int fd, std::uint64_t offset, const fs::path& file, std::set<std::string>& modules) {
  if (::lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0)
    return fail(ErrorKind::permission, fmt::format("{}: {}", file.string(), std::strerror(errno)));
  std::unique_ptr<struct archive, Reader> a(archive_read_new());
  if (!a) return fail(ErrorKind::internal, "libarchive: out of memory");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_cpio(a.get());
  if (archive_read_open_fd(a.get(), fd, 1 << 16) != ARCHIVE_OK)
    return std::unexpected(broken(file, offset, archive_error_string(a.get()) ? archive_error_string(a.get()) : "?"));
  struct archive_entry* e = nullptr;
  int r = ARCHIVE_OK;
  while ((r = archive_read_next_header(a.get(), &e)) == ARCHIVE_OK) {
    if (const char* p = archive_entry_pathname(e))
      if (auto m = module_of(p)) modules.insert(*m);
  }
  if (r != ARCHIVE_EOF)
    return std::unexpected(broken(file, offset, archive_error_string(a.get()) ? archive_error_string(a.get()) : "?"));
  return {};
}

} // namespace

Result<InitramfsModules> initramfs_modules(const fs::path& file) {
  util::Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(ErrorKind::permission, fmt::format("{}: {}", file.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(ErrorKind::unsupported, fmt::format("{}: not a regular file", file.string()));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  std::set<std::string> modules;
  InitramfsModules out;
  std::uint64_t offset = 0;
  while (offset < size) {
    // The kernel skips NUL padding between archives (to 4 bytes; update-initramfs and dracut pad
    // to 512).
    std::array<char, 512> buf{};
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - offset));
    HPCBAKE_TRY(read_exact(fd.get(), offset, buf.data(), n, file));
    const std::string_view window(buf.data(), n);
    const auto start = window.find_first_not_of('\0');
    if (start == std::string_view::npos) {
      offset += n;
      continue;
    }
    offset += start;
    ++out.archives;
    std::array<char, 6> magic{};
    const bool cpio = size - offset >= magic.size() &&
                      read_exact(fd.get(), offset, magic.data(), magic.size(), file) &&
                      std::string_view(magic.data(), magic.size()).starts_with("0707");
    if (cpio) {
      HPCBAKE_TRY_ASSIGN(offset, read_newc(fd.get(), offset, size, file, modules));
      continue;
    }
    // Not a cpio header: the compressed archive, which ends the file.
    HPCBAKE_TRY(read_compressed(fd.get(), offset, file, modules));
    break;
  }
  if (out.archives == 0) return fail(ErrorKind::unsupported, fmt::format("{}: empty", file.string()));
  out.modules.assign(modules.begin(), modules.end());
  return out;
}

std::vector<std::string> initramfs_matches(const InitramfsModules& held, const std::vector<std::string>& wanted) {
  std::vector<std::string> out;
  for (const auto& m : held.modules)
    for (const auto& w : wanted)
      if (m == w || (m.size() > w.size() && m.starts_with(w) && (m[w.size()] == '-' || m[w.size()] == '_'))) {
        out.push_back(m);
        break;
      }
  return out;
}

} // namespace hpcbake::archive
