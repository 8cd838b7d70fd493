#include "archive/makeself.hpp"

#include "util/fd.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

namespace hpcbake::archive {

namespace {

namespace fs = std::filesystem;

// Headers are a few hundred lines (NVIDIA's about 700); more than this is not makeself.
constexpr std::size_t kMaxHeader = 1 << 20;

const char* const kNotMakeselfHint = "hpcbake reads makeself archives (NVIDIA .run installers); check the file.";
const char* const kDamagedHint =
    "The makeself header is damaged or was edited: get the file again from its publisher and check its checksum.";

// --- POSIX cksum: CRC-32, polynomial 0x04C11DB7, most significant bit first, initial value
// 0, then the length in as few bytes as it needs (least significant first), then inverted.
// Eight tables let the loop take eight bytes per step.
struct CrcTables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  CrcTables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i << 24;
      for (int k = 0; k < 8; ++k)
        c = (c & 0x80000000u) ? (c << 1) ^ 0x04C11DB7u : c << 1;
      t[0][i] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
      for (std::size_t i = 0; i < 256; ++i)
        t[k][i] = (t[k - 1][i] << 8) ^ t[0][t[k - 1][i] >> 24];
  }
};
const CrcTables& crc_tables() {
  static const CrcTables tables;
  return tables;
}

std::uint32_t crc_update(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const auto& t = crc_tables().t;
  while (n >= 8) {
    const std::uint32_t a =
        crc ^ (std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3]);
    const std::uint32_t b = std::uint32_t{p[4]} << 24 | std::uint32_t{p[5]} << 16 | std::uint32_t{p[6]} << 8 | p[7];
    crc = t[7][a >> 24] ^ t[6][(a >> 16) & 0xff] ^ t[5][(a >> 8) & 0xff] ^ t[4][a & 0xff] ^ t[3][b >> 24] ^
          t[2][(b >> 16) & 0xff] ^ t[1][(b >> 8) & 0xff] ^ t[0][b & 0xff];
    p += 8;
    n -= 8;
  }
  while (n-- > 0)
    crc = (crc << 8) ^ t[0][(crc >> 24) ^ *p++];
  return crc;
}

class Cksum {
public:
  void update(const void* data, std::size_t n) {
    crc_ = crc_update(crc_, static_cast<const unsigned char*>(data), n);
    len_ += n;
  }
  std::uint32_t value() const {
    std::uint32_t crc = crc_;
    for (std::uint64_t len = len_; len > 0; len >>= 8) {
      const auto byte = static_cast<unsigned char>(len & 0xff);
      crc = crc_update(crc, &byte, 1);
    }
    return ~crc;
  }

private:
  std::uint32_t crc_ = 0;
  std::uint64_t len_ = 0;
};

// MD5 through OpenSSL's EVP interface (the default provider has it).
class Md5 {
public:
  Md5() : ctx_(EVP_MD_CTX_new()) { ok_ = ctx_ && EVP_DigestInit_ex(ctx_, EVP_md5(), nullptr) == 1; }
  ~Md5() { EVP_MD_CTX_free(ctx_); }
  Md5(const Md5&) = delete;
  Md5& operator=(const Md5&) = delete;
  void update(const void* data, std::size_t n) {
    if (ok_) ok_ = EVP_DigestUpdate(ctx_, data, n) == 1;
  }
  std::optional<std::string> hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_, md, &len) != 1) return std::nullopt;
    std::string out;
    for (unsigned int i = 0; i < len; ++i)
      out += fmt::format("{:02x}", md[i]);
    return out;
  }

private:
  EVP_MD_CTX* ctx_;
  bool ok_ = false;
};

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t start = s.find_first_not_of(" \t", pos);
    if (start == std::string_view::npos) break;
    const std::size_t end = std::min(s.find_first_of(" \t", start), s.size());
    out.push_back(s.substr(start, end - start));
    pos = end;
  }
  return out;
}

std::optional<std::uint64_t> to_u64(std::string_view s) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// makeself writes zeros for a checksum it did not compute.
bool absent(std::string_view sum) {
  return sum.empty() || sum.find_first_not_of('0') == std::string_view::npos;
}

// A top-level `name=value` line: unindented, so assignments inside functions and option
// parsing are not mistaken for the header's. Quoted values run to the line's last quote:
// makeself does not escape quotes inside them (label="a "b"" is what it writes).
std::optional<std::pair<std::string_view, std::string_view>> assignment(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_'))
    ++i;
  if (i == 0 || i >= line.size() || line[i] != '=' || std::isdigit(static_cast<unsigned char>(line[0])))
    return std::nullopt;
  const std::string_view name = line.substr(0, i);
  std::string_view value = line.substr(i + 1);
  while (!value.empty() && (value.back() == '\r' || value.back() == ' ' || value.back() == '\t'))
    value.remove_suffix(1);
  if (!value.empty() && (value.front() == '"' || value.front() == '\'')) {
    const std::size_t close = value.rfind(value.front());
    if (close == 0) return std::nullopt; // unterminated on this line (a multi-line license text)
    value = value.substr(1, close - 1);
  } else {
    value = value.substr(0, std::min(value.find_first_of(" \t;"), value.size()));
  }
  return std::pair{name, value};
}

// `head -n NNN "$0"` (or "$1") with a literal count: the makeself 2.1 way to find the payload.
std::optional<std::uint64_t> literal_head_count(std::string_view line) {
  const std::size_t at = line.find("head -n ");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + 8);
  const std::size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
  if (digits == 0) return std::nullopt;
  const std::string_view tail = rest.substr(digits);
  if (tail.rfind(" \"$0\"", 0) != 0 && tail.rfind(" \"$1\"", 0) != 0) return std::nullopt;
  return to_u64(rest.substr(0, digits));
}

std::unexpected<Error> bad_header(const fs::path& p, std::string_view why) {
  return fail(ErrorKind::fetch, fmt::format("{}: not a usable makeself archive: {}", p.string(), why),
              kNotMakeselfHint);
}

// A header field that does not read: `part` is a view into `text` (the file's first bytes),
// named as file:line:column (1-based, in bytes) and byte offset.
std::unexpected<Error> bad_field(const fs::path& p, std::string_view text, std::string_view part,
                                 std::string_view why) {
  const auto off = static_cast<std::size_t>(part.data() - text.data());
  const std::string_view before = text.substr(0, off);
  const auto line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  const std::size_t nl = before.rfind('\n');
  const std::size_t column = off - (nl == std::string_view::npos ? 0 : nl + 1) + 1;
  return fail(
      ErrorKind::fetch,
      fmt::format("{}:{}:{}: not a usable makeself archive: {} (header byte {})", p.string(), line, column, why, off),
      kDamagedHint);
}

// The compression a header declares: its --info section echoes COMPRESS=name; older
// headers only show the decompressor in MS_Decompress (or, before that, inline).
std::string declared_compression(std::string_view header) {
  std::size_t at = header.find("echo COMPRESS=");
  if (at != std::string_view::npos) {
    std::string_view v = header.substr(at + 14);
    return std::string(v.substr(0, std::min(v.find_first_of(" \t\r\n\"'`;"), v.size())));
  }
  struct Tool {
    const char* needle;
    const char* name;
  };
  static const Tool tools[] = {
      {"gzip -cd", "gzip"}, {"gzip -d", "gzip"}, {"bzip2 -d", "bzip2"},   {"xz -d", "xz"}, {"zstd -d", "zstd"},
      {"zstd -cd", "zstd"}, {"lz4 -d", "lz4"},   {"base64 -d", "base64"}, {"gpg ", "gpg"}, {"openssl ", "openssl"}};
  for (const auto& t : tools)
    if (header.find(t.needle) != std::string_view::npos) return t.name;
  return {};
}

} // namespace

std::uint32_t posix_cksum(const void* data, std::size_t size) {
  Cksum c;
  c.update(data, size);
  return c.value();
}

namespace {

// The file's first kMaxHeader bytes (or all of a shorter file): the header is inside them.
Result<std::string> read_head(const fs::path& run_file) {
  util::Fd fd(::open(run_file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    return fail(errno == ENOENT ? ErrorKind::usage : ErrorKind::internal,
                fmt::format("{}: cannot open: {}", run_file.string(), std::strerror(errno)), "Check the file's path.");
  std::string head(kMaxHeader, '\0');
  std::size_t got = 0;
  while (got < head.size()) {
    const ssize_t n = ::read(fd.get(), head.data() + got, head.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return fail(ErrorKind::internal, fmt::format("{}: read failed: {}", run_file.string(), std::strerror(errno)),
                  "Check the file and the disk it is on.");
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  head.resize(got);
  return head;
}

// The header's lines, and from them info.header_lines and info.payload_offset.
Result<std::vector<std::string_view>> header_lines(const fs::path& run_file, std::string_view text,
                                                   MakeselfInfo& info) {
  // Lines in order until the line count is found: skip="NNN" (2.4) comes before any use of
  // it, and a 2.1 header writes the count literally in its first `head -n`. Either way it is
  // found inside the header, before any payload byte could be mistaken for text.
  std::vector<std::string_view> lines;
  std::optional<std::uint64_t> count;
  std::size_t found_on = 0;    // the line (1-based) that gave the count
  std::string_view count_from; // the text that gave it: skip's value, or the `head -n` line
  std::size_t pos = 0;
  while (pos < text.size() && lines.size() < 100000) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) break; // an unterminated last line is never header
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
    const std::string_view line = lines.back();
    if (!count) {
      if (auto a = assignment(line); a && a->first == "skip") {
        count = to_u64(a->second);
        if (!count)
          return bad_field(run_file, text, a->second, fmt::format("skip=\"{}\" is not a line count", a->second));
        found_on = lines.size();
        count_from = a->second;
      } else if (auto n = literal_head_count(line)) {
        count = n;
        found_on = lines.size();
        count_from = line;
      }
    }
    if (count && lines.size() >= *count) break;
  }
  if (!count) return bad_header(run_file, "no payload offset: the header has neither skip=NNN nor head -n NNN \"$0\"");
  if (found_on > *count)
    return bad_field(run_file, text, count_from,
                     fmt::format("line {} declares a {}-line header, which would not contain it", found_on, *count));
  if (lines.size() < *count)
    return bad_field(run_file, text, count_from,
                     fmt::format("the header declares {} lines but the file has {} complete lines in its first {} "
                                 "bytes",
                                 *count, lines.size(), kMaxHeader));
  info.header_lines = *count;
  info.payload_offset = static_cast<std::uint64_t>(lines.back().data() + lines.back().size() + 1 - text.data());
  return lines;
}

// The assignments of the header that hpcbake reads; the first of each name counts.
struct HeaderFields {
  std::optional<std::string_view> filesizes, totalsize, script, scriptargs, decrypt, crc, md5, sha, label, target;
};

HeaderFields header_fields(const std::vector<std::string_view>& lines) {
  HeaderFields f;
  for (const auto line : lines) {
    const auto a = assignment(line);
    if (!a) continue;
    auto take = [&](std::string_view name, std::optional<std::string_view>& slot) {
      if (a->first == name && !slot) slot = a->second;
    };
    take("filesizes", f.filesizes);
    take("totalsize", f.totalsize);
    take("script", f.script);
    take("scriptargs", f.scriptargs);
    take("decrypt_cmd", f.decrypt);
    take("CRCsum", f.crc);
    take("MD5", f.md5);
    take("SHA", f.sha);
    take("label", f.label);
    take("targetdir", f.target);
  }
  return f;
}

// filesizes= (and totalsize=, when present, must be their sum) into info.filesizes.
Status read_sizes(const fs::path& run_file, std::string_view text, const HeaderFields& f, MakeselfInfo& info) {
  if (!f.filesizes) return bad_header(run_file, "no filesizes= line");
  std::uint64_t sum = 0;
  for (const auto w : words(*f.filesizes)) {
    const auto n = to_u64(w);
    if (!n || *n > (std::uint64_t{1} << 62) - sum)
      return bad_field(
          run_file, text, w,
          fmt::format("filesizes=\"{}\" is not a list of sizes: '{}' is not a byte count", *f.filesizes, w));
    info.filesizes.push_back(*n);
    sum += *n;
  }
  if (info.filesizes.empty()) return bad_field(run_file, text, *f.filesizes, "filesizes= is empty");
  if (f.totalsize && !f.totalsize->empty() && to_u64(*f.totalsize) != sum)
    return bad_field(run_file, text, *f.totalsize,
                     fmt::format("totalsize=\"{}\" is not the sum of filesizes ({})", *f.totalsize, sum));
  return {};
}

// The compression: refused when encrypted or not one hpcbake extracts.
Status read_compression(const fs::path& run_file, const HeaderFields& f, std::string_view header, MakeselfInfo& info) {
  if (f.decrypt && !f.decrypt->empty())
    return fail(
        ErrorKind::unsupported,
        fmt::format("{}: the makeself payload is encrypted (decrypt_cmd=\"{}\")", run_file.string(), *f.decrypt),
        "hpcbake extracts unencrypted makeself archives only.");
  info.compression = declared_compression(header);
  static const std::string_view supported[] = {"",   "gzip", "pigz", "bzip2",    "pbzip2",
                                               "xz", "zstd", "lz4",  "compress", "none"};
  if (std::find(std::begin(supported), std::end(supported), info.compression) == std::end(supported))
    return fail(ErrorKind::unsupported,
                fmt::format("{}: the makeself payload uses {}, which hpcbake does not extract", run_file.string(),
                            info.compression),
                "Supported payloads: gzip, bzip2, xz, zstd, lz4, compress or uncompressed tar.");
  return {};
}

// The checksum lists (one word per payload, or absent), the label, target and script.
Status read_sums_and_script(const fs::path& run_file, std::string_view text, const HeaderFields& f,
                            MakeselfInfo& info) {
  auto sums = [&](const std::optional<std::string_view>& v, const char* what) -> Result<std::string> {
    if (!v || absent(*v)) return std::string();
    const auto w = words(*v);
    if (w.size() != info.filesizes.size())
      return bad_field(run_file, text, *v,
                       fmt::format("{}=\"{}\": {} lists {} checksums for {} payloads", what, *v, what, w.size(),
                                   info.filesizes.size()));
    return std::string(*v);
  };
  HPCBAKE_TRY_ASSIGN(info.crc, sums(f.crc, "CRCsum"));
  HPCBAKE_TRY_ASSIGN(info.md5, sums(f.md5, "MD5"));
  HPCBAKE_TRY_ASSIGN(info.sha256, sums(f.sha, "SHA"));
  info.label = f.label ? std::string(*f.label) : "";
  info.target_dir = f.target ? std::string(*f.target) : "";
  if (f.script && !f.script->empty()) {
    info.script = std::string(*f.script);
    if (f.scriptargs && !f.scriptargs->empty()) info.script += fmt::format(" {}", *f.scriptargs);
  }
  return {};
}

} // namespace

bool looks_like_makeself(const fs::path& path) {
  const util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) return false;
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0 || !S_ISREG(sb.st_mode)) return false;
  std::array<char, 262> head{};
  std::size_t got = 0;
  while (got < head.size()) {
    const ssize_t n = ::read(fd.get(), head.data() + got, head.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  const std::string_view h(head.data(), got);
  return h.starts_with("#!") && !(got == head.size() && h.substr(257, 5) == "ustar");
}

Result<MakeselfInfo> read_makeself_header(const fs::path& run_file) {
  HPCBAKE_TRY_ASSIGN(const std::string head, read_head(run_file));
  const std::string_view text(head);
  if (text.rfind("#!", 0) != 0) return bad_header(run_file, "it does not start with a #! line");

  MakeselfInfo info;
  HPCBAKE_TRY_ASSIGN(const auto lines, header_lines(run_file, text, info));
  const std::string_view header = text.substr(0, info.payload_offset);
  for (const auto line : lines) {
    const std::size_t at = line.find("generated using Makeself ");
    if (at != std::string_view::npos && info.makeself_version.empty()) {
      const auto w = words(line.substr(at + 25));
      if (!w.empty()) info.makeself_version = std::string(w.front());
    }
  }
  if (info.makeself_version.empty()) return bad_header(run_file, "no \"generated using Makeself\" line in its header");
  const HeaderFields fields = header_fields(lines);
  HPCBAKE_TRY(read_sizes(run_file, text, fields, info));
  HPCBAKE_TRY(read_compression(run_file, fields, header, info));
  HPCBAKE_TRY(read_sums_and_script(run_file, text, fields, info));
  return info;
}

Result<ExtractStats> extract_makeself(const fs::path& run_file, const fs::path& dest, const ExtractOptions& options) {
  HPCBAKE_TRY_ASSIGN(auto info, read_makeself_header(run_file));
  const std::string label = run_file.string();
  const util::Fd owned(::open(run_file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!owned) return fail(ErrorKind::internal, fmt::format("{}: cannot open: {}", label, std::strerror(errno)));
  const int fd = owned.get();
  struct stat sb {};
  if (::fstat(fd, &sb) != 0)
    return fail(ErrorKind::internal, fmt::format("{}: stat failed: {}", label, std::strerror(errno)));
  const auto size = static_cast<std::uint64_t>(sb.st_size);
  std::uint64_t declared = info.payload_offset;
  for (const auto n : info.filesizes)
    declared += n;
  if (size < declared)
    return fail(ErrorKind::fetch,
                fmt::format("{}: truncated: its header declares {} bytes of payload after byte {}, the file has {} "
                            "bytes ({} missing)",
                            label, declared - info.payload_offset, info.payload_offset, size, declared - size),
                "The download is incomplete: get the file again from its publisher.");
  if (size > declared)
    return fail(
        ErrorKind::fetch,
        fmt::format("{}: {} unexpected bytes after the payloads its header declares (file {} bytes, expected {})",
                    label, size - declared, size, declared),
        "The file was modified or is not what its header says: get it again from its publisher.");

  std::vector<Range> ranges;
  std::uint64_t at = info.payload_offset;
  for (const auto n : info.filesizes) {
    ranges.push_back({at, n});
    at += n;
  }
  const auto crcs = words(info.crc), md5s = words(info.md5), shas = words(info.sha256);
  // One payload at a time: the digests are restarted for each.
  std::optional<util::Sha256> sha;
  std::optional<Md5> md5;
  Cksum crc;
  std::size_t current = static_cast<std::size_t>(-1);
  auto start = [&](std::size_t i) {
    current = i;
    if (!shas.empty()) sha.emplace();
    if (!md5s.empty()) md5.emplace();
    crc = Cksum();
  };
  const Observer observe = [&](std::size_t i, const void* data, std::size_t n) {
    if (i != current) start(i);
    if (sha) static_cast<void>(sha->update(data, n)); // a failure sticks: hex() below reports it
    if (md5) md5->update(data, n);
    if (!crcs.empty()) crc.update(data, n);
  };
  const RangeCheck check = [&](std::size_t i, const Error* extraction_error) -> Status {
    if (i != current) start(i); // an empty payload: nothing was observed
    const std::string which = info.filesizes.size() > 1 ? fmt::format("payload {} of {}", i + 1, info.filesizes.size())
                                                        : std::string("payload");
    auto mismatch = [&](const char* name, std::string_view expected, const std::string& actual) {
      return fail(
          ErrorKind::fetch,
          fmt::format("{}: {} {} checksum mismatch: the header says {}, the payload has {}{}", label, which, name,
                      expected, actual,
                      extraction_error ? fmt::format(" (extraction also failed: {})", extraction_error->message) : ""),
          "The file is corrupt or was tampered with: get it again from its publisher.");
    };
    if (!shas.empty()) {
      HPCBAKE_TRY_ASSIGN(const std::string actual, sha->hex());
      if (actual != shas[i]) return mismatch("SHA-256", shas[i], actual);
    }
    if (!md5s.empty()) {
      const auto actual = md5->hex();
      if (!actual) return fail(ErrorKind::internal, fmt::format("{}: MD5 is not available from OpenSSL", label));
      if (*actual != md5s[i]) return mismatch("MD5", md5s[i], *actual);
    }
    if (!crcs.empty()) {
      const std::string actual = std::to_string(crc.value());
      if (actual != crcs[i]) return mismatch("CRC", crcs[i], actual);
    }
    return {};
  };
  HPCBAKE_TRY_ASSIGN(auto stats, extract_ranges(fd, ranges, label, dest, options, observe, check));
  // Every payload passed each checksum its header carries.
  if (!shas.empty()) stats.verified.emplace_back("SHA-256");
  if (!md5s.empty()) stats.verified.emplace_back("MD5");
  if (!crcs.empty()) stats.verified.emplace_back("CRC");
  return stats;
}

} // namespace hpcbake::archive
