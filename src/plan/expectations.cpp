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

// The value of attribute `name` in a tag's text (`<pci busid="..." class="...">`), or none.
std::optional<std::string> attribute(std::string_view tag, std::string_view name) {
  for (std::size_t at = tag.find(name); at != std::string_view::npos; at = tag.find(name, at + 1)) {
    const bool starts = at > 0 && (tag[at - 1] == ' ' || tag[at - 1] == '\t' || tag[at - 1] == '\n');
    const auto rest = tag.substr(at + name.size());
    if (!starts || !rest.starts_with("=\"")) continue;
    const auto end = rest.find('"', 2);
    if (end == std::string_view::npos) return std::nullopt;
    return std::string(rest.substr(2, end - 2));
  }
  return std::nullopt;
}

// The size's NCCL topology file as its OS settings install it (the file named "topology").
void topology_expectations(const manifest::Manifests& m, const manifest::SizeManifest& size, VerifyExpectations& e) {
  const auto* own = size.os_settings.empty() ? nullptr : m.find_settings(size.os_settings);
  if (!own) return;
  for (const auto& f : own->files) {
    if (f.name != "topology") continue;
    e.nccl_topo_file = f.path;
    auto entries = parse_nccl_topology(f.content);
    const std::string where = relative_to(own->file, m.dir) + " " + (f.from.empty() ? f.name : f.from);
    if (!entries) {
      e.topology_source = fmt::format("{}: {}", where, entries.error().message);
      return;
    }
    e.pci_topology = std::move(*entries);
    e.topology_source = f.source.empty() ? where : fmt::format("{} ({})", where, f.source);
  }
}

// all_reduce_perf from the plan's nccl-tests build, mpirun from its HPC-X.
void userspace_expectations(const Plan& plan, VerifyExpectations& e) {
  for (const auto& step : plan.steps)
    if (const auto* b = step.as<BuildStep>()) {
      if (b->component == "nccl-tests" && b->creates.ends_with("/all_reduce_perf")) e.all_reduce_perf = b->creates;
      if (b->component == "hpcx" && b->creates.ends_with("/mpirun")) e.mpirun = b->creates;
    }
}

} // namespace

Result<std::vector<PciTopologyEntry>> parse_nccl_topology(std::string_view xml) {
  if (xml.find("<system") == std::string_view::npos)
    return fail(ErrorKind::manifest, "not an NCCL topology file: no <system> element");
  std::vector<PciTopologyEntry> out;
  int numa = -1;
  std::vector<std::string> bridges; // the open <pci> elements around this one: bus id of a bridge, else ""
  for (std::size_t at = xml.find('<'); at != std::string_view::npos; at = xml.find('<', at + 1)) {
    const auto end = xml.find('>', at);
    if (end == std::string_view::npos) return fail(ErrorKind::manifest, "an element is not closed");
    const auto tag = xml.substr(at, end - at);
    if (tag.starts_with("<cpu")) {
      const auto id = attribute(tag, "numaid");
      if (!id || id->empty() || id->find_first_not_of("0123456789") != std::string::npos)
        return fail(ErrorKind::manifest, "a <cpu> element without a numeric numaid");
      numa = std::stoi(*id);
      continue;
    }
    if (tag.starts_with("</pci")) {
      if (!bridges.empty()) bridges.pop_back();
      continue;
    }
    if (!tag.starts_with("<pci")) continue;
    const auto bus = attribute(tag, "busid");
    const auto cls = attribute(tag, "class");
    if (!bus || !cls) return fail(ErrorKind::manifest, "a <pci> element without busid or class");
    // An open element holds others: a PCIe switch (class 0x0604) or a GPU with its <gpu> children.
    if (!tag.ends_with("/")) bridges.push_back(cls->starts_with("0x0604") ? *bus : std::string());
    const bool device = cls->starts_with("0x0302") || cls->starts_with("0x0207") || cls->starts_with("0x0200");
    if (!device || bus->starts_with("ffff:")) continue;
    if (numa < 0) return fail(ErrorKind::manifest, fmt::format("PCI device {} is outside any <cpu>", *bus));
    PciTopologyEntry entry;
    entry.numa = numa;
    entry.bus_id = *bus;
    entry.pci_class = *cls;
    entry.link_speed = attribute(tag, "link_speed").value_or("");
    const auto bridge = std::find_if(bridges.rbegin(), bridges.rend(), [](const auto& b) { return !b.empty(); });
    if (bridge != bridges.rend()) entry.bridge = *bridge;
    const auto width = attribute(tag, "link_width").value_or("");
    if (!width.empty() && width.find_first_not_of("0123456789") == std::string::npos && width.size() < 4)
      entry.link_width = std::stoi(width);
    out.push_back(std::move(entry));
  }
  return out;
}

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
      e.container_kubernetes = cr->kubernetes;
      e.container_rdma = cr->rdma;
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
  e.cpu_sockets = size.cpu_sockets;
  e.cpu_cores = size.cpu_cores;
  e.cpu_threads = size.cpu_threads;
  e.memory_mb = size.memory_mb;
  e.memory_kb = size.memory_kb;
  e.memory_tolerance_pct = c.memory_tolerance_pct;
  e.nvme_count = size.nvme_count;
  e.grid = size.driver && size.driver->kind == manifest::DriverKind::grid;
  e.nccl_allreduce_message = c.nccl_allreduce_message;
  userspace_expectations(plan, e);
  topology_expectations(m, size, e);
  return e;
}

namespace {
json expectations_json(const VerifyExpectations& e);
} // namespace

json to_json(const VerifyExpectations& e) {
  json j = expectations_json(e);
  if (e.container_kubernetes) j["container_kubernetes"] = true; // only with the kubernetes option
  if (e.container_rdma) j["container_rdma"] = true;             // only on an InfiniBand size
  return j;
}

namespace {
json expectations_json(const VerifyExpectations& e) {
  json dkms = json::array();
  for (const auto& [package, modules] : e.dkms_modules)
    dkms.push_back({{"package", package}, {"modules", modules}});
  json engines = json::object();
  for (const auto& [engine, config] : e.container_engines)
    engines[engine] = config;
  json topology = json::array();
  for (const auto& t : e.pci_topology)
    topology.push_back({{"numa", t.numa},
                        {"bus_id", t.bus_id},
                        {"class", t.pci_class},
                        {"link_speed", t.link_speed},
                        {"link_width", t.link_width},
                        {"bridge", t.bridge}});
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
          {"waagent_service", e.waagent_service},
          {"cpu_sockets", opt(e.cpu_sockets)},
          {"cpu_cores", opt(e.cpu_cores)},
          {"cpu_threads", opt(e.cpu_threads)},
          {"memory_mb", opt(e.memory_mb)},
          {"memory_kb", opt(e.memory_kb)},
          {"memory_tolerance_pct", opt(e.memory_tolerance_pct)},
          {"nvme_count", opt(e.nvme_count)},
          {"grid", e.grid},
          {"nccl_allreduce_message", e.nccl_allreduce_message},
          {"all_reduce_perf", e.all_reduce_perf},
          {"mpirun", e.mpirun},
          {"nccl_topo_file", e.nccl_topo_file},
          {"pci_topology", std::move(topology)},
          {"topology_source", e.topology_source}};
}
} // namespace

} // namespace hpcbake::plan
