#include "verify/verify.hpp"
#include "util/paths.hpp"

#include "driver/modinfo.hpp"
#include "verify/checks.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hpcbake::verify {

namespace fs = std::filesystem;

const char* to_string(Verdict v) {
  switch (v) {
  case Verdict::pass:
    return "pass";
  case Verdict::fail:
    return "fail";
  case Verdict::skip:
    return "skip";
  }
  return "unknown";
}

int Report::count(Verdict v) const {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), [v](const Check& c) { return c.verdict == v; }));
}

std::string number(double v) {
  if (std::abs(v - std::round(v)) < 1e-9) return fmt::format("{}", static_cast<long long>(std::llround(v)));
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0')
    s.pop_back();
  return s;
}

Check make_check(std::string id, int level, std::string title, std::string expected, std::string observed,
                 Verdict verdict, std::string hint, std::string source) {
  Check c;
  c.id = std::move(id);
  c.level = level;
  c.title = std::move(title);
  c.expected = std::move(expected);
  c.observed = std::move(observed);
  c.verdict = verdict;
  c.hint = std::move(hint);
  c.source = std::move(source);
  return c;
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

namespace {
// The NVIDIA driver's step: a .run, or packages from a signed repository.
std::optional<plan::ComponentRef> driver_of(const manifest::Manifests& m, const plan::Step& step) {
  if (!step.as<plan::RunInstallerStep>() && !step.as<plan::PackagesStep>()) return std::nullopt;
  auto ref = plan::component_of(step);
  const auto* c = ref ? m.find_component(ref->component) : nullptr;
  if (c && (c->kind == manifest::ComponentKind::nvidia_driver || c->kind == manifest::ComponentKind::grid_driver))
    return ref;
  return std::nullopt;
}
} // namespace

Expectations expectations(const manifest::Manifests& m, const manifest::SizeManifest& size,
                          const manifest::DistroManifest& distro, const plan::Plan& plan, double ib_bw_fraction) {
  Expectations e;
  std::error_code ec;
  auto rel = fs::relative(size.file, m.dir, ec);
  e.size_file = ec || rel.empty() ? size.file : rel.string();
  e.kernels = plan.kernels;
  e.waagent_config = distro.waagent_config.empty() ? paths::kWaagentConf : distro.waagent_config;
  e.waagent_service = distro.waagent_service;
  if (size.gpu && size.gpu->vendor == "nvidia") {
    e.nvidia = true;
    e.gpu_count = size.checks.gpu_count.value_or(size.gpu->count);
    e.gpu_model = size.gpu->model;
    e.gpu_pci_ids = size.gpu->pci_ids;
    e.nvswitch_count = size.gpu->nvswitch_count;
    e.fabric_manager = size.gpu->fabric_manager;
    e.gpu_bw_gbs = size.checks.gpu_bw_h2d_gbs;
  }
  for (const auto& step : plan.steps) {
    if (const auto driver = driver_of(m, step)) {
      e.driver_version = driver->version;
      const auto* c = m.find_component(driver->component);
      auto crel = c ? fs::relative(c->file, m.dir, ec) : fs::path(driver->component);
      e.driver_source = fmt::format("{} for {}", ec ? driver->component : crel.string(), plan.distro_id);
      if (const auto* rec = c ? m.find_recipe(c->kind) : nullptr; rec && e.modules.empty()) e.modules = rec->modules;
    }
    if (const auto* d = step.as<plan::DkmsCheckStep>()) {
      const bool nvidia_driver = std::any_of(plan.steps.begin(), plan.steps.end(), [&](const plan::Step& st) {
        const auto drv = driver_of(m, st);
        const auto* c = drv ? m.find_component(drv->component) : nullptr;
        const auto* rec = c ? m.find_recipe(c->kind) : nullptr;
        return rec && rec->dkms_name == d->package;
      });
      if (!nvidia_driver && std::none_of(e.dkms_modules.begin(), e.dkms_modules.end(),
                                         [&](const auto& x) { return x.first == d->package; }))
        e.dkms_modules.emplace_back(d->package, d->modules);
    }
    if (const auto* cr = step.as<plan::ContainerRuntimeStep>()) {
      e.container_engines = cr->engines;
      e.container_runtime = cr->runtime;
      e.container_binary = cr->binary;
    }
    if (const auto ref = plan::component_of(step)) {
      const auto* c = m.find_component(ref->component);
      e.dcgm = e.dcgm || (c && c->kind == manifest::ComponentKind::dcgm);
    }
    if (const auto* ml = step.as<plan::ModulesLoadStep>())
      for (const auto& mod : ml->modules) {
        e.peermem = e.peermem || driver::module_name(mod) == driver::module_name("nvidia-peermem");
        e.modules.push_back(mod);
      }
  }
  if (size.infiniband) {
    e.ib_ports = size.infiniband->ports;
    e.ib_rate_gbps = size.infiniband->rate_gbps;
    e.ipoib = size.infiniband->ipoib;
    if (size.checks.ib_write_bw_gbps) {
      e.ib_bw_gbps = *size.checks.ib_write_bw_gbps;
      e.ib_bw_source = e.size_file + " checks.ib_write_bw_gbps";
    } else {
      e.ib_bw_gbps = ib_bw_fraction * size.infiniband->rate_gbps;
      e.ib_bw_source = fmt::format("{} of {} infiniband.rate_gbps ({} Gb/s)", number(ib_bw_fraction), e.size_file,
                                   size.infiniband->rate_gbps);
    }
  }
  return e;
}

Result<Report> run(const VerifyRequest& req) {
  if (!req.manifests || !req.host || !req.fs)
    return fail(ErrorKind::internal, "verify::run needs manifests, host facts and a HostFs");
  if (req.level < 0 || req.level > 3)
    return fail(ErrorKind::usage, fmt::format("--level {}: expected 0, 1, 2 or 3", req.level));
  const auto start = std::chrono::steady_clock::now();

  plan::PlanRequest preq;
  preq.size = req.size;
  preq.distro = req.distro.empty() ? req.host->distro_id : req.distro;
  if (preq.distro.empty())
    return fail(ErrorKind::unsupported,
                req.host->os ? fmt::format("this host's distro (ID={} VERSION_ID={}) has no manifest",
                                           req.host->os->id(), req.host->os->version_id())
                             : req.host->os_error,
                "pass --distro ID-VERSION");
  preq.host = req.host;
  preq.profile = req.profile;
  // Verify checks what is there; whether signing would be needed is install's business.
  preq.signing.mode = driver::SignMode::on;
  preq.expectations_only = true;
  HPCBAKE_TRY_ASSIGN(auto p, plan::make_plan(*req.manifests, preq));
  const auto* size = req.manifests->find_size(p.size);
  const auto* distro = req.manifests->find_distro(p.distro_id);
  Expectations e = expectations(*req.manifests, *size, *distro, p, req.ib_bw_fraction);
  if (e.kernels.empty()) e.kernels = req.host->kernels.targets();

  Report report;
  report.size = p.size;
  report.size_id = p.size_id;
  report.distro = p.distro_id;
  report.level = req.level;
  report.kernels = e.kernels;
  Recorder rec(req, report);
  if (e.nvidia) gpu_checks(rec, e, req.level);
  if (e.ib_ports > 0) ib_checks(rec, e, req.level);
  if (!e.container_engines.empty()) container_checks(rec, e, req.level);
  if (req.level >= 3 && e.nvidia) dcgm_checks(rec, e);
  host_checks(rec, e);
  // Present the checks by level, keeping each concern's order within a level.
  std::stable_sort(report.checks.begin(), report.checks.end(),
                   [](const Check& a, const Check& b) { return a.level < b.level; });
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

} // namespace hpcbake::verify
