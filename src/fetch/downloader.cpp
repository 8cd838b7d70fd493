#include "fetch/downloader.hpp"

#include "fetch/retry.hpp"
#include "fetch/sink.hpp"
#include "util/clock.hpp"
#include "util/curl.hpp"
#include "util/fd.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"
#include "util/tls_trust.hpp"
#include "util/url.hpp"

#include <curl/curl.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

namespace hpcbake::fetch {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* to_string(EventKind kind) {
  switch (kind) {
  case EventKind::cache_hit:
    return "cache-hit";
  case EventKind::started:
    return "started";
  case EventKind::progress:
    return "progress";
  case EventKind::retrying:
    return "retrying";
  case EventKind::restarted:
    return "restarted";
  case EventKind::finished:
    return "finished";
  case EventKind::failed:
    return "failed";
  case EventKind::waiting:
    return "waiting";
  }
  return "unknown";
}

bool Report::ok() const {
  return std::all_of(results.begin(), results.end(), [](const auto& r) { return r.ok; });
}

std::string join_url(const std::string& base, const std::string& path) {
  const auto q = base.find_first_of("?#");
  std::string head = q == std::string::npos ? base : base.substr(0, q);
  const std::string tail = q == std::string::npos ? std::string() : base.substr(q);
  while (!head.empty() && head.back() == '/')
    head.pop_back();
  return head + "/" + path + tail;
}

namespace {

class Engine;

// Why the bytes cannot be the file's when the server compressed them anyway, and what to do;
// empty when it did not (no Content-Encoding, or identity).
std::string compressed_note(const std::string& encoding) {
  if (encoding.empty() || util::to_lower(encoding) == "identity") return {};
  return fmt::format("; the server compressed the body (Content-Encoding: {}) although hpcbake asked for the file as "
                     "it is (Accept-Encoding: identity), so these are not the file's bytes: ask the server's owner to "
                     "serve it uncompressed, or use another URL or --mirror",
                     encoding);
}

// Only these responses carry the file's bytes: a 200, or a 206 answering our Range. Any other
// 2xx (201, 203 from a transforming proxy, a 206 nobody asked for...) is not the file, and
// its body never goes into the .part, where the next run would resume after it.
bool carries_the_file(long status, std::uint64_t range_from) {
  return status == 200 || (status == 206 && range_from > 0);
}

// Why a 2xx that is not the file ended the attempt.
std::string not_the_file(long status, std::uint64_t range_from) {
  return status == 206 && range_from == 0
             ? "HTTP 206 to a request without a Range: only a 200 or 206 response is the file; its body was not kept"
             : fmt::format("HTTP {}: only a 200 or 206 response is the file; its body was not kept", status);
}

// libcurl refuses a response header line longer than CURL_MAX_HTTP_HEADER (and, from 7.83, a
// response whose headers together pass 300 KiB): before 8.6 as CURLE_OUT_OF_MEMORY with no
// message of its own ("Out of memory"), from 8.6 as CURLE_TOO_LARGE. `in_headers`: a status
// line had arrived and no body yet, so this is the server's header, not our memory.
bool header_too_large(CURLcode code, bool in_headers, const std::string& error) {
#if LIBCURL_VERSION_NUM >= 0x080600
  if (code == CURLE_TOO_LARGE) return true;
#endif
  if (code == CURLE_OUT_OF_MEMORY) return in_headers;
  return code == CURLE_RECV_ERROR && error.find("Too large response headers") != std::string::npos;
}

struct Transfer {
  Engine* engine = nullptr;
  const Job* job = nullptr;
  std::vector<std::string> candidates;
  std::size_t url_index = 0;
  int attempt = 0;
  Clock::time_point not_before{};

  util::CurlEasy easy;
  util::CurlSlist headers;
  char errbuf[CURL_ERROR_SIZE] = {};

  util::Fd fd;                // the .part, flock'ed while this process downloads it
  std::unique_ptr<Sink> sink; // this attempt's writer, from the first body byte to the end
  util::Sha256 hash;
  std::uint64_t hashed = 0; // bytes of .part covered by `hash`
  bool hash_valid = false;  // hash state matches the .part's first `hashed` bytes
  std::uint64_t range_from = 0;
  bool body_started = false;
  long status = 0;
  std::string etag, last_modified, retry_after, content_range, content_encoding;
  std::optional<std::uint64_t> content_length;
  std::string write_error;
  bool local_io_error = false;    // the write_error is ours (disk full, permissions): not worth a retry
  bool too_big = false;           // the body passed the size limit: the server serves another file
  bool retried_from_zero = false; // a resumed download failed its digest and was tried again whole
  bool interrupted = false;       // Options::stop: ends without a retry, the .part kept
  std::uint64_t received = 0;     // network body bytes, all attempts
  std::string last_error;
  Clock::time_point last_progress{};
  std::uint64_t reported = 0; // `bytes` of the last event: a smaller one comes with a restarted event
  std::string restart_note;   // why the bytes on disk were last discarded
  bool lock_busy = false;     // the last start found the .part locked by another process (or published)
  std::optional<Clock::time_point> lock_deadline; // waiting for that lock until then

  // How the last attempt ended, kept while the sink drains and syncs.
  CURLcode done_code = CURLE_OK;
  long done_status = 0;
  bool done_in_headers = false; // a status line had come, and no body: libcurl stopped in the headers
  std::string done_curl_error, done_retry_after, done_content_encoding;
  std::string done_refused_redirect; // the target of a redirect libcurl refused (a downgrade)

  const std::string& url() const { return candidates[url_index]; }
  std::uint64_t bytes() const { return hashed + (sink ? sink->appended() : 0); }
};

class Engine {
public:
  Engine(const Options& o, Observer& obs)
      : opt_(o), obs_(obs), cache_(o.cache_dir, o.quarantine_budget), trust_(util::find_tls_trust(o.ca_file)),
        rng_(std::random_device{}()) {}
  ~Engine() {
    for (auto* list : {&active_, &finishing_})
      for (auto& t : *list) {
        cleanup(*t);
        t->sink.reset(); // its worker may still wake the multi handle
        t->fd.reset();
      }
  }

  Result<Report> run(const std::vector<Job>& jobs);

private:
  void queue(const std::vector<Job>& jobs);
  void emit(EventKind kind, Transfer& t, std::string message = {}, double delay = 0) {
    std::uint64_t bytes = t.bytes();
    if (bytes < t.reported && kind == EventKind::failed) bytes = t.reported; // the last word: no restart
    if (bytes < t.reported && kind != EventKind::restarted)
      emit(EventKind::restarted, t,
           t.restart_note.empty() ? fmt::format("{} bytes discarded, starting again from byte 0", t.reported)
                                  : t.restart_note);
    t.reported = bytes;
    Event e;
    e.kind = kind;
    e.name = t.job->name;
    e.url = t.url_index < t.candidates.size() ? util::redact_url(t.url()) : std::string();
    e.bytes = bytes;
    e.total = t.job->size.value_or(0);
    e.resumed_from = t.range_from;
    e.received = t.received;
    e.message = std::move(message);
    e.delay_s = delay;
    obs_.on_event(e);
  }

  Status start(Transfer& t);
  // A verified cache entry for the job: its result and a cache_hit event. One that does not
  // match goes to quarantine (a restarted event says so) and the job downloads it again.
  bool take_cached(Transfer& t);
  // The .part is another process's: wait for it, polling, up to Options::lock_timeout; then
  // fail with lock_held. True while the transfer waits (it goes back to the queue).
  bool wait_for_lock(Transfer& t);
  // Options::stop: what waits ends now, what runs is retired with its bytes kept.
  void interrupt() {
    for (auto& t : waiting_) {
      complete(*t, false, "interrupted while waiting to start");
      results_.back().interrupted = true;
    }
    waiting_.clear();
    while (!active_.empty()) {
      auto t = std::move(active_.back());
      active_.pop_back();
      t->interrupted = true;
      retire(std::move(t), CURLE_ABORTED_BY_CALLBACK);
    }
  }
  // Opens and locks the .part, and hashes what an earlier run left in it.
  Status open_part(Transfer& t);
  // Every option of an attempt's easy handle, each checked.
  Status configure(Transfer& t);
  // A transfer's curl handle is done: record how, let its sink drain (and fsync), then finish.
  void retire(std::unique_ptr<Transfer> t, CURLcode code);
  // Takes the digest and byte count back from a drained sink.
  void absorb(Transfer& t);
  // Each returns true when the transfer goes back to the queue for another attempt.
  bool finish(Transfer& t);
  bool schedule_retry(Transfer& t, Verdict v, const std::string& why, std::optional<double> retry_after = {});
  bool complete(Transfer& t, bool ok, const std::string& error);
  void drop_if_empty(Transfer& t);
  void cleanup(Transfer& t);
  bool begin_body(Transfer& t);
  // Empties the .part and the digest: the next bytes are the file's first. False on an I/O error.
  // `why` is the restarted event's message when bytes are discarded.
  bool restart_from_zero(Transfer& t, const std::string& why);
  // The most bytes the job's body may have: its pinned size, else Options::max_unpinned_bytes.
  std::uint64_t limit(const Transfer& t) const { return t.job->size.value_or(opt_.max_unpinned_bytes); }
  // Why a body of `bytes` (announced: the Content-Length says so) is refused.
  std::string too_big_reason(const Transfer& t, std::uint64_t bytes, bool announced) const;
  // Marks the transfer refused: its body passed (or will pass) limit().
  void refuse_size(Transfer& t, std::uint64_t bytes, bool announced);

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user);
  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* user);

  const Options& opt_;
  Observer& obs_;
  Cache cache_;
  util::TlsTrust trust_;  // the host's CA store (or --ca-file), looked up once per run
  util::CurlMulti multi_; // declared before the transfers: destroyed after them
  std::mt19937_64 rng_;
  std::deque<std::unique_ptr<Transfer>> waiting_;
  std::vector<std::unique_ptr<Transfer>> active_;
  std::vector<std::unique_ptr<Transfer>> finishing_; // curl is done, the sink is draining
  std::vector<JobResult> results_;
};

std::size_t Engine::on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    // A new response (after a redirect or a 100): forget the previous one's headers.
    auto sp = line.find(' ');
    t.status = sp == std::string_view::npos ? 0 : util::parse_int(line.substr(sp + 1, 3)).value_or(0);
    t.etag.clear();
    t.last_modified.clear();
    t.retry_after.clear();
    t.content_range.clear();
    t.content_encoding.clear();
    t.content_length.reset();
    return size * n;
  }
  if (util::trim(line).empty()) {
    // The end of a response's headers. A body the Content-Length says is too big is refused
    // before a byte of it is read (a 206's length counts from where the download resumes).
    const bool body = carries_the_file(t.status, t.range_from);
    const std::uint64_t from = t.status == 206 ? t.range_from : 0;
    if (body && t.content_length && from + *t.content_length > t.engine->limit(t)) {
      t.engine->refuse_size(t, from + *t.content_length, true);
      return 0; // libcurl ends the transfer with CURLE_WRITE_ERROR
    }
    return size * n;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  const std::string key = util::to_lower(util::trim(line.substr(0, colon)));
  const std::string value(util::trim(line.substr(colon + 1)));
  if (key == "etag")
    t.etag = value;
  else if (key == "last-modified")
    t.last_modified = value;
  else if (key == "retry-after")
    t.retry_after = value;
  else if (key == "content-range")
    t.content_range = value;
  else if (key == "content-encoding")
    t.content_encoding = value;
  else if (key == "content-length")
    if (auto v = util::parse_int(value); v && *v >= 0) t.content_length = static_cast<std::uint64_t>(*v);
  return size * n;
}

std::string Engine::too_big_reason(const Transfer& t, std::uint64_t bytes, bool announced) const {
  std::string why;
  if (t.job->size)
    why = announced
              ? fmt::format("the response's Content-Length announces {} bytes, more than the pinned {}: not "
                            "downloaded",
                            bytes, *t.job->size)
              : fmt::format("the body is more than the pinned {} bytes ({} received): stopped", *t.job->size, bytes);
  else
    why = fmt::format("the body is more than {} bytes, the limit for an artifact without a pinned size ({} {}): "
                      "stopped; pin its size in the manifest, or raise --max-download-bytes",
                      opt_.max_unpinned_bytes, bytes, announced ? "announced by Content-Length" : "received");
  return why + compressed_note(t.content_encoding);
}

void Engine::refuse_size(Transfer& t, std::uint64_t bytes, bool announced) {
  t.write_error = too_big_reason(t, bytes, announced);
  t.too_big = true;
}

bool Engine::restart_from_zero(Transfer& t, const std::string& why) {
  if (t.hashed > 0) t.restart_note = why;
  if (::ftruncate(t.fd.get(), 0) != 0 || ::lseek(t.fd.get(), 0, SEEK_SET) != 0) {
    t.write_error = fmt::format("{}: cannot truncate: {}", cache_.part(t.job->sha256).string(), std::strerror(errno));
    t.local_io_error = true;
    return false;
  }
  if (auto s = t.hash.reset(); !s) {
    t.write_error = s.error().message;
    t.local_io_error = true;
    return false;
  }
  t.hashed = 0;
  t.hash_valid = true;
  t.range_from = 0;
  return true;
}

// Called at the first body byte of a 2xx response: decide between resuming and starting over.
bool Engine::begin_body(Transfer& t) {
  t.body_started = true;
  bool resume = false;
  if (t.status == 206 && t.range_from > 0) {
    // "bytes START-END/TOTAL" must start where our file ends.
    const std::string expect = fmt::format("bytes {}-", t.range_from);
    resume = t.content_range.starts_with(expect);
    if (!resume) {
      t.write_error =
          fmt::format("server answered range '{}' to a request from byte {}", t.content_range, t.range_from);
      return false;
    }
  }
  if (!resume) {
    // 200: the server ignored the range or its validator changed (If-Range): start over.
    const std::string why = fmt::format("the server ignored the range request or the file changed (HTTP {} to a "
                                        "request from byte {}): {} bytes discarded, downloading from the start",
                                        t.status, t.range_from, t.hashed);
    if (!restart_from_zero(t, why)) return false;
  }
  // The URL's digest tells a later run whether the validator is this URL's. Without userinfo: a
  // password would be open to guessing against an unsalted hash.
  auto url_digest = util::sha256_of(util::strip_userinfo(t.url()));
  if (!url_digest) {
    t.write_error = url_digest.error().message;
    t.local_io_error = true;
    return false;
  }
  PartialInfo info{util::redact_url(t.url()), *url_digest, !t.etag.empty() ? t.etag : t.last_modified};
  if (auto s = cache_.write_sidecar(t.job->sha256, info); !s) {
    t.write_error = s.error().message;
    t.local_io_error = true;
    return false;
  }
  SinkOptions so;
  so.direct = opt_.direct_io;
  t.sink = std::make_unique<Sink>(t.fd.get(), cache_.part(t.job->sha256).string(), t.hashed, std::move(t.hash), so,
                                  [multi = multi_.get()] { curl_multi_wakeup(multi); });
  return true;
}

std::size_t Engine::on_write(char* data, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::size_t len = size * n;
  // An error page, or a 2xx that is not the file: never into the .part.
  if (!carries_the_file(t.status, t.range_from)) return len;
  if (!t.body_started && !t.engine->begin_body(t)) return CURL_WRITEFUNC_ERROR;
  if (t.bytes() + len > t.engine->limit(t)) {
    t.engine->refuse_size(t, t.bytes() + len, false);
    return CURL_WRITEFUNC_ERROR;
  }
  // Verified while streaming: the sink's worker writes these bytes and hashes them from
  // memory, so nothing is read twice.
  if (!t.sink->append(data, len)) {
    t.write_error = t.sink->error();
    t.local_io_error = true;
    return CURL_WRITEFUNC_ERROR;
  }
  t.received += len;
  return len;
}

Status Engine::open_part(Transfer& t) {
  const fs::path part = cache_.part(t.job->sha256);
  // `cache gc` may remove the .part between our open and our lock (it unlinks only under the
  // lock): then the lock is on a file no longer in the cache, so open again.
  for (int tries = 0; !t.fd; ++tries) {
    t.fd.reset(::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!t.fd)
      return fail(ErrorKind::fetch, fmt::format("{}: cannot open: {}", part.string(), std::strerror(errno)),
                  fmt::format("check that {} is writable", part.parent_path().string()));
    if (::flock(t.fd.get(), LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      t.fd.reset();
      if (err != EWOULDBLOCK)
        return fail(ErrorKind::internal, fmt::format("{}: flock failed: {}", part.string(), std::strerror(err)));
      t.lock_busy = true; // another process downloads it: the caller waits
      return {};
    }
    struct stat held {
    }, now{};
    const bool same = ::fstat(t.fd.get(), &held) == 0 && ::stat(part.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
                      held.st_dev == now.st_dev;
    if (!same) t.fd.reset();
    if (!same && tries >= 3)
      return fail(ErrorKind::lock_held, fmt::format("{}: removed again and again while we opened it", part.string()),
                  "another process is cleaning the cache (hpcbake cache gc?): run this again when it is done");
  }
  if (cache_.has(t.job->sha256)) {
    // Published by another process since we looked (it held the lock we now have): its
    // result, not a second download. The empty .part we may have made goes.
    drop_if_empty(t);
    t.fd.reset();
    t.lock_busy = true;
    return {};
  }
  if (!t.hash_valid) {
    // A prefix left by an earlier run: hash it once, then resume after it.
    HPCBAKE_TRY(t.hash.reset());
    t.hashed = 0;
    if (::lseek(t.fd.get(), 0, SEEK_SET) != 0)
      return fail(ErrorKind::fetch, fmt::format("{}: lseek failed: {}", part.string(), std::strerror(errno)));
    HPCBAKE_TRY_ASSIGN(t.hashed, t.hash.update_from_fd(t.fd.get(), part.string()));
    t.hash_valid = true;
  }
  if (::lseek(t.fd.get(), static_cast<off_t>(t.hashed), SEEK_SET) < 0)
    return fail(ErrorKind::fetch, fmt::format("{}: lseek failed: {}", part.string(), std::strerror(errno)));
  return {};
}

Status Engine::configure(Transfer& t) {
  util::CurlEasy& h = t.easy;
  HPCBAKE_TRY(h.set_opt(CURLOPT_URL, t.url().c_str()));
  HPCBAKE_TRY(h.set_opt(CURLOPT_NOSIGNAL, 1L));
  HPCBAKE_TRY(h.set_opt(CURLOPT_FOLLOWLOCATION, 1L));
  HPCBAKE_TRY(h.set_opt(CURLOPT_MAXREDIRS, opt_.max_redirects));
  HPCBAKE_TRY(h.set_opt(CURLOPT_PROTOCOLS_STR, "http,https"));
  HPCBAKE_TRY(util::restrict_redirects(h, t.url()));
  HPCBAKE_TRY(h.set_opt(CURLOPT_CONNECTTIMEOUT, opt_.connect_timeout_s));
  HPCBAKE_TRY(h.set_opt(CURLOPT_LOW_SPEED_LIMIT, opt_.low_speed_bytes_per_s));
  HPCBAKE_TRY(h.set_opt(CURLOPT_LOW_SPEED_TIME, opt_.low_speed_seconds));
  HPCBAKE_TRY(h.set_opt(CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS)));
  HPCBAKE_TRY(h.set_opt(CURLOPT_PIPEWAIT, 1L));
  HPCBAKE_TRY(h.set_opt(CURLOPT_SSL_VERIFYPEER, 1L));
  HPCBAKE_TRY(h.set_opt(CURLOPT_SSL_VERIFYHOST, 2L));
  HPCBAKE_TRY(util::apply_tls_trust(h, trust_));
  HPCBAKE_TRY(h.set_opt(CURLOPT_ERRORBUFFER, t.errbuf));
  HPCBAKE_TRY(h.set_opt(CURLOPT_HEADERFUNCTION, &Engine::on_header));
  HPCBAKE_TRY(h.set_opt(CURLOPT_HEADERDATA, &t));
  HPCBAKE_TRY(h.set_opt(CURLOPT_WRITEFUNCTION, &Engine::on_write));
  HPCBAKE_TRY(h.set_opt(CURLOPT_WRITEDATA, &t));
  HPCBAKE_TRY(h.set_opt(CURLOPT_USERAGENT, "hpcbake"));
  HPCBAKE_TRY(h.set_opt(CURLOPT_BUFFERSIZE, 512L * 1024)); // fewer, larger writes and digest updates
  // The file's own bytes: a compressed body would fail the digest (the error then says why).
  HPCBAKE_TRY(t.headers.append("Accept-Encoding: identity"));
  if (t.range_from > 0) {
    const std::string range = fmt::format("{}-", t.range_from);
    HPCBAKE_TRY(h.set_opt(CURLOPT_RANGE, range.c_str())); // libcurl copies option strings
    // If-Range only with the validator this URL gave us: otherwise the digest guards the result.
    auto side = cache_.read_sidecar(t.job->sha256);
    if (side && !side->validator.empty() && util::sha256_of(util::strip_userinfo(t.url())) == side->url_digest)
      HPCBAKE_TRY(t.headers.append("If-Range: " + side->validator));
  }
  if (t.headers.get()) HPCBAKE_TRY(h.set_opt(CURLOPT_HTTPHEADER, t.headers.get()));
  return {};
}

Status Engine::start(Transfer& t) {
  t.lock_busy = false;
  HPCBAKE_TRY(open_part(t));
  if (t.lock_busy) return {}; // the caller waits for the other process
  t.range_from = t.hashed;
  t.body_started = false;
  t.status = 0;
  t.write_error.clear();
  t.local_io_error = false;
  t.too_big = false;
  t.errbuf[0] = 0;
  HPCBAKE_TRY_ASSIGN(t.easy, util::CurlEasy::create());
  HPCBAKE_TRY(configure(t));
  // Checked: a handle the multi refused would never report done, and its transfer would
  // wait in active_ for ever. The caller fails the transfer instead.
  HPCBAKE_TRY(multi_.add(t.easy));
  emit(EventKind::started, t);
  return {};
}

bool Engine::take_cached(Transfer& t) {
  const Job& j = *t.job;
  if (!cache_.has(j.sha256)) return false;
  // Checked on every use: a cached copy that changed since it was verified is not trusted.
  const EntryCheck c = cache_.check_entry(j.sha256, j.size);
  if (!c.ok) {
    emit(EventKind::restarted, t, fmt::format("the cached copy does not match: {}; downloading it again", c.problem));
    return false;
  }
  results_.push_back({j.name, j.sha256, cache_.entry(j.sha256), true, true, 0, {}});
  std::error_code ec;
  const auto on_disk = std::filesystem::file_size(cache_.entry(j.sha256), ec);
  t.hashed = ec ? j.size.value_or(0) : on_disk;
  emit(EventKind::cache_hit, t);
  return true;
}

bool Engine::wait_for_lock(Transfer& t) {
  // How often the lock and the cache are looked at again: our own choice, short next to a
  // download and long next to a stat and a flock.
  constexpr auto kPoll = std::chrono::milliseconds(250);
  const auto now = Clock::now();
  const fs::path part = cache_.part(t.job->sha256);
  const auto waited = std::chrono::duration_cast<std::chrono::seconds>(opt_.lock_timeout).count();
  if (!t.lock_deadline) {
    t.lock_deadline = now + opt_.lock_timeout;
    emit(EventKind::waiting, t,
         fmt::format("being downloaded by another process: {} is locked{}; waiting up to {} s for it (--lock-timeout)",
                     part.string(), flock_holder(part), waited),
         std::chrono::duration<double>(opt_.lock_timeout).count());
  }
  if (now >= *t.lock_deadline) {
    complete(t, false,
             fmt::format("{} is being downloaded by another process: {} is locked{}; waited {} s (--lock-timeout)",
                         t.job->name, part.string(), flock_holder(part), waited));
    results_.back().lock_held = true;
    return false;
  }
  t.not_before = std::min(now + kPoll, *t.lock_deadline);
  return true;
}

// A failed job whose .part is still empty (no response carried the file) leaves nothing in
// partial/: removed while our lock is held, and only if it is still the file we locked.
void Engine::drop_if_empty(Transfer& t) {
  const fs::path part = cache_.part(t.job->sha256);
  struct stat held {
  }, now{};
  if (::fstat(t.fd.get(), &held) != 0 || held.st_size != 0 || ::lstat(part.c_str(), &now) != 0 ||
      held.st_ino != now.st_ino || held.st_dev != now.st_dev)
    return;
  cache_.drop_partial(t.job->sha256);
}

void Engine::cleanup(Transfer& t) {
  multi_.remove(t.easy);
  t.easy.reset();
  t.headers.reset();
}

bool Engine::complete(Transfer& t, bool ok, const std::string& error) {
  if (!ok && t.fd) drop_if_empty(t);
  t.fd.reset(); // also releases the flock
  JobResult r;
  r.name = t.job->name;
  r.sha256 = t.job->sha256;
  r.ok = ok;
  r.bytes_transferred = t.received;
  r.error = error;
  if (ok) r.path = cache_.entry(t.job->sha256);
  results_.push_back(r);
  if (ok)
    emit(EventKind::finished, t);
  else
    emit(EventKind::failed, t, error);
  return false;
}

bool Engine::schedule_retry(Transfer& t, Verdict v, const std::string& why, std::optional<double> retry_after) {
  t.last_error = fmt::format("{}: {}", util::redact_url(t.url()), why);
  if (v == Verdict::retry && ++t.attempt >= opt_.attempts_per_url) v = Verdict::next_url;
  if (v == Verdict::next_url) {
    t.attempt = 0;
    if (++t.url_index >= t.candidates.size()) {
      t.url_index = t.candidates.size() - 1;
      return complete(t, false, t.last_error);
    }
    emit(EventKind::retrying, t, t.last_error + "; trying the next URL", 0);
    t.not_before = Clock::now();
  } else {
    // Exponential backoff with jitter in [0.5, 1.5) of the step; Retry-After is a floor.
    const Backoff policy{opt_.backoff_initial_s, opt_.backoff_max_s, opt_.retry_after_max_s};
    const double delay =
        backoff_delay(policy, t.attempt, std::uniform_real_distribution<double>(0.0, 1.0)(rng_), retry_after);
    emit(EventKind::retrying, t, t.last_error, delay);
    t.not_before = Clock::now() + std::chrono::milliseconds(static_cast<long>(delay * 1000));
  }
  return true;
}

void Engine::retire(std::unique_ptr<Transfer> t, CURLcode code) {
  t->done_code = code;
  t->done_status = 0;
  curl_easy_getinfo(t->easy.get(), CURLINFO_RESPONSE_CODE, &t->done_status);
  t->done_curl_error = t->errbuf[0] ? std::string(t->errbuf) : std::string(curl_easy_strerror(code));
  t->done_retry_after = t->retry_after;
  t->done_in_headers = t->status != 0 && !t->body_started;
  t->done_content_encoding = t->content_encoding;
  if (const auto refused = util::refused_redirect(t->easy, code, t->url())) {
    // Its message starts with the URL, as schedule_retry's do.
    const std::string prefix = util::redact_url(t->url()) + ": ";
    const std::string& m = refused->message;
    t->done_refused_redirect = (m.starts_with(prefix) ? m.substr(prefix.size()) : m) + "; " + refused->hint;
  } else {
    t->done_refused_redirect.clear();
  }
  cleanup(*t);
  if (t->sink) {
    // fsync on the worker, so other transfers keep streaming; only a complete body is worth it.
    const bool whole = code == CURLE_OK && t->write_error.empty() && carries_the_file(t->done_status, t->range_from);
    t->sink->close(whole ? Durability::fsync : Durability::none);
    finishing_.push_back(std::move(t));
    return;
  }
  if (finish(*t)) waiting_.push_back(std::move(t));
}

void Engine::absorb(Transfer& t) {
  t.sink->wait();
  t.hashed = t.sink->written();
  t.hash = t.sink->take_digest();
  if (const std::string e = t.sink->error(); !e.empty()) {
    // A torn chunk may follow the verified prefix: the next attempt re-hashes the file.
    t.hash_valid = false;
    if (t.write_error.empty()) {
      t.write_error = e;
      t.local_io_error = true;
    }
  }
  t.sink.reset();
}

bool Engine::finish(Transfer& t) {
  if (t.interrupted) {
    const std::uint64_t kept = t.hashed;
    complete(t, false,
             fmt::format("interrupted; {} bytes kept in {}, the next run resumes there", kept,
                         cache_.part(t.job->sha256).string()));
    results_.back().interrupted = true;
    results_.back().partial_bytes = kept;
    return false;
  }
  const CURLcode code = t.done_code;
  const long status = t.done_status;
  const std::string& curl_error = t.done_curl_error;
  const std::string& retry_after_header = t.done_retry_after;

  if (!t.write_error.empty() && (code == CURLE_WRITE_ERROR || code == CURLE_OK)) {
    // Our side failed (disk full): keep the bytes for the next run. Otherwise the server sent
    // something we cannot continue (a wrong range, more bytes than pinned): start over.
    if (t.local_io_error)
      return complete(t, false, t.write_error + " (the partial download is kept and resumes on the next run)");
    const std::string why = t.write_error;
    if (!restart_from_zero(t, why + ": starting again from byte 0")) return complete(t, false, t.write_error);
    // Too big: this URL serves another file; nothing of it is kept, and retrying it would only
    // download the same bytes again.
    return schedule_retry(t, t.too_big ? Verdict::next_url : Verdict::retry, why);
  }
  if (!t.done_refused_redirect.empty()) return schedule_retry(t, Verdict::next_url, t.done_refused_redirect);
  if (code == CURLE_OK && carries_the_file(status, t.range_from)) {
    if (!t.body_started) { // an empty body
      if (!begin_body(t)) return complete(t, false, t.write_error);
      t.sink->close(Durability::fsync);
      absorb(t);
      if (!t.write_error.empty()) return complete(t, false, t.write_error);
    }
    auto digest = t.hash.hex();
    if (!digest) return complete(t, false, digest.error().message);
    const std::string actual = *digest;
    t.hash_valid = false;
    const bool size_ok = !t.job->size || t.hashed == *t.job->size;
    if (actual == t.job->sha256 && size_ok) {
      if (auto s = cache_.publish(t.job->sha256); !s) {
        return complete(t, false, s.error().message);
      }
      return complete(t, true, {});
    }
    const auto where = cache_.quarantine(t.job->sha256);
    // Quarantine or not, the next attempt must start from an empty .part.
    if (!where) cache_.drop_partial(t.job->sha256);
    t.fd.reset();
    const std::string kept = where ? fmt::format("the file is kept in {}", where->string())
                                   : fmt::format("the file was deleted, not kept ({})", where.error().message);
    std::string why = size_ok ? fmt::format("SHA-256 mismatch: expected {}, got {} ({} bytes); {}", t.job->sha256,
                                            actual, t.hashed, kept)
                              : fmt::format("size mismatch: expected {} bytes, got {} (SHA-256 {}); {}", *t.job->size,
                                            t.hashed, actual, kept);
    why += compressed_note(t.done_content_encoding);
    t.restart_note = "the downloaded bytes failed their check and were set aside: starting again from byte 0";
    t.hashed = 0;
    // A resumed download carries bytes from an earlier attempt or an earlier run: a corrupted
    // transfer cut off before its end leaves a bad prefix that every resume would keep. The URL
    // gets one more try from byte 0 (the bad file is quarantined, so the next attempt starts
    // empty); only a whole download that mismatches moves on to the next URL.
    if (t.range_from > 0 && !t.retried_from_zero) {
      t.retried_from_zero = true;
      return schedule_retry(t, Verdict::retry, why + "; the download had resumed, so trying again from the start");
    }
    return schedule_retry(t, Verdict::next_url, why);
  }
  if (code == CURLE_OK) {
    if (status == 416) { // our .part is not a prefix the server can continue: start over
      if (!restart_from_zero(t, "HTTP 416 (range not satisfiable): starting again from byte 0"))
        return complete(t, false, t.write_error);
      return schedule_retry(t, Verdict::retry, "HTTP 416 (range not satisfiable): restarting from zero");
    }
    if (status >= 200 && status < 300) return schedule_retry(t, Verdict::next_url, not_the_file(status, t.range_from));
    return schedule_retry(t, classify_http(status), fmt::format("HTTP {}", status),
                          parse_retry_after(retry_after_header, static_cast<std::time_t>(util::now())));
  }
  if (header_too_large(code, t.done_in_headers, curl_error)) {
    // libcurl's own text says "Out of memory" for it before 8.6: only a message of its own is shown.
    const bool own = curl_error != curl_easy_strerror(code);
    return schedule_retry(t, Verdict::next_url,
                          fmt::format("the server sent a response header longer than libcurl accepts ({} bytes a line, "
                                      "300 KiB in all{}): it would send the same again, so this URL is not retried",
                                      CURL_MAX_HTTP_HEADER, own ? "; libcurl says: " + curl_error : std::string()));
  }
  // The body may have been cut: the bytes we have are good (hashed) and the next attempt resumes.
  return schedule_retry(t, classify_curl(code), curl_error);
}

// Each distinct digest once: a cache hit is a result now, the rest wait for a transfer.
void Engine::queue(const std::vector<Job>& jobs) {
  std::vector<std::string> seen;
  for (const auto& j : jobs) {
    if (std::find(seen.begin(), seen.end(), j.sha256) != seen.end()) continue; // same bytes, fetched once
    seen.push_back(j.sha256);
    auto t = std::make_unique<Transfer>();
    t->engine = this;
    t->job = &j;
    if (take_cached(*t)) continue;
    for (const auto& m : opt_.mirrors) {
      t->candidates.push_back(join_url(m, "sha256/" + j.sha256));
      t->candidates.push_back(join_url(m, j.name));
    }
    t->candidates.insert(t->candidates.end(), j.urls.begin(), j.urls.end());
    if (t->candidates.empty()) {
      results_.push_back({j.name, j.sha256, {}, false, false, 0, "no URL to download from"});
      continue;
    }
    waiting_.push_back(std::move(t));
  }
}

Result<Report> Engine::run(const std::vector<Job>& jobs) {
  HPCBAKE_TRY(cache_.ensure_layout());
  HPCBAKE_TRY_ASSIGN(multi_, util::CurlMulti::create());
  HPCBAKE_TRY(multi_.set_opt(CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX)));
  HPCBAKE_TRY(multi_.set_opt(CURLMOPT_MAX_TOTAL_CONNECTIONS, static_cast<long>(std::max(1, opt_.parallel))));

  queue(jobs);

  while (!waiting_.empty() || !active_.empty() || !finishing_.empty()) {
    if (opt_.stop && opt_.stop->load()) interrupt();
    const auto now = Clock::now();
    // Start what may start.
    std::vector<std::unique_ptr<Transfer>> skipped; // back to waiting_ after the loop (a push would move it)
    for (auto it = waiting_.begin(); it != waiting_.end() && static_cast<int>(active_.size()) < opt_.parallel;) {
      if ((*it)->not_before > now) {
        ++it;
        continue;
      }
      auto t = std::move(*it);
      it = waiting_.erase(it);
      if (auto why = util::url_problem(t->url())) { // never handed to libcurl, which might read it otherwise
        if (schedule_retry(*t, Verdict::next_url, *why + "; " + util::url_hint())) skipped.push_back(std::move(t));
        continue;
      }
      if (!trust_.found() && util::is_https_url(t->url())) {
        // No CA store on this host: this URL cannot be verified, the next one (http://) may do.
        if (schedule_retry(*t, Verdict::next_url, trust_.missing_reason() + "; " + util::TlsTrust::missing_hint()))
          skipped.push_back(std::move(t));
        continue;
      }
      // Waiting for another process: its verified result, once it is in the cache.
      if (t->lock_deadline && take_cached(*t)) continue;
      if (auto s = start(*t); !s) {
        cleanup(*t);
        complete(*t, false, s.error().message);
        continue;
      }
      if (t->lock_busy) {
        if (wait_for_lock(*t)) skipped.push_back(std::move(t));
        continue;
      }
      active_.push_back(std::move(t));
    }
    for (auto& t : skipped)
      waiting_.push_back(std::move(t));
    int running = 0;
    curl_multi_perform(multi_.get(), &running);
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_.get(), &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      auto it = std::find_if(active_.begin(), active_.end(),
                             [&](const auto& t) { return t->easy.get() == msg->easy_handle; });
      if (it == active_.end()) continue;
      auto t = std::move(*it);
      active_.erase(it);
      retire(std::move(t), msg->data.result);
    }
    for (auto it = finishing_.begin(); it != finishing_.end();) {
      if (!(*it)->sink->done()) {
        ++it;
        continue;
      }
      auto t = std::move(*it);
      it = finishing_.erase(it);
      absorb(*t);
      if (finish(*t)) waiting_.push_back(std::move(t)); // another attempt, when due
    }
    for (auto& t : active_)
      if (now - t->last_progress > std::chrono::milliseconds(100)) {
        t->last_progress = now;
        emit(EventKind::progress, *t);
      }
    // Sleep until there is network activity, a retry is due, or 100 ms pass.
    auto wait = std::chrono::milliseconds(100);
    for (const auto& t : waiting_)
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::max(t->not_before - Clock::now(), Clock::duration::zero())));
    if (!active_.empty() || wait.count() > 0)
      curl_multi_poll(multi_.get(), nullptr, 0, static_cast<int>(std::max<long>(wait.count(), active_.empty() ? 1 : 0)),
                      nullptr);
  }
  Report report;
  report.results = std::move(results_);
  give_twins_results(jobs, report.results);
  return report;
}

} // namespace

void give_twins_results(const std::vector<Job>& jobs, std::vector<JobResult>& results) {
  std::vector<bool> claimed(results.size(), false);
  std::vector<JobResult> twins;
  for (const auto& j : jobs) {
    bool has = false;
    for (std::size_t i = 0; i < results.size() && !has; ++i)
      if (!claimed[i] && results[i].name == j.name && results[i].sha256 == j.sha256) has = claimed[i] = true;
    if (has) continue;
    const auto same =
        std::find_if(results.begin(), results.end(), [&](const JobResult& r) { return r.sha256 == j.sha256; });
    if (same == results.end()) continue; // nothing was done for these bytes: the caller reports the job as missing
    JobResult copy = *same;
    copy.name = j.name;
    copy.bytes_transferred = 0; // the bytes came over the network once, for the job that fetched them
    twins.push_back(std::move(copy));
  }
  for (auto& t : twins)
    results.push_back(std::move(t));
}

Result<Report> download(const std::vector<Job>& jobs, const Options& options, Observer& observer) {
  for (const auto& j : jobs)
    // The digest names the cache entry (<cache>/sha256/<hex>): only 64 lower-case hex digits are
    // one, whoever made the job (a manifest, --sha256, a bundle's index).
    if (!util::is_sha256_hex(j.sha256))
      return fail(
          ErrorKind::fetch,
          j.sha256.empty()
              ? fmt::format("{} has no pinned SHA-256: refusing to download it", j.name)
              : fmt::format("{}: its pinned SHA-256 is not 64 lower-case hex digits: refusing to download it", j.name),
          fmt::format("pass --sha256 {}=<hex> from a source you trust", j.name));
  Engine engine(options, observer);
  return engine.run(jobs);
}

} // namespace hpcbake::fetch
