// The planner: size x distro x recipes -> typed steps. Every fact about how a component is
// installed comes from its recipe (drivers/<kind>.yaml) and its component manifest; this
// file only orders the steps (the real order of an NVIDIA + InfiniBand install).
#include "plan/plan.hpp"
#include "plan/rdma_os.hpp"
#include "plan/userspace.hpp"

#include "container/runtime.hpp"

#include "driver/headers.hpp"
#include "driver/nouveau.hpp"
#include "driver/recipe.hpp"
#include "manifest/catalog.hpp"
#include "repo/sources.hpp"
#include "util/paths.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"
#include "util/utf8.hpp"
#include "util/version.hpp"
#include "waagent/rdma.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

namespace hpcbake::plan {

using nlohmann::json;

namespace {

// Stands for each target kernel when the plan is made for another machine; install
// substitutes the running and next-boot kernels of the machine it runs on.
constexpr const char* kernel_placeholder = "{kernel}";

std::string kernel_label(const std::string& k) {
  return k == kernel_placeholder ? std::string("each target kernel") : "kernel " + k;
}

std::string arch_list(const std::vector<manifest::Arch>& arches) {
  std::vector<std::string> out;
  for (const auto a : arches)
    out.emplace_back(manifest::to_string(a));
  return util::join(out, ", ");
}

std::string distros_for(const manifest::Manifests& m, manifest::Arch arch) {
  std::vector<std::string> out;
  for (const auto& d : m.distros)
    if (d.serves(arch)) out.push_back(d.id);
  return out.empty() ? std::string("none") : util::join(out, ", ");
}

std::string distro_list(const manifest::Manifests& m) {
  std::vector<std::string> ids;
  for (const auto& d : m.distros)
    ids.push_back(d.id);
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

// `now`: started as well. The driver's persistence daemon is only enabled: it exits on a build
// VM without the GPU and starts at the next boot (as Azure's images do).
ServiceStep enable_service(const std::string& service, bool now = true) {
  const bool typed = service.ends_with(".service") || service.ends_with(".path") || service.ends_with(".socket") ||
                     service.ends_with(".timer");
  const std::string unit = typed ? service : service + ".service";
  if (!now) return {unit, {"systemctl", "enable", unit}};
  return {unit, {"systemctl", "enable", "--now", unit}};
}

// A component and the variant and recipe that apply to the plan's distro.
struct Resolved {
  const manifest::ComponentManifest* component = nullptr;
  const manifest::ComponentVariant* variant = nullptr;
  const manifest::Recipe* recipe = nullptr;
};

class Builder {
public:
  Builder(const manifest::Manifests& m, const manifest::SizeManifest& size, const manifest::DistroManifest& distro,
          Plan& plan, const PlanRequest& req)
      : m_(m), size_(size), arch_(size.arch), profile_(m.find_profile(req.profile)), distro_(distro), plan_(plan),
        hold_kernel_(req.hold_kernel), mirrors_(req.mirrors), git_bundles_(req.git_bundles), prebuilt_(req.prebuilt),
        driver_source_(req.driver_source), driver_version_(req.driver_version), defer_hardware_(req.defer_hardware) {}

  Status build();

private:
  // The action is taken by reference and moved here, in the body: a caller may read the step
  // it passes (add(id, title_from(st), after, std::move(st))) without seeing it moved from.
  template <typename A> void add(std::string id, std::string title, std::vector<std::string> after, A&& action) {
    plan_.steps.push_back(Step{std::move(id), std::move(title), std::move(after), Action(std::forward<A>(action))});
  }
  std::vector<std::string> kernels() const {
    return plan_.kernels.empty() ? std::vector<std::string>{kernel_placeholder} : plan_.kernels;
  }
  Result<Resolved> resolve(const std::string& id, const manifest::ComponentVariant* variant = nullptr) const;
  Result<const manifest::ComponentVariant*> grid_variant(const manifest::ComponentManifest& c);
  std::vector<std::string> artifacts(const Resolved& r);
  Status build_steps();
  void dkms_checks(const std::string& after, const std::string& package, const std::string& version,
                   const std::vector<std::string>& modules, std::vector<std::string>* ids = nullptr,
                   bool signed_here = true);
  Status gpu_steps(std::string& driver_step, std::string& driver_version);
  Status fabric_manager_steps(const std::string& driver_step, const std::string& driver_version);
  void driver_service_step(const std::string& service, const std::string& after);
  Result<std::string> ib_stack_steps();
  Status infiniband_steps(const std::string& stack_step, const std::string& driver_step,
                          const std::string& driver_version);
  Result<std::string> repository_step(const std::string& id);
  void pin_step(const PackagesStep& st, const std::string& repository, std::vector<std::string>& after);
  void nouveau_steps();
  Status repository_driver_steps(const Resolved& r, std::string& driver_step);
  // Canonical's signed precompiled modules (distro canonical_signed_nvidia): why they cannot
  // serve this size and driver, or empty when they can.
  std::string canonical_why_not(const Resolved& r, bool is_grid) const;
  // Whether the driver comes from Canonical's archive (--driver-source, else chosen by the
  // signing it needs); a refusal when the source asked for does not fit.
  Result<bool> choose_canonical(const Resolved& r, bool is_grid);
  void own_key_route(const std::string& because);
  Result<Resolved> driver_resolved(); // the NVIDIA driver component of the size's kind
  void canonical_driver_steps(const Resolved& r, std::string& driver_step);
  Status dkms_module_steps(const std::string& id);
  // The DKMS build of a component's dkms: module for every target kernel and its per-kernel checks,
  // from the variant's first artifact, or from `source_dir` when it is given (a directory an
  // earlier step fills: a git-source checkout, whose step is in `after`). Returns the build step.
  std::string dkms_build_steps(const manifest::ComponentManifest& c, const manifest::ComponentVariant& v,
                               const std::string& source_dir, std::vector<std::string> after);
  // What prebuilt modules are offered for: one DKMS package built for the target kernels.
  struct PrebuiltOffer {
    std::string dkms_name, version, source; // source: for the notes
    std::vector<std::string> modules, kernels;
    bool signing = false;
    std::optional<std::string> source_sha256; // none: no digest to compare (refused)
    bool after_unpack = false;                // a package's source: compared by install once unpacked
  };
  PrebuiltUse prebuilt_use(const PrebuiltOffer& offer);
  // The title of a step with prebuilt modules: which kernels take them.
  static std::string prebuilt_title(const PrebuiltUse& use, const std::string& what);
  void modules_reboot_step();
  Status kernel_hold_step();
  void verify_step();

  std::string_view gpu_model() const { return size_.gpu ? std::string_view(size_.gpu->model) : std::string_view(); }
  Status imex_steps(const std::string& driver_step, const std::string& driver_version);
  Result<std::string> repository_component_steps(const manifest::ComponentManifest& c,
                                                 const manifest::ComponentVariant& v, std::vector<std::string> after,
                                                 const std::string& what);
  Status profile_steps(const std::string& driver_step);
  Status container_steps(const std::string& toolkit_step);
  // The profile's userspace components (MPI, NCCL, tools) that apply to the size, in `after` order.
  Status userspace_components(const std::string& driver_step);
  // Why a userspace component is not for this size, or empty when it is.
  std::string userspace_why_not(const manifest::ComponentManifest& c) const;
  Result<std::string> userspace_steps(const manifest::ComponentManifest& c, const manifest::ComponentVariant& v,
                                      std::vector<std::string> after);
  std::string userspace_base_step(bool git, bool build);
  std::map<std::string, std::string> userspace_prefixes_; // planned userspace component -> prefix
  std::map<std::string, std::string> userspace_last_;     // planned userspace component -> its last step

  const manifest::Manifests& m_;
  const manifest::SizeManifest& size_;
  const manifest::Arch arch_;
  const manifest::ProfileManifest* profile_ = nullptr;
  const manifest::DistroManifest& distro_;
  Plan& plan_;
  std::vector<std::string> headers_; // kernel-headers steps
  std::string signing_step_;         // signing-key step, when a key is generated
  std::string stack_step_;           // the InfiniBand stack (DOCA-OFED or rdma-core): the driver comes after it
  bool hold_kernel_ = false;         // PlanRequest::hold_kernel
  const std::map<std::string, std::vector<MirrorFile>>& mirrors_; // PlanRequest::mirrors
  const std::map<std::string, MirrorFile>& git_bundles_;          // PlanRequest::git_bundles
  const PrebuiltInput* prebuilt_ = nullptr;                       // PlanRequest::prebuilt
  bool driver_from_packages_ = false; // a repository's packages: nothing loads the driver before a reboot
  DriverSource driver_source_ = DriverSource::automatic; // PlanRequest::driver_source
  std::string driver_version_;                           // PlanRequest::driver_version
  // With --driver-version: the variant of a component that follows the driver (or the CUDA driver
  // itself) pinning that version here; null for the usual choice.
  const manifest::ComponentVariant* version_variant(const manifest::ComponentManifest& c) const;
  bool defer_hardware_ = false;    // PlanRequest::defer_hardware
  bool canonical_ = false;         // the driver is Canonical's precompiled modules
  std::optional<Resolved> driver_; // driver_resolved()
  struct ModuleReboot {
    std::string component, module, reason;
  };
  std::vector<ModuleReboot> module_reboots_; // dkms-module components that ask for a reboot
  bool doca_ = false;                        // DOCA-OFED is the InfiniBand stack (it replaces the running modules)
};

const manifest::ComponentVariant* Builder::version_variant(const manifest::ComponentManifest& c) const {
  if (c.id != "nvidia-cuda-driver" && c.kind != manifest::ComponentKind::fabric_manager &&
      c.kind != manifest::ComponentKind::peermem && c.kind != manifest::ComponentKind::imex)
    return nullptr;
  const manifest::ComponentVariant* any = nullptr;
  for (const auto& v : c.variants) {
    if (std::find(v.distros.begin(), v.distros.end(), distro_.id) == v.distros.end() ||
        std::find(v.arches.begin(), v.arches.end(), arch_) == v.arches.end() ||
        (v.version != driver_version_ && !v.version.starts_with(driver_version_ + "-")))
      continue;
    if (!v.gpu_models.empty() && std::find(v.gpu_models.begin(), v.gpu_models.end(), gpu_model()) != v.gpu_models.end())
      return &v;
    if (v.gpu_models.empty() && !any) any = &v;
  }
  return any;
}

Result<Resolved> Builder::resolve(const std::string& id, const manifest::ComponentVariant* variant) const {
  Resolved r;
  r.component = m_.find_component(id);
  if (!r.component)
    return fail(ErrorKind::manifest, fmt::format("the manifests under {} have no component '{}'", m_.dir.string(), id),
                "restore manifests/components/" + id + ".yaml");
  if (!variant && !driver_version_.empty()) {
    variant = version_variant(*r.component);
    if (!variant && id == "nvidia-cuda-driver") {
      std::vector<std::string> pinned;
      for (const auto& v : r.component->variants)
        if (std::find(v.distros.begin(), v.distros.end(), distro_.id) != v.distros.end() &&
            std::find(v.arches.begin(), v.arches.end(), arch_) != v.arches.end() && !v.refused)
          pinned.push_back(v.version);
      return fail(ErrorKind::unsupported,
                  fmt::format("--driver-version {}: {} pins no NVIDIA driver {} for {} ({})", driver_version_,
                              r.component->file, driver_version_, distro_.id, manifest::to_string(arch_)),
                  fmt::format("pinned for {}: {}; for another version, set it with an overlay (--overlay, "
                              "manifests/README.md)",
                              distro_.id, pinned.empty() ? std::string("none") : util::join(pinned, ", ")));
    }
  }
  r.variant = variant ? variant : r.component->variant_for(distro_.id, gpu_model(), arch_);
  if (!r.variant)
    return fail(
        ErrorKind::unsupported,
        fmt::format("{} needs {}, which has no variant for {} ({})", size_.size, r.component->component, distro_.id,
                    r.component->file),
        fmt::format("{} is pinned for: {}", r.component->component, util::join(component_distros(*r.component), ", ")));
  if (r.variant->refused)
    return fail(
        ErrorKind::unsupported,
        fmt::format("{} on {} needs {} {}, which cannot be installed verifiably: {} ({})", size_.size, distro_.id,
                    r.component->component, r.variant->version, *r.variant->refused, r.component->file),
        fmt::format("{} is pinned for: {}", r.component->component, util::join(component_distros(*r.component), ", ")));
  r.recipe = m_.find_recipe(r.component->kind);
  if (!r.recipe)
    return fail(ErrorKind::manifest,
                fmt::format("{}: kind '{}' has no driver recipe in {}", r.component->file,
                            manifest::to_string(r.component->kind), m_.recipes_dir.string()),
                fmt::format("restore drivers/{}.yaml", manifest::to_string(r.component->kind)));
  return r;
}

// The GRID variant for this distro inside the size's branch range (the range Azure publishes
// for the size: a guest driver newer than the host's vGPU manager does not load): the newest
// installable one, by branch and then version. A plan note says why that branch and what the
// range left out; no installable variant in the range is an error naming the range and its source.
Result<const manifest::ComponentVariant*> Builder::grid_variant(const manifest::ComponentManifest& c) {
  if (!size_.driver->grid_branch) // the reader requires one on every GRID size
    return fail(ErrorKind::manifest, fmt::format("{}: a GRID size needs driver.grid_branch", size_.file));
  const auto& range = *size_.driver->grid_branch;
  const auto newer = [](const manifest::ComponentVariant* a, const manifest::ComponentVariant* b) {
    if (!b) return true;
    if (*a->grid_branch != *b->grid_branch) return *a->grid_branch > *b->grid_branch;
    return util::compare_versions(a->version, b->version) > 0;
  };
  const manifest::ComponentVariant* best = nullptr;    // newest installable in range
  const manifest::ComponentVariant* refused = nullptr; // newest refused in range
  std::vector<std::string> seen, outside;
  for (const auto& v : c.variants) {
    if (std::find(v.distros.begin(), v.distros.end(), distro_.id) == v.distros.end() || !v.grid_branch ||
        std::find(v.arches.begin(), v.arches.end(), arch_) == v.arches.end())
      continue;
    const std::string label = fmt::format("{} (vGPU {})", v.version, *v.grid_branch);
    seen.push_back(label);
    if (!range.contains(*v.grid_branch)) {
      if (std::find(outside.begin(), outside.end(), label) == outside.end()) outside.push_back(label);
      continue;
    }
    auto& slot = v.refused ? refused : best;
    if (newer(&v, slot)) slot = &v;
  }
  // The source is a manifest's value, so it is excerpted: 1024 bytes is our own generous bound (the
  // shipped sources are under 700), enough to quote a citation and never a pasted file.
  const std::string why =
      fmt::format("{}: Azure publishes GRID (vGPU) branch {} for this size ({}; {})", size_.family, range.str(),
                  util::excerpt(range.source, 1024), std::filesystem::relative(size_.file, m_.dir).string());
  const std::string pin_hint = fmt::format(
      "a build of GRID branch {} for {} with a published SHA-256 can be pinned in {}", range.str(), distro_.id, c.file);
  if (!best && refused)
    return fail(ErrorKind::unsupported,
                fmt::format("{} on {} needs a GRID driver in branch {}, and no pinned one there can be installed "
                            "verifiably; the newest, {} {} (vGPU {}): {} ({}). {}",
                            size_.size, distro_.id, range.str(), c.component, refused->version, *refused->grid_branch,
                            *refused->refused, c.file, why),
                pin_hint);
  if (!best)
    return fail(ErrorKind::unsupported,
                fmt::format("{} needs a GRID driver in branch {}, and {} pins none for {} (pinned there: {}). {}",
                            size_.size, range.str(), c.file, distro_.id, seen.empty() ? "none" : util::join(seen, ", "),
                            why),
                fmt::format("{} is pinned for: {}", c.component, util::join(component_distros(c), ", ")));
  std::string note = fmt::format("{}; {} (vGPU {}) is the newest pinned GRID driver within it", why, best->version,
                                 *best->grid_branch);
  if (refused && newer(refused, best))
    note += fmt::format("; {} (vGPU {}) is newer but cannot be installed verifiably: {}", refused->version,
                        *refused->grid_branch, *refused->refused);
  if (!outside.empty()) note += fmt::format("; outside it: {}", util::join(outside, ", "));
  plan_.notes.push_back(std::move(note));
  return best;
}

// Artifact steps for a component's variant; returns their ids.
std::vector<std::string> Builder::artifacts(const Resolved& r) {
  std::vector<std::string> ids;
  const auto& c = *r.component;
  const auto& v = *r.variant;
  for (const auto& a : v.artifacts) {
    ArtifactStep st{c.component, v.version, a.name, {}, a.sha256, a.size};
    for (const auto& u : a.urls)
      st.urls.push_back(util::redact_url(u));
    const std::string id = "artifact:" + a.name;
    plan_.artifacts.push_back({c.component, v.version, a});
    add(id,
        fmt::format("download {} ({} {}){}", a.name, c.component, v.version, a.sha256 ? "" : " [no pinned SHA-256]"),
        {}, std::move(st));
    if (!a.sha256)
      plan_.notes.push_back(fmt::format("{} has no pinned SHA-256 in {}: install refuses it unless you pass "
                                        "--sha256 {}=<hex> from a source you trust",
                                        a.name, std::filesystem::relative(c.file, m_.dir).string(), a.name));
    ids.push_back(id);
  }
  return ids;
}

// Compilers, DKMS and the headers of every target kernel; the signing key.
Status Builder::build_steps() {
  const bool nvidia = size_.gpu && size_.gpu->vendor == "nvidia";
  auto packages = distro_.build_packages;
  if (nvidia) packages.insert(packages.end(), distro_.gpu_build_packages.begin(), distro_.gpu_build_packages.end());
  std::vector<std::string> repos; // EPEL on EL: dkms comes from there
  for (const auto& id : distro_.build_repositories) {
    HPCBAKE_TRY_ASSIGN(auto step, repository_step(id));
    repos.push_back(std::move(step));
  }
  PackagesStep build;
  build.manager = distro_.package_manager;
  build.packages = packages;
  if (!distro_.build_repositories.empty()) build.repository = distro_.build_repositories.front();
  add("packages:build", "install the kernel module build tools", repos, std::move(build));
  for (const auto& k : kernels()) {
    const std::string id = "kernel-headers:" + k;
    add(id, fmt::format("install headers for {}", kernel_label(k)), {"packages:build"},
        HeadersStep{distro_.package_manager, k, driver::headers_package(distro_, k),
                    fmt::format("/lib/modules/{}/build", k)});
    headers_.push_back(id);
  }
  if (plan_.signing.enabled && plan_.signing.generate) {
    signing_step_ = "signing-key";
    add(signing_step_, fmt::format("generate the module signing key in {}", plan_.signing.key.parent_path().string()),
        {}, SigningKeyStep{plan_.signing});
  }
  return {};
}

void Builder::dkms_checks(const std::string& after, const std::string& package, const std::string& version,
                          const std::vector<std::string>& modules, std::vector<std::string>* ids, bool signed_here) {
  for (const auto& k : kernels()) {
    const std::string id = fmt::format("dkms:{}:{}", package, k);
    add(id, fmt::format("check {} {} for {}", util::join(modules, ", "), version, kernel_label(k)),
        {after, "kernel-headers:" + k},
        DkmsCheckStep{package, version, k, modules, signed_here && plan_.signing.enabled});
    if (ids) ids->push_back(id);
  }
}

Status Builder::build() {
  const bool nvidia = size_.gpu && size_.gpu->vendor == "nvidia";
  const auto* doca = m_.find_component("doca-ofed");
  const bool has_doca = size_.infiniband && doca && doca->variant_for(distro_.id, {}, arch_);
  if (nvidia) {
    HPCBAKE_TRY_ASSIGN(auto r, driver_resolved());
    HPCBAKE_TRY_ASSIGN(canonical_, choose_canonical(r, size_.driver->kind == manifest::DriverKind::grid));
  }
  // Canonical's precompiled driver needs no compiler, no headers and no key; other modules may.
  if ((nvidia && !canonical_) || has_doca || !size_.dkms_modules.empty()) HPCBAKE_TRY(build_steps());
  if (canonical_ && (has_doca || !size_.dkms_modules.empty()))
    plan_.notes.push_back("only the NVIDIA driver comes signed by Canonical: the other modules this plan builds with "
                          "DKMS (DOCA-OFED's, the size's dkms_modules) are not Canonical's, and load under Secure Boot "
                          "only when signed with a key the kernel trusts");
  // DOCA-OFED first: the NVIDIA driver builds nvidia-peermem against the ib_core it finds.
  if (size_.infiniband) {
    HPCBAKE_TRY_ASSIGN(stack_step_, ib_stack_steps());
  }
  std::string driver_step, driver_version;
  if (nvidia) {
    if (auto s = gpu_steps(driver_step, driver_version); !s) return s;
    HPCBAKE_TRY(profile_steps(driver_step));
  }
  if (size_.infiniband)
    if (auto s = infiniband_steps(stack_step_, driver_step, driver_version); !s) return s;
  if (!nvidia) HPCBAKE_TRY(profile_steps(driver_step)); // the userspace components a CPU size gets
  for (const auto& id : size_.dkms_modules)
    if (auto s = dkms_module_steps(id); !s) return s;
  HPCBAKE_TRY(rdma_os_steps(m_, size_, profile_, plan_, stack_step_)); // the profile's rdma_os: plan/rdma_os.hpp
  HPCBAKE_TRY(kernel_hold_step());
  modules_reboot_step();
  verify_step();
  if (prebuilt_ && std::none_of(plan_.steps.begin(), plan_.steps.end(), [](const Step& st) {
        const auto* p = st.as<PackagesStep>();
        return st.as<DkmsBuildStep>() != nullptr || (p && p->dkms);
      }))
    plan_.notes.push_back(fmt::format("the prebuilt modules in {} are not used: this plan builds no module with DKMS "
                                      "(a vendor .run builds its own)",
                                      prebuilt_->file));
  return {};
}

Result<Resolved> Builder::driver_resolved() {
  if (driver_) return *driver_; // resolved once: a GRID branch's choice adds its note once
  const bool is_grid = size_.driver->kind == manifest::DriverKind::grid;
  const std::string comp_id = is_grid ? "nvidia-grid-driver" : "nvidia-cuda-driver";
  const manifest::ComponentVariant* grid = nullptr;
  if (is_grid) {
    const auto* c = m_.find_component(comp_id);
    if (c) {
      HPCBAKE_TRY_ASSIGN(auto v, grid_variant(*c));
      grid = v;
    }
  }
  HPCBAKE_TRY_ASSIGN(auto r, resolve(comp_id, grid));
  driver_ = r;
  return r;
}

Status Builder::gpu_steps(std::string& driver_step, std::string& driver_version) {
  const auto& drv = *size_.driver;
  const bool is_grid = drv.kind == manifest::DriverKind::grid;
  const std::string comp_id = is_grid ? "nvidia-grid-driver" : "nvidia-cuda-driver";
  HPCBAKE_TRY_ASSIGN(auto r, driver_resolved());
  const auto& rec = *r.recipe;
  const auto& v = *r.variant;
  if (canonical_) {
    canonical_driver_steps(r, driver_step); // Fabric Manager from the same archive, in the same step
    return {};
  }
  if (v.repository) {
    driver_version = v.version;
    HPCBAKE_TRY(repository_driver_steps(r, driver_step));
    if (size_.gpu->fabric_manager) return fabric_manager_steps(driver_step, driver_version);
    if (size_.gpu->imex) return imex_steps(driver_step, driver_version);
    return {};
  }
  if (rec.installer != manifest::Installer::nvidia_run || v.artifacts.empty())
    return fail(ErrorKind::manifest,
                fmt::format("{}: the {} driver is installed from a pinned .run ({} says installer {})",
                            r.component->file, comp_id, rec.file, manifest::to_string(rec.installer)));
  driver_version = v.version;
  auto arts = artifacts(r);

  nouveau_steps();

  RunInstallerStep st{comp_id,
                      manifest::to_string(rec.kind),
                      v.version,
                      drv.module_flavour.value_or("proprietary"),
                      v.artifacts.front().name,
                      {},
                      plan_.signing.enabled ? SignedBy::hpcbake_key : SignedBy::unsigned_modules};
  for (const auto& k : kernels()) {
    driver::RunRequest rq{artifact_ref(st.run_file), k, st.flavour, {}, {}};
    if (plan_.signing.enabled) {
      rq.signing_key = plan_.signing.key;
      rq.signing_cert = plan_.signing.cert;
    }
    HPCBAKE_TRY_ASSIGN(auto argv, driver::run_installer_argv(rec, rq));
    st.commands.emplace_back(k, std::move(argv));
  }
  std::vector<std::string> after = headers_;
  after.insert(after.end(), arts.begin(), arts.end());
  after.push_back("config:nouveau");
  if (!signing_step_.empty()) after.push_back(signing_step_);
  if (!stack_step_.empty()) after.push_back(stack_step_);
  driver_step = "driver:" + comp_id;
  add(driver_step,
      fmt::format("install the NVIDIA {} driver {} ({} kernel modules)", is_grid ? "GRID" : "CUDA", v.version,
                  st.flavour),
      after, std::move(st));
  dkms_checks(driver_step, rec.dkms_name, v.version, rec.modules);
  if (!rec.service.empty()) {
    // The .run installs the daemon but no unit: the recipe's unit is written first.
    std::vector<std::string> svc_after = {driver_step};
    const std::string unit = rec.service.ends_with(".service") ? rec.service : rec.service + ".service";
    if (!rec.service_unit.empty()) {
      add("config:" + unit, "write the " + unit + " unit (the .run installer ships none)", {driver_step},
          ConfigStep{std::string(paths::kSystemdUnitDir) + "/" + unit, rec.service_unit});
      svc_after.push_back("config:" + unit);
    }
    add("service:" + rec.service, "enable " + rec.service + " (started at boot)", svc_after,
        enable_service(rec.service, false));
  }
  if (size_.gpu->fabric_manager) return fabric_manager_steps(driver_step, driver_version);
  if (size_.gpu->imex) return imex_steps(driver_step, driver_version);
  return {};
}

// nouveau must not hold the GPU: blacklist it and rebuild the initramfs of every target kernel
// (whichever way the driver is installed).
void Builder::nouveau_steps() {
  add("config:nouveau", "blacklist nouveau", {}, ConfigStep{distro_.nouveau_blacklist_file, driver::kNouveauBlacklist});
  std::vector<std::string> configs = {"config:nouveau"};
  if (size_.gpu->imex) { // IMEX channel 0, as Azure's HPC images create it for GB200/GB300
    add("config:nvidia-imex-channel",
        "create IMEX channel 0 and let the driver manage coherent GPU memory when the nvidia module loads", {},
        ConfigStep{"/etc/modprobe.d/nvidia-imex.conf",
                   "# Written by hpcbake, as Azure's HPC images configure ND GB200/GB300 v6\n"
                   "# (Azure/azhpc-images components/install_nvidiagpudriver.sh, NVLINK_RACKSCALE).\n"
                   "options nvidia NVreg_CreateImexChannel0=1\n"
                   "options nvidia NVreg_CoherentGPUMemoryMode=driver\n"});
    configs.push_back("config:nvidia-imex-channel");
  }
  for (const auto& k : kernels()) {
    CommandStep cmd{"initramfs", k, driver::initramfs_argv(distro_, k), {}, {}};
    if (!distro_.initramfs_file.empty()) {
      cmd.initramfs = util::replace_all(distro_.initramfs_file, "{kernel}", k);
      cmd.only_if_holds = {"nouveau", "nvidia"}; // the blacklist, and the nvidia module's options
    }
    add("initramfs:" + k, fmt::format("regenerate the initramfs of {}", kernel_label(k)), configs, std::move(cmd));
  }
}

// The trusted repository for this distro, added once; returns its step id.
Result<std::string> Builder::repository_step(const std::string& id) {
  const std::string step = "repository:" + id;
  for (const auto& st : plan_.steps)
    if (st.id == step) return step;
  const auto* repo = m_.find_repository(id);
  if (!repo)
    return fail(ErrorKind::manifest, fmt::format("the manifests under {} have no repository '{}'", m_.dir.string(), id),
                "restore manifests/repositories/" + id + ".yaml");
  const auto* v = repo->variant_for(distro_.id, arch_);
  if (!v)
    return fail(ErrorKind::unsupported, fmt::format("repository {} has no variant for {} on {} ({})", id, distro_.id,
                                                    manifest::to_string(arch_), repo->file));
  manifest::RepositoryVariant variant = *v;
  std::string mirror_dir;
  std::vector<MirrorFile> mirror;
  if (auto mi = mirrors_.find(id); mi != mirrors_.end()) { // the copy an offline bundle carries
    mirror_dir = fmt::format("{}/{}", paths::kRepoMirrorDir, id);
    variant.uri = fmt::format("file://{}/", mirror_dir);
    variant.key.urls = {fmt::format("file://{}/{}", mirror_dir, paths::kRepoMirrorKey)};
    mirror = mi->second;
  }
  HPCBAKE_TRY_ASSIGN(auto files, repo::source_files(*repo, variant, distro_.package_manager));
  const bool apt = distro_.package_manager == manifest::PackageManager::apt;
  RepositoryStep rs{id,
                    distro_.package_manager,
                    variant.uri,
                    variant.key.urls,
                    v->key.fingerprint,
                    files.key_path,
                    files.source_path,
                    files.source,
                    v->suite.empty() ? "/" : v->suite,
                    v->components,
                    mirror_dir,
                    std::move(mirror),
                    apt || v->repo_gpgcheck || v->metadata_only,
                    !apt && !v->metadata_only,
                    apt ? "" : v->metadata_only_source};
  add(step,
      fmt::format("trust {} (key {}{}){}", repo->description, v->key.fingerprint,
                  !apt && v->metadata_only ? "; signed repomd.xml, packages by its checksums" : "",
                  mirror_dir.empty() ? "" : ", from the copy in the bundle"),
      {}, std::move(rs));
  return step;
}

// apt preferences holding a repository component's `name=version` packages at exactly those
// versions, written before the packages install (dnf: the exact versions and versionlock do it).
void Builder::pin_step(const PackagesStep& st, const std::string& repository, std::vector<std::string>& after) {
  if (distro_.package_manager != manifest::PackageManager::apt) return;
  auto pref = repo::apt_preferences(st.component, repository, st.packages);
  if (!pref) return;
  const std::string id = "config:apt-preferences:" + pref->path.substr(pref->path.rfind('/') + 1);
  add(id, fmt::format("pin {} {} in apt's preferences", st.component, st.version), {"repository:" + repository},
      ConfigStep{pref->path, pref->content});
  after.push_back(id);
}

std::string Builder::canonical_why_not(const Resolved& r, bool is_grid) const {
  const auto& cs = distro_.canonical_signed_nvidia;
  if (!cs)
    return fmt::format("{} (distros/{}.yaml) names no precompiled signed NVIDIA modules of its distributor", distro_.id,
                       distro_.id);
  if (is_grid) return "GRID (vGPU guest) drivers are not among Canonical's precompiled modules";
  const std::string branch = r.variant->version.substr(0, r.variant->version.find('.'));
  if (std::find(cs->branches.begin(), cs->branches.end(), branch) == cs->branches.end())
    return fmt::format("Canonical publishes no precompiled signed modules of driver branch {} for the {} kernels of "
                       "{} (published: {}; distros/{}.yaml)",
                       branch, cs->kernel_flavour, distro_.id, util::join(cs->branches, ", "), distro_.id);
  if (size_.gpu->imex) return "IMEX (NVLink multi-node) is not part of this route";
  return {};
}

// The driver's modules built by hpcbake (DKMS, or the .run's installer) and signed with its key,
// where they must be signed: the plan's route, and why (`because`, when there is more to say).
void Builder::own_key_route(const std::string& because) {
  if (!plan_.signing.enabled || plan_.signing.precaution) return;
  plan_.route = SigningRoute::hpcbake_key;
  plan_.route_reason = fmt::format("modules must be signed ({}){}: hpcbake builds the NVIDIA driver's modules and "
                                   "signs them with its key, whose certificate the VM's firmware must trust (the "
                                   "image's UEFI db, or a MOK)",
                                   plan_.signing.why, because.empty() ? "" : "; " + because);
}

Result<bool> Builder::choose_canonical(const Resolved& r, bool is_grid) {
  const std::string why_not = canonical_why_not(r, is_grid);
  const bool from_repo = r.variant->repository.has_value();
  const std::string manifest_route = from_repo ? "repository" : "run";
  switch (driver_source_) {
  case DriverSource::canonical:
    if (!why_not.empty())
      return fail(ErrorKind::unsupported,
                  fmt::format("{} on {}: --driver-source canonical: {}", size_.size, distro_.id, why_not),
                  fmt::format("use --driver-source {} (with Secure Boot on, its modules are signed with hpcbake's key, "
                              "which must be enrolled), or bake with Secure Boot off",
                              manifest_route));
    break;
  case DriverSource::repository:
  case DriverSource::run:
    own_key_route(fmt::format("--driver-source {}", to_string(driver_source_)));
    if (to_string(driver_source_) != manifest_route)
      return fail(ErrorKind::unsupported,
                  fmt::format("{} on {}: --driver-source {}: components/{}.yaml installs the NVIDIA driver {} on {}",
                              size_.size, distro_.id, to_string(driver_source_), r.component->id,
                              from_repo ? "from a signed repository" : "from a pinned .run", distro_.id),
                  fmt::format("use --driver-source {}{}", manifest_route, why_not.empty() ? " or canonical" : ""));
    return false;
  case DriverSource::automatic:
    if (!plan_.signing.enabled || plan_.signing.precaution) return false;
    if (!why_not.empty()) {
      // Said only where the distro has the route: elsewhere there is nothing to miss.
      if (distro_.canonical_signed_nvidia)
        plan_.notes.push_back("Canonical's signed precompiled NVIDIA modules are not used: " + why_not);
      own_key_route(distro_.canonical_signed_nvidia ? why_not : "");
      return false;
    }
    if (size_.infiniband && size_.infiniband->gpudirect) {
      // GPUDirect RDMA is what these sizes are for: nvidia-peermem must be built against
      // DOCA-OFED's ib_core (infiniband_steps), which Canonical's precompiled modules are not.
      own_key_route("GPUDirect RDMA needs nvidia-peermem built against DOCA-OFED's ib_core, and Canonical's "
                    "precompiled modules are built against the kernel's own (--driver-source canonical trades "
                    "GPUDirect RDMA for no key to enrol)");
      return false;
    }
    break;
  }
  plan_.route = SigningRoute::canonical_signed;
  const std::string branch = r.variant->version.substr(0, r.variant->version.find('.'));
  plan_.route_reason =
      driver_source_ == DriverSource::canonical
          ? fmt::format("--driver-source canonical: Canonical's signed precompiled modules of branch {}", branch)
          : fmt::format("modules must be signed ({}), and Canonical publishes signed precompiled modules of branch "
                        "{} for the {} kernels of {}: they load under Secure Boot with no key to enrol",
                        plan_.signing.why, branch, distro_.canonical_signed_nvidia->kernel_flavour, distro_.id);
  return true;
}

// Canonical's precompiled modules of the branch for exactly the target kernels, the matching
// userspace without DKMS and, on NVSwitch sizes, Fabric Manager of the same branch: one step, so
// install checks the index for every kernel before any of them goes in.
void Builder::canonical_driver_steps(const Resolved& r, std::string& driver_step) {
  const auto& cs = *distro_.canonical_signed_nvidia;
  const std::string branch = r.variant->version.substr(0, r.variant->version.find('.'));
  const std::string flavour = size_.driver->module_flavour.value_or("proprietary");
  const auto expand = [&](std::string p) {
    p = util::replace_all(std::move(p), "{branch}", branch);
    return util::replace_all(std::move(p), "{open}", flavour == "open" ? "-open" : "");
  };
  CanonicalDriverStep st;
  st.component = r.component->component;
  st.branch = branch;
  st.flavour = flavour;
  st.kernels = kernels();
  st.modules_package = expand(cs.modules_package);
  // The kernel flavour's metapackage (linux-modules-nvidia-580-server-open-azure), unheld: it
  // depends on the modules package of the flavour's newest kernel, so a kernel update brings the
  // matching modules. canonical/ubuntu-drivers-common get_linux_modules_metapackage installs it
  // ("linux-modules-nvidia-<driver flavour>-<kernel flavour>", the exact-kernel package checked).
  st.flavour_package = util::replace_all(st.modules_package, "{kernel}", cs.kernel_flavour);
  for (const auto& p : cs.packages)
    st.packages.push_back(expand(p));
  if (size_.gpu->fabric_manager)
    for (const auto& p : cs.fabric_manager)
      st.packages.push_back(expand(p));
  st.keyring = cs.archive_keyring;
  st.fingerprints = cs.archive_key_fingerprints;
  st.signer = cs.signer;
  st.module_signer = cs.module_signer;
  st.signer_serials = cs.module_signer_serials;
  st.source = fmt::format("distros/{}.yaml", distro_.id);
  nouveau_steps();
  std::vector<std::string> after = {"config:nouveau"};
  if (!stack_step_.empty()) after.push_back(stack_step_);
  driver_step = "driver:" + r.component->component;
  driver_from_packages_ = true;
  add(driver_step,
      fmt::format("install Canonical's signed precompiled NVIDIA {} modules (branch {}) for {}{} from Ubuntu's archive",
                  flavour, branch, kernel_label(st.kernels.front()),
                  size_.gpu->fabric_manager ? ", with Fabric Manager" : ""),
      after, std::move(st));
  if (size_.gpu->fabric_manager)
    if (const auto* rec = m_.find_recipe(manifest::ComponentKind::fabric_manager); rec && !rec->service.empty())
      add("service:" + rec->service, "enable " + rec->service + " (started at boot)", {driver_step},
          enable_service(rec->service, false));
}

// The driver from a signed repository: the variant's packages (the version pin, such as
// nvidia-driver-pinning-<version>) and then the recipe's packages for the module flavour.
Status Builder::repository_driver_steps(const Resolved& r, std::string& driver_step) {
  const auto& rec = *r.recipe;
  const auto& v = *r.variant;
  if (auto b = manifest::driver_pinning(*r.component, v, distro_.id))
    return fail(ErrorKind::manifest, b->message, b->hint);
  HPCBAKE_TRY_ASSIGN(auto repo_step, repository_step(*v.repository));
  const std::string flavour = size_.driver->module_flavour.value_or("proprietary");
  auto fl = rec.repository_packages.find(flavour);
  if (fl == rec.repository_packages.end())
    return fail(ErrorKind::manifest,
                fmt::format("{}: no repository_packages for the '{}' kernel modules", rec.file, flavour));
  nouveau_steps();
  std::vector<std::string> after = headers_;
  after.push_back(repo_step);
  after.push_back("config:nouveau");
  if (!signing_step_.empty()) after.push_back(signing_step_);
  if (!stack_step_.empty()) after.push_back(stack_step_);
  PackagesStep st;
  st.component = r.component->component;
  st.version = v.version;
  st.manager = distro_.package_manager;
  st.hold = true;
  st.repository = *v.repository;
  if (!v.packages.empty()) {
    // The version pin (nvidia-driver-pinning-<version>: apt preferences) in its own transaction
    // first, as NVIDIA's installation guide asks: apt reads preferences only when it starts, so
    // the driver packages installed beside it would resolve to the repository's newest.
    PackagesStep pin = st;
    pin.packages = v.packages;
    pin_step(pin, *v.repository, after);
    const std::string pin_id = "packages:" + r.component->component + "-version";
    add(pin_id,
        fmt::format("select the NVIDIA driver {} ({}) before installing it", v.version, util::join(v.packages, " ")),
        after, std::move(pin));
    after.push_back(pin_id);
  }
  st.packages = fl->second;
  st.kernels = kernels();
  // With the plan signing, hpcbake builds the package's modules with its own key (autoinstall held
  // while the packages go in): the postinst would sign them with DKMS's own MOK, which nobody enrolled.
  const bool sign = plan_.signing.enabled;
  st.dkms = PackagedModules{rec.dkms_name, v.version, rec.modules, std::nullopt, sign};
  pin_step(st, *v.repository, after);
  driver_step = "driver:" + r.component->component;
  driver_from_packages_ = true;
  std::string title = fmt::format("install the NVIDIA driver {} ({} kernel modules) from {}{}", v.version, flavour,
                                  *v.repository, sign ? ", its modules built and signed with hpcbake's key" : "");
  if (prebuilt_) {
    st.dkms->prebuilt = prebuilt_use({rec.dkms_name, v.version, fmt::format("/usr/src/{}-{}", rec.dkms_name, v.version),
                                      rec.modules, st.kernels, sign, std::nullopt, true});
    if (auto t =
            prebuilt_title(*st.dkms->prebuilt, fmt::format("the NVIDIA driver {} from {}", v.version, *v.repository));
        !t.empty())
      title = t;
  }
  add(driver_step, title, after, std::move(st));
  // Signed by hpcbake: each module's signer is checked against the plan's certificate. Otherwise the
  // package's postinst signs them with DKMS's own setup, and their signer is not checked.
  dkms_checks(driver_step, rec.dkms_name, v.version, rec.modules, nullptr, sign);
  if (!rec.service.empty()) // the repository's packages ship the unit
    add("service:" + rec.service, "enable " + rec.service + " (started at boot)", {driver_step},
        enable_service(rec.service, false));
  return {};
}

Status Builder::fabric_manager_steps(const std::string& driver_step, const std::string& driver_version) {
  HPCBAKE_TRY_ASSIGN(auto r, resolve("nvidia-fabricmanager"));
  const auto& v = *r.variant;
  if (auto b = manifest::driver_coupling(*r.component, v, driver_version, distro_.id))
    return fail(ErrorKind::manifest, b->message, b->hint);
  auto arts = artifacts(r);
  std::vector<std::string> after = arts;
  after.push_back(driver_step);
  if (v.repository) {
    HPCBAKE_TRY_ASSIGN(auto repo_step, repository_step(*v.repository));
    after.push_back(repo_step);
  }
  PackagesStep st;
  st.repository = v.repository.value_or("");
  st.component = r.component->component;
  st.version = v.version;
  st.manager = distro_.package_manager;
  st.packages = v.packages;
  if (!v.artifacts.empty()) st.files = {v.artifacts.front().name};
  st.hold = r.recipe->hold;
  if (v.repository) pin_step(st, *v.repository, after);
  const char* hold = distro_.package_manager == manifest::PackageManager::apt    ? "apt-mark hold"
                     : distro_.package_manager == manifest::PackageManager::tdnf ? "/etc/tdnf/locks.d"
                                                                                 : "dnf versionlock add";
  const std::string id = "packages:" + r.component->component;
  add(id, fmt::format("install Fabric Manager {}{}", v.version, st.hold ? fmt::format(" and hold it ({})", hold) : ""),
      after, std::move(st));
  driver_service_step(r.recipe->service, id);
  return {};
}

// A service that needs the driver loaded (Fabric Manager, DCGM): started now after a .run,
// which loads its driver, else at the boot that loads it.
void Builder::driver_service_step(const std::string& service, const std::string& after) {
  if (service.empty()) return;
  // Not on a bake for another machine: the service needs the size's GPUs (the next boot starts it).
  const bool driver_live = !driver_from_packages_ && !defer_hardware_;
  add("service:" + service, "enable " + service + (driver_live ? std::string() : std::string(" (started at boot)")),
      {after}, enable_service(service, driver_live));
}

// DCGM where it is pinned for the distro, from the signed repository the driver's distro uses,
// held at its version; its service starts with the driver (now after a .run, else at boot).
// How a component is named in titles and notes.
std::string component_title(manifest::ComponentKind kind) {
  switch (kind) {
  case manifest::ComponentKind::dcgm:
    return "DCGM";
  case manifest::ComponentKind::container_toolkit:
    return "the NVIDIA Container Toolkit";
  case manifest::ComponentKind::cuda_toolkit:
    return "the CUDA toolkit";
  case manifest::ComponentKind::imex:
    return "NVIDIA IMEX";
  default:
    return manifest::to_string(kind);
  }
}

// A component installed as packages from its signed repository, held at its version, after
// `after`; its service (if the recipe names one) enabled. Returns the packages step's id.
Result<std::string> Builder::repository_component_steps(const manifest::ComponentManifest& c,
                                                        const manifest::ComponentVariant& v,
                                                        std::vector<std::string> after, const std::string& what) {
  HPCBAKE_TRY_ASSIGN(auto r, resolve(c.component, &v));
  if (!v.repository || v.packages.empty())
    return fail(ErrorKind::manifest,
                fmt::format("{}: variant {} needs a repository and its packages", c.file, v.version));
  HPCBAKE_TRY_ASSIGN(auto repo_step, repository_step(*v.repository));
  after.push_back(repo_step);
  PackagesStep st;
  st.component = c.component;
  st.version = v.version;
  st.manager = distro_.package_manager;
  st.packages = v.packages;
  st.repository = *v.repository;
  st.hold = r.recipe->hold;
  pin_step(st, *v.repository, after);
  const std::string id = "packages:" + c.component;
  add(id, fmt::format("install {} {} from {}{}", what, v.version, *v.repository, st.hold ? " and hold it" : ""),
      std::move(after), std::move(st));
  driver_service_step(r.recipe->service, id);
  return id;
}

// The profile's optional components: on NVIDIA GPU sizes DCGM, the container toolkit and the CUDA
// toolkit, after the driver, then the container engines' runtime; then the userspace components
// (userspace_components) for every size they apply to.
Status Builder::profile_steps(const std::string& driver_step) {
  if (!profile_) return {};
  const bool nvidia = size_.gpu && size_.gpu->vendor == "nvidia";
  if (!nvidia) {
    // The profile's required GPU components (the CUDA toolkit, the container toolkit) do not apply.
    std::vector<std::string> gpu_only;
    for (const auto& id : profile_->components)
      if (const auto* c = m_.find_component(id); c && c->kind != manifest::ComponentKind::userspace)
        gpu_only.push_back(id);
    if (!gpu_only.empty())
      plan_.notes.push_back(fmt::format("profile {}: {} {} for NVIDIA GPU sizes, and {} has none: not installed",
                                        profile_->id, util::join(gpu_only, ", "), gpu_only.size() == 1 ? "is" : "are",
                                        size_.size));
    return userspace_components(driver_step);
  }
  std::string toolkit_step;
  auto one = [&](const std::string& id, bool required) -> Status {
    const auto* c = m_.find_component(id);
    if (!c) return fail(ErrorKind::manifest, fmt::format("{}: unknown component '{}'", profile_->file, id));
    if (c->kind == manifest::ComponentKind::userspace) return {};
    const std::string file = std::filesystem::relative(c->file, m_.dir).string();
    if (c->kind == manifest::ComponentKind::dcgm && size_.driver->kind != manifest::DriverKind::cuda) return {};
    const auto* v = c->variant_for(distro_.id, size_.gpu->model, arch_);
    if (!v || v->refused) {
      const std::string why = v ? fmt::format("refused for {}: {}", distro_.id, *v->refused)
                                : fmt::format("not pinned for {} on {}", distro_.id, to_string(arch_));
      if (required)
        return fail(ErrorKind::unsupported,
                    fmt::format("profile {} needs {} ({}), which is {}", profile_->id, c->component, file, why),
                    fmt::format("{} is pinned for: {}; choose another --profile or --distro", c->component,
                                util::join(component_distros(*c), ", ")));
      const std::string name = c->kind == manifest::ComponentKind::dcgm ? "DCGM" : c->component;
      plan_.notes.push_back(v ? fmt::format("{} is {} ({}): not installed", name, why, file)
                              : fmt::format("{} is not pinned for {} ({}): not installed", name, distro_.id, file));
      return {};
    }
    HPCBAKE_TRY_ASSIGN(auto step, repository_component_steps(*c, *v, {driver_step}, component_title(c->kind)));
    if (c->kind == manifest::ComponentKind::container_toolkit) toolkit_step = step;
    userspace_last_[c->component] = step;
    return {};
  };
  for (const auto& id : profile_->components)
    HPCBAKE_TRY(one(id, true));
  for (const auto& id : profile_->best_effort)
    HPCBAKE_TRY(one(id, false));
  if (!profile_->container_engines.empty()) HPCBAKE_TRY(container_steps(toolkit_step));
  return userspace_components(driver_step);
}

std::string Builder::userspace_why_not(const manifest::ComponentManifest& c) const {
  const bool nvidia = size_.gpu && size_.gpu->vendor == "nvidia";
  if (c.applies_to == manifest::AppliesTo::infiniband && !size_.infiniband)
    return fmt::format("is for sizes with InfiniBand, and {} has none", size_.size);
  if (c.applies_to == manifest::AppliesTo::nvidia_gpu && !nvidia)
    return fmt::format("is for NVIDIA GPU sizes, and {} has no NVIDIA GPU", size_.size);
  return {};
}

// Each userspace component of the profile whose `after` components are planned (or not in the
// profile, or not for this size): a required one that cannot be pinned refuses the plan, a
// best-effort one becomes a note.
Status Builder::userspace_components(const std::string& driver_step) {
  struct Want {
    const manifest::ComponentManifest* c;
    bool required;
  };
  std::vector<Want> pending;
  std::set<std::string> in_profile;
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& id : pass == 0 ? profile_->components : profile_->best_effort) {
      const auto* c = m_.find_component(id);
      if (!c || c->kind != manifest::ComponentKind::userspace) continue;
      in_profile.insert(id);
      if (auto why = userspace_why_not(*c); !why.empty()) {
        plan_.notes.push_back(fmt::format("profile {}: {} {}: not installed", profile_->id, id, why));
        continue;
      }
      pending.push_back({c, pass == 0});
    }
  std::set<std::string> skipped;
  while (!pending.empty()) {
    auto ready = std::find_if(pending.begin(), pending.end(), [&](const Want& w) {
      return std::all_of(w.c->after.begin(), w.c->after.end(), [&](const std::string& a) {
        return !in_profile.count(a) || userspace_last_.count(a) || skipped.count(a) ||
               std::none_of(pending.begin(), pending.end(), [&](const Want& o) { return o.c->component == a; });
      });
    });
    if (ready == pending.end())
      return fail(ErrorKind::manifest,
                  fmt::format("profile {}: the userspace components' `after` lists form a cycle ({})", profile_->id,
                              pending.front().c->file));
    const Want w = *ready;
    pending.erase(ready);
    const auto& c = *w.c;
    const std::string file = std::filesystem::relative(c.file, m_.dir).string();
    const auto* v = c.variant_for(distro_.id, gpu_model(), arch_);
    std::string why = !v           ? fmt::format("not pinned for {} on {}", distro_.id, to_string(arch_))
                      : v->refused ? fmt::format("refused for {}: {}", distro_.id, *v->refused)
                                   : std::string();
    std::vector<std::string> after;
    for (const std::string* dep : {&driver_step, static_cast<const std::string*>(&stack_step_)})
      if (!dep->empty()) after.push_back(*dep);
    for (const auto& a : c.after)
      if (auto it = userspace_last_.find(a); it != userspace_last_.end()) after.push_back(it->second);
    if (why.empty()) {
      // A component that cannot be planned leaves no step behind (what it added before failing).
      const auto saved_steps = plan_.steps;
      const auto n_artifacts = plan_.artifacts.size(), n_notes = plan_.notes.size();
      const auto n_reboots = module_reboots_.size();
      auto step = userspace_steps(c, *v, after);
      if (!step) {
        plan_.steps = saved_steps;
        plan_.artifacts.resize(n_artifacts);
        plan_.notes.resize(n_notes);
        module_reboots_.resize(n_reboots);
      }
      if (step) {
        userspace_last_[c.component] = *step;
        userspace_prefixes_[c.component] = v->prefix;
        continue;
      }
      if (w.required) return std::unexpected(step.error());
      why = step.error().message;
    }
    if (w.required)
      return fail(ErrorKind::unsupported,
                  fmt::format("profile {} needs {} ({}), which is {}", profile_->id, c.component, file, why),
                  fmt::format("{} is pinned for: {}; choose another --profile or --distro", c.component,
                              util::join(component_distros(c), ", ")));
    plan_.notes.push_back(fmt::format("{} is {} ({}): not installed", c.component, why, file));
    skipped.insert(c.component);
  }
  return {};
}

// environment-modules (every userspace component's module is a modulefile), git (sources at a
// pinned commit) and the distro's compilers for builds on the node (userspace_build_packages),
// from the distro's own repositories; one step per plan, holding what its components need.
std::string Builder::userspace_base_step(bool git, bool build) {
  const std::string id = "packages:userspace-base";
  std::vector<std::string> want = {"environment-modules"};
  if (git) want.push_back("git");
  if (build) want.insert(want.end(), distro_.userspace_build_packages.begin(), distro_.userspace_build_packages.end());
  for (auto& st : plan_.steps)
    if (st.id == id) {
      auto& p = std::get<PackagesStep>(st.action);
      for (const auto& w : want)
        if (std::find(p.packages.begin(), p.packages.end(), w) == p.packages.end()) p.packages.push_back(w);
      st.title = fmt::format("install {} from {}'s repositories", util::join(p.packages, ", "), distro_.name);
      return id;
    }
  PackagesStep p;
  p.component = "userspace-base";
  p.manager = distro_.package_manager;
  p.packages = want;
  add(id, fmt::format("install {} from {}'s repositories", util::join(want, ", "), distro_.name), {}, std::move(p));
  return id;
}

// One userspace component: its packages (a signed repository's, or the distro's own), verified
// artifacts, a source at its pinned commit, the unpack into its prefix, the build, the modulefile.
// Returns the id of the last step.
Result<std::string> Builder::userspace_steps(const manifest::ComponentManifest& c, const manifest::ComponentVariant& v,
                                             std::vector<std::string> after) {
  Placeholders ph{v.prefix, v.version, userspace_prefixes_, std::string(gpu_model()), {}};
  for (const auto& a : v.artifacts)
    ph.artifacts.push_back(a.name);
  const std::string where = std::filesystem::relative(c.file, m_.dir).string();
  std::string last;
  const std::string base = userspace_base_step(v.git.has_value(), v.build.has_value());
  after.push_back(base);
  if (!v.packages.empty()) {
    if (v.repository) {
      HPCBAKE_TRY_ASSIGN(last, repository_component_steps(c, v, after, c.component));
    } else {
      PackagesStep p;
      p.component = c.component;
      p.version = v.version;
      p.manager = distro_.package_manager;
      p.packages = v.packages;
      last = "packages:" + c.component;
      add(last,
          fmt::format("install {} {} from {}'s repositories ({})", c.component, v.version, distro_.name,
                      util::join(v.packages, " ")),
          after, std::move(p));
    }
    after.push_back(last);
  }
  Resolved r{&c, &v, m_.find_recipe(c.kind)};
  const auto arts = artifacts(r);
  if (v.git) {
    HPCBAKE_TRY_ASSIGN(auto dest, substitute(v.git->to, ph, where));
    last = "git-source:" + c.component;
    GitSourceStep g{c.component, v.version, util::redact_url(v.git->url), v.git->commit, dest, std::nullopt};
    if (const auto b = git_bundles_.find(g.commit); b != git_bundles_.end()) g.bundle = b->second;
    add(last,
        fmt::format("check out {} {} at {}{}", c.component, v.version, v.git->commit.substr(0, 12),
                    g.bundle ? ", from the git bundle in the bundle" : ""),
        after, std::move(g));
    after.push_back(last);
    // Its kernel module (gdrcopy's gdrdrv), through the DKMS path every out-of-tree module takes.
    if (c.dkms) {
      if (canonical_)
        return fail(ErrorKind::unsupported,
                    fmt::format("{}'s module {} builds against NVIDIA's driver sources, which Canonical's "
                                "precompiled driver does not install",
                                c.component, c.dkms->name),
                    "pass --driver-source repository to build the driver (and this module) with DKMS");
      after.push_back(dkms_build_steps(c, v, dest, {last}));
    }
  }
  if (v.unpack) {
    HPCBAKE_TRY_ASSIGN(auto dest, substitute(v.unpack->to, ph, where));
    last = "unpack:" + c.component;
    std::vector<std::string> deps = after;
    deps.push_back("artifact:" + v.unpack->artifact);
    add(last, fmt::format("extract {} {} into {}", c.component, v.version, dest), deps,
        UnpackStep{c.component, v.version, v.unpack->artifact, dest, v.unpack->strip});
    after.push_back(last);
  }
  if (v.build) {
    BuildStep b{c.component, v.version, {}, {}, {}, {}};
    HPCBAKE_TRY_ASSIGN(b.dir, substitute(v.build->dir, ph, where));
    HPCBAKE_TRY_ASSIGN(b.creates, substitute(v.build->creates, ph, where));
    for (const auto& e : v.build->env) {
      HPCBAKE_TRY_ASSIGN(auto x, substitute(e, ph, where));
      b.env.push_back(std::move(x));
    }
    for (const auto& cmd : v.build->commands) {
      std::vector<std::string> argv;
      for (const auto& a : cmd) {
        HPCBAKE_TRY_ASSIGN(auto x, substitute(a, ph, where));
        argv.push_back(std::move(x));
      }
      b.commands.push_back(std::move(argv));
    }
    last = "build:" + c.component;
    std::vector<std::string> deps = after;
    deps.insert(deps.end(), arts.begin(), arts.end());
    add(last, fmt::format("build {} {} into {}", c.component, v.version, v.prefix), deps, std::move(b));
    after.push_back(last);
  }
  if (!c.module.empty() && !v.modulefile.empty()) {
    HPCBAKE_TRY_ASSIGN(auto text, substitute(v.modulefile, ph, where));
    last = "config:module-" + c.component;
    for (std::size_t i = 0; i < c.module_aliases.size(); ++i) {
      HPCBAKE_TRY_ASSIGN(auto alias, substitute(c.module_aliases[i], ph, where));
      add(fmt::format("{}-{}", last, i + 1),
          fmt::format("write the environment module {} (the same as {})", alias, c.module), after,
          ConfigStep{modulefiles_dir(distro_.package_manager) + "/" + alias, text});
    }
    add(last, fmt::format("write the environment module {} ({} {})", c.module, c.component, v.version), after,
        ConfigStep{modulefiles_dir(distro_.package_manager) + "/" + c.module, std::move(text)});
  }
  if (last.empty()) last = base;
  return last;
}

// The engines the profile names: their packages where the distro's own repositories have them,
// the NVIDIA runtime in each one's configuration, and the toolkit's CDI refresh units, which
// write /var/run/cdi/nvidia.yaml on the booted VM (a spec made now would name the bake VM's GPUs).
Status Builder::container_steps(const std::string& toolkit_step) {
  std::vector<std::string> after = {toolkit_step};
  PackagesStep engines;
  engines.component = "container-engines";
  engines.manager = distro_.package_manager;
  ContainerRuntimeStep rt;
  rt.kubernetes = profile_->kubernetes;
  // An InfiniBand size: Docker's memlock, and the HCAs' CDI spec at boot (docs/containers.md). Not
  // on a Kubernetes node: pods get HCAs from an RDMA device plugin (which writes its own CDI spec)
  // and their memlock from containerd, whose limits hpcbake does not set.
  rt.rdma = size_.infiniband.has_value() && !rt.kubernetes;
  for (const auto& engine : profile_->container_engines) {
    const auto e = container::parse_engine(engine);
    rt.engines.emplace_back(engine, container::default_config(*e));
    if (auto it = distro_.container_engine_packages.find(engine); it != distro_.container_engine_packages.end())
      engines.packages.insert(engines.packages.end(), it->second.begin(), it->second.end());
    else
      plan_.notes.push_back(fmt::format("{} names no {} package: hpcbake writes {}'s configuration for the NVIDIA "
                                        "runtime; the engine itself must come from the base image or your own step",
                                        std::filesystem::relative(distro_.file, m_.dir).string(), engine, engine));
  }
  if (!engines.packages.empty()) {
    add("packages:container-engines",
        fmt::format("install the container engines from {}'s repositories ({})", distro_.name,
                    util::join(engines.packages, " ")),
        {}, std::move(engines));
    after.push_back("packages:container-engines");
  }
  std::vector<std::string> names;
  for (const auto& [engine, config] : rt.engines)
    names.push_back(engine);
  add("config:container-runtime",
      fmt::format("name the nvidia runtime in {}{}", util::join(names, " and "),
                  rt.kubernetes ? " (containerd's default runtime, CDI enabled: a Kubernetes node)" : ""),
      after, std::move(rt));
  for (const char* unit : {"nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"})
    add(fmt::format("service:{}", unit),
        fmt::format("enable {} (regenerates /var/run/cdi/nvidia.yaml at boot and when the driver changes)", unit),
        {toolkit_step}, enable_service(unit, false));
  return {};
}

// NVLink multi-node sizes (GB200/GB300): NVIDIA IMEX at the driver's version instead of Fabric
// Manager; channel 0 created by the nvidia module (the modprobe option is written before the
// initramfs is rebuilt, in nouveau_steps).
Status Builder::imex_steps(const std::string& driver_step, const std::string& driver_version) {
  HPCBAKE_TRY_ASSIGN(auto r, resolve("nvidia-imex"));
  const auto& v = *r.variant;
  if (auto b = manifest::driver_coupling(*r.component, v, driver_version, distro_.id))
    return fail(ErrorKind::manifest, b->message, b->hint);
  if (auto step = repository_component_steps(*r.component, v, {driver_step, "config:nvidia-imex-channel"},
                                             component_title(r.component->kind));
      !step)
    return std::unexpected(step.error());
  plan_.notes.push_back(
      "IMEX: /etc/nvidia-imex/nodes_config.cfg lists the VMs of one NVLink domain, known only when a job or cluster is "
      "placed: the cluster layer fills it (Azure's CycleCloud Slurm prolog writes it per job) and restarts "
      "nvidia-imex");
  return {};
}

// The InfiniBand stack: DOCA-OFED where it is pinned for the distro, else inbox rdma-core.
Result<std::string> Builder::ib_stack_steps() {
  std::string stack_step;
  const auto* doca = m_.find_component("doca-ofed");
  if (doca && doca->variant_for(distro_.id, {}, arch_)) {
    HPCBAKE_TRY_ASSIGN(auto r, resolve("doca-ofed"));
    auto arts = artifacts(r);
    std::vector<std::string> after = headers_;
    after.insert(after.end(), arts.begin(), arts.end());
    if (r.variant->repository) { // doca-host's packages from a signed repository instead of its .deb/.rpm
      HPCBAKE_TRY_ASSIGN(auto repo_step, repository_step(*r.variant->repository));
      after.push_back(repo_step);
    }
    PackagesStep st;
    st.component = "doca-ofed";
    st.version = r.variant->version;
    st.manager = distro_.package_manager;
    if (!r.variant->artifacts.empty()) st.files = {r.variant->artifacts.front().name};
    st.repository = r.variant->repository.value_or("");
    st.packages = r.variant->packages.empty() ? std::vector<std::string>{"doca-ofed"} : r.variant->packages;
    st.hold = r.recipe->hold;
    st.kernels = kernels();
    if (r.variant->repository) pin_step(st, *r.variant->repository, after);
    // DOCA's kernel packages on Debian and Ubuntu build their modules with DKMS (the DOCA-HOST
    // repository even ships its own dkms, which Azure/azhpc-images@0d4b898 components/install_doca.sh
    // pins away for the distro's): with the plan signing, hpcbake builds every DKMS module they add
    // with its key, as for the driver's packages. Which modules is known once they are unpacked.
    const bool sign_doca = plan_.signing.enabled && distro_.package_manager == manifest::PackageManager::apt;
    if (sign_doca) {
      st.dkms = PackagedModules{{}, st.version, {}, std::nullopt, true};
      if (!signing_step_.empty()) after.push_back(signing_step_);
    } else if (plan_.signing.enabled) {
      plan_.notes.push_back(fmt::format(
          "DOCA-OFED {} on {}: its kernel modules come as NVIDIA's packages (not DKMS builds hpcbake makes), so "
          "hpcbake's key does not sign them; they load under Secure Boot only if their signer is trusted",
          st.version, distro_.id));
    }
    stack_step = "driver:doca-ofed";
    doca_ = true;
    std::string title = r.variant->repository
                            ? fmt::format("install DOCA-OFED {} ({} from {}) for the target kernels", st.version,
                                          util::join(st.packages, " "), *r.variant->repository)
                            : fmt::format("install DOCA-OFED {} (doca-host repository, then {}) for the target kernels",
                                          st.version, util::join(st.packages, " "));
    if (sign_doca) title += ", its DKMS modules built and signed with hpcbake's key";
    add(stack_step, std::move(title), after, std::move(st));
  } else {
    stack_step = "packages:rdma-core";
    PackagesStep st;
    st.manager = distro_.package_manager;
    st.packages = distro_.rdma_packages;
    add(stack_step, "install the distribution's inbox rdma-core stack", {}, std::move(st));
    plan_.notes.push_back(fmt::format("DOCA-OFED is not pinned for {}: the inbox rdma-core stack is used", distro_.id));
  }
  return stack_step;
}

Status Builder::infiniband_steps(const std::string& stack_step, const std::string& driver_step,
                                 const std::string& driver_version) {
  const auto& ib = *size_.infiniband;
  // nvidia-peermem registers with the peer-memory API that only DOCA-OFED's (MLNX_OFED's)
  // ib_core exports; built against the inbox ib_core its init is a bare -EINVAL, so loading it
  // there would fail at every boot. It loads at the boot that follows DOCA-OFED's reboot.
  if (ib.gpudirect && !driver_step.empty() && !doca_) {
    plan_.notes.push_back(fmt::format("nvidia-peermem is not loaded on {}: it needs DOCA-OFED's peer-memory API in "
                                      "ib_core, and the inbox rdma-core stack has none (its module init fails with "
                                      "EINVAL there)",
                                      distro_.id));
  } else if (ib.gpudirect && !driver_step.empty() && plan_.route == SigningRoute::canonical_signed) {
    // Canonical builds its modules against the kernel's own ib_core, which DOCA-OFED replaces.
    plan_.notes.push_back("nvidia-peermem is not loaded: Canonical's precompiled modules are built against the "
                          "kernel's own ib_core, not DOCA-OFED's, whose peer-memory API it needs; for GPUDirect RDMA "
                          "use --driver-source repository (built with DKMS against DOCA's ib_core)");
  } else if (ib.gpudirect && !driver_step.empty()) {
    HPCBAKE_TRY_ASSIGN(auto r, resolve("nvidia-peermem"));
    if (auto b = manifest::driver_coupling(*r.component, *r.variant, driver_version, distro_.id))
      return fail(ErrorKind::manifest, b->message, b->hint);
    add("config:nvidia-peermem", "load nvidia-peermem at boot (GPUDirect RDMA)", {driver_step, stack_step},
        ModulesLoadStep{std::string(paths::kModulesLoadDir) + "/" + r.component->component + ".conf",
                        r.recipe->modules_load});
  }
  if (ib.ipoib) {
    const auto desired = waagent::desired_for(size_);
    WaagentStep st{distro_.waagent_config.empty() ? paths::kWaagentConf : distro_.waagent_config,
                   distro_.waagent_service,
                   desired.mode == waagent::RdmaMode::on,
                   {},
                   desired.why};
    for (const auto& s : waagent::rdma_settings(desired.mode))
      st.settings.emplace_back(s.key, s.rule == waagent::Rule::not_on ? s.value + " (only where it reads y)" : s.value);
    add("waagent:rdma", "enable RDMA in the Azure agent (OS.EnableRDMA=y)", {stack_step}, std::move(st));
  }
  return {};
}

// An out-of-tree module from source: fetch it, build and install it with DKMS for every
// target kernel, check each module per kernel, and reboot first when the component says so.
Status Builder::dkms_module_steps(const std::string& id) {
  HPCBAKE_TRY_ASSIGN(auto r, resolve(id));
  const auto& c = *r.component;
  if (!c.dkms || r.recipe->installer != manifest::Installer::dkms)
    return fail(ErrorKind::manifest, fmt::format("{}: '{}' is not a dkms-module component", c.file, id));
  if (r.variant->artifacts.empty())
    return fail(ErrorKind::manifest, fmt::format("{}: a dkms-module variant needs its source as an artifact", c.file));
  dkms_build_steps(c, *r.variant, "", artifacts(r));
  return {};
}

std::string Builder::dkms_build_steps(const manifest::ComponentManifest& c, const manifest::ComponentVariant& v,
                                      const std::string& source_dir, std::vector<std::string> after) {
  const auto& dk = *c.dkms;
  after.insert(after.begin(), headers_.begin(), headers_.end());
  if (!signing_step_.empty()) after.push_back(signing_step_);
  const std::string step = "driver:" + c.id;
  DkmsBuildStep st;
  st.component = c.id;
  st.version = v.version;
  st.source = source_dir.empty() ? v.artifacts.front().name : "";
  st.source_dir = source_dir;
  st.dkms_name = dk.name;
  st.subdir = dk.subdir;
  st.modules = dk.modules;
  st.directives = dk.directives;
  st.kernels = kernels();
  st.signing = plan_.signing;
  st.dkms_conf_template = m_.dkms_conf_template;
  std::string title = fmt::format("build {} {} with DKMS for the target kernels", dk.name, v.version);
  // Prebuilt modules are matched by their source's digest: an artifact has one; a checkout has none
  // that the build host and the node would agree on (its .git differs per clone), so it is built.
  if (prebuilt_ && source_dir.empty()) {
    st.prebuilt = prebuilt_use({st.dkms_name, st.version, st.source, st.modules, st.kernels, st.signing.enabled,
                                v.artifacts.front().sha256, false});
    if (auto t = prebuilt_title(*st.prebuilt, fmt::format("{} {}", dk.name, v.version)); !t.empty()) title = t;
  }
  add(step, title, after, std::move(st));
  std::vector<std::string> checks;
  dkms_checks(step, dk.name, v.version, dk.modules, &checks);
  if (dk.reboot) // one reboot at the end serves every reason (modules_reboot_step)
    module_reboots_.push_back(
        {c.id, dk.name, fmt::format("{} {} is built; the machine boots into it", dk.name, v.version)});
  return step;
}

// Whether the prebuilt modules fit each target kernel (driver::prebuilt_mismatch); install checks
// the files themselves again. A plan for another machine has no kernel yet: the target decides.
PrebuiltUse Builder::prebuilt_use(const PrebuiltOffer& st) {
  const auto& m = prebuilt_->manifest;
  PrebuiltUse use{prebuilt_->file, prebuilt_->sha256, m.kernel, {}};
  for (const auto& k : st.kernels) {
    std::string why;
    if (k == kernel_placeholder)
      why = fmt::format("decided on the target: used if its kernel is {}", m.kernel);
    else if (!st.source_sha256 && !st.after_unpack)
      why = fmt::format("the plan's source {} has no pinned SHA-256 to compare with the one they were built from",
                        st.source);
    else
      why = driver::prebuilt_mismatch(m, {k, plan_.arch, st.dkms_name, st.version, st.source_sha256.value_or(""),
                                          st.modules, st.signing, st.after_unpack});
    use.kernels.emplace_back(k, why);
    plan_.notes.push_back(why.empty() ? fmt::format("{} {} for {}: prebuilt modules from {} (nothing compiled)",
                                                    st.dkms_name, st.version, k, prebuilt_->file)
                                      : fmt::format("{} {} for {}: built with DKMS; the prebuilt modules in {} are "
                                                    "not used: {}",
                                                    st.dkms_name, st.version, k, prebuilt_->file, why));
  }
  return use;
}

std::string Builder::prebuilt_title(const PrebuiltUse& use, const std::string& what) {
  std::vector<std::string> used;
  for (const auto& [k, why] : use.kernels)
    if (why.empty()) used.push_back(k);
  if (used.empty()) return {};
  return fmt::format("install {} for {} from prebuilt modules (DKMS builds the rest)", what, util::join(used, ", "));
}

// Kernel modules that cannot be swapped live: DOCA-OFED replaces the InfiniBand modules the
// running kernel has loaded (nvidia-peermem loads only against DOCA's ib_core), a driver from
// packages is not loaded by its installer (a .run loads its own), and a module component may
// ask to boot into what it built. The machine reboots once, after everything is installed, for
// all of them, and the closing verify runs in the new boot.
void Builder::modules_reboot_step() {
  std::vector<std::string> why;
  if (doca_) why.emplace_back("DOCA-OFED replaced the InfiniBand kernel modules the running kernel has loaded");
  if (driver_from_packages_) why.emplace_back("the NVIDIA driver's packages build its modules but do not load them");
  for (const auto& r : module_reboots_)
    why.push_back(r.reason);
  if (why.empty()) return;
  std::vector<std::string> after;
  for (const auto& st : plan_.steps)
    after.push_back(st.id);
  if (why.size() == 1 && module_reboots_.size() == 1) { // a module component's own reboot, named after it
    const auto& r = module_reboots_.front();
    add("reboot:" + r.component, fmt::format("reboot so that the kernel loads {}", r.module), std::move(after),
        RebootStep{r.reason});
    return;
  }
  add("reboot:modules", "reboot so that the new kernel modules load", std::move(after),
      RebootStep{util::join(why, "; ")});
}

// --hold-kernel: the distro's kernel metapackages held once every module is built and checked
// for the target kernels, before any reboot; nothing to build, nothing to hold.
Status Builder::kernel_hold_step() {
  if (!hold_kernel_) return {};
  if (distro_.kernel_hold_packages.empty())
    return fail(ErrorKind::unsupported,
                fmt::format("{} names no kernel packages to hold (kernel_hold in {})", distro_.name, distro_.file),
                "bake without --hold-kernel, or add kernel_hold (packages and their source) to the distro manifest");
  std::vector<std::string> after;
  for (const auto& st : plan_.steps)
    if (st.as<DkmsCheckStep>() || st.as<DkmsBuildStep>() || st.as<RunInstallerStep>() || st.as<HeadersStep>() ||
        (st.as<PackagesStep>() && !st.as<PackagesStep>()->kernels.empty()))
      after.push_back(st.id);
  if (after.empty()) return {};
  const auto ks = kernels();
  const bool known = !(ks.size() == 1 && ks.front() == kernel_placeholder);
  add("kernel-hold",
      fmt::format("hold the kernel packages at {} (no update installs a kernel the modules are not built for)",
                  known ? util::join(ks, ", ") : "the kernel being baked"),
      std::move(after), KernelHoldStep{distro_.kernel_hold_packages, ks, distro_.kernel_hold_source});
  return {};
}

void Builder::verify_step() {
  std::vector<std::string> after;
  for (const auto& s : plan_.steps)
    after.push_back(s.id);
  VerifyStep v{verify_expectations(m_, size_, distro_, plan_), size_.source};
  v.defer_hardware = defer_hardware_;
  add("verify",
      v.defer_hardware
          ? fmt::format("check what is on disk; the hardware checks are deferred to the first boot on {}", size_.size)
          : std::string("smoke-test what the size promises"),
      after, std::move(v));
}

Result<const manifest::SizeManifest*> find_size(const manifest::Manifests& m, const PlanRequest& req) {
  const auto* size = m.find_size(req.size);
  if (!size) {
    std::vector<std::string> names;
    for (const auto& s : m.sizes)
      names.push_back(s.size);
    return fail(
        ErrorKind::unsupported,
        fmt::format("unknown VM size '{}'{}", util::excerpt(req.size), manifest::did_you_mean(req.size, names, true)),
        fmt::format("`hpcbake sizes` lists the {} sizes hpcbake knows (`hpcbake sizes H100` those with H100 "
                    "in the name)",
                    m.sizes.size()));
  }
  if (req.driver_kind) {
    if (!size->driver)
      return fail(ErrorKind::unsupported, fmt::format("--driver {}: {} has no GPU ({})",
                                                      manifest::to_string(*req.driver_kind), size->size, size->file));
    if (*req.driver_kind != size->driver->kind)
      return fail(ErrorKind::unsupported,
                  fmt::format("--driver {} is ruled out for {}: its manifest ({}) requires the {} driver",
                              manifest::to_string(*req.driver_kind), size->size, size->file,
                              manifest::to_string(size->driver->kind)),
                  fmt::format("drop --driver or pass --driver {}", manifest::to_string(size->driver->kind)));
  }
  return size;
}

bool builds_modules(const manifest::Manifests& m, const manifest::SizeManifest& size, const std::string& distro) {
  const auto* doca = m.find_component("doca-ofed");
  return (size.gpu && size.gpu->vendor == "nvidia") || !size.dkms_modules.empty() ||
         (size.infiniband && doca && doca->variant_for(distro, {}, size.arch));
}

// nouveau loaded now: reboot after the blacklist and the initramfs rebuilds, before the driver,
// whose installer refuses to run while nouveau holds the GPU.
void insert_nouveau_reboot(Plan& plan) {
  Step reboot{"reboot:nouveau",
              "reboot so that nouveau releases the GPU",
              {},
              RebootStep{"nouveau is loaded (/proc/modules); it is blacklisted and the initramfs rebuilt"}};
  for (const auto& st : plan.steps)
    if (st.id == "config:nouveau" || st.id.starts_with("initramfs:")) reboot.after.push_back(st.id);
  auto driver =
      std::find_if(plan.steps.begin(), plan.steps.end(), [](const Step& st) { return st.as<RunInstallerStep>(); });
  if (driver != plan.steps.end()) driver->after.push_back(reboot.id);
  for (auto& st : plan.steps)
    if (st.as<VerifyStep>()) st.after.push_back(reboot.id);
  plan.steps.insert(driver, std::move(reboot));
}

} // namespace

Result<void> check_kernel_release(const std::string& release) {
  const bool chars = std::all_of(release.begin(), release.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '_' || c == '+' || c == '~' || c == '-';
  });
  if (release.empty() || !chars || release == "." || release == "..")
    return fail(ErrorKind::usage, fmt::format("'{}' is not a kernel release", release),
                "pass the target's `uname -r` (e.g. --kernel 6.8.0-1030-azure); letters, digits and . _ + ~ - only");
  return {};
}

Result<Plan> make_plan(const manifest::Manifests& m, const PlanRequest& req) {
  HPCBAKE_TRY_ASSIGN(auto size, find_size(m, req));
  const auto* distro = m.find_distro_named(req.distro);
  if (!distro) {
    std::vector<std::string> ids;
    for (const auto& d : m.distros)
      ids.push_back(d.id);
    return fail(ErrorKind::unsupported,
                fmt::format("unsupported distro '{}'{}", req.distro, manifest::did_you_mean(req.distro, ids, false)),
                fmt::format("supported distros: {} (pass --distro ID-VERSION)", distro_list(m)));
  }
  Plan plan;
  plan.size = size->size;
  plan.size_id = size->id;
  plan.family = size->family;
  plan.distro_id = distro->id;
  plan.distro_name = distro->name;
  plan.package_manager = distro->package_manager;
  plan.platform_keyring = distro->module_keyrings.platform;
  for (const auto& o : m.overrides)
    plan.overrides.push_back({o.what(), o.value, o.overlay, o.line});
  const bool on_host = req.host && req.host->distro_id == distro->id;
  if (!req.kernels.empty()) {
    for (const auto& k : req.kernels)
      HPCBAKE_TRY(check_kernel_release(k));
    for (const auto& k : req.kernels)
      if (std::find(plan.kernels.begin(), plan.kernels.end(), k) == plan.kernels.end()) plan.kernels.push_back(k);
    plan.kernels_source = fmt::format("given: --kernel {}", util::join(plan.kernels, ", --kernel "));
  } else if (on_host) {
    plan.kernels = req.host->kernels.targets();
    const auto& k = req.host->kernels;
    plan.kernels_source = fmt::format("this host: running {}; next boot {}", k.running.empty() ? "unknown" : k.running,
                                      k.next_boot.empty() ? std::string("unknown (no installed kernel found)")
                                                          : k.next_boot + " by rule: " + k.next_boot_rule);
  } else {
    plan.kernels_source =
        "resolved on the target at install time: {kernel} stands for its running and next-boot kernels";
  }
  if (builds_modules(m, *size, distro->id)) {
    auto signing =
        driver::decide_signing(req.signing, on_host ? req.host->secure_boot.state : detect::SecureBoot::unknown,
                               on_host ? req.host->secure_boot.source : "not this host", on_host);
    if (!signing) return std::unexpected(signing.error());
    plan.signing = *signing;
    if (on_host && req.host->secure_boot.state == detect::SecureBoot::enabled)
      plan.notes.push_back("Secure Boot is enabled: kernel modules must be signed and the signing certificate "
                           "enrolled (MOK) or present in the image's UEFI db");
    if (!on_host && req.signing.mode == driver::SignMode::automatic && req.signing.key.empty())
      plan.notes.push_back(
          "module signing is decided on the target: the modules are signed when Secure Boot is on there");
  }
  if (!distro->serves(size->arch))
    return fail(ErrorKind::unsupported,
                fmt::format("{} runs on {} CPUs, and {} ({}) serves {} only", size->size,
                            manifest::to_string(size->arch), distro->id, distro->file, arch_list(distro->arches)),
                fmt::format("distros for {}: {}", manifest::to_string(size->arch), distros_for(m, size->arch)));
  if (on_host && !req.host->arch.empty() && req.host->arch != manifest::to_string(size->arch))
    return fail(ErrorKind::unsupported,
                fmt::format("{} runs on {} CPUs, and this host is {} ({}): the drivers, packages and kernel modules "
                            "for one architecture do not run on the other",
                            size->size, manifest::to_string(size->arch), req.host->arch, req.host->arch_source),
                fmt::format("run hpcbake on a {} VM of that size, or plan for another machine with --distro on a "
                            "host whose distro differs",
                            manifest::to_string(size->arch)));
  if (!req.profile.empty() && !m.profiles.empty() && !m.find_profile(req.profile)) {
    std::vector<std::string> ids;
    for (const auto& p : m.profiles)
      ids.push_back(p.id);
    return fail(ErrorKind::unsupported,
                fmt::format("unknown profile '{}'{}", req.profile, manifest::did_you_mean(req.profile, ids, false)),
                fmt::format("profiles: {} (manifests/profiles/)", util::join(ids, ", ")));
  }
  plan.profile = m.find_profile(req.profile) ? req.profile : std::string();
  plan.arch = manifest::to_string(size->arch);
  if (size->gpu && size->gpu->vendor == "amd")
    plan.notes.push_back(fmt::format("{} has AMD {} GPUs: their driver (ROCm) is out of hpcbake's scope; this plan "
                                     "installs the InfiniBand stack and the agent's RDMA settings only. Use AMD's "
                                     "ROCm installer for the GPUs",
                                     size->size, size->gpu->model));
  Builder builder(m, *size, *distro, plan, req);
  HPCBAKE_TRY(builder.build());
  // Canonical's driver alone: nothing this plan installs needs a key, so none is asked for.
  if (plan.route == SigningRoute::canonical_signed && !plan.find("signing-key") && !plan.find("packages:build"))
    for (auto& note : plan.notes)
      if (note.starts_with("Secure Boot is enabled: kernel modules must be signed"))
        note = "Secure Boot is enabled: the NVIDIA driver's modules come signed by Canonical, and this plan builds "
               "no other module, so there is no key to enrol";
  if (on_host && size->gpu && req.host->modules.nouveau_loaded) {
    plan.notes.push_back("nouveau is loaded now: a reboot is required after it is blacklisted");
    insert_nouveau_reboot(plan);
  }
  return plan;
}

} // namespace hpcbake::plan
