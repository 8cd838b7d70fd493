#include "archive/extract.hpp"

#include "archive/xz_blocks.hpp"
#include "util/fd.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace hpcbake::archive {

namespace {

namespace fs = std::filesystem;

// Large reads keep the syscall count low on uncompressed archives, where libarchive hands
// out pointers into this buffer, and give the decompressors long runs of input.
constexpr std::size_t kReadBlock = 1 << 20;
// Each directory level of the entry being written holds one descriptor; this bounds them.
constexpr std::size_t kMaxDepth = 256;

const char* const kUnsafeHint =
    "The archive is unsafe or damaged: do not install from it. Get it again from its publisher and check its checksum.";

using util::Fd;

// Entry names come from the archive: show control bytes escaped so a name cannot rewrite
// the terminal or the log line it appears in.
std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

// The process umask, read without changing it (umask(2) can only be read by setting it,
// which would race with other threads). Files whose mode survives the umask need no fchmod.
mode_t process_umask() {
  static const mode_t value = [] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
    }
    return static_cast<mode_t>(0777); // unknown: always fchmod
  }();
  return value;
}

enum class NameCheck { ok, empty, absolute, dotdot };

// Splits an archive name into its components, dropping empty and "." ones.
NameCheck split_name(std::string_view name, std::vector<std::string_view>& out) {
  out.clear();
  if (name.empty()) return NameCheck::empty;
  if (name.front() == '/') return NameCheck::absolute;
  std::size_t pos = 0;
  while (pos <= name.size()) {
    const std::size_t slash = std::min(name.find('/', pos), name.size());
    const std::string_view c = name.substr(pos, slash - pos);
    if (c == "..") return NameCheck::dotdot;
    if (!c.empty() && c != ".") out.push_back(c);
    pos = slash + 1;
  }
  return NameCheck::ok;
}

std::string join(std::span<const std::string_view> comps) {
  std::string s;
  for (const auto c : comps) {
    if (!s.empty()) s += '/';
    s += c;
  }
  return s;
}

// A symlink target stays inside the tree when it is relative, all its ".." come before any
// name, and there are no more of them than the link's directory is deep. Names after the
// ".." only descend: through real directories, or through links that obey the same rule.
// A ".." after a name could climb out through a link ("l/.." where l -> ..), so it is
// refused even where it would be harmless.
const char* symlink_problem(std::string_view target, std::size_t link_depth) {
  if (target.empty()) return "its target is empty";
  if (target.front() == '/') return "its target is an absolute path";
  std::size_t ups = 0;
  bool named = false;
  std::size_t pos = 0;
  while (pos <= target.size()) {
    const std::size_t slash = std::min(target.find('/', pos), target.size());
    const std::string_view c = target.substr(pos, slash - pos);
    if (c == "..") {
      if (named) return "its target has '..' after a name";
      ++ups;
    } else if (!c.empty() && c != ".") {
      named = true;
    }
    pos = slash + 1;
  }
  if (ups > link_depth) return "its target points outside the destination";
  return nullptr;
}

int retry_eintr_pread(int fd, void* buf, std::size_t n, std::uint64_t off, ssize_t& got) {
  do
    got = ::pread(fd, buf, n, static_cast<off_t>(off));
  while (got < 0 && errno == EINTR);
  return got < 0 ? errno : 0;
}

// What libarchive reads: a byte range of an open file, through one reusable buffer. The
// observer sees every byte of the range once, in order, even when the start is read twice
// (once to detect the compression, once more by the reader that extracts); seeking is not
// offered when there is an observer.
struct Source {
  int fd = -1;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t pos = 0;
  std::vector<char> buf;
  const Observer* observe = nullptr;
  std::size_t index = 0;
  std::uint64_t observed = 0; // bytes [begin, observed) went through the observer
  // Bytes handed to a decoder, for the expansion ratio: written by the decoder thread (or the
  // xz block workers), read by the extracting thread. Read ahead counts as read, so the ratio
  // judged is never above the true one.
  std::atomic<std::uint64_t> consumed{0};

  void show(const char* data, std::uint64_t at, std::size_t n) {
    if (!observe || !*observe || at + n <= observed) return;
    const std::uint64_t skip = observed > at ? observed - at : 0;
    (*observe)(index, data + skip, n - static_cast<std::size_t>(skip));
    observed = at + n;
  }

  // Reads the rest of the range through the observer: libarchive stops at the archive's
  // end marker, but a checksum covers the whole range.
  int drain() {
    pos = std::max(pos, observed);
    while (pos < end) {
      ssize_t got = 0;
      if (const int e = retry_eintr_pread(fd, buf.data(), std::min<std::uint64_t>(buf.size(), end - pos), pos, got))
        return e;
      if (got == 0) return EIO; // shorter than the range: the caller checked the size, so it shrank
      show(buf.data(), pos, static_cast<std::size_t>(got));
      pos += static_cast<std::uint64_t>(got);
    }
    return 0;
  }
};

la_ssize_t read_cb(struct archive* a, void* data, const void** out) {
  auto* s = static_cast<Source*>(data);
  const std::uint64_t want = std::min<std::uint64_t>(s->buf.size(), s->end - s->pos);
  if (want == 0) return 0;
  ssize_t got = 0;
  if (const int e = retry_eintr_pread(s->fd, s->buf.data(), want, s->pos, got)) {
    archive_set_error(a, e, "read failed: %s", std::strerror(e));
    return -1;
  }
  s->show(s->buf.data(), s->pos, static_cast<std::size_t>(got));
  s->pos += static_cast<std::uint64_t>(got);
  s->consumed.fetch_add(static_cast<std::uint64_t>(got), std::memory_order_relaxed);
  *out = s->buf.data();
  return got;
}

la_int64_t seek_cb(struct archive*, void* data, la_int64_t offset, int whence) {
  auto* s = static_cast<Source*>(data);
  const auto size = static_cast<la_int64_t>(s->end - s->begin);
  la_int64_t base = 0;
  if (whence == SEEK_CUR)
    base = static_cast<la_int64_t>(s->pos - s->begin);
  else if (whence == SEEK_END)
    base = size;
  const la_int64_t to = std::clamp<la_int64_t>(base + offset, 0, size);
  s->pos = s->begin + static_cast<std::uint64_t>(to);
  return to;
}

struct ReaderDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
using Reader = std::unique_ptr<struct archive, ReaderDeleter>;

enum class Role { extract, decode };

// Formats: tar (ustar, pax, GNU) and zip only. "raw" and "empty" stay off for extraction:
// they would turn any file into one entry. The decoding reader of the pipeline below uses
// "raw" to get decompressed bytes, which only the extracting reader then interprets.
// Filters are enabled one by one rather than with _all so that none of them can run an
// external program (lzop, lrzip, grzip and uu would).
Result<Reader> new_reader(const std::string& label, Role role) {
  Reader a(archive_read_new());
  if (!a) return fail(ErrorKind::internal, "archive_read_new failed: out of memory");
  struct Filter {
    const char* name;
    int (*enable)(struct archive*);
  };
  static const Filter filters[] = {
      {"gzip", archive_read_support_filter_gzip}, {"bzip2", archive_read_support_filter_bzip2},
      {"xz", archive_read_support_filter_xz},     {"lzma", archive_read_support_filter_lzma},
      {"lzip", archive_read_support_filter_lzip}, {"zstd", archive_read_support_filter_zstd},
      {"lz4", archive_read_support_filter_lz4},   {"compress", archive_read_support_filter_compress},
  };
  for (const auto& f : filters) {
    const int r = f.enable(a.get());
    // ARCHIVE_WARN means "enabled, through an external program": not acceptable here.
    if (r != ARCHIVE_OK)
      return fail(
          ErrorKind::internal, fmt::format("{}: this libarchive has no built-in {} decompressor", label, f.name),
          "Install a libarchive built with zlib, libbz2, liblzma, libzstd and liblz4 (Debian's libarchive13 is).");
  }
  if (role == Role::decode) {
    if (archive_read_support_format_raw(a.get()) != ARCHIVE_OK)
      return fail(ErrorKind::internal, fmt::format("{}: libarchive lacks raw support", label));
    return a;
  }
  if (archive_read_support_format_tar(a.get()) != ARCHIVE_OK || archive_read_support_format_zip(a.get()) != ARCHIVE_OK)
    return fail(ErrorKind::internal, fmt::format("{}: libarchive lacks tar or zip support", label));
  return a;
}

struct DirFix {
  std::string path; // relative to the tree's root
  mode_t mode;
  bool has_mtime;
  struct timespec mtime;
};

// The tree being extracted: the staging directory, and the chain of open directories of the
// last entry's parent, so that consecutive entries in one directory cost no extra opens.
class Extractor {
public:
  Extractor(int root, std::string label, const ExtractOptions& opt)
      : root_(root), label_(std::move(label)), opt_(opt) {}

  Status run(struct archive* a);
  Status finish(); // applies directory modes and times
  const ExtractStats& stats() const { return stats_; }
  // The archive bytes read for the range being extracted now (nullptr: none); what earlier
  // ranges read is kept in stats_.read.
  void meter(const std::atomic<std::uint64_t>* consumed) {
    if (consumed_) stats_.read += consumed_->load(std::memory_order_relaxed);
    consumed_ = consumed;
  }

private:
  Status entry(struct archive* a, struct archive_entry* e);
  Status write_file(struct archive* a, int parent, const std::string& leaf, mode_t perm, struct archive_entry* e);
  Status write_dir(int parent, const std::string& leaf, std::span<const std::string_view> comps, mode_t perm,
                   struct archive_entry* e);
  Status write_symlink(int parent, const std::string& leaf, std::size_t depth, struct archive_entry* e);
  Status write_hardlink(int parent, const std::string& leaf, const char* target);
  Status write_node(int parent, const std::string& leaf, mode_t type, mode_t perm, struct archive_entry* e);
  template <typename Make> Status create_replacing(int parent, const std::string& leaf, const char* what, Make make);

  Result<int> open_dirs(std::span<const std::string_view> comps);
  Result<Fd> open_existing_dir(std::span<const std::string_view> comps);

  std::unexpected<Error> refuse(std::string_view why) const {
    return fail(ErrorKind::fetch, fmt::format("{}: entry '{}': {}", label_, printable(name_), why), kUnsafeHint);
  }
  std::unexpected<Error> limit(std::string_view why, Limits::Which which) const {
    return fail(ErrorKind::fetch, fmt::format("{}: entry '{}': {}", label_, printable(name_), why),
                fmt::format("An archive bomb, or an archive larger than expected: if it comes from a publisher you "
                            "trust and its size is legitimate, raise the limit with `hpcbake extract {} N`{}. "
                            "install and module install extract with the default limits.",
                            Limits::flag(which), which == Limits::Which::ratio ? " (0 turns the check off)" : ""));
  }
  Status check_data(std::uint64_t offset, std::size_t size, std::uint64_t length) const;
  Status check_declared(std::uint64_t declared) const;
  std::uint64_t read_so_far() const {
    return stats_.read + (consumed_ ? consumed_->load(std::memory_order_relaxed) : 0);
  }
  std::unexpected<Error> io(std::string_view what, int err) const {
    return fail(ErrorKind::internal,
                fmt::format("{}: entry '{}': {}: {}", label_, printable(name_), what, std::strerror(err)),
                "Check the free space and permissions where the archive is being extracted.");
  }
  std::unexpected<Error> libarchive(struct archive* a, std::string_view doing) const {
    const char* msg = archive_error_string(a);
    return fail(ErrorKind::fetch,
                fmt::format("{}: entry '{}': {}: {}", label_, printable(name_), doing, msg ? msg : "unknown error"),
                "The archive is corrupt or truncated: get it again from its publisher and check its checksum.");
  }

  int root_;
  std::string label_;
  const ExtractOptions& opt_;
  ExtractStats stats_;
  std::string name_; // the entry being extracted, for messages
  std::vector<std::string> chain_names_;
  std::vector<Fd> chain_fds_;
  std::vector<DirFix> dirs_;
  std::vector<std::string_view> comps_;
  std::vector<std::string_view> target_comps_;
  const std::atomic<std::uint64_t>* consumed_ = nullptr;
  std::uint64_t data_written_ = 0; // file data written, holes excluded: the ratio's numerator
};

// The limits, checked before `size` bytes of an entry's data at `offset` are written: on
// what was decoded, since a header may lie about the size. `length` is the entry's apparent
// size already counted in stats_.bytes (its declared size, then the furthest block's end):
// only what a block adds past it counts again, so holes count once and a block inside the
// declared size counts nothing more.
Status Extractor::check_data(std::uint64_t offset, std::size_t size, std::uint64_t length) const {
  const Limits& l = opt_.limits;
  if (offset > l.max_entry_bytes || size > l.max_entry_bytes - offset)
    return limit(fmt::format("its data exceeds the per-entry limit of {} bytes", l.max_entry_bytes),
                 Limits::Which::entry_bytes);
  const std::uint64_t end = offset + size;
  const std::uint64_t growth = end > length ? end - length : 0;
  if (growth > l.max_total_bytes - std::min(stats_.bytes, l.max_total_bytes))
    return limit(fmt::format("the archive's data exceeds the total limit of {} bytes", l.max_total_bytes),
                 Limits::Which::total_bytes);
  const std::uint64_t out = data_written_ + size;
  if (l.max_ratio == 0 || out <= l.ratio_floor_bytes) return {};
  const std::uint64_t in = read_so_far();
  // out > max_ratio * in, without overflow: ceil(out / max_ratio) > in.
  if ((out - 1) / l.max_ratio + 1 <= in) return {};
  return limit(fmt::format("the archive expands more than {} times: {} bytes of data from {} bytes of archive "
                           "(expansion ratio limit {}, judged past {} bytes)",
                           l.max_ratio, out, in, l.max_ratio, l.ratio_floor_bytes),
               Limits::Which::ratio);
}

// The size a file entry declares (tar's size field; for a sparse entry, GNU's realsize or
// PAX's GNU.sparse.realsize: its apparent size, holes included), checked against the per-entry
// and total limits before any of it is written: an all-hole entry has no data block to check.
Status Extractor::check_declared(std::uint64_t declared) const {
  const Limits& l = opt_.limits;
  if (declared > l.max_entry_bytes)
    return limit(fmt::format("its size of {} bytes (holes included) exceeds the per-entry limit of {} bytes", declared,
                             l.max_entry_bytes),
                 Limits::Which::entry_bytes);
  if (declared > l.max_total_bytes - std::min(stats_.bytes, l.max_total_bytes))
    return limit(fmt::format("the archive's data exceeds the total limit of {} bytes (this entry's size of {} bytes, "
                             "holes included, after {} bytes of earlier entries)",
                             l.max_total_bytes, declared, stats_.bytes),
                 Limits::Which::total_bytes);
  return {};
}

Result<int> Extractor::open_dirs(std::span<const std::string_view> comps) {
  std::size_t keep = 0;
  while (keep < comps.size() && keep < chain_names_.size() && chain_names_[keep] == comps[keep])
    ++keep;
  chain_names_.resize(keep);
  chain_fds_.resize(keep);
  for (std::size_t i = keep; i < comps.size(); ++i) {
    const int parent = i == 0 ? root_ : chain_fds_[i - 1].get();
    const std::string name(comps[i]);
    int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      // A parent the archive did not list: created like tar does, with ordinary permissions.
      if (::mkdirat(parent, name.c_str(), 0755) != 0 && errno != EEXIST)
        return io(fmt::format("cannot create directory '{}'", printable(join(comps.first(i + 1)))), errno);
      fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      if (errno == ENOTDIR || errno == ELOOP)
        return refuse(fmt::format("'{}' is not a directory (an earlier entry made it a file or a symlink)",
                                  printable(join(comps.first(i + 1)))));
      return io(fmt::format("cannot open directory '{}'", printable(join(comps.first(i + 1)))), errno);
    }
    chain_names_.emplace_back(comps[i]);
    chain_fds_.emplace_back(fd);
  }
  return comps.empty() ? root_ : chain_fds_.back().get();
}

Result<Fd> Extractor::open_existing_dir(std::span<const std::string_view> comps) {
  Fd cur(::fcntl(root_, F_DUPFD_CLOEXEC, 0));
  if (!cur.ok()) return io("cannot duplicate a descriptor", errno);
  for (std::size_t i = 0; i < comps.size(); ++i) {
    const std::string name(comps[i]);
    Fd next(::openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    // errno is read here, before a descriptor's close can change it.
    if (!next.ok()) return io(fmt::format("cannot open directory '{}'", printable(join(comps.first(i + 1)))), errno);
    cur = std::move(next);
  }
  return cur;
}

// Creates a node with `make(parent, leaf)`; an existing non-directory of the same name (a
// duplicate entry, as appended tar archives have) is replaced, a directory never is.
template <typename Make>
Status Extractor::create_replacing(int parent, const std::string& leaf, const char* what, Make make) {
  if (make() == 0) return {};
  if (errno != EEXIST) return io(fmt::format("cannot create {}", what), errno);
  struct stat st {};
  if (::fstatat(parent, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    return refuse(
        fmt::format("a directory of that name was already extracted; refusing to replace it with a {}", what));
  if (::unlinkat(parent, leaf.c_str(), 0) != 0) return io("cannot replace an earlier entry of the same name", errno);
  if (make() != 0) return io(fmt::format("cannot create {}", what), errno);
  return {};
}

Status Extractor::write_file(struct archive* a, int parent, const std::string& leaf, mode_t perm,
                             struct archive_entry* e) {
  int fd = -1;
  if (auto s = create_replacing(parent, leaf, "file",
                                [&] {
                                  fd = ::openat(parent, leaf.c_str(),
                                                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm & 0777);
                                  return fd < 0 ? -1 : 0;
                                });
      !s)
    return s;
  Fd file(fd);
  // The file's apparent size: what the entry declares, or the end of its furthest block if
  // that is further (a header that lies). A sparse entry may end in a hole, or be all hole,
  // with no block to say so: its declared size is what GNU tar restores, and what counts
  // against the limits.
  const std::uint64_t declared =
      archive_entry_size_is_set(e) && archive_entry_size(e) > 0 ? static_cast<std::uint64_t>(archive_entry_size(e)) : 0;
  HPCBAKE_TRY(check_declared(declared));
  stats_.bytes += declared;
  std::uint64_t length = declared;
  while (true) {
    const void* buf = nullptr;
    std::size_t size = 0;
    la_int64_t offset = 0;
    const int r = archive_read_data_block(a, &buf, &size, &offset);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return libarchive(a, "reading its data failed");
    if (offset < 0) return refuse("its data has a negative offset");
    const auto off = static_cast<std::uint64_t>(offset);
    HPCBAKE_TRY(check_data(off, size, length));
    const char* p = static_cast<const char*>(buf);
    std::size_t done = 0;
    while (done < size) {
      const ssize_t w = ::pwrite(fd, p + done, size - done, static_cast<off_t>(off + done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return io("write failed", errno);
      done += static_cast<std::size_t>(w);
    }
    data_written_ += size;
    if (off + size > length) {
      stats_.bytes += off + size - length;
      length = off + size;
    }
  }
  // Holes after the last block: extend the file to its size without writing them.
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io("stat failed", errno);
  if (static_cast<std::uint64_t>(st.st_size) < length && ::ftruncate(fd, static_cast<off_t>(length)) != 0)
    return io("cannot extend a sparse file to its size", errno);
  // After the data: writing clears setuid/setgid bits, and open() only applied 0777 & ~umask.
  if (((perm & ~0777) != 0 || (perm & process_umask()) != 0) && ::fchmod(fd, perm) != 0)
    return io("chmod failed", errno);
  if (archive_entry_mtime_is_set(e)) {
    const struct timespec ts[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
    if (::futimens(fd, ts) != 0) return io("cannot set its modification time", errno);
  }
  return {};
}

Status Extractor::write_dir(int parent, const std::string& leaf, std::span<const std::string_view> comps, mode_t perm,
                            struct archive_entry* e) {
  // Created owner-only and given its mode after its contents: a read-only directory in the
  // archive must not stop its own files from being written.
  if (::mkdirat(parent, leaf.c_str(), 0700) != 0) {
    if (errno != EEXIST) return io("cannot create directory", errno);
    struct stat st {};
    if (::fstatat(parent, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return io("stat failed", errno);
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(parent, leaf.c_str(), 0) != 0 || ::mkdirat(parent, leaf.c_str(), 0700) != 0)
        return io("cannot replace an earlier entry of the same name", errno);
    }
  }
  DirFix fix{join(comps), perm, archive_entry_mtime_is_set(e) != 0, {}};
  if (fix.has_mtime) fix.mtime = {archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
  dirs_.push_back(std::move(fix));
  return {};
}

Status Extractor::write_symlink(int parent, const std::string& leaf, std::size_t depth, struct archive_entry* e) {
  const char* target = archive_entry_symlink(e);
  if (!target) target = archive_entry_symlink_utf8(e);
  if (!target) return refuse("it is a symlink without a readable target");
  if (const char* why = symlink_problem(target, depth))
    return refuse(fmt::format("symlink to '{}' refused: {}", printable(target), why));
  if (auto s = create_replacing(parent, leaf, "symlink", [&] { return ::symlinkat(target, parent, leaf.c_str()); }); !s)
    return s;
  if (archive_entry_mtime_is_set(e)) {
    const struct timespec ts[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
    ::utimensat(parent, leaf.c_str(), ts, AT_SYMLINK_NOFOLLOW); // best effort: a link's time matters little
  }
  return {};
}

Status Extractor::write_hardlink(int parent, const std::string& leaf, const char* target) {
  const std::string_view t(target);
  if (const auto check = split_name(t, target_comps_); check != NameCheck::ok)
    return refuse(fmt::format("hardlink to '{}' refused: the target is {}", printable(t),
                              check == NameCheck::absolute ? "an absolute path"
                              : check == NameCheck::dotdot ? "outside the destination ('..')"
                                                           : "empty"));
  if (target_comps_.size() <= opt_.strip_components)
    return refuse(fmt::format("hardlink to '{}' refused: the target is removed by strip_components", printable(t)));
  const std::span<const std::string_view> rest(target_comps_.begin() + opt_.strip_components, target_comps_.end());
  const std::string target_leaf(rest.back());
  auto dir = open_existing_dir(rest.first(rest.size() - 1));
  struct stat st {};
  if (!dir || ::fstatat(dir->get(), target_leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
    return refuse(
        fmt::format("hardlink to '{}' refused: the target is not a regular file extracted earlier", printable(t)));
  struct stat self {};
  if (::fstatat(parent, leaf.c_str(), &self, AT_SYMLINK_NOFOLLOW) == 0 && self.st_ino == st.st_ino &&
      self.st_dev == st.st_dev)
    return {}; // already that file
  return create_replacing(parent, leaf, "hardlink",
                          [&] { return ::linkat(dir->get(), target_leaf.c_str(), parent, leaf.c_str(), 0); });
}

Status Extractor::write_node(int parent, const std::string& leaf, mode_t type, mode_t perm, struct archive_entry* e) {
  const dev_t dev = type == S_IFIFO ? 0 : archive_entry_rdev(e);
  if (auto s = create_replacing(parent, leaf, "device node",
                                [&] { return ::mknodat(parent, leaf.c_str(), type | (perm & 0777), dev); });
      !s)
    return s;
  if (((perm & ~0777) != 0 || (perm & process_umask()) != 0) && ::fchmodat(parent, leaf.c_str(), perm, 0) != 0)
    return io("chmod failed", errno);
  return {};
}

Status Extractor::entry(struct archive* a, struct archive_entry* e) {
  const char* raw = archive_entry_pathname(e);
  if (!raw) raw = archive_entry_pathname_utf8(e);
  name_ = raw ? raw : "";
  if (!raw) return refuse("its name cannot be read");
  if (++stats_.entries > opt_.limits.max_entries)
    return limit(fmt::format("the archive has more than {} entries", opt_.limits.max_entries), Limits::Which::entries);
  switch (split_name(name_, comps_)) {
  case NameCheck::ok:
    break;
  case NameCheck::empty:
    return refuse("its name is empty");
  case NameCheck::absolute:
    return refuse("its name is an absolute path");
  case NameCheck::dotdot:
    return refuse("its name has a '..' component");
  }
  if (comps_.size() <= opt_.strip_components) return {}; // the root itself, or stripped away
  const std::span<const std::string_view> comps(comps_.begin() + opt_.strip_components, comps_.end());
  if (comps.size() > kMaxDepth) return refuse(fmt::format("its name is more than {} directories deep", kMaxDepth));

  const mode_t mode = archive_entry_mode(e);
  const mode_t type = mode & S_IFMT;
  const char* hardlink = archive_entry_hardlink(e);
  if (!hardlink) hardlink = archive_entry_hardlink_utf8(e);
  const bool special = mode & (S_ISUID | S_ISGID);
  if (special && !opt_.allow_setuid && type != S_IFDIR)
    return refuse(
        fmt::format("it has the {} bit set (mode {:04o})", mode & S_ISUID ? "setuid" : "setgid", mode & 07777));
  // Directories keep 0777 and sticky; a setgid directory only passes its group on, and
  // archives made in shared directories carry it, so it is dropped rather than refused.
  const mode_t perm = mode & (opt_.allow_setuid ? 07777 : 01777);
  if (!hardlink) {
    if ((type == S_IFCHR || type == S_IFBLK || type == S_IFIFO) && !opt_.allow_devices)
      return refuse(fmt::format("it is a {}; device nodes and FIFOs are refused", type == S_IFCHR   ? "character device"
                                                                                  : type == S_IFBLK ? "block device"
                                                                                                    : "FIFO"));
    if (type != S_IFREG && type != S_IFDIR && type != S_IFLNK && type != S_IFCHR && type != S_IFBLK && type != S_IFIFO)
      return refuse(fmt::format("it has an unsupported type (mode {:o})", mode));
  }

  HPCBAKE_TRY_ASSIGN(auto parent, open_dirs(comps.first(comps.size() - 1)));
  const std::string leaf(comps.back());
  if (hardlink) return write_hardlink(parent, leaf, hardlink);
  switch (type) {
  case S_IFREG:
    return write_file(a, parent, leaf, perm, e);
  case S_IFDIR:
    return write_dir(parent, leaf, comps, perm, e);
  case S_IFLNK:
    return write_symlink(parent, leaf, comps.size() - 1, e);
  default:
    return write_node(parent, leaf, type, perm, e);
  }
}

Status Extractor::run(struct archive* a) {
  while (true) {
    struct archive_entry* e = nullptr;
    const int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF) return {};
    if (r < ARCHIVE_WARN || !e) {
      const char* msg = archive_error_string(a);
      return fail(ErrorKind::fetch,
                  stats_.entries == 0
                      ? fmt::format("{}: cannot read the first entry: {}", label_, msg ? msg : "unknown error")
                      : fmt::format("{}: cannot read the entry after '{}': {}", label_, printable(name_),
                                    msg ? msg : "unknown error"),
                  "The archive is corrupt, truncated or not a tar/zip archive: get it again from its publisher and "
                  "check its checksum.");
    }
    if (auto s = entry(a, e); !s) return s;
  }
}

Status Extractor::finish() {
  chain_names_.clear();
  chain_fds_.clear();
  // Deepest first, so a directory made read-only does not stop its subdirectories from being
  // fixed; a stable sort keeps the last of duplicate entries last, so it wins.
  std::stable_sort(dirs_.begin(), dirs_.end(), [](const DirFix& x, const DirFix& y) { return x.path > y.path; });
  for (const auto& d : dirs_) {
    name_ = d.path;
    std::vector<std::string_view> comps;
    split_name(d.path, comps);
    HPCBAKE_TRY_ASSIGN(auto dir, open_existing_dir(comps)); // names the directory and the reason
    if (::fchmod(dir.get(), d.mode) != 0) return io("chmod failed", errno);
    if (d.has_mtime) {
      const struct timespec ts[2] = {{0, UTIME_OMIT}, d.mtime};
      if (::futimens(dir.get(), ts) != 0) return io("cannot set its modification time", errno);
    }
  }
  return {};
}

// Removes a staging tree, making its directories writable first if a plain removal fails
// (directories get their archive modes, possibly read-only, just before the rename).
void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (!ec) return;
  for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
  }
  ::chmod(p.c_str(), 0700);
  fs::remove_all(p, ec);
}

struct Staging {
  fs::path dest;
  fs::path path;
  Fd root;
  mode_t final_mode = 0755;
  bool done = false;
  ~Staging() {
    root.reset();
    if (!done && !path.empty()) remove_tree(path);
  }
};

Status prepare(Staging& st, const fs::path& dest_in, const std::string& label) {
  std::error_code ec;
  fs::path dest = fs::absolute(dest_in, ec).lexically_normal();
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot resolve destination {}: {}", label, dest_in.string(), ec.message()));
  if (!dest.has_filename()) dest = dest.parent_path();
  if (!dest.has_filename() || dest == dest.root_path())
    return fail(ErrorKind::usage, fmt::format("{}: cannot extract onto {}", label, dest.string()),
                "Name a new or empty directory as the destination.");
  struct stat sb {};
  st.final_mode = 0755 & ~process_umask();
  if (::lstat(dest.c_str(), &sb) == 0) {
    if (!S_ISDIR(sb.st_mode) || !fs::is_empty(dest, ec) || ec)
      return fail(ErrorKind::usage,
                  fmt::format("{}: destination {} exists and is not an empty directory", label, dest.string()),
                  "Extract into a new or empty directory; remove the old tree first if it is no longer needed.");
    st.final_mode = sb.st_mode & 07777;
  } else if (errno != ENOENT) {
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot inspect {}: {}", label, dest.string(), std::strerror(errno)));
  }
  fs::create_directories(dest.parent_path(), ec);
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot create {}: {}", label, dest.parent_path().string(), ec.message()),
                "Check the permissions of the destination's parent directory.");
  std::string tmpl = dest.string() + ".partial-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return fail(
        ErrorKind::internal,
        fmt::format("{}: cannot create a staging directory next to {}: {}", label, dest.string(), std::strerror(errno)),
        "Check the free space and permissions of the destination's parent directory.");
  st.dest = dest;
  st.path = tmpl;
  st.root = Fd(::open(tmpl.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!st.root.ok())
    return fail(ErrorKind::internal, fmt::format("{}: cannot open {}: {}", label, tmpl, std::strerror(errno)));
  return {};
}

Status publish(Staging& st, const std::string& label) {
  if (::fchmod(st.root.get(), st.final_mode) != 0)
    return fail(ErrorKind::internal,
                fmt::format("{}: chmod {} failed: {}", label, st.path.string(), std::strerror(errno)));
  st.root.reset();
  // Onto a missing or empty directory, rename(2) is atomic; a tree that appeared meanwhile
  // makes it fail with ENOTEMPTY, and that tree is left alone.
  if (::rename(st.path.c_str(), st.dest.c_str()) != 0)
    return fail(
        ErrorKind::internal,
        fmt::format("{}: cannot move the extracted tree onto {}: {}", label, st.dest.string(), std::strerror(errno)),
        "Something else wrote to the destination during extraction; remove it and retry.");
  st.done = true;
  return {};
}

// Decompression on its own thread. A compressed archive is decoded by one libarchive reader
// (filters and the raw format) on a worker, which hands 1 MiB blocks of tar bytes through a
// short queue to the extracting reader on the calling thread. Decompressing and writing
// files then overlap, as with GNU tar's gzip or xz child process, without a pipe. The queue
// is bounded (kDepth blocks), so the worker cannot run ahead of the extraction limits.
class Decoder {
public:
  static constexpr std::size_t kDepth = 4;

  explicit Decoder(Reader raw) : raw_(std::move(raw)) {
    for (auto& b : blocks_) {
      b.resize(kReadBlock);
      free_.push_back(b.data());
    }
    worker_ = std::thread([this] { run(); });
  }
  ~Decoder() {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  static la_ssize_t read(struct archive* a, void* data, const void** out) {
    auto* d = static_cast<Decoder*>(data);
    std::unique_lock lock(d->mu_);
    if (d->lent_) {
      d->free_.push_back(d->lent_);
      d->lent_ = nullptr;
      d->cv_.notify_all();
    }
    d->cv_.wait(lock, [&] { return !d->full_.empty() || d->done_; });
    if (!d->full_.empty()) {
      const auto [p, n] = d->full_.front();
      d->full_.pop_front();
      d->lent_ = p;
      *out = p;
      return static_cast<la_ssize_t>(n);
    }
    if (!d->error_.empty()) {
      archive_set_error(a, EIO, "%s", d->error_.c_str());
      return -1;
    }
    return 0;
  }

private:
  void run() {
    while (true) {
      char* block = nullptr;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !free_.empty() || cancelled_; });
        if (cancelled_) break;
        block = free_.back();
        free_.pop_back();
      }
      // Fill the block: fewer, larger hand-overs.
      std::size_t n = 0;
      la_ssize_t r = 1;
      while (n < kReadBlock && r > 0) {
        r = archive_read_data(raw_.get(), block + n, kReadBlock - n);
        if (r > 0) n += static_cast<std::size_t>(r);
      }
      std::lock_guard lock(mu_);
      if (n > 0)
        full_.emplace_back(block, n);
      else
        free_.push_back(block);
      if (r < 0) {
        const char* msg = archive_error_string(raw_.get());
        error_ = msg ? msg : "decompression failed";
      }
      if (r <= 0) {
        done_ = true;
        cv_.notify_all();
        break;
      }
      cv_.notify_all();
    }
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

  Reader raw_;
  std::array<std::vector<char>, kDepth> blocks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char*> free_;
  std::deque<std::pair<char*, std::size_t>> full_;
  char* lent_ = nullptr; // the block libarchive is reading; returned at its next read
  bool done_ = false;
  bool cancelled_ = false;
  std::string error_;
  std::thread worker_; // last: starts once everything above exists
};

std::unexpected<Error> not_an_archive(struct archive* a, const std::string& label) {
  const char* msg = archive_error_string(a);
  return fail(ErrorKind::fetch, fmt::format("{}: not a readable archive: {}", label, msg ? msg : "unknown error"),
              "hpcbake extracts tar (plain, gzip, xz, zstd, bzip2, lz4) and zip archives; check that the file is one "
              "and is complete.");
}

// The extractor counts what `src` reads while it exists.
struct Metered {
  Extractor& ex;
  Metered(Extractor& e, const Source& src) : ex(e) { ex.meter(&src.consumed); }
  ~Metered() { ex.meter(nullptr); }
  Metered(const Metered&) = delete;
  Metered& operator=(const Metered&) = delete;
};

Status extract_one(Extractor& ex, Source& src, const std::string& label, bool seekable) {
  const Metered metered(ex, src);
  ::posix_fadvise(src.fd, static_cast<off_t>(src.begin), static_cast<off_t>(src.end - src.begin),
                  POSIX_FADV_SEQUENTIAL);
  // First, is it compressed? The decoding reader finds out from the first bytes.
  {
    HPCBAKE_TRY_ASSIGN(auto raw, new_reader(label, Role::decode));
    archive_read_set_callback_data(raw.get(), &src);
    archive_read_set_read_callback(raw.get(), read_cb);
    struct archive_entry* e = nullptr;
    if (archive_read_open1(raw.get()) == ARCHIVE_OK && archive_read_next_header(raw.get(), &e) == ARCHIVE_OK &&
        archive_filter_count(raw.get()) > 1 && archive_filter_code(raw.get(), 0) != ARCHIVE_FILTER_NONE) {
      HPCBAKE_TRY_ASSIGN(auto reader, new_reader(label, Role::extract));
      // A multi-block .xz (xz -T) that can be read at any offset: two threads decode it.
      if (seekable && archive_filter_code(raw.get(), 0) == ARCHIVE_FILTER_XZ) {
        std::string why_not;
        // The block workers read the file again from its start; the sequential decoder, if
        // they do not take it, goes on from what the first reader already read.
        const std::uint64_t detected = src.consumed.exchange(0);
        auto blocks = XzBlocks::open(src.fd, src.begin, src.end, label, why_not, &src.consumed);
        if (!blocks) src.consumed = detected;
        if (blocks) {
          raw.reset();
          archive_read_set_callback_data(reader.get(), blocks.get());
          archive_read_set_read_callback(reader.get(), XzBlocks::read);
          if (archive_read_open1(reader.get()) != ARCHIVE_OK) return not_an_archive(reader.get(), label);
          return ex.run(reader.get());
        }
      }
      Decoder decoder(std::move(raw));
      archive_read_set_callback_data(reader.get(), &decoder);
      archive_read_set_read_callback(reader.get(), Decoder::read);
      if (archive_read_open1(reader.get()) != ARCHIVE_OK) return not_an_archive(reader.get(), label);
      return ex.run(reader.get());
    }
  }
  // Not compressed (or unreadable: the extracting reader then says why): read it directly,
  // seeking where allowed, which zip's central directory wants.
  src.pos = src.begin;
  src.consumed = 0;
  HPCBAKE_TRY_ASSIGN(auto reader, new_reader(label, Role::extract));
  struct archive* a = reader.get();
  archive_read_set_callback_data(a, &src);
  archive_read_set_read_callback(a, read_cb);
  if (seekable) archive_read_set_seek_callback(a, seek_cb);
  if (archive_read_open1(a) != ARCHIVE_OK) return not_an_archive(a, label);
  return ex.run(a);
}

Result<std::uint64_t> file_size(int fd, const std::string& label) {
  struct stat sb {};
  if (::fstat(fd, &sb) != 0)
    return fail(ErrorKind::internal, fmt::format("{}: stat failed: {}", label, std::strerror(errno)));
  if (!S_ISREG(sb.st_mode))
    return fail(ErrorKind::usage, fmt::format("{}: not a regular file", label), "Name an archive file.");
  return static_cast<std::uint64_t>(sb.st_size);
}

Result<ExtractStats> extract_range(int fd, std::uint64_t offset, std::uint64_t end, const std::string& label,
                                   const fs::path& dest, const ExtractOptions& options) {
  if (offset > end)
    return fail(ErrorKind::usage, fmt::format("{}: offset {} is past its end ({} bytes)", label, offset, end));
  Staging st;
  HPCBAKE_TRY(prepare(st, dest, label));
  Extractor ex(st.root.get(), label, options);
  Source src{fd, offset, end, offset, std::vector<char>(kReadBlock), nullptr, 0};
  HPCBAKE_TRY(extract_one(ex, src, label, true));
  HPCBAKE_TRY(ex.finish());
  HPCBAKE_TRY(publish(st, label));
  return ex.stats();
}

} // namespace

const char* Limits::flag(Which w) {
  switch (w) {
  case Which::total_bytes:
    return "--max-bytes";
  case Which::entries:
    return "--max-entries";
  case Which::entry_bytes:
    return "--max-entry-bytes";
  case Which::ratio:
    return "--max-ratio";
  }
  return "?";
}

Result<ExtractStats> extract_file(const fs::path& archive_path, const fs::path& dest, const ExtractOptions& options) {
  const std::string label = archive_path.string();
  Fd fd(::open(archive_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok())
    return fail(errno == ENOENT ? ErrorKind::usage : ErrorKind::internal,
                fmt::format("{}: cannot open: {}", label, std::strerror(errno)), "Check the archive's path.");
  HPCBAKE_TRY_ASSIGN(auto size, file_size(fd.get(), label));
  return extract_range(fd.get(), 0, size, label, dest, options);
}

Result<ExtractStats> extract_fd(int fd, std::uint64_t offset, const std::string& label, const fs::path& dest,
                                const ExtractOptions& options) {
  HPCBAKE_TRY_ASSIGN(auto size, file_size(fd, label));
  return extract_range(fd, offset, size, label, dest, options);
}

Result<ExtractStats> extract_ranges(int fd, std::span<const Range> ranges, const std::string& label,
                                    const fs::path& dest, const ExtractOptions& options, const Observer& observe,
                                    const RangeCheck& check) {
  HPCBAKE_TRY_ASSIGN(auto size, file_size(fd, label));
  for (const auto& r : ranges) {
    if (r.offset > size || r.length > size - r.offset)
      return fail(
          ErrorKind::fetch,
          fmt::format("{}: truncated: a payload of {} bytes at offset {} goes past the end of the file ({} bytes)",
                      label, r.length, r.offset, size),
          "The download is incomplete: get the file again from its publisher.");
  }
  Staging st;
  HPCBAKE_TRY(prepare(st, dest, label));
  Extractor ex(st.root.get(), label, options);
  std::vector<char> buf(kReadBlock);
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    Source src{fd, ranges[i].offset, ranges[i].offset + ranges[i].length, ranges[i].offset, std::move(buf), &observe,
               i};
    auto extracted = extract_one(ex, src, label, false);
    const int drain_err = src.drain();
    buf = std::move(src.buf);
    if (check) {
      if (drain_err != 0)
        return fail(ErrorKind::internal, fmt::format("{}: read failed: {}", label, std::strerror(drain_err)));
      HPCBAKE_TRY(check(i, extracted ? nullptr : &extracted.error()));
    }
    if (!extracted) return std::unexpected(extracted.error());
  }
  HPCBAKE_TRY(ex.finish());
  HPCBAKE_TRY(publish(st, label));
  return ex.stats();
}

} // namespace hpcbake::archive
