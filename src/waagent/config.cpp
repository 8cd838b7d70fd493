#include "waagent/config.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

namespace hpcbake::waagent {

namespace {

// The UTF-8 encodings of the characters Python 3's str.isspace() is true for, longest
// first: [c for c in range(0x110000) if chr(c).isspace()], 29 of them in Python 3.11 (Debian
// 12's, which runs the agent there; U+180E and U+200B are not among them). test_cli_rdma.py
// asks the Python that runs the agent's parser for this list and checks hpcbake against it.
constexpr std::string_view kSpaces[] = {
    "\xe1\x9a\x80",                                                       // U+1680 OGHAM SPACE MARK
    "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83",       // U+2000..U+2003
    "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87",       // U+2004..U+2007
    "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a",                       // U+2008..U+200A
    "\xe2\x80\xa8", "\xe2\x80\xa9",                                       // LINE and PARAGRAPH SEPARATOR
    "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80",                       // U+202F, U+205F, U+3000
    "\xc2\x85",     "\xc2\xa0",                                           // NEXT LINE, NO-BREAK SPACE
    "\t",           "\n",           "\v",           "\f",           "\r", // U+0009..U+000D
    "\x1c",         "\x1d",         "\x1e",         "\x1f",         " ",  // separators, space
};

// A lead byte never occurs inside another character, so in valid UTF-8 a match of a whole
// encoding is a whole character. Invalid UTF-8 the agent does not read at all (undecodable);
// here it only has to be read the same way every time.
std::size_t match_at(std::string_view s, std::size_t at) {
  for (const auto sp : kSpaces)
    if (s.substr(at, sp.size()) == sp) return sp.size();
  return 0;
}

std::size_t match_before(std::string_view s, std::size_t end) {
  for (const auto sp : kSpaces)
    if (sp.size() <= end && s.substr(end - sp.size(), sp.size()) == sp) return sp.size();
  return 0;
}

bool quote_or_space(char c) {
  return c == '"' || c == ' ';
}

// The length of the valid UTF-8 character at `at`, or 0 with `reason` set, as Python's
// strict decoder judges it (it reports the first byte of the bad sequence).
std::size_t utf8_length(std::string_view s, std::size_t at, const char*& reason) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(at);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf; // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0; // no overlong forms
    if (c == 0xed) hi = 0x9f; // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f; // nothing past U+10FFFF
  } else {
    reason = "invalid start byte";
    return 0;
  }
  for (std::size_t i = 1; i < n; ++i) {
    if (at + i >= s.size()) {
      reason = "unexpected end of data";
      return 0;
    }
    const unsigned char x = b(at + i);
    if (x < (i == 1 ? lo : 0x80) || x > (i == 1 ? hi : 0xbf)) {
      reason = "invalid continuation byte";
      return 0;
    }
  }
  return n;
}

} // namespace

std::size_t space_at(std::string_view s, std::size_t at) {
  return at < s.size() ? match_at(s, at) : 0;
}

std::size_t space_before(std::string_view s, std::size_t end) {
  return end <= s.size() ? match_before(s, end) : 0;
}

std::string_view python_strip(std::string_view s) {
  while (const std::size_t n = space_at(s, 0))
    s.remove_prefix(n);
  while (const std::size_t n = space_before(s, s.size()))
    s.remove_suffix(n);
  return s;
}

std::optional<Assignment> parse_assignment(std::string_view line) {
  if (line.starts_with('#')) return std::nullopt;
  const auto eq = line.find('=');
  if (eq == std::string_view::npos) return std::nullopt;
  Assignment a;
  a.key = python_strip(line.substr(0, eq));
  // conf.py: parts[1].split('#')[0].strip("\" ").strip()
  std::string_view value = line.substr(eq + 1);
  if (const auto hash = value.find('#'); hash != std::string_view::npos) value = value.substr(0, hash);
  const std::size_t base = eq + 1;
  std::size_t begin = 0, end = value.size();
  while (const std::size_t n = space_at(value, begin))
    begin += n;
  while (end > begin && space_before(value, end) > 0)
    end -= space_before(value, end);
  a.value_begin = base + begin;
  a.value_end = base + end;
  while (!value.empty() && quote_or_space(value.front()))
    value.remove_prefix(1);
  while (!value.empty() && quote_or_space(value.back()))
    value.remove_suffix(1);
  a.value = python_strip(value);
  return a;
}

std::optional<std::string> effective_value(std::string_view conf_text, std::string_view key) {
  std::optional<std::string> result;
  for (auto line : util::split(conf_text, '\n')) {
    const auto a = parse_assignment(line);
    if (!a || a->key != key) continue;
    if (a->value == "None")
      result.reset();
    else
      result = std::string(a->value);
  }
  return result;
}

std::optional<Undecodable> undecodable(std::string_view text) {
  std::size_t line = 1, line_start = 0;
  for (std::size_t at = 0; at < text.size();) {
    const char* reason = "";
    const std::size_t n = utf8_length(text, at, reason);
    if (n == 0) return Undecodable{at, line, at - line_start + 1, static_cast<unsigned char>(text[at]), reason};
    if (text[at] == '\n') {
      ++line;
      line_start = at + 1;
    }
    at += n;
  }
  return std::nullopt;
}

Status check_agent_can_decode(const std::filesystem::path& file, std::string_view text) {
  const auto u = undecodable(text);
  if (!u) return {};
  return fail(ErrorKind::unsupported,
              fmt::format("{}:{}:{}: byte 0x{:02x} is not UTF-8 ({}): the Azure Linux Agent decodes this file as "
                          "UTF-8 and does not start on it (UnicodeDecodeError at position {}), so it has no RDMA "
                          "setting to read or change",
                          file.string(), u->line, u->column, u->byte, u->reason, u->offset),
              "fix or remove that byte (the file must be UTF-8), then run again; nothing was changed");
}

} // namespace hpcbake::waagent
