#include "plan/plan.hpp"

#include "driver/headers.hpp"
#include "driver/nouveau.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace hpcbake::plan {

using nlohmann::json;

const char* to_string(StepKind kind) {
  switch (kind) {
  case StepKind::packages: return "packages";
  case StepKind::artifact: return "artifact";
  case StepKind::kernel_headers: return "kernel-headers";
  case StepKind::config: return "config";
  case StepKind::initramfs: return "initramfs";
  case StepKind::reboot: return "reboot";
  case StepKind::driver: return "driver";
  case StepKind::dkms: return "dkms";
  case StepKind::service: return "service";
  case StepKind::waagent: return "waagent";
  case StepKind::verify: return "verify";
  }
  return "unknown";
}

namespace {

// Stands for each target kernel when the plan is made for another machine; install
// substitutes the running and next-boot kernels of the machine it runs on.
constexpr const char* kernel_placeholder = "{kernel}";

std::string kernel_label(const std::string& k) {
  return k == kernel_placeholder ? std::string("each target kernel") : "kernel " + k;
}

std::string size_list(const manifest::Manifests& m) {
  std::vector<std::string> names;
  for (const auto& s : m.sizes) names.push_back(s.size);
  std::sort(names.begin(), names.end());
  return util::join(names, ", ");
}

std::string distro_list(const manifest::Manifests& m) {
  std::vector<std::string> ids;
  for (const auto& d : m.distros) ids.push_back(d.id);
  std::sort(ids.begin(), ids.end());
  return util::join(ids, ", ");
}

std::vector<std::string> component_distros(const manifest::ComponentManifest& c) {
  std::vector<std::string> ids;
  for (const auto& v : c.variants)
    for (const auto& d : v.distros)
      if (std::find(ids.begin(), ids.end(), d) == ids.end()) ids.push_back(d);
  std::sort(ids.begin(), ids.end());
  return ids;
}

class Builder {
public:
  Builder(const manifest::Manifests& m, const manifest::SizeManifest& size, const manifest::DistroManifest& distro,
          Plan& plan)
      : m_(m), size_(size), distro_(distro), plan_(plan) {}

  Step& add(StepKind kind, std::string id, std::string title, std::vector<std::string> after, json detail) {
    plan_.steps.push_back(Step{std::move(id), kind, std::move(title), std::move(after), std::move(detail)});
    return plan_.steps.back();
  }

  std::vector<std::string> kernels() const {
    return plan_.kernels.empty() ? std::vector<std::string>{kernel_placeholder} : plan_.kernels;
  }

  Result<const manifest::ComponentManifest*> component(const std::string& id) const {
    const auto* c = m_.find_component(id);
    if (!c)
      return fail(ErrorKind::manifest, fmt::format("the manifests under {} have no component '{}'", m_.dir.string(), id),
                  "restore manifests/components/" + id + ".yaml");
    return c;
  }

  Result<const manifest::ComponentVariant*> variant_of(const manifest::ComponentManifest& c) const {
    if (const auto* v = c.variant_for(distro_.id)) return v;
    return fail(ErrorKind::unsupported,
                fmt::format("{} needs {}, which has no variant for {} ({})", size_.size, c.component, distro_.id, c.file),
                fmt::format("{} is pinned for: {}", c.component, util::join(component_distros(c), ", ")));
  }

  // Artifact steps for a variant; returns their ids.
  std::vector<std::string> artifacts(const manifest::ComponentManifest& c, const manifest::ComponentVariant& v) {
    std::vector<std::string> ids;
    for (const auto& a : v.artifacts) {
      std::vector<std::string> urls;
      for (const auto& u : a.urls) urls.push_back(util::redact_url(u));
      json detail = {{"component", c.component},
                     {"version", v.version},
                     {"name", a.name},
                     {"urls", urls},
                     {"sha256", a.sha256 ? json(*a.sha256) : json(nullptr)},
                     {"size", a.size ? json(*a.size) : json(nullptr)}};
      const std::string id = "artifact:" + a.name;
      plan_.artifacts.push_back({c.component, v.version, a});
      add(StepKind::artifact, id,
          fmt::format("download {} ({} {}){}", a.name, c.component, v.version,
                      a.sha256 ? "" : " [no pinned SHA-256]"),
          {}, detail);
      if (!a.sha256)
        plan_.notes.push_back(fmt::format("{} has no pinned SHA-256 in {}: install refuses it unless you pass "
                                          "--sha256 {}=<hex> from a source you trust",
                                          a.name, std::filesystem::relative(c.file, m_.dir).string(), a.name));
      ids.push_back(id);
    }
    return ids;
  }

  Status build();

private:
  Status gpu_steps(std::vector<std::string>& headers, std::string& driver_step, std::string& driver_version);
  Status infiniband_steps(const std::vector<std::string>& headers, const std::string& driver_step,
                          const std::string& driver_version);
  Status dkms_module_steps(const std::string& id, const std::vector<std::string>& headers);
  void verify_step(const std::string& driver_version);

  const manifest::Manifests& m_;
  const manifest::SizeManifest& size_;
  const manifest::DistroManifest& distro_;
  Plan& plan_;
};

Status Builder::build() {
  const bool nvidia = size_.gpu && size_.gpu->vendor == "nvidia";
  const bool doca = size_.infiniband && m_.find_component("doca-ofed") &&
                    m_.find_component("doca-ofed")->variant_for(distro_.id);
  std::vector<std::string> headers;
  if (nvidia || doca || !size_.dkms_modules.empty()) {
    // Kernel modules get built: compilers, DKMS and the headers of every target kernel.
    auto packages = distro_.build_packages;
    if (nvidia) packages.insert(packages.end(), distro_.gpu_build_packages.begin(), distro_.gpu_build_packages.end());
    add(StepKind::packages, "packages:build", "install the kernel module build tools", {},
        {{"manager", distro_.package_manager}, {"packages", packages}});
    for (const auto& k : kernels()) {
      const std::string pkg = driver::headers_package(distro_, k);
      const std::string id = "kernel-headers:" + k;
      add(StepKind::kernel_headers, id, fmt::format("install headers for {}", kernel_label(k)), {"packages:build"},
          {{"manager", distro_.package_manager},
           {"kernel", k},
           {"package", pkg},
           {"check", fmt::format("/lib/modules/{}/build", k)}});
      headers.push_back(id);
    }
  }
  std::string driver_step, driver_version;
  if (nvidia)
    if (auto s = gpu_steps(headers, driver_step, driver_version); !s) return s;
  if (size_.infiniband)
    if (auto s = infiniband_steps(headers, driver_step, driver_version); !s) return s;
  for (const auto& id : size_.dkms_modules)
    if (auto s = dkms_module_steps(id, headers); !s) return s;
  verify_step(driver_version);
  return {};
}

Status Builder::gpu_steps(std::vector<std::string>& headers, std::string& driver_step, std::string& driver_version) {
  const auto& drv = *size_.driver;
  const std::string comp_id = drv.kind == "grid" ? "nvidia-grid-driver" : "nvidia-cuda-driver";
  auto comp = component(comp_id);
  if (!comp) return std::unexpected(comp.error());
  const manifest::ComponentVariant* variant = nullptr;
  if (drv.kind == "grid") {
    // Newest variant for this distro inside the size's GRID branch range.
    std::vector<int> seen;
    for (const auto& v : (*comp)->variants) {
      if (std::find(v.distros.begin(), v.distros.end(), distro_.id) == v.distros.end()) continue;
      seen.push_back(*v.grid_branch);
      if (drv.grid_branch_min && *v.grid_branch < *drv.grid_branch_min) continue;
      if (drv.grid_branch_max && *v.grid_branch > *drv.grid_branch_max) continue;
      if (!variant || *v.grid_branch > *variant->grid_branch) variant = &v;
    }
    if (!variant) {
      std::vector<std::string> branches;
      for (int b : seen) branches.push_back(std::to_string(b));
      return fail(ErrorKind::unsupported,
                  fmt::format("{} needs a GRID driver in branch {}..{}, and {} pins none for {} (branches there: {})",
                              size_.size, drv.grid_branch_min ? std::to_string(*drv.grid_branch_min) : "any",
                              drv.grid_branch_max ? std::to_string(*drv.grid_branch_max) : "any", (*comp)->file,
                              distro_.id, branches.empty() ? "none" : util::join(branches, ", ")),
                  fmt::format("{} is pinned for: {}", comp_id, util::join(component_distros(**comp), ", ")));
    }
  } else {
    auto v = variant_of(**comp);
    if (!v) return std::unexpected(v.error());
    variant = *v;
  }
  driver_version = variant->version;
  auto arts = artifacts(**comp, *variant);

  // nouveau must not hold the GPU: blacklist it and rebuild the initramfs of every target kernel.
  add(StepKind::config, "config:nouveau", "blacklist nouveau", {},
      {{"path", distro_.nouveau_blacklist_file},
       {"content", driver::kNouveauBlacklist}}); // what `nouveau disable` writes
  for (const auto& k : kernels()) {
    const std::vector<std::string> argv = driver::initramfs_argv(distro_, k);
    add(StepKind::initramfs, "initramfs:" + k, fmt::format("regenerate the initramfs of {}", kernel_label(k)), {"config:nouveau"},
        {{"kernel", k}, {"argv", argv}});
  }

  const std::string flavour = drv.module_flavour.value_or("proprietary");
  const auto ks = kernels();
  std::vector<std::string> after = headers;
  after.insert(after.end(), arts.begin(), arts.end());
  after.push_back("config:nouveau");
  driver_step = "driver:" + comp_id;
  json installer = json::array();
  if (!variant->artifacts.empty())
    installer = {variant->artifacts.front().name, "--silent", "--dkms", "--no-questions", "--ui=none",
                 flavour == "open" ? "-m=kernel-open" : "-m=kernel", "--kernel-name=" + ks.front()};
  add(StepKind::driver, driver_step,
      fmt::format("install the NVIDIA {} driver {} ({} kernel modules)", drv.kind == "grid" ? "GRID" : "CUDA",
                  variant->version, flavour),
      after,
      {{"component", comp_id},
       {"kind", (*comp)->kind},
       {"version", variant->version},
       {"module_flavour", flavour},
       {"installer_argv", installer},
       {"packages", variant->packages}});
  for (const auto& k : ks)
    add(StepKind::dkms, fmt::format("dkms:nvidia:{}", k), fmt::format("DKMS: nvidia {} for {}", variant->version, kernel_label(k)),
        {driver_step, "kernel-headers:" + k},
        {{"module", "nvidia"}, {"version", variant->version}, {"kernel", k},
         {"modules", {"nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"}}});
  add(StepKind::service, "service:nvidia-persistenced", "enable nvidia-persistenced", {driver_step},
      {{"unit", "nvidia-persistenced.service"}, {"action", "enable-now"}});

  if (size_.gpu->fabric_manager) {
    auto fm = component("nvidia-fabricmanager");
    if (!fm) return std::unexpected(fm.error());
    auto fv = variant_of(**fm);
    if (!fv) return std::unexpected(fv.error());
    if ((*fv)->version != variant->version)
      return fail(ErrorKind::manifest,
                  fmt::format("Fabric Manager {} ({}) does not equal the driver version {} ({}) for {}: NVSwitch "
                              "systems fail to start CUDA when they differ",
                              (*fv)->version, (*fm)->file, variant->version, (*comp)->file, distro_.id),
                  "pin both components to the same version");
    auto fm_arts = artifacts(**fm, **fv);
    std::vector<std::string> fm_after = fm_arts;
    fm_after.push_back(driver_step);
    const std::string hold = distro_.package_manager == "apt" ? "apt-mark hold" : "dnf versionlock add";
    add(StepKind::packages, "packages:nvidia-fabricmanager",
        fmt::format("install Fabric Manager {} and hold it ({})", (*fv)->version, hold), fm_after,
        {{"component", "nvidia-fabricmanager"},
         {"version", (*fv)->version},
         {"manager", distro_.package_manager},
         {"packages", (*fv)->packages},
         {"repository", (*fv)->repository ? json(*(*fv)->repository) : json(nullptr)},
         {"files", fm_arts.empty() ? json::array() : json::array({(*fv)->artifacts.front().name})},
         {"hold", true}});
    add(StepKind::service, "service:nvidia-fabricmanager", "enable nvidia-fabricmanager",
        {"packages:nvidia-fabricmanager"}, {{"unit", "nvidia-fabricmanager.service"}, {"action", "enable-now"}});
  }
  return {};
}

Status Builder::infiniband_steps(const std::vector<std::string>& headers, const std::string& driver_step,
                                 const std::string& driver_version) {
  const auto& ib = *size_.infiniband;
  std::string stack_step;
  const auto* doca = m_.find_component("doca-ofed");
  if (const auto* v = doca ? doca->variant_for(distro_.id) : nullptr) {
    auto arts = artifacts(*doca, *v);
    std::vector<std::string> after = headers;
    after.insert(after.end(), arts.begin(), arts.end());
    stack_step = "driver:doca-ofed";
    add(StepKind::driver, stack_step,
        fmt::format("install DOCA-OFED {} (doca-host repository, then doca-ofed) for the target kernels", v->version), after,
        {{"component", "doca-ofed"},
         {"kind", doca->kind},
         {"version", v->version},
         {"manager", distro_.package_manager},
         {"repository_package", v->artifacts.empty() ? json(nullptr) : json(v->artifacts.front().name)},
         {"packages", v->packages.empty() ? std::vector<std::string>{"doca-ofed"} : v->packages},
         {"kernels", kernels()}});
  } else {
    stack_step = "packages:rdma-core";
    add(StepKind::packages, stack_step, "install the distribution's inbox rdma-core stack", {},
        {{"manager", distro_.package_manager}, {"packages", distro_.rdma_packages}});
    plan_.notes.push_back(fmt::format("DOCA-OFED is not pinned for {}: the inbox rdma-core stack is used", distro_.id));
  }
  if (ib.gpudirect && !driver_step.empty()) {
    auto pm = component("nvidia-peermem");
    if (!pm) return std::unexpected(pm.error());
    auto pv = variant_of(**pm);
    if (!pv) return std::unexpected(pv.error());
    if ((*pv)->version != driver_version)
      return fail(ErrorKind::manifest,
                  fmt::format("nvidia-peermem {} ({}) does not equal the driver version {} for {}", (*pv)->version,
                              (*pm)->file, driver_version, distro_.id),
                  "nvidia-peermem ships inside the driver: pin the same version");
    add(StepKind::config, "config:nvidia-peermem", "load nvidia-peermem at boot (GPUDirect RDMA)",
        {driver_step, stack_step},
        {{"path", "/etc/modules-load.d/nvidia-peermem.conf"}, {"content", "nvidia-peermem\n"}});
  }
  if (ib.ipoib)
    add(StepKind::waagent, "waagent:rdma", "enable RDMA in the Azure agent (OS.EnableRDMA=y)", {stack_step},
        {{"config", distro_.waagent_config},
         {"set", {{"OS.EnableRDMA", "y"}}},
         {"restart_service", distro_.waagent_service}});
  return {};
}

// An out-of-tree module from source: fetch it, build and install it with DKMS for every
// target kernel, check each module per kernel, and reboot first when the component says so.
Status Builder::dkms_module_steps(const std::string& id, const std::vector<std::string>& headers) {
  auto comp = component(id);
  if (!comp) return std::unexpected(comp.error());
  auto v = variant_of(**comp);
  if (!v) return std::unexpected(v.error());
  const auto& dk = *(*comp)->dkms;
  if ((*v)->artifacts.empty())
    return fail(ErrorKind::manifest, fmt::format("{}: a dkms-module variant needs its source as an artifact", (*comp)->file));
  auto arts = artifacts(**comp, **v);
  std::vector<std::string> after = headers;
  after.insert(after.end(), arts.begin(), arts.end());
  const std::string step = "driver:" + id;
  add(StepKind::driver, step, fmt::format("build {} {} with DKMS for the target kernels", dk.name, (*v)->version), after,
      {{"component", id},
       {"kind", (*comp)->kind},
       {"installer", "dkms"},
       {"version", (*v)->version},
       {"files", json::array({(*v)->artifacts.front().name})},
       {"dkms_name", dk.name},
       {"modules", dk.modules},
       {"subdir", dk.subdir}});
  std::vector<std::string> checks;
  for (const auto& k : kernels()) {
    const std::string cid = fmt::format("dkms:{}:{}", dk.name, k);
    add(StepKind::dkms, cid, fmt::format("DKMS: {} {} for {}", dk.name, (*v)->version, kernel_label(k)),
        {step, "kernel-headers:" + k},
        {{"module", dk.name}, {"version", (*v)->version}, {"kernel", k}, {"modules", dk.modules}});
    checks.push_back(cid);
  }
  if (dk.reboot)
    add(StepKind::reboot, "reboot:" + id, fmt::format("reboot so that the kernel loads {}", dk.name), checks,
        {{"reason", fmt::format("{} {} is built; the machine boots into it", dk.name, (*v)->version)}});
  return {};
}

void Builder::verify_step(const std::string& driver_version) {
  std::vector<std::string> after;
  for (const auto& s : plan_.steps) after.push_back(s.id);
  json checks = json::object();
  const auto& c = size_.checks;
  if (size_.gpu) {
    checks["gpu_count"] = size_.gpu->count;
    checks["gpu_model"] = size_.gpu->model;
    if (!size_.gpu->pci_ids.empty()) checks["gpu_pci_ids"] = size_.gpu->pci_ids;
    if (size_.gpu->nvswitch_count) checks["nvswitch_count"] = size_.gpu->nvswitch_count;
    if (!driver_version.empty()) checks["driver_version"] = driver_version;
    if (size_.gpu->fabric_manager) checks["fabric_manager"] = "active";
  }
  if (c.gpu_bw_h2d_gbs) checks["gpu_bw_h2d_gbs"] = *c.gpu_bw_h2d_gbs;
  if (c.gpu_bw_p2p_gbs) checks["gpu_bw_p2p_gbs"] = *c.gpu_bw_p2p_gbs;
  if (c.gpu_ecc_sram_threshold) checks["gpu_ecc_sram_threshold"] = *c.gpu_ecc_sram_threshold;
  if (c.gpu_ecc_dram_threshold) checks["gpu_ecc_dram_threshold"] = *c.gpu_ecc_dram_threshold;
  if (c.nccl_allreduce_gbs) checks["nccl_allreduce_gbs"] = *c.nccl_allreduce_gbs;
  if (size_.infiniband) {
    checks["ib_ports"] = size_.infiniband->ports;
    checks["ib_rate_gbps"] = size_.infiniband->rate_gbps;
    checks["ib_port_state"] = "ACTIVE";
    checks["ib_phys_state"] = "LinkUp";
    if (size_.infiniband->gpudirect && size_.gpu && size_.gpu->vendor == "nvidia") checks["nvidia_peermem"] = "loaded";
    if (size_.infiniband->ipoib) checks["waagent_os_enable_rdma"] = "y";
  }
  if (c.ib_write_bw_gdr_gbps) checks["ib_write_bw_gdr_gbps"] = *c.ib_write_bw_gdr_gbps;
  if (c.ib_write_bw_gbps) checks["ib_write_bw_gbps"] = *c.ib_write_bw_gbps;
  if (size_.gpu && size_.gpu->vendor == "nvidia") checks["kernel_modules_for"] = kernels();
  add(StepKind::verify, "verify", "smoke-test what the size promises", after,
      {{"checks", checks}, {"thresholds_source", size_.source}});
}

} // namespace

Result<Plan> make_plan(const manifest::Manifests& m, const PlanRequest& req) {
  const auto* size = m.find_size(req.size);
  if (!size) {
    std::vector<std::pair<std::size_t, std::string>> close;
    for (const auto& s : m.sizes) close.emplace_back(util::edit_distance(s.size, req.size), s.size);
    std::sort(close.begin(), close.end());
    std::string suggestion;
    if (!close.empty() && close.front().first <= 4) suggestion = fmt::format(" (did you mean {}?)", close.front().second);
    return fail(ErrorKind::unsupported, fmt::format("unknown VM size '{}'{}", req.size, suggestion),
                fmt::format("supported sizes: {}", size_list(m)));
  }
  const auto* distro = m.find_distro(req.distro);
  if (!distro)
    return fail(ErrorKind::unsupported, fmt::format("unsupported distro '{}'", req.distro),
                fmt::format("supported distros: {} (pass --distro ID-VERSION)", distro_list(m)));
  if (req.driver_kind) {
    if (!size->driver)
      return fail(ErrorKind::unsupported,
                  fmt::format("--driver {}: {} has no GPU ({})", *req.driver_kind, size->size, size->file));
    if (*req.driver_kind != size->driver->kind)
      return fail(ErrorKind::unsupported,
                  fmt::format("--driver {} is ruled out for {}: its manifest ({}) requires the {} driver",
                              *req.driver_kind, size->size, size->file, size->driver->kind),
                  fmt::format("drop --driver or pass --driver {}", size->driver->kind));
  }
  if (size->driver && size->driver->kind == "rocm")
    return fail(ErrorKind::unsupported,
                fmt::format("{} has AMD {} GPUs: hpcbake ships no ROCm driver recipe ({})", size->size,
                            size->gpu->model, size->file),
                "use AMD's ROCm installer for this size; hpcbake covers NVIDIA GPUs and InfiniBand");

  Plan plan;
  plan.size = size->size;
  plan.size_id = size->id;
  plan.family = size->family;
  plan.distro_id = distro->id;
  plan.distro_name = distro->name;
  if (req.host && req.host->distro_id == distro->id) {
    plan.kernels = req.host->kernels.targets();
    const auto& k = req.host->kernels;
    plan.kernels_source = fmt::format("this host: running {}; next boot {}", k.running.empty() ? "unknown" : k.running,
                                      k.next_boot.empty() ? std::string("unknown (no installed kernel found)")
                                                          : k.next_boot + " by rule: " + k.next_boot_rule);
  } else {
    plan.kernels_source = "resolved on the target at install time: {kernel} stands for its running and next-boot kernels";
  }
  Builder builder(m, *size, *distro, plan);
  if (auto s = builder.build(); !s) return std::unexpected(s.error());
  if (req.host && req.host->distro_id == distro->id) {
    const bool builds_modules = std::any_of(plan.steps.begin(), plan.steps.end(), [](const Step& s) {
      return s.kind == StepKind::dkms || s.kind == StepKind::driver;
    });
    if (builds_modules && req.host->secure_boot.state == "enabled" && req.signing == Signing::off)
      return fail(ErrorKind::unsupported,
                  fmt::format("Secure Boot is enabled on this host ({}) and module signing is off: the kernel would "
                              "refuse the {} modules this plan builds",
                              req.host->secure_boot.source, size->gpu ? "NVIDIA" : "driver"),
                  "let hpcbake sign (drop --sign off; it generates a key or uses --sign-key/--sign-cert), or turn "
                  "Secure Boot off in the VM's security profile");
    if (builds_modules && req.host->secure_boot.state == "enabled")
      plan.notes.push_back("Secure Boot is enabled: kernel modules must be signed and the signing certificate "
                           "enrolled (MOK) or present in the image's UEFI db");
    if (size->gpu && req.host->modules.nouveau_loaded) {
      plan.notes.push_back("nouveau is loaded now: a reboot is required after it is blacklisted");
      // The reboot goes after the blacklist and the initramfs rebuilds, before the driver,
      // whose installer refuses to run while nouveau holds the GPU.
      Step reboot{"reboot:nouveau", StepKind::reboot, "reboot so that nouveau releases the GPU", {}, {}};
      for (const auto& st : plan.steps)
        if (st.id == "config:nouveau" || st.kind == StepKind::initramfs) reboot.after.push_back(st.id);
      reboot.detail = {{"reason", "nouveau is loaded (/proc/modules); it is blacklisted and the initramfs rebuilt"}};
      auto driver = std::find_if(plan.steps.begin(), plan.steps.end(),
                                 [](const Step& st) { return st.kind == StepKind::driver; });
      if (driver != plan.steps.end()) driver->after.push_back(reboot.id);
      for (auto& st : plan.steps)
        if (st.kind == StepKind::verify) st.after.push_back(reboot.id);
      plan.steps.insert(driver, std::move(reboot));
    }
  }
  return plan;
}

} // namespace hpcbake::plan
