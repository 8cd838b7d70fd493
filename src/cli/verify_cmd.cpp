#include "cli/verify_cmd.hpp"
#include "cli/report.hpp"
#include "cli/test_runner.hpp"
#include "exec/runner.hpp"

#include "detect/host.hpp"
#include "install/journal.hpp"
#include "install/plan_file.hpp"
#include "manifest/catalog.hpp"
#include "manifest/manifests.hpp"
#include "util/atomic_file.hpp"
#include "util/build_config.hpp"
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/http.hpp"
#include "util/json.hpp"
#include "util/paths.hpp"
#include "util/strings.hpp"
#include "util/utf8.hpp"
#include "verify/hardware_verdict.hpp"
#include "verify/node_state.hpp"
#include "verify/record.hpp"
#include "verify/verify.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <thread>

namespace hpcbake::cli {

namespace {

// `verify --libraries`: which vendor libraries load, from where, with which entry points.
int cmd_libraries(const VerifyOptions& o, std::ostream& out, std::ostream& err) {
  const auto probes = verify::probe_libraries();
  out << (o.json ? verify::libraries_to_json_text(probes) : verify::render_libraries(probes));
  std::vector<std::string> bad;
  for (const auto& p : probes)
    if (!p.ok()) bad.push_back(p.soname);
  if (bad.empty()) return 0;
  return report(Error{ErrorKind::smoke_test, fmt::format("verify --libraries: {} cannot be used", fmt::join(bad, ", ")),
                      "each library above says why; verify's checks that use it will fail the same way"},
                err);
}

// Whether the metadata service says this VM is another size than the stored plan's.
bool facts_say_other_size(const install::StoredPlan& s, const detect::HostFacts& facts) {
  return facts.imds.on_azure && manifest::size_key(facts.imds.vm_size) != manifest::size_key(s.plan.size);
}

// The stored plan answers unless the command line asks for another size, distro or profile, or
// the metadata service says this VM is another size (a VM made from the image on another size).
// Empty: it fits; else why not.
std::string stored_plan_misfit(const install::StoredPlan& s, const CLI::App& cmd, const VerifyOptions& o,
                               const detect::HostFacts& facts) {
  const std::string stored = manifest::size_key(s.plan.size);
  if (!o.size.empty() && manifest::size_key(o.size) != stored) return fmt::format("--size {}", o.size);
  if (!o.distro.empty() && util::to_lower(o.distro) != s.plan.distro_id) return fmt::format("--distro {}", o.distro);
  if (cmd.count("--profile") && o.profile != (s.plan.profile.empty() ? "default" : s.plan.profile))
    return fmt::format("--profile {}", o.profile);
  // A bake on another machine (--hardware-checks deferred) is another size by definition.
  if (o.size.empty() && o.hardware_checks != "deferred" && facts_say_other_size(s, facts))
    return fmt::format("this VM is a {} (Azure metadata)", util::excerpt(facts.imds.vm_size));
  return {};
}

// A plan made now from the manifests, for a machine no install recorded (or another request).
// `asked`: `facts` already holds the metadata service's answer (the stored plan's check): not
// asked a second time.
Result<plan::Plan> fresh_plan(const VerifyOptions& o, const std::string& manifests_dir, detect::ImdsOptions imds,
                              const util::HostFs& host, detect::HostFacts& facts, bool asked) {
  HPCBAKE_TRY_ASSIGN(auto manifests, manifest::load_manifests(manifest::manifest_dir_or_default(manifests_dir)));
  if (!o.size.empty() || asked) imds.enabled = false; // the size is given, or the answer is in hand
  const auto answer = facts.imds;
  util::CurlHttpClient http;
  facts = detect::detect_host(host, http, imds, &manifests);
  if (asked) facts.imds = answer;
  std::string size = o.size;
  if (size.empty()) {
    if (!facts.imds.on_azure)
      return fail(ErrorKind::usage, fmt::format("no --size given, and the VM size is unknown: {}", facts.imds.status),
                  "pass --size VM_SIZE, e.g. --size Standard_ND96isr_H100_v5");
    size = facts.imds.vm_size;
  }
  return verify::plan_for_verify(manifests, size, o.distro, o.profile, facts);
}

std::string describe_state(const verify::NodeState& s, const std::string& this_boot) {
  std::string boot = s.boot_id.empty()        ? "boot unknown"
                     : s.boot_id == this_boot ? "this boot"
                                              : fmt::format("an earlier boot, {}", s.boot_id);
  std::string text = fmt::format("node state {}: {} (level {}, {}, checked at {:%Y-%m-%d %H:%M:%S} UTC in {:.1f} s, "
                                 "{} passed, {} failed, {} skipped, hpcbake {})\n",
                                 verify::kNodeStatePath, s.healthy ? "healthy" : "unhealthy", s.level, boot,
                                 fmt::gmtime(static_cast<std::time_t>(s.checked_at)), s.duration_seconds, s.pass,
                                 s.fail, s.skip, s.hpcbake_version);
  if (!s.error.empty()) text += fmt::format("  verify could not run: {}\n", s.error);
  for (const auto* c : s.failed()) {
    text += "  FAILED " + verify::describe_failure(*c) + "\n";
    if (!c->hint.empty()) text += "    hint: " + c->hint + "\n";
  }
  return text;
}

// `verify --node-state [--wait SECONDS]`: the last `verify --boot` verdict; with --wait, the first
// one of this boot (boot id), polled once a second until it is there or the time is up.
int cmd_node_state(const VerifyOptions& o, const util::HostFs& host, std::ostream& out, std::ostream& err) {
  using clock = std::chrono::steady_clock;
  const std::string this_boot = verify::current_boot_id(host);
  const bool waiting = o.wait_s >= 0;
  const auto deadline = clock::now() + std::chrono::seconds(std::max(o.wait_s, 0L));
  std::optional<verify::NodeState> state;
  for (;;) {
    auto s = verify::read_node_state(host);
    if (!s) return report(s.error(), err);
    state = std::move(*s);
    // The boot id unknown here: any state counts (nothing to tell boots apart with).
    if (state && (!waiting || this_boot.empty() || state->boot_id == this_boot)) break;
    if (clock::now() >= deadline) {
      const std::string last =
          !state ? "none was ever written" : fmt::format("the last is from boot {}", state->boot_id);
      return report(Error{ErrorKind::smoke_test,
                          waiting ? fmt::format("no 'verify --boot' result for this boot ({}) within {} s ({}; {})",
                                                this_boot, o.wait_s, verify::kNodeStatePath, last)
                                  : fmt::format("no node state: {} does not exist ('verify --boot' has not run here)",
                                                verify::kNodeStatePath),
                          "see 'systemctl status hpcbake-verify-boot.service' and 'journalctl -u "
                          "hpcbake-verify-boot.service'; is the unit enabled (hpcbake seal enables it)?"},
                    err);
    }
    std::this_thread::sleep_for(std::min<clock::duration>(std::chrono::seconds(1), deadline - clock::now()));
  }
  if (o.json)
    out << util::dump_json(verify::to_json(*state), 2) << "\n";
  else
    out << describe_state(*state, this_boot);
  if (state->healthy) return 0;
  return report(Error{ErrorKind::smoke_test,
                      fmt::format("the node is unhealthy: {}",
                                  state->error.empty() ? fmt::format("{} checks failed", state->fail) : state->error),
                      "each failed check above says what to do next; a node that stays unhealthy is "
                      "reimaged or removed (docs/health.md)"},
                err);
}

// The plan verify checks against, and the machine's facts: the stored plan, unless it does not fit
// (stored_plan_misfit), then one made now. `o` takes the install's options where the command line
// does not set them (not the level under --boot: the unit's argument, default 1).
struct Chosen {
  plan::Plan plan;
  std::string plan_sha256; // the stored plan's; empty for a plan made now
  detect::HostFacts facts;
  int install_level = -1; // the stored install's --verify-level; -1: no stored plan used
  // --boot on a VM the metadata service says is another size than the stored plan's: the plan is
  // kept (what the image promises) and image.size fails, naming this VM's size.
  std::string other_size;
};

Result<Chosen> choose_plan(const CLI::App& cmd, VerifyOptions& o, const util::HostFs& host,
                           const std::string& manifests_dir, const detect::ImdsOptions& imds, std::ostream& err) {
  Chosen c;
  auto stored = install::load_plan_file(host.resolve(paths::kPlanFile));
  if (!stored) { // damaged, or from another hpcbake: say so, and check against a plan made now
    err << fmt::format("verify: warning: the stored plan is not used: {}\n", stored.error().message);
    stored = std::optional<install::StoredPlan>();
  }
  std::string misfit;
  if (*stored) {
    // Whether this VM is the stored plan's size: the metadata service is asked only without --size.
    detect::ImdsOptions ask = imds;
    if (!o.size.empty()) ask.enabled = false;
    util::CurlHttpClient http;
    c.facts = detect::detect_host(host, http, ask, nullptr);
    misfit = stored_plan_misfit(**stored, cmd, o, c.facts);
  }
  // --boot checks what the image promises: on another size, say so (image.size), not a new plan.
  if (*stored && !misfit.empty() && o.boot && o.size.empty() && facts_say_other_size(**stored, c.facts)) {
    c.other_size = c.facts.imds.vm_size;
    misfit.clear();
  }
  if (*stored && misfit.empty()) {
    // What the install was given, unless the command line says otherwise.
    const auto& so = (*stored)->options;
    if (!cmd.count("--level") && !o.boot) o.level = so.verify_level;
    if (!cmd.count("--fabric-wait")) o.fabric_wait_s = so.fabric_wait.count();
    if (!cmd.count("--ib-device")) o.ib_devices = so.ib_devices;
    if (!cmd.count("--ib-seconds")) o.ib_seconds = so.ib_seconds;
    c.plan = std::move((*stored)->plan);
    c.plan_sha256 = (*stored)->sha256;
    c.install_level = so.verify_level;
    err << fmt::format("verify: against the plan installed on this machine ({}: {} on {})\n", paths::kPlanFile,
                       c.plan.size, c.plan.distro_id);
    return c;
  }
  HPCBAKE_TRY_ASSIGN(c.plan, fresh_plan(o, manifests_dir, imds, host, c.facts, stored->has_value()));
  err << (*stored ? fmt::format("verify: against a plan made now for {} on {} ({}; the install on this machine "
                                "stored {} on {}, {})\n",
                                c.plan.size, c.plan.distro_id, misfit, (*stored)->plan.size, (*stored)->plan.distro_id,
                                paths::kPlanFile)
                  : fmt::format("verify: no install is recorded on this machine ({} does not exist): against a plan "
                                "made now for {} on {}\n",
                                paths::kPlanFile, c.plan.size, c.plan.distro_id));
  return c;
}

// --boot: the node state and the textfile metrics, one journal line per failed check, and the
// verdict (healthy or not: with the earlier results of the same boot, verify::carry_forward).
// Errors writing either file are reported (the unit fails: nobody could read the verdict).
Result<bool> write_boot_outputs(const util::HostFs& host, const VerifyOptions& o, verify::NodeState state,
                                std::ostream& err) {
  if (auto before = verify::read_node_state(host); before && *before) verify::carry_forward(state, **before);
  for (const auto* c : state.failed())
    err << "verify --boot: FAILED " << verify::describe_failure(*c) << "\n";
  if (!state.error.empty()) err << "verify --boot: could not run the checks: " << state.error << "\n";
  HPCBAKE_TRY(verify::write_node_state(host, state));
  HPCBAKE_TRY(verify::write_textfile(host, o.textfile_dir, state));
  err << fmt::format("verify --boot: node {} at level {} ({} failed, {} passed, {} skipped, {:.1f} s); wrote {} and "
                     "{}/{}\n",
                     state.healthy ? "healthy" : "UNHEALTHY", state.level, state.fail, state.pass, state.skip,
                     state.duration_seconds, verify::kNodeStatePath, o.textfile_dir, verify::kTextfileName);
  return state.healthy;
}

// --boot on an image sealed with its hardware verdict pending (seal --verify deferred). With
// --first-boot (the boot unit) and no verdict that passed yet, this run is the deferred checks: at
// the bake's and the install's level (at most 2), recorded as "running" first, so that a run the
// unit's timeout kills counts as not passed. Every --boot run on such an image then carries
// image.hardware_verdict (verify/hardware_verdict.hpp).
struct FirstBoot {
  std::optional<verify::PendingHardware> pending;
  std::optional<verify::HardwareVerdict> verdict;
  bool run = false; // this run is the deferred checks
};

FirstBoot first_boot(const util::HostFs& host, const Chosen& chosen, VerifyOptions& o, std::ostream& err) {
  FirstBoot f;
  std::string warning;
  f.pending = verify::pending_hardware(host, warning);
  if (!warning.empty()) err << "verify --boot: warning: " << warning << "\n";
  if (!f.pending) return f;
  if (auto v = verify::read_hardware_verdict(host); v)
    f.verdict = *v;
  else
    err << "verify --boot: warning: " << v.error().message << " (" << v.error().hint << ")\n";
  if (!o.first_boot || (f.verdict && f.verdict->passed)) return f;
  f.run = true;
  o.level = std::min(verify::kFirstBootMaxLevel, std::max({o.level, chosen.install_level, f.pending->level}));
  err << fmt::format("verify --boot: the first boot of an image whose hardware checks were deferred (for {}): the "
                     "hardware checks at level {}\n",
                     f.pending->size, o.level);
  verify::HardwareVerdict running;
  running.state = "running";
  running.boot_id = verify::current_boot_id(host);
  running.size = chosen.plan.size;
  running.level = o.level;
  running.checked_at = install::now_seconds();
  if (auto s = verify::write_hardware_verdict(host, running); !s)
    err << "hpcbake: warning: " << s.error().message << "\n";
  return f;
}

// After the checks: the verdict of a first-boot run, and image.hardware_verdict in the report.
void record_first_boot(const util::HostFs& host, FirstBoot& f, verify::Report& rep, std::ostream& err) {
  if (!f.pending) return;
  if (f.run) {
    f.verdict = verify::verdict_of(rep, verify::current_boot_id(host), install::now_seconds());
    if (auto s = verify::write_hardware_verdict(host, *f.verdict); !s)
      err << "hpcbake: warning: " << s.error().message << " (the next boot runs the deferred checks again)\n";
  }
  rep.checks.insert(rep.checks.begin(), verify::hardware_verdict_check(f.verdict, *f.pending));
}

// --boot on a VM of another size than the image was baked for (the metadata service's answer).
verify::Check image_size_check(const Chosen& c) {
  verify::Check check;
  check.id = "image.size";
  check.level = 0;
  check.title = "VM size the image was baked for";
  check.expected = c.plan.size;
  check.observed = fmt::format("{} (Azure metadata)", util::excerpt(c.other_size));
  check.verdict = verify::Verdict::fail;
  check.hint = fmt::format("this image was baked for {}: deploy it on that size, or bake an image for {} (hpcbake "
                           "install --size {})",
                           c.plan.size, util::excerpt(c.other_size), util::excerpt(c.other_size));
  check.source = std::string(paths::kPlanFile) + " (the image's stored plan)";
  return check;
}

verify::NodeStateContext boot_context(const util::HostFs& host, const std::string& plan_sha256) {
  return {verify::current_boot_id(host), install::now_seconds(), build::version,
          plan_sha256.empty() ? std::string() : std::string(paths::kPlanFile), plan_sha256};
}

// --boot, verify stopped before any check ran: the node is unhealthy, and says why.
int boot_failed(const util::HostFs& host, const VerifyOptions& o, const Error& e, const std::string& plan_sha256,
                std::chrono::steady_clock::time_point t0, std::ostream& err) {
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  const auto state = verify::error_node_state(e.message, o.level, took.count(), boot_context(host, plan_sha256));
  if (auto s = write_boot_outputs(host, o, state, err); !s) err << "hpcbake: warning: " << s.error().message << "\n";
  return report(e, err);
}

int cmd_verify(const CLI::App& cmd, const VerifyOptions& given, const std::string& root,
               const std::string& manifests_dir, const detect::ImdsOptions& imds, std::ostream& out,
               std::ostream& err) {
  if (given.libraries) return cmd_libraries(given, out, err);
  const util::HostFs host(root);
  if (given.node_state) return cmd_node_state(given, host, out, err);
  if (given.boot && given.hardware_checks != "now")
    return report(Error{ErrorKind::usage,
                        "verify --boot checks this machine's hardware: --hardware-checks deferred is "
                        "for a bake on another machine",
                        "drop --hardware-checks"},
                  err);
  if (given.boot && given.level > 1)
    return report(Error{ErrorKind::usage,
                        fmt::format("verify --boot runs the quick levels (0 or 1), not --level {}", given.level),
                        "run the fabric and load levels (2, 3) as a job: 'hpcbake verify --level 3'"},
                  err);
  const auto t0 = std::chrono::steady_clock::now();
  VerifyOptions o = given;
  auto chosen = choose_plan(cmd, o, host, manifests_dir, imds, err);
  if (!chosen) return o.boot ? boot_failed(host, o, chosen.error(), {}, t0, err) : report(chosen.error(), err);
  auto& facts = chosen->facts;
  FirstBoot fb = o.boot ? first_boot(host, *chosen, o, err) : FirstBoot{};

  verify::VerifyRequest req;
  req.plan = &chosen->plan;
  req.level = o.level;
  req.container_image = o.container_image;
  auto runner = make_runner(host);
  req.runner = runner.get();
  req.host = &facts;
  req.fs = &host;
  req.fabric_wait = std::chrono::seconds(o.fabric_wait_s);
  req.ib_devices = o.ib_devices;
  req.ib_gid_index = o.gid_index;
  req.ib_iterations = o.ib_iterations;
  req.ib_seconds = o.ib_seconds;
  req.gpu_bw_bytes = static_cast<std::size_t>(o.gpu_bw_mib) << 20;
  req.p2p_bytes = static_cast<std::size_t>(o.p2p_mib) << 20;
  req.ib_bw_fraction = o.ib_bw_fraction;
  req.defer_hardware = o.hardware_checks == "deferred";
  req.refresh_rdma_cdi = o.boot; // the HCAs' CDI spec, rewritten at every boot
  req.on_status = [&err](const std::string& s) { err << "verify: " << s << "\n"; };
  auto rep = verify::run(req);
  if (!rep) return o.boot ? boot_failed(host, o, rep.error(), chosen->plan_sha256, t0, err) : report(rep.error(), err);
  if (!chosen->other_size.empty()) rep->checks.insert(rep->checks.begin(), image_size_check(*chosen));
  record_first_boot(host, fb, *rep, err);
  // For seal ("verify passed in this boot"): the summary and this boot's id, passed or not.
  if (auto s =
          verify::write_record(host, verify::make_record(*rep, verify::current_boot_id(host), install::now_seconds()));
      !s)
    err << "hpcbake: warning: " << s.error().message << " (seal will not see this verify run)\n";

  if (o.json)
    out << verify::to_json_text(*rep);
  else
    out << verify::render_table(*rep);
  bool healthy = rep->passed();
  if (o.boot) {
    auto h = write_boot_outputs(host, o, verify::make_node_state(*rep, boot_context(host, chosen->plan_sha256)), err);
    if (!h) return report(h.error(), err);
    healthy = *h;
  }
  if (!o.junit.empty())
    if (auto s = util::write_file_atomic(std::filesystem::absolute(o.junit), verify::to_junit(*rep)); !s)
      return report(s.error(), err);
  if (!rep->passed())
    return report(Error{ErrorKind::smoke_test,
                        fmt::format("verify: {} of {} checks failed on {}", rep->count(verify::Verdict::fail),
                                    rep->checks.size(), rep->size),
                        o.json ? "each failed check's \"hint\" says what to do next"
                               : "each failed check above says what to do next"},
                  err);
  if (!healthy) // --boot: this run passed, a check of a higher level failed earlier in this boot
    return report(Error{ErrorKind::smoke_test,
                        fmt::format("verify --boot: the node is unhealthy: a check that ran earlier in this boot "
                                    "failed ({})",
                                    verify::kNodeStatePath),
                        "run 'hpcbake verify --boot' (level 1) again once the cause is fixed, or reboot"},
                  err);
  return 0;
}

} // namespace

VerifyCommands add_verify_commands(CLI::App& app, VerifyOptions& o) {
  VerifyCommands c;
  auto* v = app.add_subcommand("verify",
                               "smoke-test this machine against what its VM size promises (exit 6 on a failed check)");
  c.verify = v;
  v->add_option("--size", o.size,
                "VM size (default: the installed plan's, /var/lib/hpcbake/plan.json; else from the metadata service)")
      ->option_text("VM_SIZE");
  v->add_option("--distro", o.distro, "distro manifest id (default: the installed plan's, else this host's)")
      ->option_text("ID-VERSION");
  v->add_option("--profile", o.profile, "profile (default: the installed plan's, else default)")->option_text("ID");
  v->add_option(
       "--level", o.level,
       "0 inventory (instant: files, sysfs, NVML queries, kernel log), 1 function (seconds: a CUDA kernel, "
       "host-device bandwidth, clocks under a short load), 2 fabric and P2P (tens of seconds: RDMA loopback, "
       "GPU peer-to-peer), 3 load (minutes: NCCL all-reduce at most 5 min, GPUDirect RDMA ib_write_bw at most 1 min "
       "per HCA, DCGM diagnostic); each level "
       "runs the ones below it (default: the install's --verify-level, else 1; with --boot, 1)")
      ->check(CLI::Range(0, 3))
      ->default_val(1);
  auto* boot = v->add_flag(
      "--boot", o.boot,
      "as the boot unit (hpcbake-verify-boot.service): run level 0 or 1 against the stored plan, then write "
      "the node state (/var/lib/hpcbake/node-state.json) and node exporter's textfile (hpcbake.prom); one "
      "line per failed check on stderr; exit 6 when the node is unhealthy. On an image whose hardware checks "
      "were deferred, image.hardware_verdict fails until the boot unit's --first-boot run has passed them; "
      "on a VM the metadata service says is another size than the image's, image.size fails");
  v->add_flag("--first-boot", o.first_boot,
              "with --boot, as the boot unit runs it: on an image sealed with its hardware verdict pending (seal "
              "--verify deferred), run the deferred hardware checks (at the bake's level, at most 2) until they "
              "pass, recorded in /var/lib/hpcbake/hardware-verdict.json")
      ->needs(boot);
  v->add_option("--hardware-checks", o.hardware_checks,
                "now (default): check this machine's GPUs and HCAs; deferred: this machine is not the size (a bake "
                "on another VM): check what is on disk, record each hardware check as deferred to the first boot "
                "on the size (seal --verify deferred accepts that)")
      ->check(CLI::IsMember({"now", "deferred"}))
      ->option_text("now|deferred");
  v->add_option("--textfile-dir", o.textfile_dir,
                "with --boot: node exporter's textfile collector directory (default /var/lib/prometheus/node-exporter, "
                "Debian's prometheus-node-exporter)")
      ->option_text("DIR")
      ->needs(boot);
  auto* node_state =
      v->add_flag("--node-state", o.node_state,
                  "only print the last 'verify --boot' verdict (node-state.json; --json: as is); exit 0 healthy, 6 "
                  "unhealthy or none")
          ->excludes(boot);
  v->add_option("--wait", o.wait_s,
                "with --node-state: wait up to SECONDS for this boot's verdict (boot id), e.g. in a Batch start task")
      ->check(CLI::Range(0L, 86400L))
      ->option_text("SECONDS")
      ->needs(node_state);
  v->add_flag("--libraries", o.libraries,
              "only list the NVIDIA and RDMA libraries verify loads, where from, and each entry point it uses "
              "(nothing is initialized; exit 6 when one is missing)");
  v->add_option("--container-image", o.container_image,
                "level 1: run this local image (with nvidia-smi) under docker --gpus all and podman --device "
                "nvidia.com/gpu=all (CDI); never pulled")
      ->option_text("IMAGE");
  v->add_option("--junit", o.junit, "also write a JUnit XML report to FILE")->option_text("FILE");
  v->add_option("--fabric-wait", o.fabric_wait_s, "how long Fabric Manager may take to finish (default 60)")
      ->check(CLI::Range(0L, 3600L))
      ->default_val(60)
      ->option_text("SECONDS");
  v->add_option("--ib-device", o.ib_devices, "check only this RDMA device (any link layer, e.g. rxe0); repeatable")
      ->option_text("NAME");
  v->add_option("--gid-index", o.gid_index,
                "GID index for the loopback's address (default: the first usable one on RoCE)")
      ->check(CLI::Range(0, 255));
  v->add_option("--gpu-bw-mib", o.gpu_bw_mib, "pinned buffer per host<->device copy at level 1 (default 64)")
      ->check(CLI::Range(1, 4096))
      ->default_val(64)
      ->option_text("MIB");
  v->add_option("--p2p-mib", o.p2p_mib,
                "buffer per GPU peer-to-peer copy at level 2 (default 512, as nvbandwidth's; 161 copies per GPU pair)")
      ->check(CLI::Range(1, 4096))
      ->default_val(512)
      ->option_text("MIB");
  v->add_option("--ib-iterations", o.ib_iterations, "timed 1 MiB RDMA writes per port at level 2 (default 2000)")
      ->check(CLI::Range(1, 1000000))
      ->default_val(2000);
  v->add_option("--ib-seconds", o.ib_seconds,
                "stop each port's timed loopback after this long, whatever --ib-iterations says (default 10)")
      ->check(CLI::Range(0.1, 3600.0))
      ->default_val(10);
  v->add_option(
       "--ib-bw-fraction", o.ib_bw_fraction,
       "loopback threshold as a fraction of the port rate, where the size has no ib_write_bw_gbps (default 0.75)")
      ->check(CLI::Range(0.0, 1.0))
      ->default_val(0.75);
  return c;
}

std::optional<int> run_verify_command(const VerifyCommands& cmds, const VerifyOptions& o, const std::string& root,
                                      const std::string& manifests, const detect::ImdsOptions& imds, std::ostream& out,
                                      std::ostream& err) {
  if (cmds.verify && cmds.verify->parsed()) return cmd_verify(*cmds.verify, o, root, manifests, imds, out, err);
  return std::nullopt;
}

} // namespace hpcbake::cli
