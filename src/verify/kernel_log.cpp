#include "verify/kernel_log.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace hpcbake::verify {

namespace {

template <typename T> bool number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size() && !s.empty();
}

// Why /dev/kmsg cannot be opened, and what to do about it.
Error open_error(const util::HostFs& fs, int err) {
  const std::string where = fs.display(kKmsgPath).string();
  if (err == EPERM || err == EACCES) {
    const auto restrict_ = fs.read_attr("/proc/sys/kernel/dmesg_restrict");
    return Error{ErrorKind::permission,
                 fmt::format("{}: cannot open: {} (reading the kernel log needs CAP_SYSLOG when "
                             "kernel.dmesg_restrict is 1; here it is {})",
                             where, std::strerror(err), restrict_ ? *restrict_ : "unknown"),
                 "run `hpcbake verify` as root (sudo)"};
  }
  if (err == ENOENT || err == ENOTDIR)
    return Error{ErrorKind::unsupported, fmt::format("{}: no such device (no kernel log to read here)", where),
                 "run `hpcbake verify` on the machine itself, not in a container without /dev/kmsg"};
  return Error{ErrorKind::internal, fmt::format("{}: cannot open: {}", where, std::strerror(err)), ""};
}

// The character device: one record per read(2) until EAGAIN.
Result<KernelLog> read_device(int fd, const std::string& where) {
  KernelLog log;
  log.source = where;
  std::string buf(16 * 1024, '\0'); // a record is at most CONSOLE_EXT_LOG_MAX (8 KiB) of text
  std::size_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      if (errno == EPIPE) {
        ++log.lost;
        continue;
      }
      return fail(ErrorKind::internal, fmt::format("{}: read: {}", where, std::strerror(errno)));
    }
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
    if (total > kKernelLogBound.max_bytes)
      return fail(ErrorKind::internal,
                  fmt::format("{}: more than {} MiB of records; {} is read at most that far", where,
                              kKernelLogBound.max_bytes >> 20, kKernelLogBound.kind),
                  "the kernel is logging faster than it can be read: look at `dmesg --follow`");
    if (auto r = parse_kmsg_record(std::string_view(buf.data(), static_cast<std::size_t>(n))))
      log.records.push_back(std::move(*r));
  }
  return log;
}

} // namespace

std::optional<KernelRecord> parse_kmsg_record(std::string_view text) {
  const auto nl = text.find('\n');
  if (nl != std::string_view::npos) text = text.substr(0, nl);
  const auto semi = text.find(';');
  if (semi == std::string_view::npos) return std::nullopt;
  const auto fields = util::split(text.substr(0, semi), ',');
  KernelRecord r;
  if (fields.size() < 4 || !number(fields[0], r.priority) || !number(fields[1], r.seq) || !number(fields[2], r.usec))
    return std::nullopt;
  r.message = std::string(text.substr(semi + 1));
  return r;
}

std::vector<KernelRecord> parse_kmsg_text(std::string_view text) {
  std::vector<KernelRecord> out;
  for (const auto& line : util::split(text, '\n')) {
    if (line.empty() || line.front() == ' ') continue;
    if (auto r = parse_kmsg_record(line)) out.push_back(std::move(*r));
  }
  return out;
}

Result<KernelLog> read_kernel_log(const util::HostFs& fs) {
  const std::string where = fs.display(kKmsgPath).string();
  auto fd = fs.open(kKmsgPath, O_RDONLY | O_NONBLOCK);
  if (!fd) return std::unexpected(open_error(fs, fd.error()));
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0)
    return fail(ErrorKind::internal, fmt::format("{}: fstat: {}", where, std::strerror(errno)));
  KernelLog log;
  if (S_ISCHR(st.st_mode)) {
    HPCBAKE_TRY_ASSIGN(log, read_device(fd->get(), where));
  } else {
    fd->close();
    HPCBAKE_TRY_ASSIGN(auto text, fs.read_checked(kKmsgPath, kKernelLogBound));
    if (!text) return std::unexpected(open_error(fs, ENOENT));
    log.source = where;
    log.records = parse_kmsg_text(*text);
  }
  if (const auto up = fs.read_attr("/proc/uptime")) {
    double seconds = 0;
    const auto first = up->substr(0, up->find(' '));
    const auto [end, ec] = std::from_chars(first.data(), first.data() + first.size(), seconds);
    if (ec == std::errc{} && end == first.data() + first.size()) log.uptime_seconds = seconds;
  }
  return log;
}

std::vector<const KernelRecord*> records_within(const KernelLog& log, std::chrono::seconds window) {
  std::vector<const KernelRecord*> out;
  const double since = log.uptime_seconds ? *log.uptime_seconds - static_cast<double>(window.count()) : -1;
  for (const auto& r : log.records)
    if (static_cast<double>(r.usec) / 1e6 >= since) out.push_back(&r);
  return out;
}

} // namespace hpcbake::verify
