#include "cli/install_cmd.hpp"

#include "cli/report.hpp"
#include "cli/test_runner.hpp"
#include "plan/plan.hpp"
#include "util/paths.hpp"
#include "util/preflight.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>

namespace hpcbake::cli {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) {
    // A second Ctrl-C: the user means it.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

struct SignalGuard {
  struct sigaction old_int {
  }, old_term{};
  SignalGuard() {
    g_stop = false;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

// Lines on stdout; the question on the terminal.
class TerminalObserver final : public install::InstallObserver {
public:
  explicit TerminalObserver(std::ostream& out) : out_(out) {}
  void say(const std::string& line) override { out_ << line << "\n" << std::flush; }
  Result<bool> confirm(const plan::Plan& plan) override {
    if (!::isatty(STDIN_FILENO))
      return fail(ErrorKind::usage, "install changes this machine and there is no terminal to ask",
                  "pass --yes (Batch start tasks imply it); --dry-run shows what would run");
    out_ << plan::render_text(plan) << "Proceed with the install on this machine? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    return answer == "y" || answer == "Y" || answer == "yes";
  }

private:
  std::ostream& out_;
};

std::string indent(const std::string& text, const std::string& by) {
  std::string out;
  for (auto line : util::split(text, '\n'))
    if (!line.empty()) out += by + std::string(line) + "\n";
  return out;
}

void render_preview(const install::InstallResult& r, std::ostream& out) {
  const auto& plan = r.plan;
  out << fmt::format("install plan for {} on {} (kernels: {}); journal {}\n", plan.size, plan.distro_name,
                     util::join(plan.kernels, ", "), r.journal_file.string());
  int to_run = 0;
  for (const auto& row : r.preview) {
    const auto& s = plan.steps[row.step];
    out << fmt::format("  {:<28} {:<16} {}\n", row.state, s.kind(), s.id);
    if (row.runs) {
      ++to_run;
      out << plan::step_lines(s);
    }
  }
  out << fmt::format("{} of {} steps would run; nothing was changed\n", to_run, plan.steps.size());
}

int render_failure(const install::EngineResult& r, std::ostream& err) {
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

int exit_code(const install::InstallRequest& rq, const install::InstallResult& r, std::ostream& out,
              std::ostream& err) {
  using install::Outcome;
  switch (r.outcome) {
  case Outcome::complete:
    return static_cast<int>(ExitCode::ok);
  case Outcome::dry_run:
    render_preview(r, out);
    return static_cast<int>(ExitCode::ok);
  case Outcome::declined:
    out << "nothing was changed\n";
    return static_cast<int>(ExitCode::usage);
  case Outcome::failed:
    return render_failure(r.engine, err);
  case Outcome::reboot_required:
    if (rq.reboot == install::RebootPolicy::never)
      err << fmt::format("hpcbake: error: {} needs a reboot and --reboot=never\n  hint: reboot the machine and run "
                         "install again, or pass --reboot=exit|auto\n",
                         util::join(r.engine.reboot, ", "));
    return static_cast<int>(ExitCode::reboot_required);
  case Outcome::rebooting:
    return static_cast<int>(ExitCode::reboot_required);
  case Outcome::interrupted:
    return static_cast<int>(ExitCode::interrupted);
  }
  return static_cast<int>(ExitCode::internal);
}

std::string absolute(const std::string& p) {
  return fs::absolute(p).string();
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
  c.add_option("--verify-level", o.verify_level, "level of the closing smoke tests (0 to 3, see verify --level)")
      ->check(CLI::Range(0, 3))
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

int run_install(const InstallOptions& o, install::InstallRequest rq, std::ostream& out, std::ostream& err) {
  rq.dry_run = o.dry_run;
  rq.yes = o.yes;
  rq.reboot = install::parse_reboot_policy(o.reboot).value_or(install::RebootPolicy::exit);
  rq.resume_unit = o.resume_unit;
  rq.lock_timeout = std::chrono::seconds(o.lock_timeout_s);
  rq.jobs = o.jobs;
  rq.verify_level = o.verify_level;
  rq.ib_devices = o.ib_devices;
  rq.fabric_wait = std::chrono::seconds(o.fabric_wait_s);
  auto& signing = rq.resolve.signing;
  signing.key = o.sign_key.empty() ? fs::path() : fs::path(absolute(o.sign_key));
  signing.cert = o.sign_cert.empty() ? fs::path() : fs::path(absolute(o.sign_cert));
  signing.key_dir = o.key_dir.empty() ? rq.resolve.host.resolve(paths::kKeyDir) : fs::path(absolute(o.key_dir));
  // The resume unit never reboots by itself (packaging/systemd/hpcbake-resume.service).
  auto& argv = rq.resume_argv;
  argv.insert(argv.end(), {"--yes", "--resume-unit", "--reboot=exit"});
  if (o.verify_level != 1) argv.push_back(fmt::format("--verify-level={}", o.verify_level));
  for (const auto& d : o.ib_devices)
    argv.push_back("--ib-device=" + d);
  if (!o.sign_key.empty()) argv.push_back("--sign-key=" + signing.key.string());
  if (!o.sign_cert.empty()) argv.push_back("--sign-cert=" + signing.cert.string());
  if (!o.key_dir.empty()) argv.push_back("--key-dir=" + signing.key_dir.string());

  rq.batch = install::detect_batch_task([](const char* v) { return std::getenv(v); });
  auto runner = make_runner();
  rq.runner = runner.get();
  rq.commands_recorded = records_commands(*runner);
  util::CurlHttpClient http;
  rq.http = &http;
  SignalGuard signals;
  rq.stop = &g_stop;
  TerminalObserver observer(out);
  auto r = install::run(rq, observer);
  if (!r) return report(r.error(), err);
  return exit_code(rq, *r, out, err);
}

} // namespace hpcbake::cli
