#pragma once
// The wall clock and SOURCE_DATE_EPOCH, in one place. Time stamps that end up in records
// (the journal, the verify record, image-manifest.json, bundle entries) honour
// SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/), so two runs
// with the same inputs write the same bytes. Intervals and timeouts use std::chrono::steady_clock
// directly: they are not time stamps and must not jump.
#include <cstdint>
#include <optional>
#include <string>

namespace hpcbake::util {

// Seconds since the epoch, from the system clock.
std::int64_t now();
// SOURCE_DATE_EPOCH when it is set to a non-negative decimal integer; empty otherwise (unset,
// empty, or not a number: a malformed value is ignored, as the specification allows).
std::optional<std::int64_t> source_date_epoch();
// The time stamp for a record: SOURCE_DATE_EPOCH when set, else now().
std::int64_t record_time();
// "2026-11-25T01:10:17Z": ISO 8601 in UTC, for log lines a person and a parser both read.
std::string iso8601_utc(std::int64_t seconds);

} // namespace hpcbake::util
