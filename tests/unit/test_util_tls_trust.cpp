// util/tls_trust: which CA file and directory libcurl verifies with. --ca-file alone; else the
// environment (SSL_CERT_FILE, CURL_CA_BUNDLE, SSL_CERT_DIR); else the first usable bundle and
// hashed directory where the distributions keep them, under a scratch tree standing in for "/".
#include "helpers.hpp"
#include "util/tls_trust.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

const std::string kPem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fs::path at(const fs::path& root, std::string_view host_path) {
  return root / fs::path(host_path).relative_path();
}

void bundle(const fs::path& root, std::string_view host_path, const std::string& text = kPem) {
  test::write(at(root, host_path), text);
}

void hashed_dir(const fs::path& root, std::string_view host_path) {
  test::write(at(root, host_path) / "5ad8a5d6.0", kPem);
}

} // namespace

TEST_CASE("tls trust: each distribution's bundle is found where it keeps it") {
  for (auto file : util::kCaBundleFiles) {
    CAPTURE(file);
    const auto root = test::scratch("tls-each");
    bundle(root, file);
    const auto t = util::find_tls_trust("", {}, root);
    CHECK(t.ca_file == at(root, file).string());
    CHECK(t.source == t.ca_file);
    CHECK(t.found());
  }
}

TEST_CASE("tls trust: the first usable bundle wins, past empty files, directories and dangling links") {
  const auto root = test::scratch("tls-order");
  bundle(root, "/etc/ssl/certs/ca-certificates.crt", "");               // half-installed: empty
  fs::create_directories(at(root, "/etc/pki/tls/certs/ca-bundle.crt")); // not a file
  fs::create_directories(at(root, "/etc/pki/ca-trust/extracted/pem"));
  fs::create_symlink("nowhere.pem", at(root, "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"));
  bundle(root, "/var/lib/ca-certificates/ca-bundle.pem");
  bundle(root, "/etc/ssl/cert.pem");
  auto t = util::find_tls_trust("", {}, root);
  CHECK(t.ca_file == at(root, "/var/lib/ca-certificates/ca-bundle.pem").string());
  CHECK(t.looked_at_files.size() == 4); // up to the one found

  // SUSE's /etc/ssl/ca-bundle.pem is a relative link to /var/lib/ca-certificates/ca-bundle.pem.
  fs::remove(at(root, "/var/lib/ca-certificates/ca-bundle.pem"));
  bundle(root, "/var/lib/ca-certificates/real.pem");
  fs::create_symlink("../../var/lib/ca-certificates/real.pem", at(root, "/etc/ssl/ca-bundle.pem"));
  t = util::find_tls_trust("", {}, root);
  CHECK(t.ca_file == at(root, "/etc/ssl/ca-bundle.pem").string());

  if (::geteuid() != 0) { // root reads whatever the mode says
    bundle(root, "/etc/ssl/certs/ca-certificates.crt");
    REQUIRE(::chmod(at(root, "/etc/ssl/certs/ca-certificates.crt").c_str(), 0) == 0);
    t = util::find_tls_trust("", {}, root);
    CHECK(t.ca_file == at(root, "/etc/ssl/ca-bundle.pem").string());
  }
}

TEST_CASE("tls trust: a CA directory counts only when it holds hashed certificate names") {
  const auto root = test::scratch("tls-dir");
  fs::create_directories(at(root, "/etc/ssl/certs")); // what Debian's openssl package ships
  test::write(at(root, "/etc/ssl/certs/README"), "x");
  test::write(at(root, "/etc/ssl/certs/5ad8a5d6.pem"), kPem);
  auto t = util::find_tls_trust("", {}, root);
  CHECK(t.ca_dir.empty());
  CHECK_FALSE(t.found());

  hashed_dir(root, "/etc/pki/tls/certs");
  t = util::find_tls_trust("", {}, root);
  CHECK(t.ca_dir == at(root, "/etc/pki/tls/certs").string());
  CHECK(t.ca_file.empty());
  CHECK(t.found()); // a hashed directory alone verifies

  hashed_dir(root, "/etc/ssl/certs");
  bundle(root, "/etc/ssl/certs/ca-certificates.crt");
  t = util::find_tls_trust("", {}, root);
  CHECK(t.ca_dir == at(root, "/etc/ssl/certs").string());
  CHECK(t.ca_file == at(root, "/etc/ssl/certs/ca-certificates.crt").string());
}

TEST_CASE("tls trust: the environment overrides the well-known paths, file and directory each on its own") {
  const auto root = test::scratch("tls-env");
  bundle(root, "/etc/ssl/certs/ca-certificates.crt");
  hashed_dir(root, "/etc/ssl/certs");

  util::TlsEnv env;
  env.ssl_cert_file = "/opt/ca/file.pem"; // taken as given: the user said so
  auto t = util::find_tls_trust("", env, root);
  CHECK(t.ca_file == "/opt/ca/file.pem");
  CHECK(t.source == "SSL_CERT_FILE");
  CHECK(t.ca_dir == at(root, "/etc/ssl/certs").string());

  env.curl_ca_bundle = "/opt/ca/curl.pem"; // SSL_CERT_FILE first
  CHECK(util::find_tls_trust("", env, root).ca_file == "/opt/ca/file.pem");
  env.ssl_cert_file.clear();
  t = util::find_tls_trust("", env, root);
  CHECK(t.ca_file == "/opt/ca/curl.pem");
  CHECK(t.source == "CURL_CA_BUNDLE");

  env = {};
  env.ssl_cert_dir = "/opt/ca/dir";
  t = util::find_tls_trust("", env, root);
  CHECK(t.ca_dir == "/opt/ca/dir");
  CHECK(t.ca_file == at(root, "/etc/ssl/certs/ca-certificates.crt").string());
}

TEST_CASE("tls trust: --ca-file is used alone, whatever the environment and the host hold") {
  const auto root = test::scratch("tls-explicit");
  bundle(root, "/etc/ssl/certs/ca-certificates.crt");
  hashed_dir(root, "/etc/ssl/certs");
  util::TlsEnv env;
  env.ssl_cert_file = "/opt/ca/file.pem";
  env.ssl_cert_dir = "/opt/ca/dir";
  const auto t = util::find_tls_trust("/srv/mirror-ca.pem", env, root);
  CHECK(t.ca_file == "/srv/mirror-ca.pem");
  CHECK(t.ca_dir.empty()); // replaces the host's CAs, not added to them
  CHECK(t.source == "--ca-file");
}

TEST_CASE("tls trust: nothing found names every path looked at and says what to do") {
  const auto root = test::scratch("tls-none");
  const auto t = util::find_tls_trust("", {}, root);
  CHECK_FALSE(t.found());
  CHECK(t.looked_at_files.size() == util::kCaBundleFiles.size());
  CHECK(t.looked_at_dirs.size() == util::kCaDirs.size());
  const Error e = t.missing_error("https://example.com/x?sig=token");
  CHECK(e.kind == ErrorKind::fetch);
  CHECK(e.message.starts_with("https://example.com/x: no CA certificates"));
  CHECK(e.message.find("token") == std::string::npos);
  for (auto file : util::kCaBundleFiles)
    CHECK(e.message.find(at(root, file).string()) != std::string::npos);
  for (auto dir : util::kCaDirs)
    CHECK(e.message.find(at(root, dir).string()) != std::string::npos);
  CHECK(e.message.find("SSL_CERT_FILE") != std::string::npos);
  CHECK(e.hint.find("install ca-certificates") != std::string::npos);
  CHECK(e.hint.find("--ca-file") != std::string::npos);
}

TEST_CASE("tls trust: https URLs are told apart from the others") {
  CHECK(util::is_https_url("https://example.com/x"));
  CHECK(util::is_https_url("HTTPS://example.com/x"));
  CHECK_FALSE(util::is_https_url("http://example.com/x"));
  CHECK_FALSE(util::is_https_url("file:///srv/x"));
  CHECK_FALSE(util::is_https_url("https:"));
}
