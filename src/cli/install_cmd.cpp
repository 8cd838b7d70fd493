#include "cli/install_cmd.hpp"
#include "cli/preflight.hpp"
#include "cli/report.hpp"
#include "cli/test_runner.hpp"

#include "driver/module_build.hpp"
#include "exec/runner.hpp"
#include "install/actions.hpp"
#include "install/engine.hpp"
#include "pkg/manager.hpp"
#include "util/atomic_file.hpp"
#include "util/hostfs.hpp"
#include "util/paths.hpp"
#include "util/strings.hpp"
#include "verify/record.hpp"
#include "verify/verify.hpp"
#include "waagent/rdma.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

namespace hpcbake::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockPath = paths::kLockFile;
constexpr const char* kLogPath = paths::kInstallLog;
constexpr const char* kUnitName = paths::kResumeUnitName;
constexpr const char* kUnitPath = paths::kResumeUnit;
constexpr const char* kUnitWants = paths::kResumeUnitWants;
constexpr const char* kKeyDir = paths::kKeyDir;

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) {
    // A second Ctrl-C: the user means it.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

struct SignalGuard {
  struct sigaction old_int{}, old_term{};
  SignalGuard() {
    g_stop = false;
    struct sigaction sa{};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

// Azure Batch runs start tasks with AZ_BATCH_* set: no terminal, retried, re-run after every
// reboot; logs belong in the task's working directory.
struct Batch {
  bool active = false;
  fs::path working_dir;
};

Batch detect_batch() {
  Batch b;
  for (const char* v : {"AZ_BATCH_TASK_ID", "AZ_BATCH_NODE_ID", "AZ_BATCH_TASK_WORKING_DIR", "AZ_BATCH_POOL_ID"})
    if (const char* e = std::getenv(v); e && *e) b.active = true;
  if (const char* w = std::getenv("AZ_BATCH_TASK_WORKING_DIR"); w && *w) b.working_dir = w;
  return b;
}

// Lines for people (stdout) and for the log file, from any thread.
class Log {
public:
  Log(std::ostream& out, const fs::path& file) : out_(out) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    file_.open(file, std::ios::app);
    path_ = file;
  }
  void say(const std::string& line) {
    std::lock_guard lock(mu_);
    out_ << line << "\n" << std::flush;
    if (file_) file_ << stamp() << line << "\n" << std::flush;
  }
  // Only into the log file: command output.
  void detail(const std::string& line) {
    std::lock_guard lock(mu_);
    if (file_) file_ << stamp() << "  | " << line << "\n";
  }
  const fs::path& path() const { return path_; }
  bool ok() const { return static_cast<bool>(file_); }

private:
  static std::string stamp() { return fmt::format("{} ", install::now_seconds()); }
  std::ostream& out_;
  std::ofstream file_;
  fs::path path_;
  std::mutex mu_;
};

// The machine lock: flock(2) on /run/hpcbake/install.lock (under --root), so it dies with the
// process that holds it (a crash or SIGKILL never leaves a stale lock). The holder's pid is
// written into the file for the waiting message.
class MachineLock {
public:
  ~MachineLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status acquire(const fs::path& file, std::chrono::seconds timeout, Log& log) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return fail(ErrorKind::internal, fmt::format("{}: cannot open the install lock: {}", file.string(), std::strerror(errno)));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool told = false;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR)
        return fail(ErrorKind::internal, fmt::format("{}: flock failed: {}", file.string(), std::strerror(errno)));
      const std::string holder = util::read_file(file).value_or("");
      if (!told) {
        log.say(fmt::format("waiting for another hpcbake install to finish (lock {}, held by pid {}; up to {} s)",
                            file.string(), util::trim(holder).empty() ? "?" : util::trim(holder), timeout.count()));
        told = true;
      }
      if (std::chrono::steady_clock::now() >= deadline || g_stop)
        return fail(ErrorKind::lock_held,
                    fmt::format("another hpcbake install holds {} (pid {}) after waiting {} s", file.string(),
                                util::trim(holder).empty() ? "?" : util::trim(holder), timeout.count()),
                    "Wait for it to finish (its progress is in /var/log/hpcbake/install.log), or raise --lock-timeout.");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] auto n = ::pwrite(fd_, pid.data(), pid.size(), 0);
    }
    return {};
  }

private:
  int fd_ = -1;
};

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/usr/bin/hpcbake") : p.string();
}

// The one-shot unit that continues the install on the next boot. "Enabled" by the symlink
// systemctl enable would make, so it also works under --root; removed once the install is
// complete.
Status write_resume_unit(const util::HostFs& host, const InstallOptions& o, const InstallInputs& in) {
  std::vector<std::string> argv = {self_exe()};
  argv.insert(argv.end(), in.global_args.begin(), in.global_args.end());
  argv.insert(argv.end(), {"install", "--yes", "--resume-unit", "--reboot=" + o.reboot});
  argv.insert(argv.end(), in.install_args.begin(), in.install_args.end());
  if (o.verify_level != 1) argv.push_back(fmt::format("--verify-level={}", o.verify_level));
  for (const auto& d : o.ib_devices) argv.push_back("--ib-device=" + d);
  if (!o.sign_key.empty()) argv.push_back("--sign-key=" + fs::absolute(o.sign_key).string());
  if (!o.sign_cert.empty()) argv.push_back("--sign-cert=" + fs::absolute(o.sign_cert).string());
  if (!o.key_dir.empty()) argv.push_back("--key-dir=" + fs::absolute(o.key_dir).string());
  const std::string unit = fmt::format(
      "# Written by hpcbake install: continues an install that needed a reboot. It removes itself\n"
      "# when the install completes. Logs: journalctl -u {0} and {1}.\n"
      "[Unit]\n"
      "Description=hpcbake: continue the install after a reboot\n"
      "After=local-fs.target network-online.target\n"
      "Wants=network-online.target\n"
      "ConditionPathExists=/var/lib/hpcbake/state.json\n"
      "\n"
      "[Service]\n"
      "Type=oneshot\n"
      "ExecStart={2}\n"
      "StandardOutput=journal+console\n"
      "StandardError=journal+console\n"
      "TimeoutStartSec=infinity\n"
      "\n"
      "[Install]\n"
      "WantedBy=multi-user.target\n",
      kUnitName, kLogPath, exec::shell_quote(argv));
  const fs::path file = host.resolve(kUnitPath);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (auto s = util::write_file_atomic(file, unit, 0644); !s) return s;
  const fs::path wants = host.resolve(kUnitWants);
  fs::create_directories(wants.parent_path(), ec);
  if (!fs::is_symlink(fs::symlink_status(wants, ec))) {
    fs::create_symlink(kUnitPath, wants, ec);
    if (ec)
      return fail(ErrorKind::internal, fmt::format("{}: cannot enable the resume unit: {}", wants.string(), ec.message()));
  }
  return {};
}

void remove_resume_unit(const util::HostFs& host) {
  std::error_code ec;
  fs::remove(host.resolve(kUnitWants), ec);
  fs::remove(host.resolve(kUnitPath), ec);
}

std::string indent(const std::string& text, const std::string& by) {
  std::string out;
  for (auto line : util::split(text, '\n'))
    if (!line.empty()) out += by + std::string(line) + "\n";
  return out;
}

std::string step_line(const install::Event& e, const char* what) {
  return fmt::format("[{:>2}/{}] {:<8} {}", e.done, e.total, what, e.step->id);
}

} // namespace

void add_install_options(CLI::App& c, InstallOptions& o) {
  c.add_flag("--yes,-y", o.yes, "do not ask before changing this machine (implied in Batch start tasks)");
  c.add_flag("--dry-run", o.dry_run, "print what would run, step by step, and change nothing");
  c.add_option("--reboot", o.reboot,
               "when a step needs a reboot: exit (code 7, default), auto (reboot now; for Packer's "
               "expect_disconnect and Batch) or never (fail)")
      ->check(CLI::IsMember({"exit", "auto", "never"}))
      ->option_text("exit|auto|never");
  c.add_flag("--resume-unit", o.resume_unit,
             "on a reboot, install a one-shot systemd unit that continues the install on the next boot");
  c.add_option("--lock-timeout", o.lock_timeout_s, "wait this long for another install (and the package locks)")
      ->check(CLI::Range(0L, 86400L))
      ->default_val(600)
      ->option_text("SECONDS");
  c.add_option("--jobs", o.jobs, "independent steps at once")->check(CLI::Range(1, 16))->default_val(4);
  c.add_option("--verify-level", o.verify_level, "level of the closing smoke tests (0, 1 or 2)")
      ->check(CLI::Range(0, 2))
      ->default_val(1);
  c.add_option("--ib-device", o.ib_devices, "verify these RDMA devices (any link layer, e.g. rxe0); repeatable");
  c.add_option("--fabric-wait", o.fabric_wait_s, "how long verify waits for Fabric Manager")
      ->check(CLI::Range(0L, 600L))
      ->default_val(60)
      ->option_text("SECONDS");
  c.add_option("--sign-key", o.sign_key, "sign modules with this private key (with --sign-cert)");
  c.add_option("--sign-cert", o.sign_cert, "the certificate of --sign-key");
  c.add_option("--key-dir", o.key_dir, "where a generated signing key lives (default /var/lib/hpcbake/signing)");
}

int run_install(const InstallOptions& o, const InstallInputs& in, std::ostream& out, std::ostream& err) {
  const util::HostFs host(in.root);
  // Root, and nothing it reads or acts on writable by anyone else: manifests and recipes say
  // what runs as root, the journal what is skipped, the cache holds the installers it runs,
  // the key signs modules (docs/security.md). --dry-run changes nothing and is not held to it.
  if (!o.dry_run) {
    const std::vector<TrustedPath> paths = {
        manifest_trust(in.manifests_dir.string()),
        drivers_trust(in.manifests_dir.string()),
        {host.resolve(install::kJournalPath).parent_path(), "state directory", 1, {}},
        {host.resolve(kLockPath).parent_path(), "lock directory", 1, {}},
        {in.fetch.cache_dir, "artifact cache", -1, "or pass --cache DIR"},
        {o.key_dir.empty() ? host.resolve(kKeyDir) : fs::path(o.key_dir), "signing key directory", 1, {}},
    };
    if (auto s = preflight("install", host, paths); !s) return report(s.error(), err);
  }
  const Batch batch = detect_batch();
  Log log(out, batch.active && !batch.working_dir.empty() ? batch.working_dir / "hpcbake-install.log"
                                                          : host.resolve(kLogPath));

  auto manifests = manifest::load_manifests(in.manifests_dir, in.size);
  if (!manifests) return report(manifests.error(), err);
  auto resolved = in.resolve(*manifests);
  if (!resolved) return report(resolved.error(), err);
  auto& [plan, facts] = *resolved;
  const auto* distro = manifests->find_distro(plan.distro_id);
  if (!distro) return report(Error{ErrorKind::internal, "the plan's distro has no manifest", {}}, err);
  if (plan.kernels.empty())
    return report(Error{ErrorKind::unsupported,
                        fmt::format("no target kernel is known for this host ({})", plan.kernels_source),
                        "install runs on the machine being baked, with its distro's manifest (check 'hpcbake detect')"},
                  err);
  const fs::path journal_file = host.resolve(install::kJournalPath);

  if (o.dry_run) {
    auto j = install::load_journal(journal_file);
    if (!j) return report(j.error(), err);
    const auto digests = install::step_digests(plan);
    out << fmt::format("install plan for {} on {} (kernels: {}); journal {}\n", plan.size, plan.distro_name,
                       util::join(plan.kernels, ", "), journal_file.string());
    int to_run = 0;
    for (const auto& s : plan.steps) {
      auto it = j->steps.find(s.id);
      std::string state = "run";
      if (it != j->steps.end() && it->second.digest == digests.at(s.id)) {
        if (it->second.status == install::StepStatus::done) state = "skip (done)";
        else if (it->second.status == install::StepStatus::reboot_pending) state = "resume (after a reboot)";
        else state = fmt::format("run again ({})", install::to_string(it->second.status));
      } else if (it != j->steps.end()) {
        state = "run again (inputs changed)";
      }
      if (state.starts_with("run")) ++to_run;
      out << fmt::format("  {:<28} {:<16} {}\n", state, s.kind(), s.id);
      if (state.starts_with("run")) out << plan::step_lines(s);
    }
    out << fmt::format("{} of {} steps would run; nothing was changed\n", to_run, plan.steps.size());
    return 0;
  }

  const bool yes = o.yes || batch.active;
  if (!yes) {
    if (!::isatty(STDIN_FILENO))
      return report(Error{ErrorKind::usage, "install changes this machine and there is no terminal to ask",
                          "pass --yes (Batch start tasks imply it); --dry-run shows what would run"},
                    err);
    out << plan::render_text(plan) << "Proceed with the install on this machine? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      out << "nothing was changed\n";
      return static_cast<int>(ExitCode::usage);
    }
  }

  SignalGuard signals;
  MachineLock lock;
  if (auto s = lock.acquire(host.resolve(kLockPath), std::chrono::seconds(o.lock_timeout_s), log); !s)
    return report(s.error(), err);

  auto runner = make_runner();
  const bool recording = records_commands(*runner);
  pkg::PkgOptions popt;
  popt.lock_timeout = std::chrono::seconds(o.lock_timeout_s);
  popt.on_status = [&log](const std::string& s) { log.say("  " + s); };
  auto packages = pkg::make_package_manager(distro->package_manager == manifest::PackageManager::dnf ? pkg::Family::dnf : pkg::Family::apt,
                                            *runner, host, popt);
  const std::string conf_template =
      util::read_file(manifests->recipes_dir / "dkms" / "dkms.conf.in").value_or("");

  install::ActionsConfig ac;
  ac.host = host;
  ac.runner = runner.get();
  ac.packages = packages.get();
  ac.distro = distro;
  ac.plan = &plan;
  ac.fetch = in.fetch;
  ac.bundle = in.bundle;
  ac.sha256_overrides = in.sha256_overrides;
  ac.dkms.kernel_modules_dir = host.resolve("/lib/modules");
  if (!host.is_real_root()) // a fixture machine keeps DKMS's trees inside it
    ac.dkms.trees = {host.resolve("/var/lib/dkms"), host.resolve("/usr/src"), host.resolve("/lib/modules")};
  ac.dkms_conf_template = conf_template;
  ac.work_dir = host.resolve(paths::kWorkDir);
  ac.on_output = [&log](const plan::Step& s, const std::string& line) { log.detail(s.id + ": " + line); };
  const manifest::SizeManifest* size = manifests->find_size(plan.size);
  ac.waagent = [&](const plan::Step& step) -> install::StepResult {
    waagent::RdmaOptions ro;
    const auto* ws = step.as<plan::WaagentStep>();
    ro.config = ws->config;
    ro.unit = ws->unit.empty() ? detect::agent_unit(host, distro) : ws->unit;
    // Under a fixture --root the agent that runs is this machine's, not the tree's: never
    // restart it, unless commands are only being recorded.
    if (!host.is_real_root() && !recording) {
      ro.restart = waagent::Restart::never;
      ro.no_restart_reason = "--root is not /";
    }
    auto r = waagent::apply_rdma(host, waagent::desired_for(*size), *runner, ro);
    if (!r) return install::StepResult::failure(r.error());
    if (!r->changed) return install::StepResult::ok(fmt::format("{} already as wanted", ro.config));
    std::vector<std::string> edits;
    for (const auto& e : r->edits)
      edits.push_back(fmt::format("{}={} ({} line {})", e.key, e.after, waagent::how_name(e.how), e.line));
    return install::StepResult::ok(fmt::format("{}: {}; {}", ro.config, util::join(edits, ", "), r->note));
  };
  std::string verify_summary;
  ac.verify = [&](const plan::Step&) -> install::StepResult {
    verify::VerifyRequest req;
    req.manifests = &*manifests;
    req.size = plan.size;
    req.distro = plan.distro_id;
    req.level = o.verify_level;
    req.host = &facts;
    req.fs = &host;
    req.fabric_wait = std::chrono::seconds(o.fabric_wait_s);
    req.ib_devices = o.ib_devices;
    req.on_status = [&log](const std::string& s) { log.say("  verify: " + s); };
    auto rep = verify::run(req);
    if (!rep) return install::StepResult::failure(rep.error());
    // The report is kept for seal and for people: /var/lib/hpcbake/verify-install.json.
    (void)util::write_file_atomic(host.resolve("/var/lib/hpcbake/verify-install.json"), verify::to_json_text(*rep));
    // ... and the record seal reads (what `hpcbake verify` writes): install then seal works
    // without a separate verify run.
    if (auto w = verify::write_record(host, verify::make_record(*rep, verify::current_boot_id(host), install::now_seconds())); !w)
      return install::StepResult::failure(w.error());
    log.detail(verify::render_table(*rep));
    if (rep->passed())
      return install::StepResult::ok(fmt::format("{} checks passed ({} skipped)", rep->count(verify::Verdict::pass),
                                                 rep->count(verify::Verdict::skip)));
    std::vector<std::string> failed;
    for (const auto& c : rep->checks)
      if (c.verdict == verify::Verdict::fail) failed.push_back(fmt::format("{}: expected {}, observed {}", c.id, c.expected, c.observed));
    return install::StepResult::failure(
        Error{ErrorKind::smoke_test, fmt::format("{} check(s) failed: {}", failed.size(), util::join(failed, "; ")),
              "Run 'hpcbake verify' for the full table and what to do for each check."},
        verify::render_table(*rep));
  };
  install::Actions actions(std::move(ac));

  install::EngineOptions eo;
  eo.journal_file = journal_file;
  eo.parallel = o.jobs;
  eo.stop = &g_stop;
  eo.size = plan.size;
  eo.distro = plan.distro_id;
  eo.observe = [&log](const install::Event& e) {
    using K = install::EventKind;
    switch (e.kind) {
    case K::skipped: break; // summarised below
    case K::resumed: log.say(step_line(e, "resumed") + "  " + e.message); break;
    case K::started: log.say(step_line(e, "start") + "  " + e.message); break;
    case K::finished: log.say(step_line(e, "done") + fmt::format("  ({:.1f} s){}", e.seconds, e.message.empty() ? "" : " " + e.message)); break;
    case K::failed: log.say(step_line(e, "FAILED") + fmt::format("  ({:.1f} s) {}", e.seconds, e.message)); break;
    case K::reboot: log.say(step_line(e, "reboot") + "  " + e.message); break;
    }
  };
  if (batch.active) log.say(fmt::format("hpcbake install: Azure Batch start task (log {})", log.path().string()));
  log.say(fmt::format("hpcbake install: {} on {} ({} steps; kernels {}; journal {})", plan.size, plan.distro_name,
                      plan.steps.size(), util::join(plan.kernels, ", "), journal_file.string()));

  auto result = install::execute_plan(plan, actions, eo);
  if (!result) return report(result.error(), err);
  const auto& r = *result;

  switch (r.state) {
  case install::RunState::complete:
    remove_resume_unit(host);
    if (r.executed == 0) log.say(fmt::format("nothing to do: all {} steps are done (journal {})", r.skipped, journal_file.string()));
    else log.say(fmt::format("install complete: {} steps run, {} already done (journal {})", r.executed, r.skipped, journal_file.string()));
    return 0;
  case install::RunState::failed: {
    for (const auto& id : r.failed) {
      const auto& rec = r.journal.steps.at(id);
      err << fmt::format("hpcbake: error: step {} failed: {}\n", id, rec.message);
      if (!rec.output_tail.empty()) err << "  last output:\n" << indent(rec.output_tail, "    ");
    }
    if (!r.blocked.empty()) err << fmt::format("  not run because of the failure: {}\n", util::join(r.blocked, ", "));
    err << "  hint: fix the cause and run install again: done steps are skipped, failed ones retried\n";
    // The first failure's kind decides the exit code (fetch 4, build 5, smoke test 6, ...).
    return static_cast<int>(exit_code_for(r.failure_kinds.at(r.failed.front())));
  }
  case install::RunState::reboot_required: {
    const std::string steps = util::join(r.reboot, ", ");
    if (o.reboot == "never") {
      err << fmt::format("hpcbake: error: {} needs a reboot and --reboot=never\n  hint: reboot the machine and run "
                         "install again, or pass --reboot=exit|auto\n",
                         steps);
      return static_cast<int>(ExitCode::reboot_required);
    }
    if (o.resume_unit || o.reboot == "auto" ) {
      if (auto s = write_resume_unit(host, o, in); !s) return report(s.error(), err);
      log.say(fmt::format("resume unit installed: {} continues the install on the next boot", kUnitName));
    }
    if (o.reboot == "auto") {
      log.say(fmt::format("rebooting now ({}): the install continues after the reboot", steps));
      exec::Command reboot;
      reboot.argv = {"systemctl", "reboot"};
      auto rr = runner->run(reboot);
      if (!rr || !rr->ok())
        return report(Error{ErrorKind::reboot_required, "systemctl reboot failed", "reboot the machine by hand"}, err);
      return static_cast<int>(ExitCode::reboot_required);
    }
    log.say(fmt::format("reboot required ({}): reboot, then run install again{}", steps,
                        o.resume_unit ? " (or let the resume unit do it)" : ""));
    return static_cast<int>(ExitCode::reboot_required);
  }
  case install::RunState::interrupted:
    log.say(fmt::format("interrupted: {} steps not started; the journal is consistent, run install again to continue",
                        r.blocked.size()));
    return 130;
  case install::RunState::running: break;
  }
  return static_cast<int>(ExitCode::internal);
}

} // namespace hpcbake::cli
