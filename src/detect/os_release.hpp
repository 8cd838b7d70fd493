#pragma once
// /etc/os-release (os-release(5)): KEY=VALUE lines with shell-style quoting.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::detect {

struct OsRelease {
  std::map<std::string, std::string> fields;
  std::string source; // the file it was read from
  std::string get(const std::string& key) const;
  std::string id() const { return get("ID"); }
  std::string version_id() const { return get("VERSION_ID"); }
  std::string id_like() const { return get("ID_LIKE"); }
  std::string pretty_name() const { return get("PRETTY_NAME"); }
};

// Parses os-release text. Malformed lines are skipped, as systemd does; an
// unterminated quote is an error naming the line.
Result<OsRelease> parse_os_release(std::string_view text, std::string source);

// /etc/os-release, falling back to /usr/lib/os-release as os-release(5) says.
Result<OsRelease> read_os_release(const util::HostFs& host);

} // namespace hpcbake::detect
