#pragma once
// The content-addressed artifact cache:
//   <cache>/sha256/<hex>            verified artifacts, published by fsync + rename only
//   <cache>/partial/<hex>.part      bytes of an unfinished download
//   <cache>/partial/<hex>.json      its sidecar: URL (query removed), a digest of the full URL,
//                                   the server's validator (ETag or Last-Modified)
//   <cache>/verified/<hex>          what sha256/<hex> looked like (size, mtime, ctime, inode) when
//                                   its digest was last checked: an entry that still looks so
//                                   is trusted without hashing it again
//   <cache>/quarantine/<hex>.<why>  files whose digest did not match, kept for inspection: one per
//                                   digest (.download: a transfer's, .corrupt: a cache entry's),
//                                   within a byte budget, the oldest removed first
#include "util/error.hpp"
#include "util/fd.hpp"

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
  std::string actual;             // empty when unreadable
  std::string read_error;         // why it could not be hashed, when unreadable
  std::filesystem::path moved_to; // empty when the move to quarantine failed
  std::string move_error;         // why the move failed, or why the quarantined copy was removed
  bool removed = false;           // moved, then removed: larger than the quarantine budget
  // One line for the user: what the content hashes to (or why it could not be read), and
  // where the file went, or that it is still in place and why.
  std::string describe(const std::filesystem::path& entry) const;
};

struct GcSkipped {
  std::filesystem::path path;
  std::string reason; // "being downloaded by another hpcbake process", or the error
};

struct GcResult {
  int removed = 0;
  std::uintmax_t freed = 0;
  std::vector<GcSkipped> skipped; // locked by a fetch or an install, or not removable
};

struct ListProblem {
  std::filesystem::path path;
  std::string error;
};

// quarantine/'s default byte budget. 2 GiB: five times the largest artifact the shipped
// manifests pin (397995298 bytes, an NVIDIA driver .run), so the copies someone would inspect
// fit, while failed runs can no longer fill the disk with copies (--quarantine-budget).
inline constexpr std::uint64_t kDefaultQuarantineBudget = 2ull << 30;

// What Cache::check_entry found.
struct EntryCheck {
  bool ok = false;
  bool rehashed = false; // the entry changed since it was last verified and was hashed again
  std::string problem;   // !ok: what is wrong with it and where it went
};

// " (held by pid N, COMM)" for the process holding a flock on the file at `path`, from the
// kernel's /proc/locks (the real kernel's, as the lock is, whatever --root names); empty when
// it cannot be told.
std::string flock_holder(const std::filesystem::path& path);

class Cache {
public:
  explicit Cache(std::filesystem::path dir, std::uint64_t quarantine_budget = kDefaultQuarantineBudget);
  const std::filesystem::path& dir() const { return dir_; }

  Status ensure_layout() const;
  std::filesystem::path entry(const std::string& sha256) const { return dir_ / "sha256" / sha256; }
  std::filesystem::path part(const std::string& sha256) const { return dir_ / "partial" / (sha256 + ".part"); }
  std::filesystem::path sidecar(const std::string& sha256) const { return dir_ / "partial" / (sha256 + ".json"); }
  bool has(const std::string& sha256) const;

  std::optional<PartialInfo> read_sidecar(const std::string& sha256) const;
  Status write_sidecar(const std::string& sha256, const PartialInfo& info) const;
  // fsyncs the .part, renames it to sha256/<hex>, fsyncs the directory, drops the sidecar and
  // records the entry as verified.
  Status publish(const std::string& sha256) const;
  // Moves the .part to quarantine/<hex>.download, replacing an earlier copy of that digest,
  // then trims quarantine/ to the budget, oldest first. Returns where it went, or why it is not
  // there (the move failed, or the file alone is larger than the budget and was removed).
  Result<std::filesystem::path> quarantine(const std::string& sha256) const;
  // Before an entry is used: its size against `size` when pinned, and its digest when it changed
  // (size, mtime, ctime or inode) since it was last verified, or was never recorded. A bad
  // entry goes to quarantine/<hex>.corrupt. The unchanged entry costs a stat and a small read.
  EntryCheck check_entry(const std::string& sha256, std::optional<std::uint64_t> size) const;
  void drop_partial(const std::string& sha256) const;

  // The entries, sorted. One that vanishes or cannot be stat'ed while listing (a gc or a
  // fetch beside us) is skipped; `problems`, when given, gets what was skipped and why.
  std::vector<CacheEntry> list(std::vector<ListProblem>* problems = nullptr) const;
  // Re-hashes every entry; one that does not match its name goes to quarantine/<hex>.corrupt.
  std::vector<VerifyProblem> verify(int* verified = nullptr) const;
  // Removes partial downloads, quarantined files and entries whose digest `keep` lacks. Takes
  // the lock a download holds on its .part, and the one a reader holds on an entry
  // (lock_entry_shared), without waiting: what is locked is skipped and listed in `skipped`.
  GcResult gc(const std::set<std::string>& keep) const;
  // A shared flock on an entry, held while it is read (an install extracting it, a bundle
  // copying it), so gc leaves it alone. Fails when the entry cannot be opened.
  Result<util::Fd> lock_entry_shared(const std::string& sha256) const;

private:
  std::filesystem::path verified_record(const std::string& sha256) const { return dir_ / "verified" / sha256; }
  void record_verified(const std::string& sha256) const;
  // Moves `from` to quarantine/<hex>.<suffix> (one copy per digest) and applies the budget.
  Result<std::filesystem::path> move_to_quarantine(const std::filesystem::path& from, const std::string& sha256,
                                                   const char* suffix) const;
  std::filesystem::path dir_;
  std::uint64_t quarantine_budget_;
};

} // namespace hpcbake::fetch
