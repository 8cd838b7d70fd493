#include "util/json.hpp"
#include "util/strings.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace hpcbake::util;

TEST_CASE("trim, lower, iequals, split, join") {
  CHECK(trim("  a b \n") == "a b");
  CHECK(trim("") == "");
  CHECK(to_lower("Standard_ND96isr") == "standard_nd96isr");
  CHECK(iequals("standard_nd96isr_h100_v5", "Standard_ND96isr_H100_v5"));
  CHECK_FALSE(iequals("Standard_ND96isr_H100_v5x", "Standard_ND96isr_H100_v5"));
  auto parts = split("a,b,,c", ',');
  REQUIRE(parts.size() == 4);
  CHECK(parts[2] == "");
  CHECK(join({"x", "y"}, ", ") == "x, y");
}

TEST_CASE("numbers are parsed whole or not at all") {
  CHECK(parse_int("0x10de", 16) == 0x10de);
  CHECK(parse_int("10de", 16) == 0x10de);
  CHECK(parse_int("42\n") == 42);
  CHECK_FALSE(parse_int("42x").has_value());
  CHECK_FALSE(parse_int("").has_value());
  CHECK(parse_double("2.5") == doctest::Approx(2.5));
  CHECK_FALSE(parse_double("2.5 Gb").has_value());
}

TEST_CASE("replace_all and edit_distance") {
  CHECK(replace_all("linux-headers-{kernel}", "{kernel}", "6.1.0") == "linux-headers-6.1.0");
  CHECK(replace_all("{k}{k}", "{k}", "ab") == "abab");
  CHECK(edit_distance("Standard_ND96isr_H100_v6", "Standard_ND96isr_H100_v5") == 1);
  CHECK(edit_distance("", "abc") == 3);
}

TEST_CASE("json members of the wrong type read as missing, never throw") {
  const auto j = nlohmann::json::parse(
      R"({"s": "text", "n": 7, "neg": -2, "big": 18446744073709551615, "f": 1.5, "o": {}, "a": [1]})");
  CHECK(string_member(j, "s") == "text");
  CHECK(string_member(j, "n", "x") == "x");
  CHECK(string_member(j, "o", "x") == "x");
  CHECK(string_member(j, "missing", "x") == "x");
  CHECK(int_member(j, "n", 0) == 7);
  CHECK(int_member(j, "neg", 0) == -2);
  CHECK(int_member(j, "big", -1) == -1); // over long long
  CHECK(int_member(j, "f", -1) == -1);
  CHECK(int_member(j, "s", -1) == -1);
  CHECK(int_member(nlohmann::json::array(), "n", -1) == -1);
  CHECK(string_member(nlohmann::json("text"), "s", "x") == "x");
}
