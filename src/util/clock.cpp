#include "util/clock.hpp"

#include <ctime>

#include "util/strings.hpp"

#include <chrono>
#include <cstdlib>

namespace hpcbake::util {

std::int64_t now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<std::int64_t> source_date_epoch() {
  const char* e = std::getenv("SOURCE_DATE_EPOCH");
  if (!e || !*e) return std::nullopt;
  const auto v = parse_int(e);
  if (!v || *v < 0) return std::nullopt;
  return v;
}

std::int64_t record_time() {
  return source_date_epoch().value_or(now());
}

std::string iso8601_utc(std::int64_t seconds) {
  const auto t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  if (!::gmtime_r(&t, &tm)) return std::to_string(seconds);
  char buf[32];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return n ? std::string(buf, n) : std::to_string(seconds);
}

} // namespace hpcbake::util
