#pragma once
// Move-only owners of libcurl handles (easy, multi, header list) whose setters check what
// libcurl answers: an option this libcurl lacks or refuses becomes an Error naming the option,
// never a transfer that silently runs without it (no TLS verification, no timeout). In util,
// not fetch, because util's HttpClient (IMDS) uses them too and util may not include fetch.
// Include only from .cpp files: it brings <curl/curl.h>.
#include "util/error.hpp"
#include "util/tls_trust.hpp"

#include <curl/curl.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace hpcbake::util {

// curl_global_init, once per process.
void curl_global_init_once();

// The name libcurl gives an option ("CURLOPT_URL" style, without the prefix), for errors.
std::string curl_option_name(CURLoption option);
Error curl_setopt_error(std::string option, const char* why);

class CurlSlist {
public:
  CurlSlist() = default;
  CurlSlist(const CurlSlist&) = delete;
  CurlSlist& operator=(const CurlSlist&) = delete;
  CurlSlist(CurlSlist&& o) noexcept : list_(std::exchange(o.list_, nullptr)) {}
  CurlSlist& operator=(CurlSlist&& o) noexcept {
    if (this != &o) {
      reset();
      list_ = std::exchange(o.list_, nullptr);
    }
    return *this;
  }
  ~CurlSlist() { reset(); }
  Status append(const std::string& line);
  curl_slist* get() const { return list_; }
  void reset() {
    if (list_) curl_slist_free_all(list_);
    list_ = nullptr;
  }

private:
  curl_slist* list_ = nullptr;
};

class CurlEasy {
public:
  static Result<CurlEasy> create();
  CurlEasy() = default; // holds nothing
  CurlEasy(const CurlEasy&) = delete;
  CurlEasy& operator=(const CurlEasy&) = delete;
  CurlEasy(CurlEasy&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CurlEasy& operator=(CurlEasy&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  ~CurlEasy() { reset(); }

  CURL* get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }
  void reset() {
    if (h_) curl_easy_cleanup(h_);
    h_ = nullptr;
  }

  template <typename T> Status set_opt(CURLoption option, T value) {
    if (!h_) return std::unexpected(curl_setopt_error(curl_option_name(option), "no handle"));
    if (const CURLcode rc = curl_easy_setopt(h_, option, value); rc != CURLE_OK)
      return std::unexpected(curl_setopt_error(curl_option_name(option), curl_easy_strerror(rc)));
    return {};
  }

private:
  explicit CurlEasy(CURL* h) : h_(h) {}
  CURL* h_ = nullptr;
};

// Sets the CA file and directory find_tls_trust chose on a handle, for the peer and for an
// HTTPS proxy; each unset one is cleared, so libcurl's compiled-in locations (the build
// machine's) never add to it. Nothing found: libcurl's defaults are left alone (the caller
// refuses https:// URLs first, with TlsTrust::missing_error).
Status apply_tls_trust(CurlEasy& handle, const TlsTrust& trust);

// The protocols a transfer from `url` may be redirected to: an https:// URL only to https://
// (a redirect to http:// would be a downgrade: the request and the artifact in clear), an
// http:// URL to either. CURLOPT_REDIR_PROTOCOLS_STR needs libcurl 7.85: Debian 12 and the
// static release build (scripts/static-deps, Debian 12's source) both have 7.88.1, so the
// deprecated bitmask option (a deprecation warning, an error under -Werror) is not needed.
Status restrict_redirects(CurlEasy& handle, std::string_view url);

// After a transfer from `url` failed with `code`: when libcurl refused to follow a redirect to a
// protocol restrict_redirects forbids, an error naming both URLs (redacted) and what to do;
// nothing otherwise. The target comes from CURLINFO_REDIRECT_URL, else the effective URL
// libcurl had moved on to (7.88 leaves CURLINFO_REDIRECT_URL empty when it refuses).
std::optional<Error> refused_redirect(const CurlEasy& handle, CURLcode code, std::string_view url);

class CurlMulti {
public:
  static Result<CurlMulti> create();
  CurlMulti() = default;
  CurlMulti(const CurlMulti&) = delete;
  CurlMulti& operator=(const CurlMulti&) = delete;
  CurlMulti(CurlMulti&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
  CurlMulti& operator=(CurlMulti&& o) noexcept {
    if (this != &o) {
      reset();
      m_ = std::exchange(o.m_, nullptr);
    }
    return *this;
  }
  ~CurlMulti() { reset(); } // every easy handle must have been removed first

  CURLM* get() const { return m_; }
  explicit operator bool() const { return m_ != nullptr; }
  void reset() {
    if (m_) curl_multi_cleanup(m_);
    m_ = nullptr;
  }

  template <typename T> Status set_opt(CURLMoption option, T value) {
    if (!m_) return std::unexpected(curl_setopt_error("multi option " + std::to_string(option), "no handle"));
    if (const CURLMcode rc = curl_multi_setopt(m_, option, value); rc != CURLM_OK)
      return std::unexpected(curl_setopt_error("multi option " + std::to_string(option), curl_multi_strerror(rc)));
    return {};
  }
  // curl_multi_add_handle, checked: on failure the easy handle is not in the set.
  Status add(const CurlEasy& easy);
  // curl_multi_remove_handle; a handle not in the set is fine.
  void remove(const CurlEasy& easy);

private:
  explicit CurlMulti(CURLM* m) : m_(m) {}
  CURLM* m_ = nullptr;
};

} // namespace hpcbake::util
