#include "repo/openpgp.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>

namespace hpcbake::repo {

namespace {

constexpr std::string_view kArmorBegin = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
constexpr std::string_view kArmorEnd = "-----END PGP PUBLIC KEY BLOCK-----";

enum Tag : int { signature = 2, secret_key = 5, public_key = 6, secret_subkey = 7, user_id = 13, public_subkey = 14 };

Error bad(const std::string& label, const std::string& what) {
  return Error{ErrorKind::usage, fmt::format("{}: not a usable OpenPGP public key: {}", label, what),
               "fetch the key file again from the vendor's URL; check that it is the public key block"};
}

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0, pad = 0;
  for (char c : text) {
    if (c == '=') {
      ++pad;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    const int v = b64_value(c);
    if (v < 0 || pad) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (pad > 2) return std::nullopt;
  return out;
}

// RFC 4880 6.1.
std::uint32_t crc24(std::string_view data) {
  std::uint32_t crc = 0xB704CEu;
  for (unsigned char c : data) {
    crc ^= static_cast<std::uint32_t>(c) << 16;
    for (int i = 0; i < 8; ++i) {
      crc <<= 1;
      if (crc & 0x1000000u) crc ^= 0x1864CFBu;
    }
  }
  return crc & 0xFFFFFFu;
}

Result<std::string> dearmor(std::string_view data, const std::string& label) {
  const auto begin = data.find(kArmorBegin);
  const auto end = data.find(kArmorEnd);
  if (end == std::string_view::npos || end < begin) return std::unexpected(bad(label, "the armor has no END line"));
  // Armor headers ("Version: ...") end at the first empty line.
  auto body_at = data.find("\n\n", begin);
  if (auto crlf = data.find("\r\n\r\n", begin); crlf != std::string_view::npos && crlf < body_at) body_at = crlf;
  if (body_at == std::string_view::npos || body_at > end) return std::unexpected(bad(label, "the armor has no body"));
  std::string_view body = data.substr(body_at, end - body_at);
  std::optional<std::uint32_t> checksum;
  // The checksum line: '=' and four base64 characters at the start of a line.
  for (std::size_t at = body.find("\n="); at != std::string_view::npos; at = body.find("\n=", at + 1)) {
    const auto line_end = body.find('\n', at + 1);
    auto line = body.substr(at + 2, (line_end == std::string_view::npos ? body.size() : line_end) - at - 2);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    if (line.size() != 4) continue;
    auto crc = base64_decode(line);
    if (!crc || crc->size() != 3) return std::unexpected(bad(label, "the armor checksum line is malformed"));
    checksum = (static_cast<std::uint32_t>(static_cast<unsigned char>((*crc)[0])) << 16) |
               (static_cast<std::uint32_t>(static_cast<unsigned char>((*crc)[1])) << 8) |
               static_cast<unsigned char>((*crc)[2]);
    body = body.substr(0, at);
    break;
  }
  auto bytes = base64_decode(body);
  if (!bytes) return std::unexpected(bad(label, "the armor body is not base64"));
  if (checksum && crc24(*bytes) != *checksum)
    return std::unexpected(bad(label, "the armor checksum does not match: the file is damaged"));
  return *bytes;
}

struct Packet {
  int tag = 0;
  std::string_view body;
  std::string_view header; // the bytes before the body
};

Result<std::vector<Packet>> split_packets(std::string_view data, const std::string& label) {
  std::vector<Packet> out;
  std::size_t at = 0;
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(data[i]); };
  while (at < data.size()) {
    const std::size_t start = at;
    const unsigned char h = byte(at++);
    if (!(h & 0x80)) return std::unexpected(bad(label, fmt::format("byte {} does not start a packet", start)));
    Packet p;
    std::uint64_t len = 0;
    auto need = [&](std::size_t n) { return at + n <= data.size(); };
    if (h & 0x40) { // new format
      p.tag = h & 0x3f;
      if (!need(1)) return std::unexpected(bad(label, "truncated packet header"));
      const unsigned char o1 = byte(at++);
      if (o1 < 192) {
        len = o1;
      } else if (o1 < 224) {
        if (!need(1)) return std::unexpected(bad(label, "truncated packet header"));
        len = ((o1 - 192u) << 8) + byte(at++) + 192u;
      } else if (o1 == 255) {
        if (!need(4)) return std::unexpected(bad(label, "truncated packet header"));
        len = (std::uint64_t{byte(at)} << 24) | (std::uint64_t{byte(at + 1)} << 16) |
              (std::uint64_t{byte(at + 2)} << 8) | byte(at + 3);
        at += 4;
      } else {
        return std::unexpected(bad(label, "a partial-length packet, which key files never use"));
      }
    } else { // old format
      p.tag = (h >> 2) & 0x0f;
      const int ltype = h & 3;
      if (ltype == 3) return std::unexpected(bad(label, "a packet of indeterminate length"));
      const std::size_t n = ltype == 0 ? 1 : ltype == 1 ? 2 : 4;
      if (!need(n)) return std::unexpected(bad(label, "truncated packet header"));
      for (std::size_t i = 0; i < n; ++i)
        len = (len << 8) | byte(at++);
    }
    if (len > data.size() - at)
      return std::unexpected(bad(label, fmt::format("a packet at byte {} runs past the end of the file", start)));
    p.header = data.substr(start, at - start);
    p.body = data.substr(at, static_cast<std::size_t>(len));
    at += static_cast<std::size_t>(len);
    out.push_back(p);
  }
  return out;
}

std::string hex_upper(const unsigned char* d, unsigned n) {
  std::string out;
  for (unsigned i = 0; i < n; ++i)
    out += fmt::format("{:02X}", d[i]);
  return out;
}

// v4: SHA-1 over 0x99, a two-octet length and the key packet body (RFC 4880 12.2);
// v6: SHA-256 over 0x9B, a four-octet length and the body (RFC 9580 5.5.4).
Result<std::string> fingerprint_of(std::string_view body, const std::string& label) {
  if (body.empty()) return std::unexpected(bad(label, "an empty key packet"));
  const int version = static_cast<unsigned char>(body[0]);
  std::string prefix;
  const EVP_MD* md = nullptr;
  if (version == 4) {
    if (body.size() > 0xffff) return std::unexpected(bad(label, "a v4 key packet over 64 KiB"));
    prefix = {static_cast<char>(0x99), static_cast<char>((body.size() >> 8) & 0xff),
              static_cast<char>(body.size() & 0xff)};
    md = EVP_sha1();
  } else if (version == 6) {
    prefix = {static_cast<char>(0x9B), static_cast<char>((body.size() >> 24) & 0xff),
              static_cast<char>((body.size() >> 16) & 0xff), static_cast<char>((body.size() >> 8) & 0xff),
              static_cast<char>(body.size() & 0xff)};
    md = EVP_sha256();
  } else {
    return std::unexpected(bad(label, fmt::format("key version {} (hpcbake reads v4 and v6 keys)", version)));
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned n = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), body.data(), body.size()) != 1 || EVP_DigestFinal_ex(ctx.get(), out.data(), &n) != 1)
    return fail(ErrorKind::internal, fmt::format("{}: computing a key fingerprint failed (OpenSSL)", label));
  return hex_upper(out.data(), n);
}

} // namespace

Result<KeyFile> read_key_file(std::string_view data, const std::string& label) {
  KeyFile kf;
  // Binary first: a packet header has the high bit set (RFC 4880 4.2), which armored text never
  // starts with, and a binary key's user ID may itself hold the armor's BEGIN line.
  if (!data.empty() && (static_cast<unsigned char>(data[0]) & 0x80)) {
    kf.binary = std::string(data);
  } else if (data.find(kArmorBegin) != std::string_view::npos) {
    HPCBAKE_TRY_ASSIGN(kf.binary, dearmor(data, label));
    kf.armored = true;
  } else {
    return std::unexpected(bad(label, "neither an armored key block nor binary OpenPGP"));
  }
  HPCBAKE_TRY_ASSIGN(auto packets, split_packets(kf.binary, label));
  for (const auto& p : packets) {
    if (p.tag == secret_key || p.tag == secret_subkey)
      return std::unexpected(bad(label, "it holds a secret key; a repository needs only the public key"));
    if (p.tag == public_key) {
      PublicKey k;
      HPCBAKE_TRY_ASSIGN(k.fingerprint, fingerprint_of(p.body, label));
      k.version = static_cast<unsigned char>(p.body[0]);
      kf.keys.push_back(std::move(k));
      continue;
    }
    if (kf.keys.empty())
      return std::unexpected(bad(label, fmt::format("packet type {} comes before any public key", p.tag)));
    if (p.tag == public_subkey) {
      HPCBAKE_TRY_ASSIGN(auto fpr, fingerprint_of(p.body, label));
      kf.keys.back().subkeys.push_back(std::move(fpr));
    } else if (p.tag == user_id) {
      kf.keys.back().user_ids.emplace_back(p.body);
    }
  }
  if (kf.keys.empty()) return std::unexpected(bad(label, "it holds no public key"));
  return kf;
}

Result<KeyFile> verify_pinned_key(std::string_view data, std::string_view pinned, const std::string& label) {
  const std::string pin = util::normalize_fingerprint(pinned);
  if (pin.empty())
    return fail(ErrorKind::manifest, fmt::format("'{}' is not a key fingerprint (40 or 64 hex digits)", pinned));
  HPCBAKE_TRY_ASSIGN(auto kf, read_key_file(data, label));
  std::vector<std::string> found;
  for (const auto& k : kf.keys)
    found.push_back(k.fingerprint);
  if (kf.keys.size() != 1)
    return fail(ErrorKind::fetch,
                fmt::format("{}: holds {} primary keys ({}), expected only the pinned {}", label, kf.keys.size(),
                            util::join(found, ", "), pin),
                "a repository key file must hold the vendor's key alone: apt and dnf would trust every key in it");
  if (kf.keys.front().fingerprint != pin)
    return fail(ErrorKind::fetch,
                fmt::format("{}: key fingerprint {} is not the pinned {}", label, kf.keys.front().fingerprint, pin),
                "the vendor may have rotated its key: check the vendor's announcement and update the manifest's pin; "
                "never trust a key whose fingerprint you did not check");
  return kf;
}

} // namespace hpcbake::repo
