#include "util/clock.hpp"

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

} // namespace hpcbake::util
