// The downloader's retry rules as a table: which failures are retried on the same URL, which
// move on, and how long the backoff waits.
#include "fetch/retry.hpp"

#include <doctest/doctest.h>

#include <ctime>

using namespace hpcbake::fetch;

TEST_CASE("retry: HTTP statuses") {
  struct Case {
    long status;
    Verdict verdict;
  };
  const Case cases[] = {
      {408, Verdict::retry},    {413, Verdict::retry},    {429, Verdict::retry},    {500, Verdict::retry},
      {502, Verdict::retry},    {503, Verdict::retry},    {504, Verdict::retry},    {599, Verdict::retry},
      {400, Verdict::next_url}, {401, Verdict::next_url}, {403, Verdict::next_url}, {404, Verdict::next_url},
      {410, Verdict::next_url}, {451, Verdict::next_url}, {300, Verdict::next_url},
  };
  for (const auto& c : cases) {
    CAPTURE(c.status);
    CHECK(classify_http(c.status) == c.verdict);
  }
}

TEST_CASE("retry: libcurl results") {
  struct Case {
    CURLcode code;
    Verdict verdict;
  };
  const Case cases[] = {
      {CURLE_OPERATION_TIMEDOUT, Verdict::retry},
      {CURLE_COULDNT_CONNECT, Verdict::retry},
      {CURLE_COULDNT_RESOLVE_HOST, Verdict::retry},
      {CURLE_RECV_ERROR, Verdict::retry},
      {CURLE_SEND_ERROR, Verdict::retry},
      {CURLE_PARTIAL_FILE, Verdict::retry},
      {CURLE_GOT_NOTHING, Verdict::retry},
      {CURLE_HTTP2_STREAM, Verdict::retry},
      {CURLE_PEER_FAILED_VERIFICATION, Verdict::next_url},
      {CURLE_SSL_CONNECT_ERROR, Verdict::next_url},
      {CURLE_SSL_CACERT_BADFILE, Verdict::next_url},
      {CURLE_SSL_CERTPROBLEM, Verdict::next_url},
      {CURLE_SSL_ISSUER_ERROR, Verdict::next_url},
      {CURLE_SSL_PINNEDPUBKEYNOTMATCH, Verdict::next_url},
      {CURLE_TOO_MANY_REDIRECTS, Verdict::next_url},
      {CURLE_UNSUPPORTED_PROTOCOL, Verdict::next_url},
      {CURLE_URL_MALFORMAT, Verdict::next_url},
      // Issue 40: answers the same URL gives again, once retried as transient.
      {CURLE_WEIRD_SERVER_REPLY, Verdict::next_url},
      {CURLE_BAD_CONTENT_ENCODING, Verdict::next_url},
      {CURLE_AUTH_ERROR, Verdict::next_url},
      {CURLE_LOGIN_DENIED, Verdict::next_url},
      {CURLE_SSL_CIPHER, Verdict::next_url},
      {CURLE_USE_SSL_FAILED, Verdict::next_url},
      {CURLE_NOT_BUILT_IN, Verdict::next_url},
      {CURLE_UNKNOWN_OPTION, Verdict::next_url},
  };
  for (const auto& c : cases) {
    CAPTURE(curl_easy_strerror(c.code));
    CHECK(classify_curl(c.code) == c.verdict);
  }
}

TEST_CASE("retry: backoff is exponential, capped, jittered between 0.5 and 1.5 times the step") {
  const Backoff p{1.0, 30.0, 300.0};
  struct Case {
    int attempt;
    double step;
  };
  const Case cases[] = {{1, 1.0}, {2, 2.0}, {3, 4.0}, {4, 8.0}, {5, 16.0}, {6, 30.0}, {20, 30.0}};
  for (const auto& c : cases) {
    CAPTURE(c.attempt);
    CHECK(backoff_delay(p, c.attempt, 0.0, {}) == doctest::Approx(c.step * 0.5));
    CHECK(backoff_delay(p, c.attempt, 0.5, {}) == doctest::Approx(c.step));
    CHECK(backoff_delay(p, c.attempt, 0.999, {}) < c.step * 1.5);
    // Out-of-range jitter is clamped: the bounds hold whatever the random source gives.
    CHECK(backoff_delay(p, c.attempt, -1.0, {}) == doctest::Approx(c.step * 0.5));
    CHECK(backoff_delay(p, c.attempt, 7.0, {}) <= c.step * 1.5);
  }
}

TEST_CASE("retry: Retry-After is a floor, capped by retry_after_max") {
  const Backoff p{1.0, 30.0, 300.0};
  CHECK(backoff_delay(p, 1, 0.5, 10.0) == doctest::Approx(10.0));    // longer than the backoff: honoured
  CHECK(backoff_delay(p, 5, 0.5, 2.0) == doctest::Approx(16.0));     // shorter: the backoff wins
  CHECK(backoff_delay(p, 1, 0.5, 9999.0) == doctest::Approx(300.0)); // capped
}

TEST_CASE("retry: Retry-After header values") {
  const std::time_t now = 1'700'000'000; // Tue, 14 Nov 2023 22:13:20 GMT
  CHECK(parse_retry_after("120", now) == 120.0);
  CHECK(parse_retry_after("0", now) == 0.0);
  CHECK(parse_retry_after("-3", now) == 0.0);
  CHECK(parse_retry_after("Tue, 14 Nov 2023 22:14:20 GMT", now) == 60.0);
  CHECK(parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now) == 0.0); // in the past: now
  CHECK_FALSE(parse_retry_after("", now).has_value());
  CHECK_FALSE(parse_retry_after("soon", now).has_value());
}
