// The libcurl handle owners: a refused option is an Error naming it, and a handle the multi
// refuses is reported, so the downloader fails that transfer instead of waiting for it forever.
#include "util/curl.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace hpcbake;

TEST_CASE("curl: set_opt turns libcurl's refusal into an error naming the option") {
  auto easy = util::CurlEasy::create();
  REQUIRE(easy.has_value());
  CHECK(easy->set_opt(CURLOPT_NOSIGNAL, 1L).has_value());
  CHECK(easy->set_opt(CURLOPT_URL, "https://example.invalid/").has_value());
  auto bad = easy->set_opt(CURLOPT_PROTOCOLS_STR, "no-such-protocol");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("PROTOCOLS_STR") != std::string::npos);
  CHECK_FALSE(bad.error().hint.empty());

  util::CurlEasy none;
  CHECK_FALSE(none.set_opt(CURLOPT_NOSIGNAL, 1L).has_value());
}

TEST_CASE("curl: a handle the multi refuses is an error, not a transfer that never ends") {
  // Regression: curl_multi_add_handle's result was ignored; a refused handle stayed in the
  // downloader's active set with nothing ever reporting it done.
  auto multi = util::CurlMulti::create();
  REQUIRE(multi.has_value());
  auto easy = util::CurlEasy::create();
  REQUIRE(easy.has_value());
  REQUIRE(multi->add(*easy).has_value());
  auto again = multi->add(*easy); // CURLM_ADDED_ALREADY
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().message.find("cannot start the transfer") != std::string::npos);
  multi->remove(*easy);

  util::CurlEasy moved = std::move(*easy);
  CHECK(moved);
  CHECK_FALSE(*easy); // NOLINT(bugprone-use-after-move): the moved-from state is the contract
}

TEST_CASE("curl: header lists grow and free themselves") {
  util::CurlSlist list;
  CHECK(list.get() == nullptr);
  REQUIRE(list.append("If-Range: \"abc\"").has_value());
  REQUIRE(list.append("X-Test: 1").has_value());
  REQUIRE(list.get() != nullptr);
  CHECK(std::string(list.get()->data) == "If-Range: \"abc\"");
  CHECK(std::string(list.get()->next->data) == "X-Test: 1");
}
