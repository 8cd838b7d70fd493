#pragma once
// The plan memo: the planner's answer cached for the no-op re-run (docs/benchmarks.md, "Install:
// the no-op re-run"). Reading the manifests (YAML) and planning is most of a re-run's time,
// while on a finished machine the answer is the same plan every time. So after a run ends
// complete, install writes /var/lib/hpcbake/plan-memo.json: the digest of everything the plan
// was made from (PlanInputs) and the digest of each of that plan's steps. A later run whose
// inputs have the same digest has the same plan (the planner is a pure function of them), so
// when the journal says the run is complete and each of those steps is done with that same
// digest, there is nothing to do, and neither the manifests nor the planner are needed.
//
// The inputs are over-included on purpose: a difference that would not change the plan only
// costs a full (slow) re-run, while one left out could skip work. They are: the binary's build
// id (a new hpcbake may plan differently), every file under the manifest and recipe
// directories, every option of the request, and the host facts the planner reads
// (detect::to_json of them, without the two fields derived from the manifests, which the
// manifest digest covers).
//
// Runs with an offline bundle or prebuilt modules (--bundle, --prebuilt: files whose bytes the
// plan reads) neither use nor write a memo.
//
// The memo is derived data: a missing, unreadable, malformed or foreign memo is ignored (the
// slow path runs and writes a new one), never an error. The journal stays the only record of
// what was done; the memo never marks a step done.
#include "detect/host.hpp"
#include "install/journal.hpp"
#include "util/error.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::install {

struct InstallRequest;

inline constexpr int kPlanMemoVersion = 1;

struct PlanMemo {
  std::string inputs;                       // PlanInputs digest (hex)
  std::string size, distro_name;            // the plan's headline
  std::vector<std::string> kernels;         // the plan's target kernels
  std::map<std::string, std::string> steps; // step id -> step digest
};

// The digest of everything the plan for `rq` on a host with `facts` is made from. `facts` may
// come with or without the manifests (detect_host's last argument): the fields they add are
// left out. An error when a manifest or recipe file cannot be read.
Result<std::string> plan_inputs_digest(const InstallRequest& rq, const detect::HostFacts& facts);

// The journal agrees with the memo: it is complete and every step of the memo's plan is done with
// the memo's digest. (Whether the memo is for this run's inputs is the caller's comparison.)
bool memo_holds(const PlanMemo& memo, const Journal& journal);

// nullopt for a missing, unreadable or malformed file (ignored by design, see above).
std::optional<PlanMemo> load_plan_memo(const std::filesystem::path& file);
// Atomic (temp file, rename). Creates the directory.
Status save_plan_memo(const std::filesystem::path& file, const PlanMemo& memo);

} // namespace hpcbake::install
