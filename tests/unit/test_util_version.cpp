#include "util/version.hpp"

#include <doctest/doctest.h>

using hpcbake::util::compare_versions;

TEST_CASE("kernel releases order like sort -V / rpmvercmp") {
  CHECK(compare_versions("6.8.0-1015-azure", "6.5.0-1025-azure") > 0);
  CHECK(compare_versions("6.5.0-1025-azure", "6.5.0-1009-azure") > 0);
  CHECK(compare_versions("4.18.0-553.16.1.el8_10.x86_64", "4.18.0-553.el8_10.x86_64") > 0);
  CHECK(compare_versions("6.1.0-26-amd64", "6.1.0-9-amd64") > 0);
  CHECK(compare_versions("580.126.20", "580.126.20") == 0);
  CHECK(compare_versions("580.126.20", "580.126.16") > 0);
  CHECK(compare_versions("1.010", "1.10") == 0);
  CHECK(compare_versions("1.0", "1.0.1") < 0);
}
