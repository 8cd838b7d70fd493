// SOURCE_DATE_EPOCH is read in one place: a valid value wins, anything else is ignored.
#include "util/clock.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>
#include <string>

using namespace hpcbake;

namespace {

struct EnvGuard {
  explicit EnvGuard(const char* v) {
    if (const char* old = std::getenv("SOURCE_DATE_EPOCH")) saved = old;
    if (v)
      ::setenv("SOURCE_DATE_EPOCH", v, 1);
    else
      ::unsetenv("SOURCE_DATE_EPOCH");
  }
  ~EnvGuard() {
    if (saved)
      ::setenv("SOURCE_DATE_EPOCH", saved->c_str(), 1);
    else
      ::unsetenv("SOURCE_DATE_EPOCH");
  }
  std::optional<std::string> saved;
};

} // namespace

TEST_CASE("clock: SOURCE_DATE_EPOCH when valid, the system clock otherwise") {
  {
    EnvGuard g("1700000000");
    CHECK(util::source_date_epoch() == std::int64_t{1700000000});
    CHECK(util::record_time() == 1700000000);
  }
  for (const char* bad : {"", "abc", "-5", "12x"}) {
    CAPTURE(bad);
    EnvGuard g(bad);
    CHECK_FALSE(util::source_date_epoch().has_value());
    CHECK(util::record_time() >= util::now() - 5);
  }
  EnvGuard g(nullptr);
  CHECK_FALSE(util::source_date_epoch().has_value());
  CHECK(util::now() > 1'600'000'000); // after 2020: the clock is the real one
}
