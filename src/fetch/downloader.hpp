#pragma once
// The download engine: libcurl multi, several transfers at once, each verified while
// it streams (SHA-256 and size in the write path) and published to the cache only
// when the digest matches. Partial downloads resume with a Range request guarded by
// If-Range (the server's ETag or Last-Modified), so a changed file starts over.
//
// Per URL: transport errors, DNS, 408/429/5xx and stalls (low-speed limit) are retried
// with exponential backoff and jitter, honouring Retry-After; 403/404/other 4xx, TLS
// verification failures, too many redirects and digest mismatches move on to the next
// URL (mirrors first, then the manifest's URLs in order). URLs appear in events and
// errors without their query string and userinfo: SAS tokens and passwords never leave the
// process. An https:// URL may redirect only to https://. A body is refused as soon as it (or
// its Content-Length) passes the pinned size, or max_unpinned_bytes when none is pinned.
// Accept-Encoding: identity is sent; a body the server compressed anyway fails its digest,
// and the error says so. Only a 200, or a 206 answering our Range, is written to the .part;
// a response header past libcurl's limit is named and that URL not retried. A .part another
// process holds (flock) is waited for, up to lock_timeout, and its verified result used.
#include "fetch/cache.hpp"
#include "fetch/sink.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::fetch {

struct Job {
  std::string name;              // file name, for people and for mirrors holding files by name
  std::vector<std::string> urls; // tried in order after the mirrors
  std::string sha256;            // required: an unpinned download is refused before it starts
  std::optional<std::uint64_t> size;
};

// The bound on an artifact without a pinned size (--max-download-bytes). 4 GiB: ten times the
// largest artifact the shipped manifests pin (397995298 bytes, an NVIDIA driver .run), so a real
// artifact is not cut off, while a server that streams without end stops long before it fills
// a VM's disk.
inline constexpr std::uint64_t kDefaultMaxUnpinnedBytes = 4ull << 30;

struct Options {
  std::filesystem::path cache_dir;
  std::uint64_t max_unpinned_bytes = kDefaultMaxUnpinnedBytes;
  std::uint64_t quarantine_budget = kDefaultQuarantineBudget; // cache.hpp
  int parallel = 4;
  int attempts_per_url = 4;
  long connect_timeout_s = 15;
  long low_speed_bytes_per_s = 1024; // slower than this ...
  long low_speed_seconds = 30;       // ... for this long is a stall
  long max_redirects = 5;
  double backoff_initial_s = 1.0;
  double backoff_max_s = 30.0;
  double retry_after_max_s = 300.0;
  std::string ca_file;                   // the only CAs to verify with (replaces the host's); empty: the host's
  std::vector<std::string> mirrors;      // base URLs tried first: <base>/sha256/<hex>, then <base>/<name>
  DirectIo direct_io = DirectIo::try_it; // see sink.hpp
  // Another process downloading the same artifact into this cache holds its .part's lock: wait
  // this long for it (fetch --lock-timeout), then take its verified result from the cache. 10
  // minutes, install's --lock-timeout default, as apt's and dnf's lock waits are bounded.
  std::chrono::milliseconds lock_timeout = std::chrono::minutes(10);
  // Set (by a signal handler): no transfer starts, the running ones stop, and each keeps its
  // bytes in the .part for the next run to resume. Their results fail with Interrupted.
  const std::atomic<bool>* stop = nullptr;
};

// `restarted`: bytes on disk were discarded (the server ignored a range, a resumed file failed
// its digest, a cached copy changed): `bytes` goes down only at this event, and `message`
// says why. Between two of them an artifact's `bytes` never decreases.
// `waiting`: another process holds the artifact's download lock; `delay_s` is the most this
// job waits for it (Options::lock_timeout).
enum class EventKind { cache_hit, started, progress, retrying, restarted, finished, failed, waiting };
const char* to_string(EventKind kind);

struct Event {
  EventKind kind = EventKind::progress;
  std::string name;
  std::string url;         // query string removed
  std::uint64_t bytes = 0; // bytes of the artifact on disk so far
  std::uint64_t total = 0; // expected size, 0 when unknown
  std::uint64_t resumed_from = 0;
  std::uint64_t received = 0; // body bytes over the network in this run, every attempt: the link's rate
  double delay_s = 0;         // retrying: wait before the next attempt
  std::string message;        // retrying/failed: why
};

class Observer {
public:
  virtual ~Observer() = default;
  virtual void on_event(const Event& event) = 0;
};

struct JobResult {
  std::string name;
  std::string sha256;
  std::filesystem::path path; // in the cache, when ok
  bool ok = false;
  bool from_cache = false;
  std::uint64_t bytes_transferred = 0; // body bytes received over the network
  std::string error;
  bool interrupted = false;        // Options::stop ended it; the .part is kept
  bool lock_held = false;          // another process held its download lock past Options::lock_timeout
  std::uint64_t partial_bytes = 0; // interrupted: bytes kept in the .part
};

struct Report {
  std::vector<JobResult> results;
  bool ok() const;
};

// Jobs that share a SHA-256 are fetched once. Each job without a result of its own gets a
// copy of the result for its bytes, under its own name, so every job has exactly one.
void give_twins_results(const std::vector<Job>& jobs, std::vector<JobResult>& results);

// Downloads every job into the cache. Never throws; per-job failures are in the report.
Result<Report> download(const std::vector<Job>& jobs, const Options& options, Observer& observer);

// "<base>/<path>", keeping base's query string (an Azure SAS token) after the path.
std::string join_url(const std::string& base, const std::string& path);

} // namespace hpcbake::fetch
