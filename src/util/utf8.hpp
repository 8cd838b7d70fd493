#pragma once
// UTF-8 text from files and hosts nobody here wrote: where it stops being valid UTF-8, the same
// text made safe to print, and the short excerpt of a value that a message quotes.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::util {

// The offset of the first byte that does not begin a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence); nullopt when
// all of `text` is valid.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// `text` with each byte that begins no well-formed sequence replaced by U+FFFD: host data made
// safe to print.
std::string replace_invalid_utf8(std::string_view text);

// Quoting a value in a message: at most `max` bytes of it (cut at a character boundary), then
// "… (N bytes)" when it is longer; invalid UTF-8 replaced, control characters escaped (\n,
// \xNN), so that a 10 MB value or one holding escape sequences stays one short line. Every
// diagnostic that quotes a value goes through it.
inline constexpr std::size_t excerpt_bytes = 60; // a URL or a package name fits; a pasted file does not
std::string excerpt(std::string_view value, std::size_t max = excerpt_bytes);

} // namespace hpcbake::util
