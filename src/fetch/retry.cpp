#include "fetch/retry.hpp"

#include "util/strings.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace hpcbake::fetch {

Verdict classify_http(long status) {
  const bool transient = status == 408 || status == 413 || status == 429 || status >= 500;
  return transient ? Verdict::retry : Verdict::next_url;
}

Verdict classify_curl(CURLcode code) {
  switch (code) {
  // What the same URL answers the same way again: a TLS setup that fails, a server that does
  // not speak HTTP, an encoding or an authentication it insists on, an option this libcurl
  // lacks (our build, not the network).
  case CURLE_AUTH_ERROR:
  case CURLE_BAD_CONTENT_ENCODING:
  case CURLE_LOGIN_DENIED:
  case CURLE_NOT_BUILT_IN:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_UNKNOWN_OPTION:
  case CURLE_USE_SSL_FAILED:
  case CURLE_WEIRD_SERVER_REPLY:
#if LIBCURL_VERSION_NUM >= 0x080600
  case CURLE_TOO_LARGE: // a response header past libcurl's limit
#endif
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_TOO_MANY_REDIRECTS:
  case CURLE_UNSUPPORTED_PROTOCOL:
  case CURLE_URL_MALFORMAT:
    return Verdict::next_url;
  default:
    return Verdict::retry;
  }
}

double backoff_delay(const Backoff& policy, int attempt, double jitter, std::optional<double> retry_after) {
  // 2^(attempt-1) as ldexp, exact: pow() would tie the release binary to glibc 2.29's libm
  // (docs/release.md, the glibc floor).
  const double step = std::min(policy.max_s, policy.initial_s * std::ldexp(1.0, std::max(attempt, 1) - 1));
  double delay = step * (0.5 + std::clamp(jitter, 0.0, 1.0));
  if (retry_after) delay = std::max(delay, std::min(*retry_after, policy.retry_after_max_s));
  return delay;
}

std::optional<double> parse_retry_after(std::string_view value, std::time_t now) {
  if (value.empty()) return std::nullopt;
  if (auto n = util::parse_int(value)) return static_cast<double>(std::max<std::int64_t>(*n, 0));
  std::tm tm{};
  const std::string text(value);
  if (::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm))
    return std::max(std::difftime(::timegm(&tm), now), 0.0);
  return std::nullopt;
}

} // namespace hpcbake::fetch
