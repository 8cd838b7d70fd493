// UTF-8 checks, the excerpt every diagnostic quotes, and the one JSON dump (issue 20, items 5
// and 6).
#include "util/json.hpp"
#include "util/utf8.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace hpcbake;

TEST_CASE("first_invalid_utf8 finds the first byte of the first ill-formed sequence") {
  CHECK_FALSE(util::first_invalid_utf8(""));
  CHECK_FALSE(util::first_invalid_utf8("plain ascii\n"));
  CHECK_FALSE(util::first_invalid_utf8("caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf \xef\xbb\xbf"));
  struct Case {
    std::string text;
    std::size_t at;
    const char* why;
  };
  for (const auto& [text, at, why] :
       std::vector<Case>{{"ab\xff", 2, "0xff is never UTF-8"},
                         {"caf\xe9", 3, "Latin-1"},
                         {"\x80", 0, "a lone continuation byte"},
                         {"x\xc0\xaf", 1, "overlong '/'"},
                         {"x\xc1\xbf", 1, "overlong, 0xc1"},
                         {"\xe0\x80\xaf", 0, "overlong, three bytes"},
                         {"\xf0\x80\x80\xaf", 0, "overlong, four bytes"},
                         {"ok\xed\xa0\x80", 2, "a UTF-16 surrogate"},
                         {"\xf4\x90\x80\x80", 0, "above U+10FFFF"},
                         {"\xf5\x80\x80\x80", 0, "0xf5 is never UTF-8"},
                         {"ab\xe2\x82", 2, "truncated at the end"},
                         {"\xe2\x82x", 0, "truncated before ASCII"},
                         {"\xc3\xa9\xc3", 2, "a valid character, then a truncated one"}}) {
    CAPTURE(why);
    const auto bad = util::first_invalid_utf8(text);
    REQUIRE(bad);
    CHECK(*bad == at);
  }
}

TEST_CASE("replace_invalid_utf8 keeps valid text and replaces each bad byte with U+FFFD") {
  CHECK(util::replace_invalid_utf8("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(util::replace_invalid_utf8("caf\xe9!") == "caf\xef\xbf\xbd!");
  CHECK(util::replace_invalid_utf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  CHECK_FALSE(util::first_invalid_utf8(util::replace_invalid_utf8("\xff\xfe\xc3")));
}

TEST_CASE("excerpt: short values whole, long ones cut at a character with their size, control bytes escaped") {
  CHECK(util::excerpt("rate") == "rate");
  CHECK(util::excerpt(std::string(60, 'a')) == std::string(60, 'a'));
  CHECK(util::excerpt(std::string(61, 'a')) == std::string(60, 'a') + "\xe2\x80\xa6 (61 bytes)");
  const std::string huge(10 * 1024 * 1024, 'x');
  CHECK(util::excerpt(huge).size() < 100);
  CHECK(util::excerpt(huge).ends_with("\xe2\x80\xa6 (10485760 bytes)"));
  // 59 ASCII bytes then "é": byte 60 is inside the character, which is dropped whole.
  CHECK(util::excerpt(std::string(59, 'a') + "\xc3\xa9" + "tail") == std::string(59, 'a') + "\xe2\x80\xa6 (65 bytes)");
  CHECK(util::excerpt("a\nb\tc\x1b[2J") == "a\\nb\\tc\\x1b[2J");
  CHECK(util::excerpt("caf\xe9") == "caf\xef\xbf\xbd");
  CHECK(util::excerpt("abcdef", 3) == "abc\xe2\x80\xa6 (6 bytes)");
}

// Issue 20, item 5: `detect --json` died with type_error.316 on a Latin-1 PRETTY_NAME.
TEST_CASE("dump_json writes host bytes that are not UTF-8 as U+FFFD instead of throwing") {
  const nlohmann::json j = {{"pretty_name", "Debian 12 \xe9"
                                            "dition"},
                            {"n", 1}};
  CHECK_THROWS(j.dump()); // why every dump goes through util::dump_json
  std::string text;
  REQUIRE_NOTHROW(text = util::dump_json(j));
  CHECK(text == "{\"n\":1,\"pretty_name\":\"Debian 12 \xef\xbf\xbd"
                "dition\"}");
  CHECK(nlohmann::json::parse(text)["pretty_name"] == "Debian 12 \xef\xbf\xbd"
                                                      "dition");
  // Valid documents come out exactly as dump() writes them, compact and indented.
  const nlohmann::json ok = {{"a", {1, 2}}, {"b", "caf\xc3\xa9"}};
  CHECK(util::dump_json(ok) == ok.dump());
  CHECK(util::dump_json(ok, 2) == ok.dump(2));
}
