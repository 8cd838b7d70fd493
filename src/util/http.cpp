#include "util/http.hpp"

#include "util/strings.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <memory>
#include <mutex>

namespace hpcbake::util {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

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

struct CurlFree {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

} // namespace

Result<HttpResponse> CurlHttpClient::get(const HttpRequest& request) {
  global_init();
  std::unique_ptr<CURL, CurlFree> handle(curl_easy_init());
  if (!handle) return fail(ErrorKind::internal, "curl_easy_init failed");
  std::unique_ptr<curl_slist, CurlFree> headers;
  for (const auto& h : request.headers) {
    curl_slist* appended = curl_slist_append(headers.get(), h.c_str());
    if (!appended) return fail(ErrorKind::internal, "curl_slist_append failed");
    (void)headers.release();
    headers.reset(appended);
  }
  Sink sink;
  sink.limit = request.max_body_bytes;
  char errbuf[CURL_ERROR_SIZE] = {};
  CURL* h = handle.get();
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, request.connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, request.timeout_ms);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (request.bypass_proxy) curl_easy_setopt(h, CURLOPT_NOPROXY, "*");

  const CURLcode rc = curl_easy_perform(h);
  const std::string where = redact_url(request.url);
  if (sink.overflow)
    return fail(ErrorKind::fetch, fmt::format("{}: response larger than {} bytes", where, request.max_body_bytes));
  if (rc != CURLE_OK)
    return fail(ErrorKind::fetch,
                fmt::format("{}: {}", where, errbuf[0] ? errbuf : curl_easy_strerror(rc)));
  HttpResponse response;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(sink.body);
  return response;
}

} // namespace hpcbake::util
