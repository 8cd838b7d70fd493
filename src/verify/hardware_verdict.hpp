#pragma once
// The first-boot hardware verdict of an image baked with its hardware checks deferred
// (`--hardware-checks deferred`, `seal --verify deferred`). The image manifest says the verdict is
// pending; the boot unit (`verify --boot --first-boot`) runs the deferred checks at every boot until
// they pass, and records each attempt in /var/lib/hpcbake/hardware-verdict.json ("running" before
// the checks start, so that a run the unit's timeout kills counts as not passed). Every `--boot` run
// on such an image carries the check `image.hardware_verdict`, so node-state.json, hpcbake.prom and
// the start task's `--node-state --wait` all see a failed or missing verdict.
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

inline constexpr const char* kHardwareVerdictPath = paths::kHardwareVerdict;
// The first boot's checks stop at level 2: the load checks (level 3: NCCL, GPUDirect RDMA, DCGM)
// take minutes each, longer than the boot unit may run; they are a job's.
inline constexpr int kFirstBootMaxLevel = 2;

// The image manifest's `hardware_verdict` when its state is "pending".
struct PendingHardware {
  std::string size;
  int level = 1; // the level the bake's deferred verify listed its checks at (at most kFirstBootMaxLevel)
};
// None when the image manifest is absent or says "checked". An unreadable or malformed manifest is
// none too, with `warning` saying why.
std::optional<PendingHardware> pending_hardware(const util::HostFs& fs, std::string& warning);

struct HardwareVerdict {
  std::string state = "done"; // "running": the checks started and never finished
  bool passed = false;
  std::string boot_id, size;
  int level = 0;
  std::int64_t checked_at = 0; // seconds since the epoch
  std::vector<std::string> failed_checks;
};
nlohmann::json to_json(const HardwareVerdict& v);
Result<std::optional<HardwareVerdict>> read_hardware_verdict(const util::HostFs& fs);
Status write_hardware_verdict(const util::HostFs& fs, const HardwareVerdict& v); // atomic

// The verdict of a first-boot run from its report.
HardwareVerdict verdict_of(const Report& report, std::string boot_id, std::int64_t now);

// `image.hardware_verdict` (level 0): passes only when the recorded verdict passed.
Check hardware_verdict_check(const std::optional<HardwareVerdict>& verdict, const PendingHardware& pending);

} // namespace hpcbake::verify
