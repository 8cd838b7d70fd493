#include "util/http.hpp"

#include "util/curl.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

namespace hpcbake::util {

namespace {

struct Sink {
  std::string body;
  std::size_t limit = 0;
  bool overflow = false;
};

std::size_t on_write(char* data, std::size_t size, std::size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const std::size_t n = size * count;
  if (sink->body.size() + n > sink->limit) {
    sink->overflow = true;
    return 0; // aborts the transfer with CURLE_WRITE_ERROR
  }
  sink->body.append(data, n);
  return n;
}

Status configure(CurlEasy& h, const HttpRequest& request, const CurlSlist& headers, Sink& sink, char* errbuf) {
  HPCBAKE_TRY(h.set_opt(CURLOPT_URL, request.url.c_str()));
  HPCBAKE_TRY(h.set_opt(CURLOPT_HTTPHEADER, headers.get()));
  HPCBAKE_TRY(h.set_opt(CURLOPT_CONNECTTIMEOUT_MS, request.connect_timeout_ms));
  HPCBAKE_TRY(h.set_opt(CURLOPT_TIMEOUT_MS, request.timeout_ms));
  HPCBAKE_TRY(h.set_opt(CURLOPT_NOSIGNAL, 1L));
  HPCBAKE_TRY(h.set_opt(CURLOPT_FOLLOWLOCATION, request.follow_redirects ? 1L : 0L));
  HPCBAKE_TRY(h.set_opt(CURLOPT_MAXREDIRS, 5L));
  HPCBAKE_TRY(restrict_redirects(h, request.url));
  const TlsTrust trust = find_tls_trust(request.ca_file);
  if (!trust.found() && is_https_url(request.url)) return std::unexpected(trust.missing_error(request.url));
  HPCBAKE_TRY(apply_tls_trust(h, trust));
  HPCBAKE_TRY(h.set_opt(CURLOPT_WRITEFUNCTION, on_write));
  HPCBAKE_TRY(h.set_opt(CURLOPT_WRITEDATA, &sink));
  HPCBAKE_TRY(h.set_opt(CURLOPT_ERRORBUFFER, errbuf));
  HPCBAKE_TRY(h.set_opt(CURLOPT_PROTOCOLS_STR, "http,https"));
  if (request.bypass_proxy) HPCBAKE_TRY(h.set_opt(CURLOPT_NOPROXY, "*"));
  return {};
}

} // namespace

Result<HttpResponse> CurlHttpClient::get(const HttpRequest& request) {
  if (auto why = url_problem(request.url))
    return fail(ErrorKind::fetch, fmt::format("{}: {}", redact_url(request.url), *why), url_hint());
  HPCBAKE_TRY_ASSIGN(CurlEasy handle, CurlEasy::create());
  CurlSlist headers;
  for (const auto& line : request.headers)
    HPCBAKE_TRY(headers.append(line));
  Sink sink;
  sink.limit = request.max_body_bytes;
  char errbuf[CURL_ERROR_SIZE] = {};
  HPCBAKE_TRY(configure(handle, request, headers, sink, errbuf));
  CURL* h = handle.get();

  const CURLcode rc = curl_easy_perform(h);
  const std::string where = redact_url(request.url);
  if (sink.overflow)
    return fail(ErrorKind::fetch, fmt::format("{}: response larger than {} bytes", where, request.max_body_bytes));
  if (auto refused = refused_redirect(handle, rc, request.url)) return std::unexpected(std::move(*refused));
  if (rc != CURLE_OK)
    return fail(ErrorKind::fetch, fmt::format("{}: {}", where, errbuf[0] ? errbuf : curl_easy_strerror(rc)));
  HttpResponse response;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(sink.body);
  return response;
}

} // namespace hpcbake::util
