#pragma once
// install::run: one install, from manifests to a verified machine. It owns what an install is
// beyond running the plan's steps (install/engine.hpp):
//   - the plan (plan::resolve), the same one `plan` shows, stored before the first step
//     (plan_file.hpp) as the record of what runs; `--resume` continues the stored one;
//   - --dry-run: what would run, step by step, from the journal; nothing on the host changes
//     (no log file, no lock file, no directory);
//   - the confirmation (asked through the observer), the machine lock (flock on
//     /run/hpcbake/install.lock, waiting up to lock_timeout), the install log;
//   - Azure Batch start tasks (AZ_BATCH_*: no terminal, the log in the task's directory);
//   - the waagent and verify steps, whose closing verify writes the record seal reads;
//   - a reboot: the resume unit (install/resume_unit.hpp) and, with RebootPolicy::automatic,
//     `systemctl reboot` through the runner.
// The caller keeps argv, the prompt, signals, rendering and exit codes.
#include "exec/runner.hpp"
#include "fetch/downloader.hpp"
#include "install/engine.hpp"
#include "plan/resolve.hpp"
#include "util/error.hpp"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::install {

// --reboot: what to do when a step needs a reboot.
enum class RebootPolicy {
  exit,      // stop with exit 7 (default): whoever drives the machine reboots
  automatic, // reboot now (Packer's expect_disconnect, Batch start tasks)
  never,     // a reboot is a failure
};
std::optional<RebootPolicy> parse_reboot_policy(std::string_view text);
std::string_view to_string(RebootPolicy policy);

// An Azure Batch start task: AZ_BATCH_* in the environment.
struct BatchTask {
  bool active = false;
  std::filesystem::path working_dir; // AZ_BATCH_TASK_WORKING_DIR
};
BatchTask detect_batch_task(const std::function<const char*(const char*)>& getenv);

struct InstallRequest {
  std::filesystem::path manifests_dir;
  std::string size_filter;      // read only this size's manifest (--size given)
  plan::ResolveRequest resolve; // the machine (host = --root), size, distro, driver, signing
  fetch::Options fetch;
  std::filesystem::path bundle;
  std::vector<std::string> sha256_overrides;

  bool dry_run = false;
  bool yes = false; // do not ask (Batch start tasks imply it)
  RebootPolicy reboot = RebootPolicy::exit;
  bool resume_unit = false; // write the resume unit on a reboot (RebootPolicy::automatic implies it)
  std::chrono::seconds lock_timeout{600};
  int jobs = 4;
  int verify_level = 1;
  std::vector<std::string> ib_devices;
  double ib_seconds = 10; // each port's timed RDMA loopback at level 2 stops after this long
  std::chrono::seconds fabric_wait{60};
  // `install --resume`: continue the stored plan (plan_file.hpp) with the options stored beside it;
  // the manifests and every plan or option field above are not read.
  bool resume = false;
  BatchTask batch;

  // The plan memo (plan_memo.hpp): the build this binary is (a new one plans anew); empty: no
  // memo is read or written. memo_fast_path false: the memo is kept up to date but every run
  // plans in full (--json wants every step's event, and only a plan has the steps).
  std::string build_id;
  bool memo_fast_path = true;

  exec::Runner* runner = nullptr;          // every command
  util::HttpClient* http = nullptr;        // Azure metadata, when asked
  const std::atomic<bool>* stop = nullptr; // set by SIGINT/SIGTERM: no new step starts
  fetch::Observer* downloads = nullptr;    // the artifacts' download events, live; null: none
};

// One step's state in a dry run.
struct PreviewRow {
  std::size_t step = 0; // index into the plan's steps
  std::string state;    // "run", "skip (done)", "run again (inputs changed)", ...
  bool runs = false;
};

enum class Outcome { complete, dry_run, declined, failed, reboot_required, rebooting, interrupted };
std::string_view to_string(Outcome outcome);

struct InstallResult {
  Outcome outcome = Outcome::complete;
  plan::Plan plan;
  std::filesystem::path journal_file, log_file;
  EngineResult engine;             // not for dry_run/declined
  std::vector<PreviewRow> preview; // dry_run
};

class InstallObserver {
public:
  virtual ~InstallObserver() = default;
  // A progress line for people (the library also writes it to the install log).
  virtual void say(const std::string& line) = 0;
  // Each step event, as it happens (for --json); say() gets its line too. From worker threads.
  virtual void on_step(const Event& /*event*/) {}
  // A line only the install log gets by default (command output); shown with -v.
  virtual void detail(const std::string& /*line*/) {}
  // The plan about to run, once, before anything changes (the download total, for progress).
  virtual void on_plan(const plan::Plan& /*plan*/) {}
  // Asked once, before anything changes, unless request.yes or a Batch task. false: declined.
  // An error (no terminal to ask) ends the install with it.
  virtual Result<bool> confirm(const plan::Plan& plan) = 0;
};

// Root, and nothing install reads or acts on writable by anyone else: the manifests and recipes
// say what runs as root, the journal what is skipped, the cache holds the installers it runs,
// the key signs modules (docs/security.md). run() checks it first unless dry_run, which
// changes nothing.
Status check_trust(const InstallRequest& rq);

// The command the resume unit runs: this executable, the root when it is not /, `install --resume`.
std::vector<std::string> resume_argv(const util::HostFs& host);

// Errors: trust (check_trust), manifests, the plan (or, resuming, the stored plan and its journal),
// the lock, the journal, the resume unit, the reboot command.
// Step failures are in the result (Outcome::failed), each with its record in engine.journal.
Result<InstallResult> run(const InstallRequest& request, InstallObserver& observer);

} // namespace hpcbake::install
