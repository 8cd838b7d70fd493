#include "seal/secrets.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <system_error>

namespace hpcbake::seal {

namespace fs = std::filesystem;

namespace {

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

// Case-insensitive find of an ASCII needle, from `from`.
std::size_t ifind(std::string_view hay, std::string_view needle, std::size_t from = 0) {
  if (needle.empty() || hay.size() < needle.size()) return std::string_view::npos;
  for (std::size_t i = from; i + needle.size() <= hay.size(); ++i) {
    std::size_t k = 0;
    while (k < needle.size() && lower(hay[i + k]) == lower(needle[k]))
      ++k;
    if (k == needle.size()) return i;
  }
  return std::string_view::npos;
}

bool token_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' || c == '=' ||
         c == '%';
}

// How many token characters follow position `at`.
std::size_t token_length(std::string_view line, std::size_t at) {
  std::size_t n = 0;
  while (at + n < line.size() && token_char(line[at + n]))
    ++n;
  return n;
}

bool private_key(std::string_view line) {
  const auto begin = line.find("-----BEGIN ");
  return begin != std::string_view::npos && line.find("PRIVATE KEY-----", begin) != std::string_view::npos;
}

bool sas_token(std::string_view line) {
  for (auto at = ifind(line, "sig="); at != std::string_view::npos; at = ifind(line, "sig=", at + 1))
    if (at > 0 && (line[at - 1] == '?' || line[at - 1] == '&') && token_length(line, at + 4) > 0) return true;
  const auto cs = ifind(line, "SharedAccessSignature=");
  return cs != std::string_view::npos && token_length(line, cs + 22) > 0;
}

bool authorization(std::string_view line) {
  for (auto at = ifind(line, "authorization"); at != std::string_view::npos;
       at = ifind(line, "authorization", at + 1)) {
    auto i = at + 13;
    if (i < line.size() && line[i] == '"') ++i; // "Authorization": "..." in JSON
    while (i < line.size() && line[i] == ' ')
      ++i;
    if (i >= line.size() || line[i] != ':') continue;
    ++i;
    while (i < line.size() && (line[i] == ' ' || line[i] == '"'))
      ++i;
    if (token_length(line, i) > 0) return true;
  }
  for (auto at = ifind(line, "bearer "); at != std::string_view::npos; at = ifind(line, "bearer ", at + 1)) {
    auto i = at + 7;
    while (i < line.size() && line[i] == ' ')
      ++i;
    if (token_length(line, i) >= 8) return true;
  }
  return false;
}

bool account_key(std::string_view line) {
  for (auto at = ifind(line, "AccountKey="); at != std::string_view::npos; at = ifind(line, "AccountKey=", at + 1))
    if (token_length(line, at + 11) >= 8) return true;
  return false;
}

bool looks_binary(std::ifstream& in) {
  char buf[64 * 1024];
  in.read(buf, sizeof buf);
  const auto n = in.gcount();
  const bool binary = std::find(buf, buf + n, '\0') != buf + n;
  in.clear();
  in.seekg(0);
  return binary;
}

void scan_file(const fs::path& file, const std::string& host_path, ScanResult& out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return;
  if (looks_binary(in)) {
    ++out.binary_skipped;
    return;
  }
  ++out.files_scanned;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    for (auto& kind : scan_line(line))
      out.findings.push_back({host_path, n, std::move(kind)});
  }
}

} // namespace

std::vector<std::string> scan_line(std::string_view line) {
  std::vector<std::string> kinds;
  if (private_key(line)) kinds.emplace_back("private-key");
  if (sas_token(line)) kinds.emplace_back("sas-token");
  if (authorization(line)) kinds.emplace_back("authorization");
  if (account_key(line)) kinds.emplace_back("account-key");
  return kinds;
}

ScanResult scan_paths(const util::HostFs& host, const std::vector<std::string>& host_paths) {
  ScanResult out;
  for (const auto& hp : host_paths) {
    const fs::path top = host.resolve(hp);
    std::error_code ec;
    const auto st = fs::symlink_status(top, ec);
    if (ec || !fs::exists(st)) continue;
    if (fs::is_regular_file(st)) {
      scan_file(top, hp, out);
      continue;
    }
    if (!fs::is_directory(st)) continue;
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(top, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_symlink(ec)) continue;
      if (it->is_regular_file(ec)) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string rel = f.lexically_relative(top).generic_string();
      std::string shown = hp;
      if (!shown.ends_with('/')) shown += '/';
      scan_file(f, shown + rel, out);
    }
  }
  return out;
}

} // namespace hpcbake::seal
