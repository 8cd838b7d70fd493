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
#include "util/error.hpp"
#include "util/hostfs.hpp"
#include "util/http.hpp"
#include "util/paths.hpp"
#include "util/strings.hpp"
#include "util/utf8.hpp"
#include "verify/record.hpp"
#include "verify/verify.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
  if (o.size.empty() && facts.imds.on_azure && manifest::size_key(facts.imds.vm_size) != stored)
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

int cmd_verify(const CLI::App& cmd, const VerifyOptions& given, const std::string& root,
               const std::string& manifests_dir, const detect::ImdsOptions& imds, std::ostream& out,
               std::ostream& err) {
  if (given.libraries) return cmd_libraries(given, out, err);
  const util::HostFs host(root);
  VerifyOptions o = given;
  detect::HostFacts facts;
  plan::Plan plan;
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
    facts = detect::detect_host(host, http, ask, nullptr);
    misfit = stored_plan_misfit(**stored, cmd, o, facts);
  }
  if (*stored && misfit.empty()) {
    // What the install was given, unless the command line says otherwise.
    const auto& so = (*stored)->options;
    if (!cmd.count("--level")) o.level = so.verify_level;
    if (!cmd.count("--fabric-wait")) o.fabric_wait_s = so.fabric_wait.count();
    if (!cmd.count("--ib-device")) o.ib_devices = so.ib_devices;
    if (!cmd.count("--ib-seconds")) o.ib_seconds = so.ib_seconds;
    plan = std::move((*stored)->plan);
    err << fmt::format("verify: against the plan installed on this machine ({}: {} on {})\n", paths::kPlanFile,
                       plan.size, plan.distro_id);
  } else {
    auto p = fresh_plan(o, manifests_dir, imds, host, facts, stored->has_value());
    if (!p) return report(p.error(), err);
    plan = std::move(*p);
    err << (*stored ? fmt::format("verify: against a plan made now for {} on {} ({}; the install on this machine "
                                  "stored {} on {}, {})\n",
                                  plan.size, plan.distro_id, misfit, (*stored)->plan.size, (*stored)->plan.distro_id,
                                  paths::kPlanFile)
                    : fmt::format("verify: no install is recorded on this machine ({} does not exist): against a plan "
                                  "made now for {} on {}\n",
                                  paths::kPlanFile, plan.size, plan.distro_id));
  }

  verify::VerifyRequest req;
  req.plan = &plan;
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
  req.on_status = [&err](const std::string& s) { err << "verify: " << s << "\n"; };
  auto rep = verify::run(req);
  if (!rep) return report(rep.error(), err);
  // For seal ("verify passed in this boot"): the summary and this boot's id, passed or not.
  if (auto s =
          verify::write_record(host, verify::make_record(*rep, verify::current_boot_id(host), install::now_seconds()));
      !s)
    err << "hpcbake: warning: " << s.error().message << " (seal will not see this verify run)\n";

  if (o.json)
    out << verify::to_json_text(*rep);
  else
    out << verify::render_table(*rep);
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
       "0 inventory, 1 function (NVML, CUDA, containers), 2 fabric (RDMA loopback), 3 load, minutes (DCGM "
       "diagnostic; NCCL all-reduce, at most 5 min; GPUDirect RDMA ib_write_bw, at most 1 min per HCA) (default: "
       "the install's --verify-level, else 1)")
      ->check(CLI::Range(0, 3))
      ->default_val(1);
  v->add_flag("--libraries", o.libraries,
              "only list the NVIDIA and RDMA libraries verify loads, where from, and each entry point it uses "
              "(nothing is initialized; exit 6 when one is missing)");
  v->add_option("--container-image", o.container_image,
                "level 1: run this local image (with nvidia-smi) under docker --gpus all; never pulled")
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
