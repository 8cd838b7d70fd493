#pragma once
// The install journal: /var/lib/hpcbake/state.json (under --root). One record per plan step,
// rewritten atomically (temp file, fsync, rename, fsync of the directory) after every change,
// so a crash at any instant leaves the previous or the next version, never a torn one.
//
// A step's record says what was last known about it:
//   started        it began and never reported back (a crash or power loss): it runs again
//   done           it finished with these inputs (digest): skipped while they are unchanged
//   failed         it failed (output tail kept): it runs again on the next install
//   reboot-pending it needs a reboot of this machine (boot_id of the boot that asked): done
//                  once the machine has booted again, still pending in the same boot
// Versioned: a journal from a newer hpcbake is refused rather than misread.
#include "util/error.hpp"
#include "util/paths.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace hpcbake::install {

inline constexpr const char* kJournalPath = paths::kJournal;
inline constexpr int kJournalVersion = 1;

enum class StepStatus { started, done, failed, reboot_pending };
const char* to_string(StepStatus s);
std::optional<StepStatus> step_status_from(const std::string& s);

struct StepRecord {
  std::string digest; // of the step's inputs, including its dependencies' digests
  StepStatus status = StepStatus::started;
  std::int64_t started_at = 0;  // seconds since the epoch (SOURCE_DATE_EPOCH when set)
  std::int64_t finished_at = 0; // 0 while started
  int attempts = 0;             // how many times it was started
  std::string boot_id;          // reboot-pending: the boot that asked for the reboot
  std::string message;          // failed / reboot-pending: why
  std::string output_tail;      // failed: the last lines of the step's output
};

// The journal's overall state, for `status`-like readers and for seal.
enum class RunState { running, complete, failed, reboot_required, interrupted };
const char* to_string(RunState s);

struct Journal {
  int version = kJournalVersion;
  std::string size;
  std::string distro;
  std::string plan_sha256; // the stored plan (/var/lib/hpcbake/plan.json) the steps ran from
  RunState state = RunState::running;
  std::int64_t updated_at = 0;
  std::map<std::string, StepRecord> steps; // by step id
};

nlohmann::json to_json(const Journal& j);
// Strict: unknown status strings, a missing field or a newer version are errors naming the
// file and the field, with what to do.
Result<Journal> journal_from_json(const nlohmann::json& doc, const std::string& where);

// A missing file is an empty journal; an unreadable or malformed one is an error (exit 2)
// saying to move it aside, never silently replaced: it is the only record of what was done.
Result<Journal> load_journal(const std::filesystem::path& file);
// Atomic and durable. Creates the directory.
Status save_journal(const std::filesystem::path& file, const Journal& j);

// Seconds since the epoch: SOURCE_DATE_EPOCH when set (reproducible journals), else the clock.
std::int64_t now_seconds();

} // namespace hpcbake::install
