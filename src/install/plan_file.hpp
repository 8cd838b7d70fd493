#pragma once
// The plan that runs is the record of what ran: install writes /var/lib/hpcbake/plan.json
// (atomically, before its first step) with the typed plan and every option that matters after a
// reboot, and the journal records its digest. `install --resume` continues that plan and reads
// nothing else of the first run's command line (no manifests, no flags); `verify` and `seal` read
// it, and seal records its digest in image-manifest.json.
//
// No credential is stored: artifact URLs lose their query string and password (a SAS token must
// not stay on the disk, nor in the image), and the plan names those artifacts (artifacts_redacted).
// The digest covers the whole stored plan (artifacts included) and the options.
#include "plan/plan.hpp"
#include "util/error.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::install {

inline constexpr int kPlanFileVersion = 1;

// The install options a resumed run needs, as the first run was given them.
struct RunOptions {
  int jobs = 4;
  std::chrono::seconds lock_timeout{600};
  int verify_level = 1;
  std::vector<std::string> ib_devices;
  double ib_seconds = 10;
  std::chrono::seconds fabric_wait{60};
  // Artifacts a resumed run may still download (never --mirror: a mirror URL may carry a SAS
  // token, and the file stays in the image).
  std::filesystem::path cache_dir;
  std::string ca_file;
  int parallel = 4;
  int attempts_per_url = 4;
  long low_speed_seconds = 30;
  double backoff_initial_s = 1.0;
  std::uint64_t max_unpinned_bytes = 0;
  std::uint64_t quarantine_budget = 0;
  std::filesystem::path bundle;              // --bundle: artifacts come only from it
  std::vector<std::string> sha256_overrides; // --sha256 NAME=HEX
  std::filesystem::path key_dir;             // --key-dir: where a generated signing key lives (seal looks there)
};

struct StoredPlan {
  plan::Plan plan;
  RunOptions options;
  std::string sha256; // plan_digest(plan, options)
};

// SHA-256 over the plan as stored (its URLs without credentials) and the options: what the journal
// and the image manifest record.
std::string plan_digest(const plan::Plan& plan, const RunOptions& options);

// Atomic (temp file, fsync, rename), mode 0644 (no credential in it), the directory created.
// Returns the digest.
Result<std::string> save_plan_file(const std::filesystem::path& file, const plan::Plan& plan,
                                   const RunOptions& options);

// The digest the file records, without reading its plan back or hashing it again: for the checks
// that only ask whether the stored plan is still the one a journal or a loaded plan names (the
// no-op re-run, a resume under the lock). nullopt: no file; an error: not a plan file.
Result<std::optional<std::string>> recorded_plan_sha256(const std::filesystem::path& file);

// nullopt: no file (no install on this machine). Strict: unknown keys, another version, a digest
// that does not match the content or a malformed plan are errors naming the file and the field.
Result<std::optional<StoredPlan>> load_plan_file(const std::filesystem::path& file);

} // namespace hpcbake::install
