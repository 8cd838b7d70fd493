#pragma once
// The node state `verify --boot` leaves for whoever decides what a node may run: a Batch start
// task (`verify --node-state --wait`), a Slurm health program, a VMSS health probe, monitoring.
//   /var/lib/hpcbake/node-state.json  the verdict (healthy/unhealthy), the failed checks with what
//                                     was expected and observed, level, boot id, time, duration,
//                                     hpcbake version, the stored plan's digest, the size
//   <textfile dir>/hpcbake.prom       the same as Prometheus text exposition format for node
//                                     exporter's textfile collector (default dir: Debian's
//                                     prometheus-node-exporter, /var/lib/prometheus/node-exporter)
// Both are written whole (temp file in the same directory, then rename): node exporter reads
// only *.prom, and the temp file is hpcbake.prom.tmp.<pid>. Format references:
//   https://prometheus.io/docs/instrumenting/exposition_formats/ ("Text format details": \n line
//   ends, the last line ends with \n; label values escape \\ \" \n; HELP escapes \\ \n)
//   prometheus/node_exporter@0361693d7b54d94f0e2b93fb03ed26b8f798f8e7 README.md "Textfile
//   Collector" (*.prom, no timestamps, write a temp file then mv)
//   Debian prometheus-node-exporter 1.5.0-1+b6 /usr/share/doc/prometheus-node-exporter/README.textfile
//   (the directory /var/lib/prometheus/node-exporter)
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

inline constexpr const char* kNodeStatePath = paths::kNodeState;
inline constexpr const char* kTextfileName = "hpcbake.prom";
inline constexpr int kNodeStateSchema = 1;

struct NodeCheck {
  std::string id;
  int level = 0;
  Verdict verdict = Verdict::pass;
  std::string title, expected, observed, hint; // kept for failed checks only
};

struct NodeState {
  bool healthy = false;
  std::string error; // verify could not run at all (then healthy is false and checks empty)
  int level = 1;
  std::string boot_id;         // empty: unknown
  std::int64_t checked_at = 0; // seconds since the epoch
  double duration_seconds = 0;
  std::string hpcbake_version;
  std::string plan_path, plan_sha256; // the stored plan the checks ran against; empty: a plan made now
  std::string size, size_id;
  int pass = 0, fail = 0, skip = 0;
  std::vector<NodeCheck> checks; // every check, in the report's order
  std::vector<const NodeCheck*> failed() const;
};

struct NodeStateContext {
  std::string boot_id;
  std::int64_t now = 0;
  std::string hpcbake_version;
  std::string plan_path, plan_sha256;
};

NodeState make_node_state(const Report& report, const NodeStateContext& ctx);
// verify stopped before any check (`error`: why): unhealthy, so that a waiter is not left waiting.
NodeState error_node_state(std::string error, int level, double seconds, const NodeStateContext& ctx);

// A run of a lower level than an earlier run of the same boot (the periodic level 0 after the boot's
// level 1) keeps that run's checks of the higher levels, which it did not run again: a level-1
// failure at boot stays until the next boot or the next level-1 run. Counts, verdict and level
// follow; a state of another boot is ignored.
void carry_forward(NodeState& now, const NodeState& before);

nlohmann::json to_json(const NodeState& state);
Result<NodeState> node_state_from_json(const nlohmann::json& doc);

// The Prometheus text exposition of `state` (gauges; each line ends with \n).
std::string to_prometheus(const NodeState& state);

// Both files, each atomic; `textfile_dir` is a host path (under the root). The directories are
// created when missing. Errors name the file.
Status write_node_state(const util::HostFs& fs, const NodeState& state);
Status write_textfile(const util::HostFs& fs, const std::string& textfile_dir, const NodeState& state);
// nullopt when no node state was written; an error when unreadable or malformed.
Result<std::optional<NodeState>> read_node_state(const util::HostFs& fs);

// One line a failed check ("gpu.count (level 0): expected 8, observed 2 (NVML)"), for the journal.
std::string describe_failure(const NodeCheck& check);

} // namespace hpcbake::verify
