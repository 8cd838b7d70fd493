#include "util/url.hpp"

#include "util/curl.hpp"
#include "util/strings.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>

namespace hpcbake::util {

namespace {

// The flags lib/url.c gives curl_url_set for CURLOPT_URL (libcurl 7.88): what a transfer reads.
constexpr unsigned kTransportFlags = CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME;

struct UrlFree {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
using UrlHandle = std::unique_ptr<CURLU, UrlFree>;

bool has_control_or_space(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

// The length of a leading "scheme://" (RFC 3986, 3.1: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )),
// 0 when the text does not start with one.
std::size_t scheme_prefix(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '+' || s[i] == '-' || s[i] == '.'))
    ++i;
  if (i == 0 || !std::isalpha(static_cast<unsigned char>(s[0])) || s.substr(i, 3) != "://") return 0;
  return i + 3;
}

// Where the authority of "scheme://authority..." ends in the text: libcurl ends it at the first
// '/', '?' or '#' (lib/urlapi.c, parseurl).
std::size_t authority_end(std::string_view s, std::size_t start) {
  return std::min(s.find_first_of("/?#", start), s.size());
}

// The URL as the transport parses it; nothing when libcurl refuses it (`why` says why).
UrlHandle parse(std::string_view url, std::string* why = nullptr) {
  curl_global_init_once();
  UrlHandle h(curl_url());
  if (!h) {
    if (why) *why = "out of memory";
    return nullptr;
  }
  const std::string text(url); // url_problem and redact_url look for NUL bytes first
  if (const CURLUcode rc = curl_url_set(h.get(), CURLUPART_URL, text.c_str(), kTransportFlags); rc != CURLUE_OK) {
    if (why) *why = curl_url_strerror(rc);
    return nullptr;
  }
  return h;
}

bool has_part(CURLU* h, CURLUPart part) {
  char* v = nullptr;
  const bool has = curl_url_get(h, part, &v, 0) == CURLUE_OK && v != nullptr;
  curl_free(v);
  return has;
}

std::optional<std::string> get_url(CURLU* h) {
  char* v = nullptr;
  if (curl_url_get(h, CURLUPART_URL, &v, 0) != CURLUE_OK || !v) return std::nullopt;
  std::string out(v);
  curl_free(v);
  return out;
}

// Whether the text reads as libcurl reads it: "scheme://" written out with at most two slashes,
// and no '@' after the authority (a person, or another parser, would take what comes before it
// for a user name and password).
bool reads_plainly(std::string_view url) {
  const std::size_t start = scheme_prefix(url);
  if (start == 0 || has_control_or_space(url)) return false;
  const bool file = iequals(url.substr(0, start), "file://");
  if (start < url.size() && url[start] == '/' && !file) return false;
  return url.find('@', authority_end(url, start)) == std::string_view::npos;
}

// Everything before the last '@' as "***@" (keeping a written "scheme://"), nothing from the
// first '?' or '#' after it, control bytes as \xNN: for text libcurl does not read plainly.
std::string conservative(std::string_view url) {
  std::string out;
  if (const auto at = url.rfind('@'); at != std::string_view::npos) {
    const std::size_t scheme = scheme_prefix(url);
    out = std::string(url.substr(0, scheme <= at ? scheme : 0)) + "***@";
    url.remove_prefix(at + 1);
  }
  url = url.substr(0, std::min(url.find_first_of("?#"), url.size()));
  for (const char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out.push_back(c);
  }
  return out;
}

} // namespace

std::string redact_url(std::string_view url) {
  if (!reads_plainly(url)) return conservative(url);
  const UrlHandle h = parse(url);
  if (!h) return conservative(url);
  const bool userinfo = has_part(h.get(), CURLUPART_USER) || has_part(h.get(), CURLUPART_PASSWORD) ||
                        has_part(h.get(), CURLUPART_OPTIONS);
  if (!userinfo && !has_part(h.get(), CURLUPART_QUERY) && !has_part(h.get(), CURLUPART_FRAGMENT))
    return std::string(url);
  bool ok = curl_url_set(h.get(), CURLUPART_PASSWORD, nullptr, 0) == CURLUE_OK &&
            curl_url_set(h.get(), CURLUPART_OPTIONS, nullptr, 0) == CURLUE_OK &&
            curl_url_set(h.get(), CURLUPART_USER, userinfo ? "***" : nullptr, 0) == CURLUE_OK &&
            curl_url_set(h.get(), CURLUPART_QUERY, nullptr, 0) == CURLUE_OK &&
            curl_url_set(h.get(), CURLUPART_FRAGMENT, nullptr, 0) == CURLUE_OK;
  auto out = ok ? get_url(h.get()) : std::nullopt;
  return out ? *out : conservative(url);
}

bool url_has_secret(std::string_view url) {
  return redact_url(url) != url;
}

std::optional<std::string> url_problem(std::string_view url) {
  if (url.empty()) return "is empty";
  if (has_control_or_space(url))
    return "holds a space, a control character or a NUL byte (libcurl would not send it as written)";
  const std::size_t start = scheme_prefix(url);
  const std::string scheme = start ? to_lower(url.substr(0, start - 3)) : std::string();
  if (scheme != "http" && scheme != "https") {
    if (url.starts_with("//")) return "starts with '//' and has no scheme";
    if (start != 0) return fmt::format("is a {}:// URL, not http:// or https://", scheme);
    if (url.find('@') == std::string_view::npos) return "does not start with http:// or https://";
    return "does not start with http:// or https:// (libcurl would still take what comes before the '@' for a user "
           "name and password, and send them)";
  }
  if (start < url.size() && url[start] == '/') return "has more than two '/' after its scheme";
  std::string why;
  if (!parse(url, &why)) return fmt::format("is not a URL libcurl reads ({})", why);
  if (url.find('@', authority_end(url, start)) != std::string_view::npos)
    return "has an '@' after its host: libcurl ends the host at the first '/', '?' or '#', so a password holding one "
           "would be sent as the host and path";
  return std::nullopt;
}

const char* url_hint() {
  return "write the URL as http://HOST/PATH or https://HOST/PATH, with a user name or password in it %-encoded "
         "('/' as %2F, '?' as %3F, '#' as %23, '@' as %40, '%' as %25)";
}

Status check_url(std::string_view url, std::string_view where, ErrorKind kind) {
  if (auto why = url_problem(url))
    return fail(kind, fmt::format("{}: '{}' {}", where, redact_url(url), *why), url_hint());
  return {};
}

std::string strip_userinfo(std::string_view url) {
  if (!reads_plainly(url)) return redact_url(url);
  const UrlHandle h = parse(url);
  if (!h) return redact_url(url);
  if (!has_part(h.get(), CURLUPART_USER) && !has_part(h.get(), CURLUPART_PASSWORD)) return std::string(url);
  const bool ok = curl_url_set(h.get(), CURLUPART_USER, nullptr, 0) == CURLUE_OK &&
                  curl_url_set(h.get(), CURLUPART_PASSWORD, nullptr, 0) == CURLUE_OK &&
                  curl_url_set(h.get(), CURLUPART_OPTIONS, nullptr, 0) == CURLUE_OK;
  auto out = ok ? get_url(h.get()) : std::nullopt;
  return out ? *out : redact_url(url);
}

} // namespace hpcbake::util
