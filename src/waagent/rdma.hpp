#pragma once
// The Azure Linux Agent's RDMA settings in /etc/waagent.conf, edited the way a careful
// admin would: one line changed in place (or the shipped "# OS.EnableRDMA=y" uncommented),
// every other byte kept, written atomically through any symlink, the original kept once as
// "<config>.hpcbake-orig", and the agent restarted only when it runs and the file changed.
//
// What the keys mean to waagent 2.7.3 (azurelinuxagent/common/conf.py, daemon/main.py,
// common/rdma.py, pa/rdma/*.py), and so what hpcbake sets:
//   - The daemon runs its RDMA setup once, at start, when conf.enable_rdma() is true, which
//     is OS.EnableRDMA OR OS.UpdateRdmaDriver OR OS.CheckRdmaDriver ('y', case-insensitive;
//     each defaults to off). On SR-IOV InfiniBand sizes (every IB size in manifests/) that
//     setup waits for the IB device and assigns the IPoIB address from the host's shared
//     configuration. Hence OS.EnableRDMA=y for sizes with InfiniBand and IPoIB.
//   - OS.UpdateRdmaDriver=y lets the agent upgrade the kernel (apt-get install linux-azure)
//     and reboot the VM on its own (Ubuntu, Network Direct sizes). hpcbake owns the kernel
//     and the modules built for it, so it must not be on: enable sets it to n when it reads
//     'y' and leaves it alone otherwise.
//   - OS.CheckRdmaDriver (defaults to ON for the driver check itself) only matters on legacy
//     Network Direct sizes (an NdDriverVersion in the KVP pool), where it installs the
//     Hyper-V ND driver; enable leaves it as it is.
//   - Disabling means conf.enable_rdma() is false: each of the three keys that reads 'y' is
//     set to n on its effective line. Keys that are unset already read as off, so a shipped
//     file is left untouched (nothing is commented back: an explicit "=n" is visible to
//     `status`, and a line the admin wrote is never removed).
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::waagent {

inline constexpr const char* kEnableRdma = "OS.EnableRDMA";
inline constexpr const char* kUpdateRdmaDriver = "OS.UpdateRdmaDriver";
inline constexpr const char* kCheckRdmaDriver = "OS.CheckRdmaDriver";
// The one-time backup beside the config's own name: "/etc/waagent.conf.hpcbake-orig".
inline constexpr const char* kBackupSuffix = ".hpcbake-orig";
// Test hook name (util::crash_point): SIGKILL after the new config is written to its temp
// file and fsynced, before the rename. Set HPCBAKE_TEST_CRASH_POINT to it to trigger (in the
// test binaries, util/test_hooks.hpp).
inline constexpr const char* kCrashBeforeRename = "waagent-before-rename";

// How a setting is satisfied, judged on the value the agent reads.
enum class Rule {
  equals, // the agent must read `value` (compared case-insensitively, as get_switch does)
  not_on, // the switch must not read 'y'; when it does, its effective line gets `value`
};

struct Setting {
  std::string key;
  std::string value; // what is written when the file must change
  Rule rule = Rule::equals;
};

// Whether the agent, reading `conf_text`, sees `s` satisfied.
bool satisfied(std::string_view conf_text, const Setting& s);

// One change edit_config made. Lines are 1-based, in the edited text.
struct Edit {
  enum class How { in_place, uncommented, appended };
  std::string key;
  std::optional<std::string> before; // the effective value before (nullopt: unset)
  std::string after;
  std::size_t line = 0;
  How how = How::in_place;
};
const char* how_name(Edit::How how);

struct EditResult {
  std::string text;
  std::vector<Edit> edits; // empty: text == input
};

// The pure text edit. For each setting not already satisfied, in order:
//   1. the last active assignment of the key (the one the agent uses) gets the new value in
//      place: the key, spacing, trailing comment and line ending stay; earlier assignments
//      are left as they are (they are overridden, and may be someone's notes);
//   2. else the last commented-out assignment ("#OS.EnableRDMA=y", "# OS.EnableRDMA = y",
//      '#' in column 0 and a one-word value) is uncommented and given the value;
//   3. else "KEY=VALUE" is appended, with the file's line ending (CRLF when its lines use
//      CRLF) and its final-newline convention (no newline at the end stays so).
// Values are written bare (no quotes), so the agent's quote stripping cannot misread them.
// Every byte outside the edited lines is kept.
EditResult plan_edit(std::string_view text, const std::vector<Setting>& settings);
std::string edit_config(std::string_view text, const std::vector<Setting>& settings);

enum class RdmaMode { on, off };
const char* mode_name(RdmaMode mode);

// The settings behind each mode (see the top of this file for why).
std::vector<Setting> rdma_settings(RdmaMode mode);

struct Desired {
  RdmaMode mode = RdmaMode::on;
  std::string why; // one sentence: which size wants it and why, or "requested without --size"
};

// What a size wants: on for sizes with InfiniBand and IPoIB, off otherwise.
Desired desired_for(const manifest::SizeManifest& size);
// An explicit request with no size to judge it by.
Desired desired_without_size(RdmaMode mode);

enum class Restart { if_active, never };
enum class Missing { fail, create };

struct RdmaOptions {
  std::string config = "/etc/waagent.conf"; // host path (a distro manifest's waagent_config)
  std::string unit;                         // the agent's systemd unit; empty: installed_agent_unit, else waagent
  Restart restart = Restart::if_active;
  std::string no_restart_reason; // said in the result when restart == never
  // A missing config is an error (the agent is not installed) unless this says create:
  // then a file holding only the settings is written.
  Missing missing = Missing::fail;
};

// The agent's systemd unit as the distro manifest names it (waagent_service), else a unit file
// present under the root (walinuxagent.service on Debian/Ubuntu, waagent.service on RHEL-family);
// nullopt when neither says. detect::agent_unit adds the os-release fallback.
std::optional<std::string> installed_agent_unit(const util::HostFs& host, const manifest::DistroManifest* distro);

struct KeyStatus {
  std::string key;
  std::optional<std::string> value; // effective, as the agent reads it; nullopt: unset
  std::size_t line = 0;             // 1-based line of the effective assignment; 0: none
  std::size_t assignments = 0;      // active assignments of the key (more than 1: the last wins)
};

struct RdmaStatus {
  std::string config;         // host path
  std::filesystem::path path; // the file read: under the root, symlinks followed
  bool exists = false;
  std::vector<KeyStatus> keys; // OS.EnableRDMA, OS.UpdateRdmaDriver, OS.CheckRdmaDriver
  bool rdma_enabled = false;   // conf.enable_rdma(): the daemon runs RDMA setup at start
  bool driver_update = false;  // conf.enable_rdma_update()
  bool driver_check = true;    // conf.enable_check_rdma_driver() (defaults to on)
  std::optional<Desired> wanted;
  std::optional<bool> matches;                 // nullopt without `wanted`
  std::vector<std::string> differences;        // "OS.EnableRDMA is unset; wants y"
  std::optional<std::filesystem::path> backup; // when the backup exists
};

// Reads the config (never writes). A missing config is a status (exists = false, the
// agent's defaults), not an error; an unreadable one is an error.
Result<RdmaStatus> rdma_status(const util::HostFs& host, const std::optional<Desired>& wanted,
                               const RdmaOptions& opts = {});

struct RdmaChange {
  std::string config;         // host path
  std::filesystem::path path; // the file written: under the root, symlinks followed
  bool changed = false;
  bool created = false; // Missing::create wrote a new file
  std::vector<Edit> edits;
  std::optional<std::filesystem::path> backup; // the backup (created now or earlier)
  bool backup_created = false;
  std::string unit;
  std::optional<bool> service_active; // nullopt: not asked (unchanged file, Restart::never, no systemctl)
  bool restarted = false;
  std::string note; // why the service was or was not restarted, in a sentence
};

// Makes the config agree with `desired`. Nothing is written and nothing restarted when it
// already does (idempotent). Otherwise: the backup is created once (never overwritten), the
// new text is written atomically to the file the config name points to (a symlink stays a
// symlink) with its mode and owner, and then, with Restart::if_active, the unit is restarted
// only if `systemctl is-active` says it runs (the daemon reads these keys only at start).
// Errors: missing config (unsupported, unless Missing::create), unreadable or read-only
// config (internal; nothing changed), a failed restart (internal; the file is written).
Result<RdmaChange> apply_rdma(const util::HostFs& host, const Desired& desired, exec::Runner& runner,
                              const RdmaOptions& opts = {});

// `--json` documents (schema 1).
nlohmann::json to_json(const RdmaStatus& s);
nlohmann::json to_json(const RdmaChange& c);

} // namespace hpcbake::waagent
