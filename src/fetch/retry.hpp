#pragma once
// The downloader's retry rules as pure functions, so a table of cases can test them:
// what an HTTP status or a libcurl result means for the next attempt, how long to wait
// before it, and what a Retry-After header asks for.
#include <curl/curl.h>

#include <ctime>
#include <optional>
#include <string_view>

namespace hpcbake::fetch {

// retry: the same URL again after a backoff; next_url: this URL will not get better.
enum class Verdict { retry, next_url };

// An HTTP status that ended a transfer (not 2xx, not 416, which the engine handles by
// starting over): 408, 413, 429 and 5xx are worth a retry, every other status is not.
Verdict classify_http(long status);
// A libcurl failure: TLS verification and setup, bad URLs, redirect loops, replies that are
// not HTTP, refused authentication and encodings move on; connection errors, timeouts,
// stalls and cut bodies are retried. (An over-long response header, CURLE_OUT_OF_MEMORY before
// libcurl 8.6, is told from our own memory by the engine, which knows a header was arriving.)
Verdict classify_curl(CURLcode code);

struct Backoff {
  double initial_s = 1.0;
  double max_s = 30.0;
  double retry_after_max_s = 300.0;
};

// The wait before retry number `attempt` (1 for the first retry): initial * 2^(attempt-1),
// capped at max, times a jitter factor in [0.5, 1.5) (`jitter` in [0, 1) picks it). A
// Retry-After, capped at retry_after_max, is a floor.
double backoff_delay(const Backoff& policy, int attempt, double jitter, std::optional<double> retry_after);

// Retry-After: delta-seconds or an HTTP-date (relative to `now`); never negative. Empty when
// absent or unreadable.
std::optional<double> parse_retry_after(std::string_view value, std::time_t now);

} // namespace hpcbake::fetch
