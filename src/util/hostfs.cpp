#include "util/hostfs.hpp"

#include "util/fd.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

namespace hpcbake::util {

HostFs::HostFs(std::filesystem::path root) : root_(std::move(root)) {
  if (root_.empty()) root_ = "/";
}

bool HostFs::is_real_root() const {
  std::error_code ec;
  return std::filesystem::equivalent(root_, "/", ec);
}

std::filesystem::path HostFs::resolve(std::string_view host_path) const {
  std::string_view rel = host_path;
  while (!rel.empty() && rel.front() == '/')
    rel.remove_prefix(1);
  return root_ / std::filesystem::path(rel);
}

std::optional<std::string> read_file(const std::filesystem::path& path) {
  // sysfs files report a size of 4096 whatever they hold: read to EOF, never by size.
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string content{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return std::nullopt;
  return content;
}

Result<std::string> read_file_or_error(const std::filesystem::path& path) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal, fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)),
                "check that it exists and that hpcbake may read it (run as root?)");
  std::string content;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorKind::internal, fmt::format("{}: read failed: {}", path.string(), std::strerror(errno)),
                  "check the file and the disk (dmesg may show I/O errors)");
    if (n == 0) return content;
    content.append(buf, static_cast<std::size_t>(n));
  }
}

Result<std::string> read_small_file(const std::filesystem::path& path, std::size_t max_bytes) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::internal, fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)),
                "check that it exists and that hpcbake may read it (run as root?)");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(ErrorKind::internal, fmt::format("{}: not a regular file", path.string()));
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return fail(ErrorKind::internal,
                fmt::format("{}: {} bytes, more than the {} expected", path.string(), st.st_size, max_bytes));
  std::string content;
  char buf[16 * 1024];
  while (content.size() <= max_bytes) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorKind::internal, fmt::format("{}: read failed: {}", path.string(), std::strerror(errno)));
    if (n == 0) return content;
    content.append(buf, static_cast<std::size_t>(n));
  }
  return fail(ErrorKind::internal, fmt::format("{}: grew past {} bytes while being read", path.string(), max_bytes));
}

std::optional<std::string> HostFs::read(std::string_view host_path) const {
  return read_file(resolve(host_path));
}

std::optional<std::string> HostFs::read_attr(std::string_view host_path) const {
  auto content = read(host_path);
  if (!content) return std::nullopt;
  std::string_view first = *content;
  if (auto nl = first.find('\n'); nl != std::string_view::npos) first = first.substr(0, nl);
  return std::string(trim(first));
}

bool HostFs::exists(std::string_view host_path) const {
  std::error_code ec;
  return std::filesystem::exists(resolve(host_path), ec);
}

bool HostFs::is_dir(std::string_view host_path) const {
  std::error_code ec;
  return std::filesystem::is_directory(resolve(host_path), ec);
}

std::vector<std::string> HostFs::list(std::string_view host_path) const {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(resolve(host_path), ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace hpcbake::util
