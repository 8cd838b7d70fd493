#pragma once
// Executes a plan as a journaled transaction: the plan's steps form a graph (`after`), and
// every step whose dependencies are complete may run, up to `parallel` at once (downloads
// overlap package installs; DKMS builds start when their inputs are ready). The journal is
// written after every status change.
//
// A re-run skips a step that is done with the same inputs. A step's digest covers its kind,
// its detail (URLs, SHA-256s, versions, packages, kernels, file contents) and the digests of
// the steps it depends on, so changing a manifest redoes the changed step and everything
// downstream of it, and nothing else. Started-but-unfinished steps (a crash) and failed steps
// run again; steps must therefore be idempotent, which every executor action is.
//
// A step may ask for a reboot: nothing new starts, running steps finish, and the result says
// so; on the next run in a later boot the step counts as done. A failed step blocks only what
// depends on it: independent steps still run, so one run reports every failure it can.
#include "install/journal.hpp"
#include "plan/plan.hpp"
#include "util/error.hpp"

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hpcbake::install {

struct StepResult {
  enum class Kind { done, reboot, failed };
  Kind kind = Kind::done;
  std::string message;     // what happened (failed, reboot: why), one line
  std::string hint;        // failed: what to do next
  std::string output_tail; // failed: the last lines of the step's output
  ErrorKind error = ErrorKind::build;

  static StepResult ok(std::string message = {}) { return {Kind::done, std::move(message), {}, {}, ErrorKind::build}; }
  static StepResult reboot(std::string why) {
    return {Kind::reboot, std::move(why), {}, {}, ErrorKind::reboot_required};
  }
  static StepResult failure(const Error& e, std::string tail = {}) {
    return {Kind::failed, e.message, e.hint, std::move(tail), e.kind};
  }
};

// What running one step means; the real one is install::Actions. Called from several threads
// at once for independent steps. An exception out of execute or boot_id is that step's failure
// (ErrorKind::internal, its what() in the message), recorded in the journal like any other.
class StepExecutor {
public:
  virtual ~StepExecutor() = default;
  virtual StepResult execute(const plan::Step& step) = 0;
  // This boot's identity (/proc/sys/kernel/random/boot_id): a reboot-pending step is done once
  // it differs.
  virtual std::string boot_id() = 0;
};

enum class EventKind { skipped, resumed, started, finished, failed, reboot };
std::string_view to_string(EventKind kind);
struct Event {
  EventKind kind = EventKind::started;
  const plan::Step* step = nullptr;
  std::string message;
  double seconds = 0;
  int done = 0, total = 0; // progress after this event
};

struct EngineOptions {
  std::filesystem::path journal_file;
  int parallel = 4;
  // Called with the engine's lock held, from worker threads: keep it short.
  std::function<void(const Event&)> observe;
  // Set from a signal handler (Ctrl-C, SIGTERM): no new step starts, running ones finish,
  // the journal stays consistent.
  const std::atomic<bool>* stop = nullptr;
  std::string size, distro;
  std::string plan_sha256; // the stored plan this run executes (plan_file.hpp), recorded in the journal
};

struct EngineResult {
  int executed = 0; // steps run in this invocation
  int skipped = 0;  // done before, inputs unchanged (or resumed after a reboot)
  // In plan order, whichever thread finished first: failed.front() decides the exit code.
  std::vector<std::string> failed;
  std::map<std::string, ErrorKind> failure_kinds; // of the failed steps, for the exit code
  std::vector<std::string> reboot;                // steps that asked for a reboot (now or in this same boot before)
  std::vector<std::string> blocked;               // not run: a dependency failed, a reboot is pending, or a stop
  bool interrupted = false;
  RunState state = RunState::running;
  Journal journal; // as left on disk
};

// Digest of every step: sha256 over its id, kind, typed content (Step::content: no prose) and the
// digests of its `after` steps, so a step re-runs when what it does or what it builds on changes.
std::map<std::string, std::string> step_digests(const plan::Plan& plan);

// Errors: the journal cannot be read or written, or the plan's graph is broken (an unknown
// dependency, a cycle). Step failures are in the result, not an error.
Result<EngineResult> execute_plan(const plan::Plan& plan, StepExecutor& executor, const EngineOptions& options);

// Crash injection for tests: with the test hook TestHook::crash_after_writes at N
// (util/test_hooks.hpp), the process SIGKILLs itself right after its Nth journal write.

} // namespace hpcbake::install
