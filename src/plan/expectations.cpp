// What a size promises (the verify step's content), computed once when the plan is made: verify
// checks a machine against the plan it was installed with, not against today's manifests.
#include "plan/plan.hpp"
#include "util/paths.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpcbake::plan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The NVIDIA driver's step: a .run, or packages from a signed repository.
std::optional<ComponentRef> driver_of(const manifest::Manifests& m, const Step& step) {
  if (!step.as<RunInstallerStep>() && !step.as<PackagesStep>()) return std::nullopt;
  auto ref = component_of(step);
  const auto* c = ref ? m.find_component(ref->component) : nullptr;
  if (c && (c->kind == manifest::ComponentKind::nvidia_driver || c->kind == manifest::ComponentKind::grid_driver))
    return ref;
  return std::nullopt;
}

std::string relative_to(const std::string& file, const fs::path& dir) {
  std::error_code ec;
  auto rel = fs::relative(file, dir, ec);
  return ec || rel.empty() ? file : rel.string();
}

// The DKMS package of the plan's NVIDIA driver recipe, if any: its modules are the driver's.
bool is_driver_dkms(const manifest::Manifests& m, const Plan& plan, const std::string& package) {
  return std::any_of(plan.steps.begin(), plan.steps.end(), [&](const Step& st) {
    const auto drv = driver_of(m, st);
    const auto* c = drv ? m.find_component(drv->component) : nullptr;
    const auto* rec = c ? m.find_recipe(c->kind) : nullptr;
    return rec && rec->dkms_name == package;
  });
}

template <class T> json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

} // namespace

VerifyExpectations verify_expectations(const manifest::Manifests& m, const manifest::SizeManifest& size,
                                       const manifest::DistroManifest& distro, const Plan& plan) {
  VerifyExpectations e;
  e.size_file = relative_to(size.file, m.dir);
  e.kernels = plan.kernels;
  e.waagent_config = distro.waagent_config.empty() ? paths::kWaagentConf : distro.waagent_config;
  e.waagent_service = distro.waagent_service;
  const auto& c = size.checks;
  if (size.gpu && size.gpu->vendor == "nvidia") {
    e.nvidia = true;
    e.gpu_count = c.gpu_count.value_or(size.gpu->count);
    e.gpu_model = size.gpu->model;
    e.gpu_pci_ids = size.gpu->pci_ids;
    e.nvswitch_count = size.gpu->nvswitch_count;
    e.fabric_manager = size.gpu->fabric_manager;
    e.gpu_bw_gbs = c.gpu_bw_h2d_gbs;
  }
  e.gpu_bw_p2p_gbs = c.gpu_bw_p2p_gbs;
  e.gpu_ecc_sram_threshold = c.gpu_ecc_sram_threshold;
  e.gpu_ecc_dram_threshold = c.gpu_ecc_dram_threshold;
  e.nccl_allreduce_gbs = c.nccl_allreduce_gbs;
  for (const auto& step : plan.steps) {
    if (const auto driver = driver_of(m, step)) {
      e.driver_version = driver->version;
      const auto* comp = m.find_component(driver->component);
      e.driver_source =
          fmt::format("{} for {}", comp ? relative_to(comp->file, m.dir) : driver->component, plan.distro_id);
      if (const auto* rec = comp ? m.find_recipe(comp->kind) : nullptr; rec && e.modules.empty())
        e.modules = rec->modules;
    }
    if (const auto* cd = step.as<CanonicalDriverStep>()) {
      // The version is the archive's candidate, read at install: none is promised here.
      e.driver_source = fmt::format("Canonical's precompiled modules of branch {} ({})", cd->branch, cd->source);
      const auto* comp = m.find_component(cd->component);
      if (const auto* rec = comp ? m.find_recipe(comp->kind) : nullptr; rec && e.modules.empty())
        e.modules = rec->modules;
    }
    if (const auto* d = step.as<DkmsCheckStep>())
      if (!is_driver_dkms(m, plan, d->package) && std::none_of(e.dkms_modules.begin(), e.dkms_modules.end(),
                                                               [&](const auto& x) { return x.first == d->package; }))
        e.dkms_modules.emplace_back(d->package, d->modules);
    if (const auto* cr = step.as<ContainerRuntimeStep>()) {
      e.container_engines = cr->engines;
      e.container_runtime = cr->runtime;
      e.container_binary = cr->binary;
    }
    if (const auto ref = component_of(step)) {
      const auto* comp = m.find_component(ref->component);
      e.dcgm = e.dcgm || (comp && comp->kind == manifest::ComponentKind::dcgm);
    }
    if (const auto* ml = step.as<ModulesLoadStep>())
      for (const auto& mod : ml->modules) {
        e.peermem = e.peermem || driver::module_name(mod) == driver::module_name("nvidia-peermem");
        e.modules.push_back(mod);
      }
  }
  if (size.infiniband) {
    e.ib_ports = size.infiniband->ports;
    e.ib_rate_gbps = size.infiniband->rate_gbps;
    e.ipoib = size.infiniband->ipoib;
    if (c.ib_write_bw_gbps) {
      e.ib_bw_gbps = *c.ib_write_bw_gbps;
      e.ib_bw_source = e.size_file + " checks.ib_write_bw_gbps";
    }
  }
  e.ib_write_bw_gdr_gbps = c.ib_write_bw_gdr_gbps;
  return e;
}

json to_json(const VerifyExpectations& e) {
  json dkms = json::array();
  for (const auto& [package, modules] : e.dkms_modules)
    dkms.push_back({{"package", package}, {"modules", modules}});
  json engines = json::object();
  for (const auto& [engine, config] : e.container_engines)
    engines[engine] = config;
  return {{"size_file", e.size_file},
          {"nvidia", e.nvidia},
          {"gpu_count", e.gpu_count},
          {"gpu_model", e.gpu_model},
          {"gpu_pci_ids", e.gpu_pci_ids},
          {"driver_version", e.driver_version},
          {"driver_source", e.driver_source},
          {"nvswitch_count", e.nvswitch_count},
          {"fabric_manager", e.fabric_manager},
          {"modules", e.modules},
          {"dkms_modules", std::move(dkms)},
          {"kernels", e.kernels},
          {"gpu_bw_h2d_gbs", opt(e.gpu_bw_gbs)},
          {"gpu_bw_p2p_gbs", opt(e.gpu_bw_p2p_gbs)},
          {"gpu_ecc_sram_threshold", opt(e.gpu_ecc_sram_threshold)},
          {"gpu_ecc_dram_threshold", opt(e.gpu_ecc_dram_threshold)},
          {"nccl_allreduce_gbs", opt(e.nccl_allreduce_gbs)},
          {"ib_ports", e.ib_ports},
          {"ib_rate_gbps", e.ib_rate_gbps},
          {"ipoib", e.ipoib},
          {"nvidia_peermem", e.peermem},
          {"ib_write_bw_gbps", opt(e.ib_bw_gbps)},
          {"ib_write_bw_source", e.ib_bw_source},
          {"ib_write_bw_gdr_gbps", opt(e.ib_write_bw_gdr_gbps)},
          {"container_engines", std::move(engines)},
          {"container_runtime", e.container_runtime},
          {"container_binary", e.container_binary},
          {"dcgm", e.dcgm},
          {"waagent_config", e.waagent_config},
          {"waagent_service", e.waagent_service}};
}

} // namespace hpcbake::plan
