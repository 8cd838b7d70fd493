#pragma once
// /etc/waagent.conf (WALinuxAgent). Parsed exactly as the agent does it
// (azurelinuxagent/common/conf.py, ConfigurationProvider.load, 2.7.3): the file is decoded
// as strict UTF-8 (fileutil.read_file: str(bytes, 'utf-8'); an invalid byte raises
// UnicodeDecodeError and the agent does not start); it is split at '\n' only; a line that
// starts with '#' in column 0 is a comment; otherwise "Key=Value" splits at the first '=';
// the key is strip()ped; the value is cut at the first '#', stripped of '"' and ' ' at both
// ends, then strip()ped; "None" means unset; a later assignment of the same key wins.
// Python's str.strip() with no argument removes every character for which str.isspace() is
// true, not only ASCII blanks: U+00A0, U+2000..U+200A, U+3000, U+0085, \x1c..\x1f and more
// (config.cpp lists them), so "OS.EnableRDMA=<U+00A0>y" is 'y' to the agent.
#include "util/error.hpp"
#include "util/paths.hpp"

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::waagent {

inline constexpr const char* default_config = paths::kWaagentConf;

// The effective value of `key`, or nullopt when the agent would use its default.
std::optional<std::string> effective_value(std::string_view conf_text, std::string_view key);

// The byte length of the whitespace character (as Python's str.isspace() says, UTF-8
// encoded) that starts at `at` in `s`, or 0 when none does. Bytes that are not valid UTF-8
// are never whitespace.
std::size_t space_at(std::string_view s, std::size_t at);
// The same for the whitespace character that ends just before `end`.
std::size_t space_before(std::string_view s, std::size_t end);
// `s` as Python's str.strip() leaves it.
std::string_view python_strip(std::string_view s);

// One line the agent reads as an assignment.
struct Assignment {
  std::string_view key;        // stripped
  std::string_view value;      // as the agent reads it (quotes, blanks and comment removed)
  std::size_t value_begin = 0; // [value_begin, value_end) of the line: what lies between the
  std::size_t value_end = 0;   // whitespace after '=' and the whitespace before '#' or the end
};
// The assignment on `line` (one line, without its '\n'), or nullopt for a comment or a line
// without '='.
std::optional<Assignment> parse_assignment(std::string_view line);

// Where the agent's strict UTF-8 decoding of the file fails.
struct Undecodable {
  std::size_t offset = 0; // 0-based byte offset in the file (Python's "position")
  std::size_t line = 0;   // 1-based
  std::size_t column = 0; // 1-based, in bytes
  unsigned char byte = 0;
  const char* reason = ""; // Python's words: "invalid start byte", "invalid continuation byte", ...
};
std::optional<Undecodable> undecodable(std::string_view text);

// Fails, naming file:line:column and the byte, when the agent could not decode `text` (the
// contents of `file`): its reading of the keys would then be no reading at all.
Status check_agent_can_decode(const std::filesystem::path& file, std::string_view text);

} // namespace hpcbake::waagent
