#pragma once
// The secret scan `seal` runs over hpcbake's own state, cache and logs before an image is
// captured: anything that would let the image's users (or anyone who copies it) into the
// account that built it. Findings name the file and line and the kind of secret, never the
// secret itself, so the report is safe to print into a CI log.
//
// Kinds, matched on each line:
//   private-key    a PEM private key header (-----BEGIN ... PRIVATE KEY-----)
//   sas-token      an Azure SAS signature: `sig=` as a URL query parameter (after ? or &) with
//                  a value, or `SharedAccessSignature=` in a connection string
//   authorization  an HTTP `Authorization:` header with a value, or `Bearer <token>`
//   account-key    an Azure storage account key (`AccountKey=` with a value)
// Binary files (a NUL byte in the first 64 KiB: downloaded installers in the cache) are
// skipped and counted: their content is pinned by SHA-256 and seal deletes the cache anyway.
#include "util/hostfs.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::seal {

struct SecretFinding {
  std::string path; // host path ("/var/log/hpcbake/install.log")
  int line = 0;     // 1-based
  std::string kind; // private-key | sas-token | authorization | account-key
};

struct ScanResult {
  std::vector<SecretFinding> findings;
  int files_scanned = 0;
  int binary_skipped = 0;
};

// The kinds of secret on one line (each kind at most once), in the order above.
std::vector<std::string> scan_line(std::string_view line);

// Every regular file under each host path (a file or a directory, recursively; symlinks are
// not followed), read under `fs`'s root.
ScanResult scan_paths(const util::HostFs& fs, const std::vector<std::string>& host_paths);

} // namespace hpcbake::seal
