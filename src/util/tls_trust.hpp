#pragma once
// Which CA certificates libcurl verifies TLS peers with. A release binary links libcurl and
// OpenSSL statically, so the CA locations compiled into them are the build machine's, not the
// host's: hpcbake finds the host's CA store itself, the same way on every distribution, and
// sets it on every handle (CURLOPT_CAINFO, CURLOPT_CAPATH and their proxy twins).
//
// The order, first match wins, the file and the directory each on its own:
//   1. --ca-file FILE: that file alone (no directory): it replaces the system's CAs, it does
//      not add to them (to add a private CA, pass a file holding it and the system bundle);
//   2. the environment, taken as given: the file from SSL_CERT_FILE (OpenSSL's variable), else
//      CURL_CA_BUNDLE (curl's); the directory from SSL_CERT_DIR (OpenSSL's);
//   3. the first of kCaBundleFiles that is a readable, non-empty regular file (a symbolic link
//      to one counts), and the first of kCaDirs that holds OpenSSL's hashed names (HHHHHHHH.N, as
//      c_rehash and update-ca-certificates make them): the bare directory is there without any
//      certificate (Debian's openssl package ships /etc/ssl/certs empty).
// Nothing found leaves libcurl's defaults alone: http:// still works, and an https:// request
// fails with missing_error() before it starts.
//
// These are the HOST's files (the machine hpcbake runs on), never the --root target tree's:
// `root` exists so the tests can stand a scratch tree in for "/".
#include "util/error.hpp"

#include <array>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::util {

// Where the distributions keep their CA bundle, each named by its source:
//   - Go's crypto/x509 root_linux.go (certFiles) lists /etc/ssl/certs/ca-certificates.crt
//     (Debian/Ubuntu), /etc/pki/tls/certs/ca-bundle.crt (Fedora/RHEL),
//     /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem (CentOS/RHEL 7 and later), /etc/ssl/ca-bundle.pem
//     (openSUSE) and /etc/ssl/cert.pem (Alpine); curl's configure (acinclude.m4, CURL_CHECK_CA_BUNDLE)
//     probes the first two and /etc/ssl/cert.pem as well;
//   - openSUSE's ca-certificates (certbundle.run) writes /var/lib/ca-certificates/ca-bundle.pem and
//     links /etc/ssl/ca-bundle.pem to it (SLES 12 and later, openSUSE);
//   - Azure Linux's ca-certificates.spec (microsoft/azurelinux, SPECS/ca-certificates) links
//     /etc/pki/tls/certs/ca-bundle.crt to /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, and
//     /etc/ssl/certs to ../pki/tls/certs, as Fedora and EL do.
// EL 8/9 and Azure Linux hold the same bundle under both /etc/pki names; the order only decides
// which name errors show.
inline constexpr std::array<std::string_view, 6> kCaBundleFiles = {
    "/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu (update-ca-certificates)
    "/etc/pki/tls/certs/ca-bundle.crt",                  // RHEL/AlmaLinux/Fedora, Azure Linux
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // the same, where update-ca-trust writes it
    "/var/lib/ca-certificates/ca-bundle.pem",            // SUSE (openSUSE's certbundle.run)
    "/etc/ssl/ca-bundle.pem",                            // SUSE (a link to the one above)
    "/etc/ssl/cert.pem",                                 // Alpine
};
// OpenSSL hashed certificate directories (CURLOPT_CAPATH): Go's certDirectories and curl's
// configure (--with-ca-path default /etc/ssl/certs; on SUSE a link to /var/lib/ca-certificates/pem).
inline constexpr std::array<std::string_view, 2> kCaDirs = {"/etc/ssl/certs", "/etc/pki/tls/certs"};

// The environment variables find_tls_trust reads (empty: unset).
struct TlsEnv {
  std::string ssl_cert_file;  // SSL_CERT_FILE
  std::string ssl_cert_dir;   // SSL_CERT_DIR
  std::string curl_ca_bundle; // CURL_CA_BUNDLE
  static TlsEnv from_process();
};

struct TlsTrust {
  std::string ca_file; // for CURLOPT_CAINFO; empty: none found
  std::string ca_dir;  // for CURLOPT_CAPATH; empty: none
  std::string source;  // where ca_file (or ca_dir) came from: "--ca-file", "SSL_CERT_FILE", a path
  std::vector<std::string> looked_at_files, looked_at_dirs; // every path tried, for the error
  bool found() const { return !ca_file.empty() || !ca_dir.empty(); }
  // When nothing was found: why an https:// URL cannot be verified (the paths looked at), what
  // to do, and both as the Error "URL: why" for that URL.
  std::string missing_reason() const;
  static std::string missing_hint();
  Error missing_error(std::string_view url) const;
};

// "/", or the test hook TestHook::tls_root (util/test_hooks.hpp: a tree standing in for a host
// without ca-certificates; refused on a real machine like every test hook, util/preflight.hpp).
std::filesystem::path host_tls_root();

TlsTrust find_tls_trust(const std::string& ca_file, const TlsEnv& env = TlsEnv::from_process(),
                        const std::filesystem::path& root = host_tls_root());

// Whether a URL needs TLS (https://, any case).
bool is_https_url(std::string_view url);

} // namespace hpcbake::util
