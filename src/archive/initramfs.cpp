#include "archive/initramfs.hpp"

#include "util/fd.hpp"
#include "util/file_type.hpp"
#include "util/strings.hpp"

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
#include <functional>
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

std::uint64_t align4(std::uint64_t n) {
  return (n + 3) & ~std::uint64_t{3};
}

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

// A byte stream read front to back, with a look ahead: the file itself, or the decompressed
// stream of its compressed part. `offset` counts what was taken, for messages.
class Bytes {
public:
  using Source = std::function<Result<std::size_t>(char*, std::size_t)>; // 0: the end
  Bytes(Source source, const fs::path& file, std::string where)
      : source_(std::move(source)), file_(file), where_(std::move(where)) {}

  // At least `n` bytes buffered, unless the stream ends first; returns how many are.
  Result<std::size_t> fill(std::size_t n) {
    if (pos_ > 0 && buf_.size() - pos_ < n) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
      pos_ = 0;
    }
    while (!eof_ && buf_.size() - pos_ < n) {
      const std::size_t had = buf_.size();
      buf_.resize(had + kChunk);
      auto got = source_(buf_.data() + had, kChunk);
      if (!got) return std::unexpected(got.error());
      buf_.resize(had + *got);
      if (*got == 0) eof_ = true;
    }
    return buf_.size() - pos_;
  }
  std::string_view ahead() const { return std::string_view(buf_.data() + pos_, buf_.size() - pos_); }
  Status take(char* out, std::size_t n) {
    HPCBAKE_TRY_ASSIGN(auto have, fill(n));
    if (have < n) return std::unexpected(error("unexpected end of data"));
    std::memcpy(out, buf_.data() + pos_, n);
    pos_ += n;
    offset += n;
    return {};
  }
  Status skip(std::uint64_t n) {
    while (n > 0) {
      HPCBAKE_TRY_ASSIGN(auto have, fill(1));
      if (have == 0) return std::unexpected(error("unexpected end of data"));
      const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(n, have));
      pos_ += step;
      offset += step;
      n -= step;
    }
    return {};
  }
  Error error(const std::string& what) const { return broken(file_, offset, where_ + what); }

  std::uint64_t offset = 0;

private:
  static constexpr std::size_t kChunk = 1 << 16;
  Source source_;
  const fs::path& file_;
  std::string where_;
  std::vector<char> buf_;
  std::size_t pos_ = 0;
  bool eof_ = false;
};

// What is read of one file: the modules found, the archives and entries counted against the limits.
struct Seen {
  const InitramfsLimits& limits;
  std::set<std::string> modules;
  std::map<std::string, std::string> files;
  int archives = 0;
  std::uint64_t entries = 0;
};

// A path as the image has it: without a leading "./" or "/".
std::string_view image_path(std::string_view p) {
  while (true) {
    if (p.starts_with("./"))
      p.remove_prefix(2);
    else if (p.starts_with("/"))
      p.remove_prefix(1);
    else
      return p;
  }
}

bool wanted(const Seen& seen, std::string_view path) {
  for (const auto& f : seen.limits.files)
    if (image_path(f) == path) return true;
  return false;
}

// One newc archive, up to and with its trailer.
Status read_newc(Bytes& in, Seen& seen) {
  std::array<char, kNewcHeader> h{};
  std::string name;
  for (;;) {
    const std::uint64_t at = in.offset;
    HPCBAKE_TRY(in.take(h.data(), h.size()));
    const std::string_view hv(h.data(), h.size());
    if (!hv.starts_with("070701") && !hv.starts_with("070702"))
      return std::unexpected(in.error("not a cpio newc header"));
    auto field = [&](int i) -> std::optional<std::uint64_t> {
      std::uint64_t v = 0;
      const char* b = h.data() + 6 + 8 * i;
      auto [p, ec] = std::from_chars(b, b + 8, v, 16);
      if (ec != std::errc() || p != b + 8) return std::nullopt;
      return v;
    };
    const auto filesize = field(6), namesize = field(11);
    if (!filesize || !namesize || *namesize == 0 || *namesize > kMaxName)
      return std::unexpected(in.error("a cpio header with a bad size field"));
    name.resize(*namesize);
    HPCBAKE_TRY(in.take(name.data(), name.size()));
    if (name.back() != '\0') return std::unexpected(in.error("a cpio name without its NUL"));
    name.pop_back();
    HPCBAKE_TRY(in.skip(align4(at + kNewcHeader + *namesize) - in.offset));
    const std::uint64_t data_end = align4(in.offset + *filesize);
    const std::string_view path = image_path(name);
    const auto mode = field(1);
    if (mode && (*mode & S_IFMT) == S_IFREG && wanted(seen, path)) {
      if (*filesize > InitramfsLimits::kMaxWantedFile)
        return std::unexpected(
            in.error(fmt::format("{} is larger than {} bytes", path, InitramfsLimits::kMaxWantedFile)));
      std::string content(static_cast<std::size_t>(*filesize), '\0');
      HPCBAKE_TRY(in.take(content.data(), content.size()));
      seen.files[std::string(path)] = std::move(content);
    }
    HPCBAKE_TRY(in.skip(data_end - in.offset));
    if (name == "TRAILER!!!") return {};
    if (++seen.entries > seen.limits.max_entries)
      return std::unexpected(in.error(
          fmt::format("more than {} cpio entries (hpcbake's bound on an initramfs)", seen.limits.max_entries)));
    if (auto m = module_of(name)) seen.modules.insert(*m);
  }
}

enum class Next { end, compressed };

// Archives one after another, NUL padding between them (the kernel skips it), to the end of the
// stream, or (when `compressed_ok`) to data that is not a cpio header: the compressed part.
Result<Next> read_archives(Bytes& in, bool compressed_ok, Seen& seen) {
  for (;;) {
    HPCBAKE_TRY_ASSIGN(auto have, in.fill(4));
    const auto nul = in.ahead().find_first_not_of('\0');
    if (nul == std::string_view::npos) {
      if (have == 0) return Next::end;
      HPCBAKE_TRY(in.skip(have));
      continue;
    }
    HPCBAKE_TRY(in.skip(nul));
    HPCBAKE_TRY(in.fill(4));
    if (!in.ahead().starts_with("0707")) {
      if (compressed_ok) return Next::compressed;
      return std::unexpected(in.error("data that is not a cpio archive"));
    }
    ++seen.archives;
    HPCBAKE_TRY(read_newc(in, seen));
  }
}

// The compressed part, from `offset` to the end of the file, through libarchive's filters (raw
// format: the decompressed bytes, read as archives here, so several cpio archives inside one
// compressed stream are all seen). Data the filter leaves unread is an error.
Status read_compressed(int fd, std::uint64_t offset, std::uint64_t size, const fs::path& file, Seen& seen) {
  if (::lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0)
    return fail(ErrorKind::permission, fmt::format("{}: {}", file.string(), std::strerror(errno)));
  std::unique_ptr<struct archive, Reader> a(archive_read_new());
  if (!a) return fail(ErrorKind::internal, "libarchive: out of memory");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_raw(a.get());
  auto lib_error = [&](const char* what) {
    const char* e = archive_error_string(a.get());
    return broken(file, offset, fmt::format("{}: {}", what, e ? e : "libarchive gives no reason"));
  };
  struct archive_entry* e = nullptr;
  if (archive_read_open_fd(a.get(), fd, 1 << 16) != ARCHIVE_OK || archive_read_next_header(a.get(), &e) != ARCHIVE_OK)
    return std::unexpected(lib_error("the compressed part"));
  if (archive_filter_count(a.get()) < 2)
    return std::unexpected(broken(file, offset, "data that is neither cpio nor compressed"));
  std::uint64_t unpacked = 0;
  Bytes in(
      [&](char* buf, std::size_t n) -> Result<std::size_t> {
        const la_ssize_t r = archive_read_data(a.get(), buf, n);
        if (r < 0) return std::unexpected(lib_error("the compressed archive"));
        unpacked += static_cast<std::uint64_t>(r);
        if (unpacked > seen.limits.max_bytes)
          return std::unexpected(broken(file, offset,
                                        fmt::format("the compressed part unpacks to more than {} (hpcbake's bound on "
                                                    "an initramfs; Debian 12's unpacks to 130 MB)",
                                                    util::human_bytes(seen.limits.max_bytes))));
        return static_cast<std::size_t>(r);
      },
      file, fmt::format("(decompressed, from byte {}) ", offset));
  HPCBAKE_TRY(read_archives(in, false, seen));
  if (static_cast<std::uint64_t>(archive_filter_bytes(a.get(), -1)) < size - offset)
    return std::unexpected(broken(file, offset, "data after the compressed archive"));
  return {};
}

// The file behind `fd` (opened with O_NONBLOCK, so a FIFO did not block the open), named `file`.
Result<InitramfsModules> read_initramfs(const util::Fd& fd, const fs::path& file, const InitramfsLimits& limits) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return fail(ErrorKind::permission, fmt::format("{}: {}", file.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return fail(ErrorKind::unsupported,
                fmt::format("{}: {}, not a regular file: not read", file.string(), util::file_type_name(st.st_mode)));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > limits.max_bytes)
    return fail(ErrorKind::unsupported,
                fmt::format("{}: {} bytes, more than {} (hpcbake's bound on an initramfs): not read", file.string(),
                            size, util::human_bytes(limits.max_bytes)));
  // A regular file's reads ignore O_NONBLOCK (open(2)); cleared all the same.
  if (const int fl = ::fcntl(fd.get(), F_GETFL); fl >= 0) ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  Seen seen{limits, {}, {}, 0, 0};
  InitramfsModules out;
  Bytes in(
      [&](char* buf, std::size_t n) -> Result<std::size_t> {
        for (;;) {
          const ssize_t r = ::read(fd.get(), buf, n);
          if (r < 0 && errno == EINTR) continue;
          if (r < 0) return fail(ErrorKind::permission, fmt::format("{}: {}", file.string(), std::strerror(errno)));
          return static_cast<std::size_t>(r);
        }
      },
      file, "");
  HPCBAKE_TRY_ASSIGN(auto next, read_archives(in, true, seen));
  if (next == Next::compressed) {
    HPCBAKE_TRY(read_compressed(fd.get(), in.offset, size, file, seen));
  }
  out.archives = seen.archives;
  if (out.archives == 0) return fail(ErrorKind::unsupported, fmt::format("{}: empty", file.string()));
  out.modules.assign(seen.modules.begin(), seen.modules.end());
  out.files = std::move(seen.files);
  return out;
}

} // namespace

Result<InitramfsModules> initramfs_modules(const fs::path& file, const InitramfsLimits& limits) {
  util::Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) return fail(ErrorKind::permission, fmt::format("{}: {}", file.string(), std::strerror(errno)));
  return read_initramfs(fd, file, limits);
}

Result<InitramfsModules> initramfs_modules(const util::HostFs& host, std::string_view host_path,
                                           const InitramfsLimits& limits) {
  const fs::path shown = host.display(host_path);
  auto fd = host.open(host_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (!fd) return fail(ErrorKind::permission, fmt::format("{}: {}", shown.string(), std::strerror(fd.error())));
  return read_initramfs(*fd, shown, limits);
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

InitramfsCheck check_initramfs(const util::HostFs& host, std::string_view host_path,
                               const std::vector<std::string>& wanted, const InitramfsLimits& limits) {
  InitramfsCheck c{initramfs_modules(host, host_path, limits), {}};
  if (c.held) c.found = initramfs_matches(*c.held, wanted);
  return c;
}

} // namespace hpcbake::archive
