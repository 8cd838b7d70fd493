#include "detect/os_release.hpp"

#include "util/strings.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <cctype>

namespace hpcbake::detect {

std::string OsRelease::get(const std::string& key) const {
  auto it = fields.find(key);
  return it == fields.end() ? std::string() : it->second;
}

namespace {

bool valid_key(std::string_view k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k.front()))) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// Unquotes a value the way a POSIX shell would for the subset os-release allows.
std::optional<std::string> unquote(std::string_view v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    char c = v[i];
    if (c == '"' || c == '\'') {
      const char q = c;
      ++i;
      bool closed = false;
      for (; i < v.size(); ++i) {
        if (v[i] == q) {
          closed = true;
          break;
        }
        if (q == '"' && v[i] == '\\' && i + 1 < v.size() &&
            std::string_view("\"\\$`").find(v[i + 1]) != std::string_view::npos)
          ++i;
        out += v[i];
      }
      if (!closed) return std::nullopt;
    } else if (c == '\\' && i + 1 < v.size()) {
      out += v[++i];
    } else if (c == '#' || c == ' ' || c == '\t') {
      break; // end of an unquoted value
    } else {
      out += c;
    }
  }
  return out;
}

} // namespace

Result<OsRelease> parse_os_release(std::string_view text, std::string source) {
  OsRelease os;
  os.source = std::move(source);
  int line_no = 0;
  for (auto raw : util::split(text, '\n')) {
    ++line_no;
    auto line = util::trim(raw);
    if (line.empty() || line.front() == '#') continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    auto key = util::trim(line.substr(0, eq));
    if (!valid_key(key)) continue;
    auto value = unquote(util::trim(line.substr(eq + 1)));
    if (!value)
      return fail(ErrorKind::unsupported,
                  fmt::format("{}:{}: unterminated quote in {}", os.source, line_no, util::excerpt(key)),
                  "the file is damaged: restore it from the distribution's base-files/*-release package");
    os.fields[std::string(key)] = *value;
  }
  if (os.id().empty())
    return fail(ErrorKind::unsupported, fmt::format("{}: no ID= line", os.source),
                "this does not look like an os-release file; see os-release(5)");
  return os;
}

Result<OsRelease> read_os_release(const util::HostFs& host) {
  for (const char* path : {"/etc/os-release", "/usr/lib/os-release"}) {
    // A directory or FIFO at the path is an error naming it, not a reason to look further:
    // os-release(5) falls back only when /etc/os-release does not exist.
    HPCBAKE_TRY_ASSIGN(auto text, host.read_checked(path, util::host_file::os_release));
    if (text) return parse_os_release(*text, path);
  }
  return fail(ErrorKind::unsupported,
              fmt::format("neither /etc/os-release nor /usr/lib/os-release exists under {}", host.root().string()),
              "hpcbake needs a systemd-era distribution (os-release(5)); check --root");
}

} // namespace hpcbake::detect
