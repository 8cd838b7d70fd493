#pragma once
// The content-addressed artifact cache:
//   <cache>/sha256/<hex>            verified artifacts, published by fsync + rename only
//   <cache>/partial/<hex>.part      bytes of an unfinished download
//   <cache>/partial/<hex>.json      its sidecar: URL (query removed), a digest of the full URL,
//                                   the server's validator (ETag or Last-Modified)
//   <cache>/quarantine/<hex>.<n>    files whose digest did not match, kept for inspection
#include "util/error.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hpcbake::fetch {

struct PartialInfo {
  std::string url;        // redacted
  std::string url_digest; // SHA-256 of the full URL (a SAS token is never written out)
  std::string validator;  // ETag, or Last-Modified, or empty
};

struct CacheEntry {
  std::string sha256;
  std::uint64_t size = 0;
};

struct VerifyProblem {
  std::string sha256;
  std::string actual; // empty when unreadable
  std::filesystem::path moved_to;
};

struct GcResult {
  int removed = 0;
  std::uintmax_t freed = 0;
};

class Cache {
public:
  explicit Cache(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  Status ensure_layout() const;
  std::filesystem::path entry(const std::string& sha256) const { return dir_ / "sha256" / sha256; }
  std::filesystem::path part(const std::string& sha256) const { return dir_ / "partial" / (sha256 + ".part"); }
  std::filesystem::path sidecar(const std::string& sha256) const { return dir_ / "partial" / (sha256 + ".json"); }
  bool has(const std::string& sha256) const;

  std::optional<PartialInfo> read_sidecar(const std::string& sha256) const;
  Status write_sidecar(const std::string& sha256, const PartialInfo& info) const;
  // fsyncs the .part, renames it to sha256/<hex>, fsyncs the directory, drops the sidecar.
  Status publish(const std::string& sha256) const;
  // Moves the .part to quarantine/; returns where it went.
  std::filesystem::path quarantine(const std::string& sha256) const;
  void drop_partial(const std::string& sha256) const;

  std::vector<CacheEntry> list() const;
  // Re-hashes every entry; one that does not match its name goes to quarantine/<hex>.corrupt.
  std::vector<VerifyProblem> verify(int* verified = nullptr) const;
  // Removes partial downloads, quarantined files and entries whose digest `keep` lacks.
  GcResult gc(const std::set<std::string>& keep) const;

private:
  std::filesystem::path dir_;
};


} // namespace hpcbake::fetch
