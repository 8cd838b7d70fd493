#include "verify/verify.hpp"
#include "util/paths.hpp"

#include "driver/modinfo.hpp"
#include "verify/checks.hpp"

#include "util/strings.hpp"
#include "util/utf8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hpcbake::verify {

namespace fs = std::filesystem;

int Report::count(Verdict v) const {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), [v](const Check& c) { return c.verdict == v; }));
}

Recorder::Recorder(const VerifyRequest& request, Report& report)
    : request_(request), report_(report), last_(std::chrono::steady_clock::now()) {}

void Recorder::add(Check check) {
  const auto now = std::chrono::steady_clock::now();
  check.seconds = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  report_.checks.push_back(std::move(check));
  if (request_.on_check) request_.on_check(report_.checks.back());
}

void Recorder::status(const std::string& text) const {
  if (request_.on_status) request_.on_status(text);
}

Result<Expectations> expectations(const plan::Plan& plan, double ib_bw_fraction) {
  const auto it = std::find_if(plan.steps.begin(), plan.steps.end(),
                               [](const plan::Step& s) { return s.as<plan::VerifyStep>() != nullptr; });
  if (it == plan.steps.end())
    return fail(ErrorKind::internal,
                fmt::format("the plan for {} on {} has no verify step", plan.size, plan.distro_id));
  Expectations e = it->as<plan::VerifyStep>()->expect;
  if (e.ib_ports > 0 && !e.ib_bw_gbps) {
    e.ib_bw_gbps = ib_bw_fraction * e.ib_rate_gbps;
    e.ib_bw_source =
        fmt::format("{} of {} infiniband.rate_gbps ({} Gb/s)", number(ib_bw_fraction), e.size_file, e.ib_rate_gbps);
  }
  return e;
}

Result<plan::Plan> plan_for_verify(const manifest::Manifests& manifests, const std::string& size,
                                   const std::string& distro, const std::string& profile,
                                   const detect::HostFacts& host) {
  plan::PlanRequest preq;
  preq.size = size;
  preq.distro = distro.empty() ? host.distro_id : distro;
  if (preq.distro.empty())
    return fail(ErrorKind::unsupported,
                host.os ? fmt::format("this host's distro (ID={} VERSION_ID={}) has no manifest",
                                      util::excerpt(host.os->id()), util::excerpt(host.os->version_id()))
                        : host.os_error,
                "pass --distro ID-VERSION");
  preq.host = &host;
  preq.profile = profile;
  // Verify checks what is there; whether signing would be needed is install's business.
  preq.signing.mode = driver::SignMode::on;
  preq.expectations_only = true;
  return plan::make_plan(manifests, preq);
}

namespace {

// Present the checks by level, keeping each concern's order within a level; the time taken.
void finish(Report& report, std::chrono::steady_clock::time_point start) {
  std::stable_sort(report.checks.begin(), report.checks.end(),
                   [](const Check& a, const Check& b) { return a.level < b.level; });
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

Result<Report> run(const VerifyRequest& req) {
  if (!req.plan || !req.host || !req.fs)
    return fail(ErrorKind::internal, "verify::run needs a plan, host facts and a HostFs");
  if (req.level < 0 || req.level > 3)
    return fail(ErrorKind::usage, fmt::format("--level {}: expected 0, 1, 2 or 3", req.level));
  const auto start = std::chrono::steady_clock::now();
  const plan::Plan& p = *req.plan;
  HPCBAKE_TRY_ASSIGN(Expectations e, expectations(p, req.ib_bw_fraction));
  // Modules are checked for the kernels this machine boots now (a kernel update since the install
  // adds its next-boot kernel); the plan's, where this host names none.
  if (auto targets = req.host->kernels.targets(); !targets.empty()) e.kernels = std::move(targets);

  Report report;
  report.size = p.size;
  report.size_id = p.size_id;
  report.distro = p.distro_id;
  report.level = req.level;
  report.kernels = e.kernels;
  Recorder rec(req, report);
  if (req.defer_hardware) {
    report.hardware_deferred = true;
    if (!e.container_engines.empty()) container_checks(rec, e, 0); // the engines' files only
    if (e.container_kubernetes) kubernetes_checks(rec, e, 0);      // containerd's file only
    container_rdma_checks(rec, e, 0);                              // Docker's memlock only
    host_checks(rec, e, /*hardware=*/false);
    deferred_checks(rec, e, std::min(req.level, 2), p.size); // the first boot runs at most level 2
    finish(report, start);
    return report;
  }
  if (e.nvidia) gpu_checks(rec, e, req.level);
  if (e.nvidia) cuda_load_checks(rec, e, req.level);
  if (e.ib_ports > 0) ib_checks(rec, e, req.level);
  kernel_log_checks(rec, e);
  if (!e.container_engines.empty()) container_checks(rec, e, req.level);
  if (e.container_kubernetes) kubernetes_checks(rec, e, req.level);
  container_rdma_checks(rec, e, req.level);
  topology_checks(rec, e, req.level);
  if (req.level >= 3 && e.nvidia) dcgm_checks(rec, e);
  if (req.level >= 3 && e.nvidia) load_checks(rec, e);
  host_checks(rec, e);
  inventory_checks(rec, e);
  finish(report, start);
  return report;
}

} // namespace hpcbake::verify
