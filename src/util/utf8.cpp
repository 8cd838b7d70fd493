#include "util/utf8.hpp"

#include <fmt/format.h>

namespace hpcbake::util {

namespace {

// The length of the well-formed sequence at text[i], or 0 when the byte there starts none.
// Table 3-7 of the Unicode standard: the second byte's range depends on the first byte.
std::size_t sequence_at(std::string_view text, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0; // no overlong three-byte forms
    if (c == 0xed) hi = 0x9f; // no UTF-16 surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90; // no overlong four-byte forms
    if (c == 0xf4) hi = 0x8f; // nothing above U+10FFFF
  } else {
    return 0; // a continuation byte, 0xc0/0xc1 (always overlong) or 0xf5..0xff
  }
  if (i + len > text.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  return len;
}

} // namespace

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = sequence_at(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = sequence_at(text, i);
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += "\xef\xbf\xbd"; // U+FFFD, one per bad byte
      ++i;
    }
  }
  return out;
}

std::string excerpt(std::string_view value, std::size_t max) {
  std::string_view head = value.substr(0, max);
  // Never cut a character in two: drop a partial sequence at the end.
  if (head.size() < value.size()) {
    std::size_t cut = head.size();
    while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xc0) == 0x80)
      --cut;
    head = head.substr(0, cut);
  }
  std::string out;
  for (const char ch : replace_invalid_utf8(head)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  if (head.size() < value.size()) out += fmt::format("\xe2\x80\xa6 ({} bytes)", value.size());
  return out;
}

} // namespace hpcbake::util
