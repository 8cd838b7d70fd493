#include "cli/install_cmd.hpp"
#include "cli/version.hpp"

#include "cli/progress.hpp"
#include "cli/report.hpp"
#include "cli/signals.hpp"
#include "cli/test_runner.hpp"
#include "plan/plan.hpp"
#include "util/json.hpp"
#include "util/paths.hpp"
#include "util/preflight.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>

namespace hpcbake::cli {

namespace fs = std::filesystem;

namespace {

// What a person (or, with --json, a program) sees of an install: step lines, live downloads
// drawn by the progress renderer between them, and the question on the terminal.
class InstallView final : public install::InstallObserver {
public:
  InstallView(std::ostream& out, const Ui& ui) : out_(out), ui_(ui), progress_(out, progress_options(ui)) {}
  void on_plan(const plan::Plan& plan) override {
    std::vector<std::optional<std::uint64_t>> sizes;
    for (const auto& a : plan.artifacts)
      sizes.push_back(a.artifact.size ? std::optional<std::uint64_t>(*a.artifact.size) : std::nullopt);
    progress_.expect(plan.artifacts.size(), known_total(sizes));
  }
  void say(const std::string& line) override {
    // Quiet: the headline and the outcome, not the step lines ("[ 3/8] ...") or their details.
    if (ui_.quiet && (line.starts_with("[") || line.starts_with(" "))) return;
    progress_.say(line);
  }
  void on_step(const install::Event& e) override {
    if (!ui_.json || !e.step) return;
    nlohmann::json j = {{"event", "step." + std::string(install::to_string(e.kind))},
                        {"step", e.step->id},
                        {"kind", e.step->kind()},
                        {"done", e.done},
                        {"total", e.total}};
    if (e.seconds > 0) j["seconds"] = e.seconds;
    if (!e.message.empty()) j["message"] = e.message;
    out_ << util::dump_json(j) << "\n" << std::flush;
  }
  void detail(const std::string& line) override {
    if (ui_.verbose && !ui_.json) progress_.say("    | " + line);
  }
  fetch::Observer* downloads() { return &progress_; }
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
  static ProgressRenderer::Options progress_options(const Ui& ui) {
    ProgressRenderer::Options po;
    po.mode = ui.json ? ProgressMode::json : progress_mode_for(false, STDOUT_FILENO);
    if (ui.quiet && !ui.json) po.mode = ProgressMode::quiet;
    po.width = terminal_width(STDOUT_FILENO);
    po.label = "  download";
    po.json_prefix = "download.";
    return po;
  }
  std::ostream& out_;
  Ui ui_;
  ProgressRenderer progress_;
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

// The dry run as one JSON line (install --json prints JSON lines): the plan as `plan --json`
// prints it, and each step's state in this run, before the closing "result" line.
void render_preview_json(const install::InstallResult& r, std::ostream& out) {
  const auto& plan = r.plan;
  nlohmann::json steps = nlohmann::json::array();
  int to_run = 0;
  for (const auto& row : r.preview) {
    const auto& s = plan.steps[row.step];
    to_run += row.runs ? 1 : 0;
    steps.push_back({{"id", s.id}, {"kind", s.kind()}, {"state", row.state}, {"runs", row.runs}});
  }
  out << util::dump_json(nlohmann::json{{"event", "dry_run"},
                                        {"journal", r.journal_file.string()},
                                        {"would_run", to_run},
                                        {"steps", std::move(steps)},
                                        {"plan", plan::to_json(plan)}})
      << "\n";
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

int exit_code(const install::InstallRequest& rq, const install::InstallResult& r, bool json, std::ostream& out,
              std::ostream& err) {
  using install::Outcome;
  switch (r.outcome) {
  case Outcome::complete:
    return static_cast<int>(ExitCode::ok);
  case Outcome::dry_run:
    json ? render_preview_json(r, out) : render_preview(r, out);
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
  c.add_flag("--resume", o.resume,
             "continue the install stored in /var/lib/hpcbake/plan.json with its stored options (what the resume "
             "unit runs); implies --yes and --resume-unit");
  c.add_option("--lock-timeout", o.lock_timeout_s, "wait this long for another install (and the package locks)")
      ->check(CLI::Range(0L, 86400L))
      ->default_val(600)
      ->option_text("SECONDS");
  c.add_option("--jobs", o.jobs, "independent steps at once")->check(CLI::Range(1, 16))->default_val(4);
  c.add_option("--verify-level", o.verify_level, "level of the closing smoke tests (0 to 3, see verify --level)")
      ->check(CLI::Range(0, 3))
      ->default_val(1);
  c.add_option("--ib-device", o.ib_devices, "verify these RDMA devices (any link layer, e.g. rxe0); repeatable")
      ->option_text("DEVICE");
  c.add_option("--ib-seconds", o.ib_seconds,
               "the closing verify's RDMA loopback (level 2) stops after this long on each port (see verify)")
      ->check(CLI::Range(0.1, 3600.0))
      ->default_val(10)
      ->option_text("SECONDS");
  c.add_option("--fabric-wait", o.fabric_wait_s, "how long verify waits for Fabric Manager")
      ->check(CLI::Range(0L, 600L))
      ->default_val(60)
      ->option_text("SECONDS");
  c.add_option("--sign-key", o.sign_key, "sign modules with this private key (with --sign-cert)")->option_text("FILE");
  c.add_option("--sign-cert", o.sign_cert, "the certificate of --sign-key")->option_text("FILE");
  c.add_option("--key-dir", o.key_dir, "where a generated signing key lives (default /var/lib/hpcbake/signing)")
      ->option_text("DIR");
}

std::vector<std::string> resume_conflicts(const InstallOptions& o) {
  const InstallOptions d;
  std::vector<std::string> out;
  if (o.lock_timeout_s != d.lock_timeout_s) out.emplace_back("--lock-timeout");
  if (o.jobs != d.jobs) out.emplace_back("--jobs");
  if (o.verify_level != d.verify_level) out.emplace_back("--verify-level");
  if (!o.ib_devices.empty()) out.emplace_back("--ib-device");
  if (o.ib_seconds != d.ib_seconds) out.emplace_back("--ib-seconds");
  if (o.fabric_wait_s != d.fabric_wait_s) out.emplace_back("--fabric-wait");
  if (!o.sign_key.empty()) out.emplace_back("--sign-key");
  if (!o.sign_cert.empty()) out.emplace_back("--sign-cert");
  if (!o.key_dir.empty()) out.emplace_back("--key-dir");
  return out;
}

int run_install(const InstallOptions& o, const Ui& ui, install::InstallRequest rq, std::ostream& out,
                std::ostream& err) {
  rq.dry_run = o.dry_run;
  rq.yes = o.yes;
  rq.reboot = install::parse_reboot_policy(o.reboot).value_or(install::RebootPolicy::exit);
  rq.resume_unit = o.resume_unit;
  rq.lock_timeout = std::chrono::seconds(o.lock_timeout_s);
  rq.jobs = o.jobs;
  rq.verify_level = o.verify_level;
  rq.ib_devices = o.ib_devices;
  rq.ib_seconds = o.ib_seconds;
  rq.fabric_wait = std::chrono::seconds(o.fabric_wait_s);
  auto& signing = rq.resolve.signing;
  signing.key = o.sign_key.empty() ? fs::path() : fs::path(absolute(o.sign_key));
  signing.cert = o.sign_cert.empty() ? fs::path() : fs::path(absolute(o.sign_cert));
  signing.key_dir = o.key_dir.empty() ? rq.resolve.host.resolve(paths::kKeyDir) : fs::path(absolute(o.key_dir));
  rq.resume = o.resume;
  if (o.resume) { // the resume unit's run: no prompt, the unit again on a reboot
    rq.yes = true;
    rq.resume_unit = true;
  }

  rq.batch = install::detect_batch_task([](const char* v) { return std::getenv(v); });
  rq.build_id = build_id();
  rq.memo_fast_path = !ui.json; // JSON lines carry every step's event, which only a plan has
  auto runner = make_runner(rq.resolve.host);
  rq.runner = runner.get();
  util::CurlHttpClient http;
  rq.http = &http;
  StopSignals signals;
  rq.stop = signals.flag();
  InstallView view(out, ui);
  rq.downloads = view.downloads();
  auto r = install::run(rq, view);
  if (!r) return report(r.error(), err);
  const int code = exit_code(rq, *r, ui.json, out, err);
  if (ui.json)
    out << util::dump_json(nlohmann::json{{"event", "result"},
                                          {"outcome", install::to_string(r->outcome)},
                                          {"exit_code", code},
                                          {"journal", r->journal_file.string()}})
        << "\n";
  return code;
}

} // namespace hpcbake::cli
