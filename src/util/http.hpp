#pragma once
// A narrow HTTP interface for small requests (the metadata service). Large
// artifact downloads use the fetch engine, not this. Tests point the real client at
// servers they start on loopback.
#include "util/error.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace hpcbake::util {

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers; // "Name: value"
  long connect_timeout_ms = 1000;
  long timeout_ms = 2000;    // whole request
  bool bypass_proxy = false; // link-local endpoints must never go through a proxy
  std::size_t max_body_bytes = 1 << 20;
  std::string ca_file;           // the only CAs to verify with (--ca-file); empty: the host's (tls_trust.hpp)
  bool follow_redirects = false; // at most 5, http(s) only
};

struct HttpResponse {
  long status = 0;
  std::string body;
};

// Transport failures (no route, refused, timeout) are returned as Error with kind
// fetch; an HTTP error status is a successful response with that status.
class HttpClient {
public:
  virtual ~HttpClient() = default;
  virtual Result<HttpResponse> get(const HttpRequest& request) = 0;
};

class CurlHttpClient final : public HttpClient {
public:
  Result<HttpResponse> get(const HttpRequest& request) override;
};

} // namespace hpcbake::util
