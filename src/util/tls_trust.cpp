#include "util/tls_trust.hpp"

#include "util/strings.hpp"
#include "util/test_hooks.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace hpcbake::util {

namespace fs = std::filesystem;

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// A CA bundle OpenSSL could load: a regular file (through links) with something in it, that
// this process may read. An empty file is what a half-installed ca-certificates leaves.
bool usable_file(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && ::access(p.c_str(), R_OK) == 0;
}

// OpenSSL looks a certificate up in a CA directory by its subject's hash: HHHHHHHH.N.
bool hashed_name(std::string_view name) {
  const auto dot = name.find('.');
  if (dot != 8 || dot + 1 == name.size()) return false;
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return std::all_of(name.begin(), name.begin() + 8, hex) && std::all_of(name.begin() + 9, name.end(), digit);
}

bool usable_dir(const fs::path& p) {
  if (::access(p.c_str(), R_OK | X_OK) != 0) return false;
  std::error_code ec;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
    if (hashed_name(it->path().filename().native())) return true;
  return false;
}

// The host path under `root` ("/" for the real machine).
fs::path under(const fs::path& root, std::string_view host_path) {
  return root / fs::path(host_path).relative_path();
}

} // namespace

fs::path host_tls_root() {
  const std::string hook = test_hook(TestHook::tls_root);
  return hook.empty() ? fs::path("/") : fs::path(hook);
}

TlsEnv TlsEnv::from_process() {
  return {env_or_empty("SSL_CERT_FILE"), env_or_empty("SSL_CERT_DIR"), env_or_empty("CURL_CA_BUNDLE")};
}

TlsTrust find_tls_trust(const std::string& ca_file, const TlsEnv& env, const fs::path& root) {
  TlsTrust t;
  if (!ca_file.empty()) {
    t.ca_file = ca_file;
    t.source = "--ca-file";
    return t;
  }
  if (!env.ssl_cert_file.empty()) {
    t.ca_file = env.ssl_cert_file;
    t.source = "SSL_CERT_FILE";
  } else if (!env.curl_ca_bundle.empty()) {
    t.ca_file = env.curl_ca_bundle;
    t.source = "CURL_CA_BUNDLE";
  }
  if (!env.ssl_cert_dir.empty()) {
    t.ca_dir = env.ssl_cert_dir;
    if (t.source.empty()) t.source = "SSL_CERT_DIR";
  }
  for (auto file : kCaBundleFiles) {
    if (!t.ca_file.empty()) break;
    const fs::path p = under(root, file);
    t.looked_at_files.push_back(p.string());
    if (usable_file(p)) {
      t.ca_file = p.string();
      if (t.source.empty()) t.source = t.ca_file;
    }
  }
  for (auto dir : kCaDirs) {
    if (!t.ca_dir.empty()) break;
    const fs::path p = under(root, dir);
    t.looked_at_dirs.push_back(p.string());
    if (usable_dir(p)) t.ca_dir = p.string();
  }
  return t;
}

std::string TlsTrust::missing_reason() const {
  return fmt::format("no CA certificates to verify TLS with: no CA bundle (a readable, non-empty file) at {}, no "
                     "hashed certificates in {}, and SSL_CERT_FILE, SSL_CERT_DIR and CURL_CA_BUNDLE are not set",
                     join(looked_at_files, ", "), join(looked_at_dirs, ", "));
}

std::string TlsTrust::missing_hint() {
  return "install the distribution's CA certificates (apt-get, dnf, tdnf or zypper install ca-certificates), or "
         "pass --ca-file FILE naming a PEM bundle";
}

Error TlsTrust::missing_error(std::string_view url) const {
  return Error{ErrorKind::fetch, fmt::format("{}: {}", redact_url(url), missing_reason()), missing_hint()};
}

bool is_https_url(std::string_view url) {
  return url.size() >= 8 && to_lower(url.substr(0, 8)) == "https://";
}

} // namespace hpcbake::util
