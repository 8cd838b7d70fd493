#include "util/strings.hpp"

#include <doctest/doctest.h>

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

TEST_CASE("redact_url drops query strings so SAS tokens never reach output") {
  CHECK(redact_url("https://acct.blob.core.windows.net/c/f.run?sv=2021&sig=SECRET") ==
        "https://acct.blob.core.windows.net/c/f.run");
  CHECK(redact_url("https://x/y#frag") == "https://x/y");
  CHECK(redact_url("https://x/y") == "https://x/y");
}

TEST_CASE("replace_all and edit_distance") {
  CHECK(replace_all("linux-headers-{kernel}", "{kernel}", "6.1.0") == "linux-headers-6.1.0");
  CHECK(replace_all("{k}{k}", "{k}", "ab") == "abab");
  CHECK(edit_distance("Standard_ND96isr_H100_v6", "Standard_ND96isr_H100_v5") == 1);
  CHECK(edit_distance("", "abc") == 3);
}
