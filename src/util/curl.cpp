#include "util/curl.hpp"

#include "util/strings.hpp"
#include "util/url.hpp"

#include <curl/options.h>
#include <fmt/format.h>

#include <mutex>

namespace hpcbake::util {

void curl_global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string curl_option_name(CURLoption option) {
  if (const curl_easyoption* o = curl_easy_option_by_id(option); o && o->name)
    return fmt::format("CURLOPT_{}", o->name);
  return fmt::format("option {}", static_cast<int>(option));
}

Error curl_setopt_error(std::string option, const char* why) {
  return Error{ErrorKind::internal, fmt::format("libcurl refused {}: {}", option, why),
               "this libcurl lacks a feature hpcbake needs: 'curl --version' shows its version and features; install "
               "the distribution's libcurl (7.85 or later, with HTTPS)"};
}

Status CurlSlist::append(const std::string& line) {
  curl_slist* appended = curl_slist_append(list_, line.c_str());
  if (!appended)
    return fail(ErrorKind::internal, fmt::format("libcurl: cannot add the header line '{}' (out of memory)", line),
                "free memory on the machine and run hpcbake again");
  list_ = appended;
  return {};
}

Result<CurlEasy> CurlEasy::create() {
  curl_global_init_once();
  CURL* h = curl_easy_init();
  if (!h)
    return fail(ErrorKind::internal, "libcurl: curl_easy_init failed (out of memory, or libcurl failed to initialise)",
                "free memory on the machine and run hpcbake again");
  return CurlEasy(h);
}

Status apply_tls_trust(CurlEasy& handle, const TlsTrust& trust) {
  if (!trust.found()) return {};
  const char* file = trust.ca_file.empty() ? nullptr : trust.ca_file.c_str();
  const char* dir = trust.ca_dir.empty() ? nullptr : trust.ca_dir.c_str();
  HPCBAKE_TRY(handle.set_opt(CURLOPT_CAINFO, file));
  // libcurl has the proxy options only with HTTPS-proxy support, and CAPATH only where the TLS
  // library reads CA directories: CURLE_NOT_BUILT_IN is fine where there is nothing to set (a
  // proxy option, or CAPATH being cleared), and an error where a CA directory was asked for.
  for (const auto option : {CURLOPT_CAPATH, CURLOPT_PROXY_CAINFO, CURLOPT_PROXY_CAPATH}) {
    const char* value = option == CURLOPT_PROXY_CAINFO ? file : dir;
    if (const CURLcode rc = curl_easy_setopt(handle.get(), option, value); rc != CURLE_OK) {
      if (rc == CURLE_NOT_BUILT_IN && (value == nullptr || option != CURLOPT_CAPATH)) continue;
      return std::unexpected(curl_setopt_error(curl_option_name(option), curl_easy_strerror(rc)));
    }
  }
  return {};
}

Status restrict_redirects(CurlEasy& handle, std::string_view url) {
  return handle.set_opt(CURLOPT_REDIR_PROTOCOLS_STR, is_https_url(url) ? "https" : "http,https");
}

std::optional<Error> refused_redirect(const CurlEasy& handle, CURLcode code, std::string_view url) {
  if (code != CURLE_UNSUPPORTED_PROTOCOL || !handle || !is_https_url(url)) return std::nullopt;
  const char* target = nullptr;
  if (curl_easy_getinfo(handle.get(), CURLINFO_REDIRECT_URL, &target) != CURLE_OK || !target || !*target)
    if (curl_easy_getinfo(handle.get(), CURLINFO_EFFECTIVE_URL, &target) != CURLE_OK || !target) return std::nullopt;
  const std::string_view to(target);
  if (to == url || is_https_url(to)) return std::nullopt; // not a refused redirect
  return Error{ErrorKind::fetch,
               fmt::format("{}: refused its redirect to {}: an https:// URL may only redirect to https:// (following "
                           "it would send the request and what comes back in clear)",
                           redact_url(url), redact_url(to)),
               "ask the server's owner to redirect to https://, or use a URL (or --mirror) that serves the file over "
               "https:// directly"};
}

Result<CurlMulti> CurlMulti::create() {
  curl_global_init_once();
  CURLM* m = curl_multi_init();
  if (!m)
    return fail(ErrorKind::internal, "libcurl: curl_multi_init failed (out of memory, or libcurl failed to initialise)",
                "free memory on the machine and run hpcbake again");
  return CurlMulti(m);
}

Status CurlMulti::add(const CurlEasy& easy) {
  if (const CURLMcode rc = curl_multi_add_handle(m_, easy.get()); rc != CURLM_OK)
    return fail(ErrorKind::internal, fmt::format("libcurl: cannot start the transfer: {}", curl_multi_strerror(rc)),
                "this is a bug in hpcbake or libcurl: report it with the output of 'curl --version'");
  return {};
}

void CurlMulti::remove(const CurlEasy& easy) {
  if (m_ && easy) curl_multi_remove_handle(m_, easy.get());
}

} // namespace hpcbake::util
