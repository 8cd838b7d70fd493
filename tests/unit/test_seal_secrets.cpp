// seal/secrets: what counts as a secret on a line, and what does not.
#include "seal/secrets.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;
using V = std::vector<std::string>;

TEST_CASE("seal secrets: each kind") {
  CHECK(seal::scan_line("-----BEGIN PRIVATE KEY-----") == V{"private-key"});
  CHECK(seal::scan_line("-----BEGIN OPENSSH PRIVATE KEY-----") == V{"private-key"});
  CHECK(seal::scan_line("-----BEGIN ENCRYPTED PRIVATE KEY-----") == V{"private-key"});
  CHECK(seal::scan_line("GET https://a.blob.core.windows.net/c/f?sv=2022-11-02&sig=abc%2Bdef") == V{"sas-token"});
  CHECK(seal::scan_line("mirror: https://a/c?SIG=xyz") == V{"sas-token"});
  CHECK(seal::scan_line("BlobEndpoint=https://a;SharedAccessSignature=sv=2022&sig=x") == V{"sas-token"});
  CHECK(seal::scan_line("Authorization: Bearer abc") == V{"authorization"});
  CHECK(seal::scan_line("authorization:SharedKey acct:xyz") == V{"authorization"});
  CHECK(seal::scan_line("{\"Authorization\": \"Basic dXNlcjpwYXNz\"}") == V{"authorization"});
  CHECK(seal::scan_line("token: bearer eyJ0eXAiOiJKV1Qi") == V{"authorization"});
  CHECK(seal::scan_line("AccountName=a;AccountKey=Zm9vYmFyYmF6cXV4==;") == V{"account-key"});
}

TEST_CASE("seal secrets: look-alikes are not secrets") {
  CHECK(seal::scan_line("https://a.blob.core.windows.net/c/NVIDIA.run").empty()); // redacted: no query
  CHECK(seal::scan_line("design=1 sig=abc").empty());                             // not a URL parameter
  CHECK(seal::scan_line("https://a/b?x=1&sig=").empty());                         // no value
  CHECK(seal::scan_line("https://a/b?signature=abc").empty());
  CHECK(seal::scan_line("the Authorization header is never logged").empty());
  CHECK(seal::scan_line("a bearer of news").empty());
  CHECK(seal::scan_line("AccountKey=").empty());
  CHECK(seal::scan_line("-----BEGIN CERTIFICATE-----").empty());
  CHECK(seal::scan_line("-----BEGIN PUBLIC KEY-----").empty());
}

TEST_CASE("seal secrets: several kinds on one line, each once") {
  CHECK(seal::scan_line("-----BEGIN PRIVATE KEY----- ?sig=a&sig=b Authorization: x AccountKey=abcdefgh12") ==
        V{"private-key", "sas-token", "authorization", "account-key"});
}

TEST_CASE("seal secrets: scan_paths walks files and directories under the root, skipping binaries and symlinks") {
  const auto root = test::scratch("seal-scan");
  test::write(root / "var/log/hpcbake.log", "ok\nx?sig=1\n");
  test::write(root / "var/lib/hpcbake/a/b/c.txt", "\n\n\nAuthorization: y\n");
  test::write(root / "var/lib/hpcbake/bin", std::string("\x7f"
                                                        "ELF\0\0?sig=1",
                                                        12));
  test::write(root / "elsewhere/secret", "?sig=outside\n");
  std::filesystem::create_symlink(root / "elsewhere/secret", root / "var/lib/hpcbake/link");
  const util::HostFs fs(root);
  const auto r = seal::scan_paths(fs, {"/var/lib/hpcbake", "/var/log/hpcbake.log", "/var/missing"});
  REQUIRE(r.findings.size() == 2);
  CHECK(r.findings[0].path == "/var/lib/hpcbake/a/b/c.txt");
  CHECK(r.findings[0].line == 4);
  CHECK(r.findings[0].kind == "authorization");
  CHECK(r.findings[1].path == "/var/log/hpcbake.log");
  CHECK(r.findings[1].line == 2);
  CHECK(r.files_scanned == 2);
  CHECK(r.binary_skipped == 1);
}
