#pragma once
// Small string helpers shared by the parsers. No domain knowledge here.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::util {

std::string_view trim(std::string_view s);
std::string to_lower(std::string_view s);
bool iequals(std::string_view a, std::string_view b);
// One word that can go into a config file as a value: not empty, no whitespace or control
// bytes, none of '#', '[', ']' (a comment or an apt option list would start there).
bool is_config_word(std::string_view s);
std::vector<std::string_view> split(std::string_view s, char sep);

// 64 lower-case hex digits: a SHA-256 as the cache names it.
bool is_sha256_hex(std::string_view s);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
// "512 B", "379.6 MiB", "1.2 GiB": binary units, one decimal.
std::string human_bytes(std::uint64_t bytes);
// Whole-string integer parse; accepts a 0x prefix when base is 16.
std::optional<std::int64_t> parse_int(std::string_view s, int base = 10);
std::optional<double> parse_double(std::string_view s);
// The last `n` lines of `text`; trailing newlines do not count as empty lines.
std::string last_lines(std::string_view text, std::size_t n);
// Replaces every occurrence of `from` (a "{kernel}" placeholder, an "@NAME@" field).
std::string replace_all(std::string s, std::string_view from, std::string_view to);
// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b);

// An OpenPGP key fingerprint, "EB69 3B30 ..." or "0xeb693b30...", as "EB693B30..." (upper
// case, no spaces). Empty when it is not 40 (v4) or 64 (v6) hex digits: a short key id is
// never a pin.
std::string normalize_fingerprint(std::string_view text);

} // namespace hpcbake::util
