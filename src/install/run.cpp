#include "install/run.hpp"
#include "util/clock.hpp"
#include "util/datadir.hpp"

#include "detect/platform.hpp"
#include "fetch/bundle.hpp"
#include "fetch/cache.hpp"
#include "fetch/jobs.hpp"
#include "install/actions.hpp"
#include "install/plan_file.hpp"
#include "install/plan_memo.hpp"
#include "install/resume_unit.hpp"
#include "pkg/manager.hpp"
#include "util/atomic_file.hpp"
#include "util/fd.hpp"
#include "util/paths.hpp"
#include "util/preflight.hpp"
#include "util/strings.hpp"
#include "verify/record.hpp"
#include "verify/verify.hpp"
#include "waagent/rdma.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

namespace hpcbake::install {

namespace fs = std::filesystem;

std::optional<RebootPolicy> parse_reboot_policy(std::string_view text) {
  if (text == "exit") return RebootPolicy::exit;
  if (text == "auto") return RebootPolicy::automatic;
  if (text == "never") return RebootPolicy::never;
  return std::nullopt;
}

std::string_view to_string(RebootPolicy policy) {
  switch (policy) {
  case RebootPolicy::exit:
    return "exit";
  case RebootPolicy::automatic:
    return "auto";
  case RebootPolicy::never:
    return "never";
  }
  return "exit";
}

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
  case Outcome::complete:
    return "complete";
  case Outcome::dry_run:
    return "dry-run";
  case Outcome::declined:
    return "declined";
  case Outcome::failed:
    return "failed";
  case Outcome::reboot_required:
    return "reboot-required";
  case Outcome::rebooting:
    return "rebooting";
  case Outcome::interrupted:
    return "interrupted";
  }
  return "failed";
}

BatchTask detect_batch_task(const std::function<const char*(const char*)>& getenv) {
  BatchTask b;
  for (const char* v : {"AZ_BATCH_TASK_ID", "AZ_BATCH_NODE_ID", "AZ_BATCH_TASK_WORKING_DIR", "AZ_BATCH_POOL_ID"})
    if (const char* e = getenv(v); e && *e) b.active = true;
  if (const char* w = getenv("AZ_BATCH_TASK_WORKING_DIR"); w && *w) b.working_dir = w;
  return b;
}

namespace {

// Lines for people (the observer) and for the log file, from any thread.
class InstallLog {
public:
  InstallLog(InstallObserver& observer, const fs::path& file) : observer_(observer) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    file_.open(file, std::ios::app);
  }
  void say(const std::string& line) {
    std::lock_guard lock(mu_);
    observer_.say(line);
    write(" ", line);
    file_ << std::flush;
  }
  void step(const Event& e) {
    std::lock_guard lock(mu_);
    observer_.on_step(e);
  }
  // Only into the log file: command output, tables.
  void detail(const std::string& line) {
    std::lock_guard lock(mu_);
    observer_.detail(line);
    write("   | ", line);
  }

private:
  // Every physical line stamped, so a multi-line message (verify's table) parses line by line.
  void write(const char* sep, const std::string& text) {
    if (!file_) return;
    const std::string stamp = util::iso8601_utc(now_seconds());
    for (const auto part : util::split(text, '\n'))
      file_ << stamp << sep << part << "\n";
  }
  InstallObserver& observer_;
  std::ofstream file_;
  std::mutex mu_;
};

// The machine lock: flock(2), so it dies with the process that holds it (a crash or SIGKILL
// never leaves a stale lock). The holder's pid is written into the file for the waiting message.
class MachineLock {
public:
  Status acquire(const fs::path& file, std::chrono::seconds timeout, const std::atomic<bool>* stop, InstallLog& log) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    fd_.reset(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd_)
      return fail(ErrorKind::internal,
                  fmt::format("{}: cannot open the install lock: {}", file.string(), std::strerror(errno)));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool told = false;
    while (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR)
        return fail(ErrorKind::internal, fmt::format("{}: flock failed: {}", file.string(), std::strerror(errno)));
      const std::string content = util::read_file(file).value_or("");
      std::string holder(util::trim(content));
      if (holder.empty()) holder = "?";
      if (!told) {
        log.say(fmt::format("waiting for another hpcbake install to finish (lock {}, held by pid {}; up to {} s)",
                            file.string(), holder, timeout.count()));
        told = true;
      }
      if (std::chrono::steady_clock::now() >= deadline || (stop && *stop))
        return fail(
            ErrorKind::lock_held,
            fmt::format("another hpcbake install holds {} (pid {}) after waiting {} s", file.string(), holder,
                        timeout.count()),
            fmt::format("Wait for it to finish (its progress is in {}), or raise --lock-timeout.", paths::kInstallLog));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_.get(), 0) == 0) {
      [[maybe_unused]] auto n = ::pwrite(fd_.get(), pid.data(), pid.size(), 0);
    }
    return {};
  }

private:
  util::Fd fd_;
};

// What a run executes: a plan made now from the manifests, or the stored plan it resumes.
struct Loaded {
  std::optional<manifest::Manifests> manifests; // none when resuming: the stored plan is all
  plan::Resolved resolved;
  fetch::Sha256Pins sha256_pins; // --sha256, each naming an artifact of the plan
  std::string stored_sha256;     // resuming: the stored plan's digest
};

// The repositories a bundle carries, as the planner takes them (id -> files), with the
// fingerprint each was verified with when the bundle was made.
struct BundleRepositories {
  std::map<std::string, std::vector<plan::MirrorFile>> files;
  std::map<std::string, std::string> fingerprints;
  std::map<std::string, plan::MirrorFile> git; // commit -> its git bundle file (PlanRequest::git_bundles)
};

// The git sources a bundle carries (index.json's git_sources), by commit.
Status bundle_git_sources(const fs::path& bundle, BundleRepositories& out) {
  HPCBAKE_TRY_ASSIGN(auto list, fetch::bundle_git_sources(bundle));
  for (const auto& g : list) {
    const auto text = [&](const char* key) {
      return g.is_object() && g.contains(key) && g[key].is_string() ? g[key].get<std::string>() : std::string();
    };
    plan::MirrorFile f{text("name"), text("sha256"), 0};
    if (g.is_object() && g.contains("size") && g["size"].is_number_unsigned()) f.size = g["size"].get<std::uint64_t>();
    const std::string commit = text("commit");
    const bool hex40 = commit.size() == 40 && std::all_of(commit.begin(), commit.end(), [](char c) {
                         return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                       });
    if (!hex40 || !util::is_sha256_hex(f.sha256) || !f.path.starts_with("git/") ||
        f.path.find("..") != std::string::npos)
      return fail(ErrorKind::fetch,
                  fmt::format("bundle {}: index.json: a git source without a commit, a git/ name and a SHA-256",
                              bundle.string()),
                  "the bundle is damaged or not made by 'hpcbake bundle create': make it again");
    out.git[commit] = std::move(f);
  }
  return {};
}

Result<BundleRepositories> bundle_repositories(const fs::path& bundle) {
  BundleRepositories out;
  HPCBAKE_TRY_ASSIGN(auto repos, fetch::bundle_repositories(bundle));
  auto damaged = [&](const std::string& what) {
    return fail(ErrorKind::fetch, fmt::format("bundle {}: index.json: {}", bundle.string(), what),
                "the bundle is damaged or not made by 'hpcbake bundle create': make it again");
  };
  auto text = [](const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  for (const auto& r : repos) {
    const std::string id = text(r, "id");
    if (!util::is_config_word(id) || !r.contains("files") || !r["files"].is_array() || r["files"].empty())
      return damaged("a repository entry without an id or files");
    auto& files = out.files[id];
    for (const auto& f : r["files"]) {
      plan::MirrorFile m{text(f, "path"), text(f, "sha256"), 0};
      if (f.is_object() && f.contains("size") && f["size"].is_number_unsigned())
        m.size = f["size"].get<std::uint64_t>();
      if (!util::is_sha256_hex(m.sha256) || m.path.empty() || m.path.front() == '/' ||
          m.path.find("..") != std::string::npos)
        return damaged(fmt::format("repository {}: a file entry that is not a relative path with a SHA-256", id));
      files.push_back(std::move(m));
    }
    out.fingerprints[id] = text(r, "fingerprint");
  }
  HPCBAKE_TRY(bundle_git_sources(bundle, out));
  return out;
}

Result<Loaded> load_and_plan(const InstallRequest& rq) {
  HPCBAKE_TRY_ASSIGN(auto manifests, manifest::load_manifests(rq.manifests_dir, rq.size_filter));
  Loaded out{std::move(manifests), {}, {}, {}};
  plan::ResolveRequest resolve = rq.resolve;
  BundleRepositories carried;
  if (!rq.bundle.empty()) {
    HPCBAKE_TRY_ASSIGN(carried, bundle_repositories(rq.bundle));
    resolve.mirrors = carried.files;
    resolve.git_bundles = carried.git;
  }
  HPCBAKE_TRY_ASSIGN(auto resolved, plan::resolve(*out.manifests, resolve, *rq.http));
  for (const auto& s : resolved.plan.steps) // a bundle made under another pin is not this plan's repository
    if (const auto* r = s.as<plan::RepositoryStep>();
        r && !r->mirror_dir.empty() && carried.fingerprints[r->repository] != r->fingerprint)
      return fail(ErrorKind::fetch,
                  fmt::format("bundle {} carries repository {} verified with key {}, but the manifests pin {}",
                              rq.bundle.string(), r->repository, carried.fingerprints[r->repository], r->fingerprint),
                  "make the bundle again with the manifests this install uses");
  out.resolved = std::move(resolved);
  const plan::Plan& p = out.resolved.plan;
  HPCBAKE_TRY_ASSIGN(out.sha256_pins, fetch::parse_sha256_pins(rq.sha256_overrides, p.artifacts));
  if (!rq.bundle.empty()) HPCBAKE_TRY(plan::offline_installable(p)); // before any step runs
  if (p.kernels.empty())
    return fail(
        ErrorKind::unsupported, fmt::format("no target kernel is known for this host ({})", p.kernels_source),
        "install runs on the machine being baked, with its distro's manifest (check 'hpcbake detect'); for a dry run "
        "from another machine, name the target's kernel: --dry-run --kernel RELEASE");
  return out;
}

// The install options a resumed run takes from the stored plan, paired once with the request's
// fields: `each(stored, request)` for every pair (a mirror URL is never stored: it may carry a
// SAS token).
template <class RunOpts, class Request, class Each> void each_option(RunOpts& o, Request& rq, Each each) {
  each(o.jobs, rq.jobs);
  each(o.lock_timeout, rq.lock_timeout);
  each(o.verify_level, rq.verify_level);
  each(o.ib_devices, rq.ib_devices);
  each(o.ib_seconds, rq.ib_seconds);
  each(o.fabric_wait, rq.fabric_wait);
  each(o.cache_dir, rq.fetch.cache_dir);
  each(o.ca_file, rq.fetch.ca_file);
  each(o.parallel, rq.fetch.parallel);
  each(o.attempts_per_url, rq.fetch.attempts_per_url);
  each(o.low_speed_seconds, rq.fetch.low_speed_seconds);
  each(o.backoff_initial_s, rq.fetch.backoff_initial_s);
  each(o.max_unpinned_bytes, rq.fetch.max_unpinned_bytes);
  each(o.quarantine_budget, rq.fetch.quarantine_budget);
  each(o.bundle, rq.bundle);
  each(o.sha256_overrides, rq.sha256_overrides);
  each(o.key_dir, rq.resolve.signing.key_dir);
}

// The options of this run, as the stored plan keeps them; paths absolute (the resume unit runs in /).
RunOptions run_options(const InstallRequest& rq) {
  RunOptions o;
  each_option(o, rq, [](auto& stored, const auto& given) { stored = given; });
  for (fs::path* p : {&o.cache_dir, &o.bundle, &o.key_dir})
    if (!p->empty()) *p = fs::absolute(*p);
  return o;
}

void apply(const RunOptions& o, InstallRequest& rq) {
  each_option(o, rq, [](const auto& stored, auto& given) { given = stored; });
  rq.fetch.mirrors.clear(); // never stored
}

// install --resume: the stored plan and its options, checked against the journal; the manifests
// and the first run's command line are not read. `rq` takes the stored options.
Result<Loaded> load_stored(InstallRequest& rq) {
  const util::HostFs& host = rq.resolve.host;
  const fs::path file = host.resolve(paths::kPlanFile);
  HPCBAKE_TRY_ASSIGN(auto stored, load_plan_file(file));
  if (!stored)
    return fail(ErrorKind::usage,
                fmt::format("install --resume: there is no stored plan ({}), so no install to resume", file.string()),
                "run 'hpcbake install': it plans, stores the plan and runs it");
  HPCBAKE_TRY_ASSIGN(auto journal, load_journal(host.resolve(paths::kJournal)));
  if (!journal.steps.empty() && journal.plan_sha256 != stored->sha256)
    return fail(ErrorKind::usage,
                fmt::format("install --resume: the journal {} records plan {}, and the stored plan {} is {}: they "
                            "are not the same install",
                            host.resolve(paths::kJournal).string(),
                            journal.plan_sha256.empty() ? std::string("(none)") : journal.plan_sha256, file.string(),
                            stored->sha256),
                "run 'hpcbake install' to plan afresh (the journal keeps the steps that are done)");
  apply(stored->options, rq);
  Loaded out;
  out.resolved.plan = std::move(stored->plan);
  out.stored_sha256 = stored->sha256;
  // The facts the closing verify reads (kernels, PCI, modules): the size is the plan's.
  detect::ImdsOptions imds;
  imds.enabled = false;
  imds.disabled_reason = "resuming the stored plan, which names the size";
  out.resolved.facts = detect::detect_host(host, *rq.http, imds, nullptr);
  HPCBAKE_TRY_ASSIGN(out.sha256_pins, fetch::parse_sha256_pins(rq.sha256_overrides, out.resolved.plan.artifacts));
  if (!rq.bundle.empty()) HPCBAKE_TRY(plan::offline_installable(out.resolved.plan));
  // An artifact whose URL carried a credential (not stored) must be in the cache already.
  const fetch::Cache cache(rq.fetch.cache_dir);
  for (const auto& name : out.resolved.plan.artifacts_redacted) {
    const auto& arts = out.resolved.plan.artifacts;
    const auto a = std::find_if(arts.begin(), arts.end(), [&](const auto& x) { return x.artifact.name == name; });
    std::optional<std::string> sha = a != arts.end() ? a->artifact.sha256 : std::nullopt;
    if (const auto pin = out.sha256_pins.find(name); pin != out.sha256_pins.end()) sha = pin->second;
    if (!rq.bundle.empty() || (sha && cache.has(*sha))) continue;
    return fail(ErrorKind::usage,
                fmt::format("install --resume: {} is not in the cache {} yet, and its URL's credentials (a query "
                            "string, a password) are not stored with the plan",
                            name, rq.fetch.cache_dir.string()),
                "run the same 'hpcbake install' command again (its manifests carry the URL), or 'hpcbake fetch' it "
                "first");
  }
  return out;
}

// Under the machine lock: the stored plan a resumed run loaded is still the one on disk (another
// install may have stored a new plan while this one waited for the lock).
Status still_stored(const InstallRequest& rq, const Loaded& l) {
  const fs::path file = rq.resolve.host.resolve(paths::kPlanFile);
  if (auto now = recorded_plan_sha256(file); now && *now == l.stored_sha256) return {};
  return fail(ErrorKind::usage,
              fmt::format("install --resume: {} changed while this run waited for the machine lock (another install "
                          "stored its plan)",
                          file.string()),
              "nothing to resume: that install carries on (run 'hpcbake install --resume' again to continue it)");
}

// What a resumed run continues, and with which of the stored options.
std::string resuming_line(const InstallRequest& rq, const Loaded& l) {
  const plan::Plan& p = l.resolved.plan;
  return fmt::format("resuming the stored plan {} (sha256 {}; profile {}): jobs {}, verify level {}, fabric wait {} s, "
                     "lock timeout {} s, key directory {}",
                     rq.resolve.host.resolve(paths::kPlanFile).string(), l.stored_sha256,
                     p.profile.empty() ? std::string("none") : p.profile, rq.jobs, rq.verify_level,
                     rq.fabric_wait.count(), rq.lock_timeout.count(), rq.resolve.signing.key_dir.string());
}

// What a run would do with each step, from the journal; reads only.
Result<std::vector<PreviewRow>> preview(const plan::Plan& plan, const fs::path& journal_file) {
  HPCBAKE_TRY_ASSIGN(auto j, load_journal(journal_file));
  const auto digests = step_digests(plan);
  std::vector<PreviewRow> rows;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& s = plan.steps[i];
    auto it = j.steps.find(s.id);
    PreviewRow row{i, "run", true};
    if (it != j.steps.end() && it->second.digest == digests.at(s.id)) {
      if (it->second.status == StepStatus::done)
        row = {i, "skip (done)", false};
      else if (it->second.status == StepStatus::reboot_pending)
        row = {i, "resume (after a reboot)", false};
      else
        row.state = fmt::format("run again ({})", to_string(it->second.status));
    } else if (it != j.steps.end()) {
      row.state = "run again (inputs changed)";
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// The waagent step: OS.EnableRDMA and friends, exactly as the step says.
StepResult waagent_step(const plan::Step& step, const InstallRequest& rq) {
  const util::HostFs& host = rq.resolve.host;
  const auto* ws = step.as<plan::WaagentStep>();
  waagent::RdmaOptions ro;
  ro.config = ws->config;
  ro.unit = ws->unit.empty() ? detect::agent_unit(host, nullptr) : ws->unit;
  // Under a fixture --root the agent that runs is this machine's, not the tree's: never
  // restart it, unless commands are only being recorded.
  if (!exec::may_act_on_machine(host, *rq.runner)) {
    ro.restart = waagent::Restart::never;
    ro.no_restart_reason = "--root is not /";
  }
  const waagent::Desired desired{ws->enable ? waagent::RdmaMode::on : waagent::RdmaMode::off, ws->reason};
  auto r = waagent::apply_rdma(host, desired, *rq.runner, ro);
  if (!r) return StepResult::failure(r.error());
  if (!r->changed) return StepResult::ok(fmt::format("{} already as wanted", ro.config));
  std::vector<std::string> edits;
  for (const auto& e : r->edits)
    edits.push_back(fmt::format("{}={} ({} line {})", e.key, e.after, waagent::how_name(e.how), e.line));
  return StepResult::ok(fmt::format("{}: {}; {}", ro.config, util::join(edits, ", "), r->note));
}

// The closing verify: the smoke tests for the size, and the record seal reads (what
// `hpcbake verify` writes), so install then seal works without a separate verify run.
StepResult verify_step(const InstallRequest& rq, const Loaded& l, const plan::Step& step, InstallLog& log) {
  const util::HostFs& host = rq.resolve.host;
  const auto* vs = step.as<plan::VerifyStep>();
  verify::VerifyRequest req;
  req.defer_hardware = vs && vs->defer_hardware;
  req.plan = &l.resolved.plan; // its verify step: what the size promised when the plan was made
  req.level = rq.verify_level;
  req.runner = rq.runner;
  req.host = &l.resolved.facts;
  req.fs = &host;
  req.fabric_wait = rq.fabric_wait;
  req.ib_devices = rq.ib_devices;
  req.ib_seconds = rq.ib_seconds;
  req.on_status = [&log](const std::string& s) { log.say("  verify: " + s); };
  auto rep = verify::run(req);
  if (!rep) return StepResult::failure(rep.error());
  // The full report, for people: the install log has only its table.
  if (auto w = util::write_file_atomic(host.resolve(paths::kVerifyInstallReport), verify::to_json_text(*rep)); !w)
    return StepResult::failure(w.error());
  const auto record = verify::make_record(*rep, verify::current_boot_id(host), now_seconds());
  if (auto w = verify::write_record(host, record); !w) return StepResult::failure(w.error());
  log.detail(verify::render_table(*rep));
  if (rep->passed())
    return StepResult::ok(
        rep->hardware_deferred
            ? fmt::format("{} checks passed ({} skipped); {} hardware checks deferred to the first boot on {}",
                          rep->count(verify::Verdict::pass), rep->count(verify::Verdict::skip),
                          rep->count(verify::Verdict::deferred), rep->size)
            : fmt::format("{} checks passed ({} skipped)", rep->count(verify::Verdict::pass),
                          rep->count(verify::Verdict::skip)));
  std::vector<std::string> failed;
  for (const auto& c : rep->checks)
    if (c.verdict == verify::Verdict::fail)
      failed.push_back(fmt::format("{}: expected {}, observed {}", c.id, c.expected, c.observed));
  return StepResult::failure(
      Error{ErrorKind::smoke_test, fmt::format("{} check(s) failed: {}", failed.size(), util::join(failed, "; ")),
            req.defer_hardware ? "Run 'hpcbake verify' for the full table and what to do for each check."
                               : fmt::format("Run 'hpcbake verify' for the full table and what to do for each "
                                             "check. If this machine is not a {} (a bake on another VM), "
                                             "install with --hardware-checks deferred.",
                                             rep->size)},
      verify::render_table(*rep));
}

ActionsConfig actions_config(const InstallRequest& rq, const Loaded& l, pkg::PackageManager& packages,
                             InstallLog& log) {
  const util::HostFs& host = rq.resolve.host;
  ActionsConfig ac;
  ac.host = host;
  ac.runner = rq.runner;
  ac.packages = &packages;
  ac.plan = &l.resolved.plan;
  ac.fetch = rq.fetch;
  ac.fetch.lock_timeout = rq.lock_timeout; // install's --lock-timeout covers the cache's download locks too
  ac.bundle = rq.bundle;
  ac.sha256_pins = l.sha256_pins;
  ac.http = rq.http;
  ac.downloads = rq.downloads;
  ac.dkms.kernel_modules_dir = host.resolve("/lib/modules");
  ac.dkms.log_dir = host.resolve(paths::kDkmsLogDir);
  if (!host.is_real_root()) { // DKMS's trees inside a fixture machine (--root), whatever its commands
    ac.dkms.trees = {host.resolve("/var/lib/dkms"), host.resolve("/usr/src"), host.resolve("/lib/modules")};
    ac.dkms.depmod = false; // dkms's depmod rewrites this machine's /lib/modules/K, never the tree's
  }
  ac.work_dir = host.resolve(paths::kWorkDir);
  ac.on_output = [&log](const plan::Step& s, const std::string& line) { log.detail(s.id + ": " + line); };
  ac.waagent = [&rq](const plan::Step& step) { return waagent_step(step, rq); };
  ac.verify = [&rq, &l, &log](const plan::Step& s) { return verify_step(rq, l, s, log); };
  return ac;
}

std::string event_line(const Event& e) {
  const auto head = [&e](const char* what) {
    return fmt::format("[{:>2}/{}] {:<8} {}", e.done, e.total, what, e.step->id);
  };
  switch (e.kind) {
  case EventKind::skipped:
    return {}; // summarised at the end
  case EventKind::resumed:
    return head("resumed") + "  " + e.message;
  case EventKind::started:
    return head("start") + "  " + e.message;
  case EventKind::finished:
    return head("done") + fmt::format("  ({:.1f} s){}", e.seconds, e.message.empty() ? "" : " " + e.message);
  case EventKind::failed:
    return head("FAILED") + fmt::format("  ({:.1f} s) {}", e.seconds, e.message);
  case EventKind::reboot:
    return head("reboot") + "  " + e.message;
  }
  return {};
}

// A step asked for a reboot: the resume unit, then exit 7 or `systemctl reboot`.
Result<Outcome> on_reboot(const InstallRequest& rq, const EngineResult& r, InstallLog& log) {
  const std::string steps = util::join(r.reboot, ", ");
  if (rq.reboot == RebootPolicy::never) return Outcome::reboot_required; // the caller says why it failed
  if (rq.resume_unit || rq.reboot == RebootPolicy::automatic) {
    HPCBAKE_TRY(write_resume_unit(rq.resolve.host, resume_argv(rq.resolve.host)));
    log.say(fmt::format("resume unit installed: {} continues the install on the next boot", paths::kResumeUnitName));
  }
  if (rq.reboot == RebootPolicy::automatic) {
    log.say(fmt::format("rebooting now ({}): the install continues after the reboot", steps));
    exec::Command reboot;
    reboot.argv = {"systemctl", "reboot"};
    auto rr = rq.runner->run(reboot);
    if (!rr || !rr->ok())
      return fail(ErrorKind::reboot_required,
                  fmt::format("systemctl reboot failed: {}", rr ? rr->describe() : rr.error().message),
                  "reboot the machine by hand; the install continues after it");
    return Outcome::rebooting;
  }
  log.say(fmt::format("reboot required ({}): reboot, then run 'hpcbake install --resume'{}", steps,
                      rq.resume_unit ? " (or let the resume unit do it)" : ""));
  return Outcome::reboot_required;
}

Result<Outcome> finish(const InstallRequest& rq, const EngineResult& r, const fs::path& journal_file, InstallLog& log) {
  switch (r.state) {
  case RunState::complete:
    remove_resume_unit(rq.resolve.host);
    if (r.executed == 0)
      log.say(fmt::format("nothing to do: all {} steps are done (journal {})", r.skipped, journal_file.string()));
    else
      log.say(fmt::format("install complete: {} steps run, {} already done (journal {})", r.executed, r.skipped,
                          journal_file.string()));
    return Outcome::complete;
  case RunState::failed:
    return Outcome::failed;
  case RunState::reboot_required:
    return on_reboot(rq, r, log);
  case RunState::interrupted:
    log.say(fmt::format("interrupted: {} steps not started; the journal is consistent, run install again to continue",
                        r.blocked.size()));
    return Outcome::interrupted;
  case RunState::running:
    break;
  }
  return fail(ErrorKind::internal, "the install engine stopped in the running state");
}

} // namespace

fs::path log_file_for(const InstallRequest& rq) {
  return rq.batch.active && !rq.batch.working_dir.empty() ? rq.batch.working_dir / "hpcbake-install.log"
                                                          : rq.resolve.host.resolve(paths::kInstallLog);
}

std::string headline(const std::string& size, const std::string& distro, std::size_t steps,
                     const std::vector<std::string>& kernels, const fs::path& journal_file) {
  return fmt::format("hpcbake install: {} on {} ({} steps; kernels {}; journal {})", size, distro, steps,
                     util::join(kernels, ", "), journal_file.string());
}

// The memo's inputs for this request on this host as it is now (plan_memo.hpp).
Result<std::string> inputs_now(const InstallRequest& rq, const manifest::Manifests* manifests) {
  const auto facts = detect::detect_host(rq.resolve.host, *rq.http, plan::imds_options(rq.resolve), manifests);
  return plan_inputs_digest(rq, facts);
}

// The no-op re-run from the memo, before the lock: the inputs are those the memo was made from
// (finish_noop checks the journal, under the lock). nullopt: plan in full (no memo for these
// inputs, or something is off, which the full path then reports).
std::optional<PlanMemo> memo_candidate(const InstallRequest& rq) {
  // An offline bundle or prebuilt modules are files whose bytes the plan reads: planned in full.
  if (rq.build_id.empty() || !rq.memo_fast_path || !rq.bundle.empty() || !rq.resolve.prebuilt.empty() ||
      !(rq.yes || rq.batch.active))
    return std::nullopt;
  const util::HostFs& host = rq.resolve.host;
  auto memo = load_plan_memo(host.resolve(paths::kPlanMemo));
  if (!memo) return std::nullopt;
  const auto inputs = inputs_now(rq, nullptr);
  if (!inputs || *inputs != memo->inputs) return std::nullopt;
  return memo;
}

// After a complete run: the memo for the next run, made as that run would plan (on the host as
// the steps left it), and written only when that plan is all done. Best effort: a memo that
// cannot be made or written only leaves the next run on the full path.
void record_memo(const InstallRequest& rq, const Loaded& l, const fs::path& journal_file, InstallLog& log) {
  if (rq.build_id.empty() || !rq.bundle.empty() || !rq.resolve.prebuilt.empty()) return;
  const util::HostFs& host = rq.resolve.host;
  const auto facts = detect::detect_host(host, *rq.http, plan::imds_options(rq.resolve), &*l.manifests);
  const auto inputs = plan_inputs_digest(rq, facts);
  if (!inputs) return;
  auto replanned = plan::plan_for(*l.manifests, rq.resolve, facts);
  const auto journal = load_journal(journal_file);
  if (!replanned || !journal) return;
  PlanMemo memo{*inputs, replanned->size, replanned->distro_name, replanned->kernels, step_digests(*replanned)};
  if (!memo_holds(memo, *journal)) return; // the next run has work to do: no memo
  const fs::path file = host.resolve(paths::kPlanMemo);
  if (const auto old = load_plan_memo(file);
      old && old->inputs == memo.inputs && old->steps == memo.steps && old->kernels == memo.kernels)
    return; // already there: a no-op writes nothing
  if (auto saved = save_plan_memo(file, memo); !saved)
    log.detail(fmt::format("the plan memo was not written ({}): the next run plans in full", saved.error().message));
}

// Under the machine lock, as the full path would: the journal is read again, and if another
// install changed it meanwhile the memo no longer speaks for it (nullopt: plan in full).
Result<std::optional<InstallResult>> finish_noop(const InstallRequest& rq, const PlanMemo& memo,
                                                 InstallObserver& observer) {
  InstallResult out;
  out.journal_file = rq.resolve.host.resolve(paths::kJournal);
  out.log_file = log_file_for(rq);
  InstallLog log(observer, out.log_file);
  MachineLock lock;
  HPCBAKE_TRY(lock.acquire(rq.resolve.host.resolve(paths::kLockFile), rq.lock_timeout, rq.stop, log));
  const auto journal = load_journal(out.journal_file);
  if (!journal || !memo_holds(memo, *journal)) return std::nullopt;
  // The stored plan must still be the journal's (seal reads it): else plan in full, which stores it.
  if (const auto stored = recorded_plan_sha256(rq.resolve.host.resolve(paths::kPlanFile));
      !stored || *stored != journal->plan_sha256)
    return std::nullopt;
  out.plan.size = memo.size;
  out.plan.distro_name = memo.distro_name;
  out.plan.kernels = memo.kernels;
  out.engine.skipped = static_cast<int>(memo.steps.size());
  out.engine.state = RunState::complete;
  out.engine.journal = *journal;
  if (rq.batch.active) log.say(fmt::format("hpcbake install: Azure Batch start task (log {})", out.log_file.string()));
  log.say(headline(out.plan.size, out.plan.distro_name, memo.steps.size(), out.plan.kernels, out.journal_file));
  log.detail(fmt::format("plan: from the plan memo {} (same inputs as the run that wrote it; manifests not read)",
                         rq.resolve.host.resolve(paths::kPlanMemo).string()));
  HPCBAKE_TRY_ASSIGN(out.outcome, finish(rq, out.engine, out.journal_file, log));
  return std::optional<InstallResult>(std::move(out));
}

std::vector<std::string> resume_argv(const util::HostFs& host) {
  const auto exe = util::self_exe();
  std::vector<std::string> argv = {exe ? exe->string() : std::string("/usr/bin/hpcbake")};
  if (!host.is_real_root()) argv.insert(argv.end(), {"--root", fs::absolute(host.root()).string()});
  argv.insert(argv.end(), {"install", "--resume"});
  return argv;
}

Status check_trust(const InstallRequest& rq) {
  const util::HostFs& host = rq.resolve.host;
  std::vector<util::TrustedPath> trusted = {
      {host.resolve(paths::kStateDir), "state directory", 1, {}},
      {host.resolve(paths::kLockFile).parent_path(), "lock directory", 1, {}},
      {rq.fetch.cache_dir, "artifact cache", -1, "or pass --cache DIR"},
      {rq.resolve.signing.key_dir, "signing key directory", 1, {}},
  };
  // The manifests and recipes say what runs as root; a resumed run reads the stored plan instead
  // (in the state directory).
  if (!rq.resume) {
    trusted.push_back(manifest::manifest_trust(rq.manifests_dir.string()));
    trusted.push_back(manifest::drivers_trust(rq.manifests_dir.string()));
    for (const auto& p : manifest::default_overlays()) // an overlay changes what runs as root too
      trusted.push_back({p, "manifest overlay", -1, "or pass --overlay naming a root-owned copy"});
  }
  // Prebuilt modules are kernel code the node loads: nobody but root may have changed the file.
  if (!rq.resolve.prebuilt.empty()) trusted.push_back({rq.resolve.prebuilt, "prebuilt modules file", 0, {}});
  return util::preflight("install", host, trusted);
}

Result<InstallResult> run(const InstallRequest& request, InstallObserver& observer) {
  InstallRequest rq = request;
  const util::HostFs& host = rq.resolve.host;
  Loaded loaded;
  if (rq.resume) { // rq takes the stored options
    HPCBAKE_TRY_ASSIGN(loaded, load_stored(rq));
  }
  if (!rq.dry_run) HPCBAKE_TRY(check_trust(rq));
  if (rq.reboot == RebootPolicy::automatic && !exec::may_act_on_machine(host, *rq.runner))
    return fail(ErrorKind::usage,
                fmt::format("--reboot=auto would reboot the machine hpcbake runs on, not the tree under --root {}",
                            host.root().string()),
                "install into a --root tree with --reboot=exit (the default)");
  if (!rq.dry_run && !rq.resume) {
    if (const auto memo = memo_candidate(rq)) {
      HPCBAKE_TRY_ASSIGN(auto noop, finish_noop(rq, *memo, observer));
      if (noop) return std::move(*noop);
    }
  }
  if (!rq.resume) {
    HPCBAKE_TRY_ASSIGN(loaded, load_and_plan(rq));
  }
  Loaded& l = loaded;
  InstallResult out;
  out.plan = l.resolved.plan;
  out.journal_file = host.resolve(paths::kJournal);
  if (rq.dry_run) { // reads the journal and nothing else: no log, no lock, no directory
    HPCBAKE_TRY_ASSIGN(auto rows, preview(out.plan, out.journal_file));
    out.preview = std::move(rows);
    out.outcome = Outcome::dry_run;
    return out;
  }
  // Drivers, kernel modules, the agent and a reboot are the VM's: inside a container they would
  // land in the container's file system, for a kernel it does not own.
  if (const auto& c = l.resolved.facts.container; !c.engine.empty())
    return fail(ErrorKind::unsupported,
                fmt::format("this is a {} container ({}): install changes the VM itself (drivers, kernel modules, the "
                            "Azure agent, a reboot), which a container cannot",
                            c.engine, c.source),
                "run install on the VM: over SSH, from Packer, or as a Batch start task without containerSettings; "
                "inside a container, `hpcbake verify` checks the GPUs and ports the container is given");
  // A resume unit systemd would refuse is found now, not after the steps that need the reboot.
  if (rq.resume_unit || rq.reboot == RebootPolicy::automatic) HPCBAKE_TRY(systemd_exec_line(resume_argv(host)));
  observer.on_plan(out.plan);
  if (!rq.yes && !rq.batch.active) {
    auto answer = observer.confirm(out.plan);
    if (!answer) return std::unexpected(answer.error());
    if (!*answer) {
      out.outcome = Outcome::declined;
      return out;
    }
  }
  out.log_file = log_file_for(rq);
  InstallLog log(observer, out.log_file);
  MachineLock lock;
  HPCBAKE_TRY(lock.acquire(host.resolve(paths::kLockFile), rq.lock_timeout, rq.stop, log));
  if (rq.resume) HPCBAKE_TRY(still_stored(rq, l));

  pkg::PkgOptions popt;
  popt.lock_timeout = rq.lock_timeout;
  popt.on_status = [&log](const std::string& s) { log.say("  " + s); };
  const auto family = pkg::family_of(out.plan.package_manager);
  auto packages = pkg::make_package_manager(family, *rq.runner, host, popt);
  Actions actions(actions_config(rq, l, *packages, log));

  EngineOptions eo;
  eo.journal_file = out.journal_file;
  eo.parallel = rq.jobs;
  eo.stop = rq.stop;
  eo.size = out.plan.size;
  eo.distro = out.plan.distro_id;
  // The record of what runs, before the first step: resume, verify and seal read it.
  if (!rq.resume) {
    HPCBAKE_TRY_ASSIGN(l.stored_sha256, save_plan_file(host.resolve(paths::kPlanFile), out.plan, run_options(rq)));
  }
  eo.plan_sha256 = l.stored_sha256;
  eo.observe = [&log](const Event& e) {
    log.step(e);
    if (auto line = event_line(e); !line.empty()) log.say(line);
  };
  if (rq.batch.active) log.say(fmt::format("hpcbake install: Azure Batch start task (log {})", out.log_file.string()));
  log.say(headline(out.plan.size, out.plan.distro_name, out.plan.steps.size(), out.plan.kernels, out.journal_file));
  if (rq.resume) log.say(resuming_line(rq, l));
  HPCBAKE_TRY_ASSIGN(auto engine, execute_plan(l.resolved.plan, actions, eo));
  out.engine = std::move(engine);
  HPCBAKE_TRY_ASSIGN(auto outcome, finish(rq, out.engine, out.journal_file, log));
  out.outcome = outcome;
  if (outcome == Outcome::complete) {
    if (l.manifests) record_memo(rq, l, out.journal_file, log);
  }
  return out;
}

} // namespace hpcbake::install
