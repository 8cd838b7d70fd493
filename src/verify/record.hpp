#pragma once
// The last `verify` result, kept at /var/lib/hpcbake/verify.json (under --root) with the
// boot it ran in, so that `seal` can tell "verify passed in this boot" from "verify passed
// once, before a kernel update and a reboot". Written atomically after every verify run,
// passed or not; only the summary is kept (the full report is what --json/--junit print).
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/paths.hpp"
#include "verify/verify.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::verify {

inline constexpr const char* kRecordPath = paths::kVerifyRecord;
inline constexpr const char* kBootIdPath = paths::kBootId;
inline constexpr int kRecordSchema = 1;

struct Record {
  std::string boot_id;          // /proc/sys/kernel/random/boot_id when verify ran; empty: unknown
  std::int64_t recorded_at = 0; // seconds since the epoch
  bool passed = false;
  int level = 1;
  std::string size, size_id, distro;
  std::vector<std::string> kernels;
  int pass = 0, fail = 0, skip = 0, deferred = 0;
  std::vector<std::string> failed_checks; // check ids
  // `--hardware-checks deferred`: the hardware checks were not run (a bake on another machine);
  // the ids recorded instead, for the first boot on `size`. seal --verify deferred accepts that.
  bool hardware_deferred = false;
  std::vector<std::string> deferred_checks;
  std::vector<std::string> ran_checks; // the ids of the checks that ran (passed, failed or skipped)
};

// This boot's id under `fs` (empty when unreadable).
std::string current_boot_id(const util::HostFs& fs);

Record make_record(const Report& report, std::string boot_id, std::int64_t now);
nlohmann::json to_json(const Record& record);

// Creates /var/lib/hpcbake when needed; atomic (util::write_file_atomic).
Status write_record(const util::HostFs& fs, const Record& record);
// nullopt when no verify has been recorded; an error when the file is unreadable or malformed.
Result<std::optional<Record>> read_record(const util::HostFs& fs);

} // namespace hpcbake::verify
