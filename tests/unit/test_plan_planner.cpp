// Planner rules beyond what the golden files pin: selection, refusals, host facts.
#include "install/engine.hpp"
#include "manifest/catalog.hpp"
#include "plan/plan.hpp"

#include "helpers.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>

using namespace hpcbake;

namespace {
const manifest::Manifests& shipped() {
  return test::shipped_manifests();
}

const plan::Step* find(const plan::Plan& p, const std::string& id) {
  for (const auto& s : p.steps)
    if (s.id == id) return &s;
  return nullptr;
}

Result<plan::Plan> make(const std::string& size, const std::string& distro, const detect::HostFacts* host = nullptr) {
  plan::PlanRequest r;
  r.size = size;
  r.distro = distro;
  r.host = host;
  return plan::make_plan(shipped(), r);
}
} // namespace

TEST_CASE("size names in every spelling Azure uses, distros in any case, never a prefix") {
  for (const char* spelling :
       {"standard_nd96isr_h100_v5", "Standard_ND96isr_H100_v5", "ND96isr_H100_v5", "nd96isr_h100_v5"}) {
    auto p = make(spelling, "Ubuntu-22.04");
    REQUIRE_MESSAGE(p.has_value(), spelling);
    CHECK(p->size == "Standard_ND96isr_H100_v5");
    CHECK(p->distro_id == "ubuntu-22.04");
  }
  auto p = make("Standard_ND96isr_H100", "ubuntu-22.04");
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().kind == ErrorKind::unsupported);
  CHECK(p.error().message.find("did you mean Standard_ND96isr_H100_v5") != std::string::npos);
  CHECK(p.error().hint.find("hpcbake sizes") != std::string::npos);
  auto d = make("Standard_HB120rs_v3", "almalinux-9.4");
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().message.find("did you mean almalinux-9") != std::string::npos);
}

TEST_CASE("catalog: size keys, suggestions a typo away, and the size filter") {
  CHECK(manifest::size_key("Standard_ND96isr_H100_v5") == "nd96isr_h100_v5");
  CHECK(manifest::size_key("ND96ISR_H100_V5") == "nd96isr_h100_v5");
  const std::vector<std::string> names = {"Standard_HB120rs_v3", "Standard_HB120rs_v2", "Standard_NC4as_T4_v3"};
  CHECK(manifest::closest("hb120rs_v4", names, true) ==
        std::vector<std::string>{"Standard_HB120rs_v3", "Standard_HB120rs_v2"});
  CHECK(manifest::closest("Standard_ZZ1", names, true).empty());
  CHECK(manifest::closest("debain-12", {"debian-12", "rhel-9"}, false) == std::vector<std::string>{"debian-12"});
  const auto& m = shipped();
  const auto h100 = manifest::select_sizes(m, {"H100", "", false});
  REQUIRE_FALSE(h100.empty());
  for (const auto* s : h100)
    CHECK(s->size.find("H100") != std::string::npos);
  const auto cpu = manifest::select_sizes(m, {"", "none", true});
  REQUIRE_FALSE(cpu.empty());
  for (const auto* s : cpu) {
    CHECK_FALSE(s->gpu.has_value());
    CHECK(s->infiniband.has_value());
  }
  CHECK(manifest::select_sizes(m, {"", "a10", false}).size() >= 1);
}

// Issue 40, item 15: NV36ads_A10_v5 got GRID 595.58.03 (vGPU 20), the newest pinned, because its
// manifest stated only a minimum branch; Azure publishes vGPU 17 to 18 for NVadsA10 v5, and a
// guest driver newer than the host's vGPU manager does not load.
TEST_CASE("GRID branch per size: NVadsA10 v5 never gets 595.58.03, and no verifiable build in 17..18 is an error") {
  for (const char* distro : {"ubuntu-22.04", "ubuntu-24.04", "rhel-8.10", "almalinux-8.10", "rocky-8.10"}) {
    CAPTURE(distro);
    auto a10 = make("Standard_NV36ads_A10_v5", distro);
    REQUIRE_FALSE(a10.has_value());
    const auto& e = a10.error();
    CHECK(e.kind == ErrorKind::unsupported);
    CHECK(e.message.find("595.58.03") == std::string::npos);
    CHECK(e.message.find("needs a GRID driver in branch 17..18") != std::string::npos);
    CHECK(e.message.find("570.195.03 (vGPU 18)") != std::string::npos);
    CHECK(e.message.find("no published SHA-256") != std::string::npos);
    // The range's source, so the reader can check it.
    CHECK(e.message.find("NVadsA10 v5: Azure publishes GRID (vGPU) branch 17..18") != std::string::npos);
    CHECK(e.message.find("virtual-machines-n-series-linux-support.md") != std::string::npos);
    CHECK(e.message.find("sizes/nv36ads_a10_v5.yaml") != std::string::npos);
  }
}

TEST_CASE("GRID branch per size family: NCv6 gets vGPU 20 and says why, M60 is refused with why") {
  auto ncv6 = make("Standard_NC24lds_xl_RTXPRO6000BSE_v6", "ubuntu-24.04");
  REQUIRE_MESSAGE(ncv6.has_value(), (ncv6 ? "" : ncv6.error().message));
  const auto* drv = find(*ncv6, "driver:nvidia-grid-driver");
  REQUIRE(drv);
  CHECK(drv->detail()["version"] == "595.58.03");
  const auto note = std::find_if(ncv6->notes.begin(), ncv6->notes.end(), [](const std::string& n) {
    return n.starts_with("NC RTX PRO 6000 BSE v6: Azure publishes GRID (vGPU) branch 20 for this size (");
  });
  REQUIRE(note != ncv6->notes.end());
  CHECK(note->find("v20.x (R595)") != std::string::npos);
  CHECK(note->find("595.58.03 (vGPU 20) is the newest pinned GRID driver within it") != std::string::npos);
  CHECK(note->find("outside it: 570.195.03 (vGPU 18), 550.144.06 (vGPU 17)") != std::string::npos);
  // M60 (NVv3, 16 or lower): its only build, 535.161.08, has no published checksum.
  auto m60 = make("Standard_NV12s_v3", "ubuntu-22.04");
  REQUIRE_FALSE(m60.has_value());
  CHECK(m60.error().kind == ErrorKind::unsupported);
  CHECK(m60.error().message.find("branch ..16") != std::string::npos);
  CHECK(m60.error().message.find("535.161.08") != std::string::npos);
  CHECK(m60.error().message.find("no published SHA-256") != std::string::npos);
  CHECK(m60.error().message.find("only support **vGPU 16 or lower**") != std::string::npos);
  // No build of the range pinned for the distro at all: the error lists what is pinned there.
  auto none = make("Standard_NV12s_v3", "ubuntu-24.04");
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().kind == ErrorKind::unsupported);
  CHECK(none.error().message.find("pins none for ubuntu-24.04 (pinned there: 595.58.03 (vGPU 20), 570.195.03 "
                                  "(vGPU 18), 550.144.06 (vGPU 17))") != std::string::npos);
  CHECK(none.error().message.find("NVv3: Azure publishes GRID (vGPU) branch ..16") != std::string::npos);
}

TEST_CASE("GRID choice: the newest installable build within the range, skipping a newer unverifiable one") {
  auto m = shipped(); // a copy: 550.144.06 (vGPU 17) made verifiable
  for (auto& c : m.components) {
    if (c.component != "nvidia-grid-driver") continue;
    const auto v595 =
        std::find_if(c.variants.begin(), c.variants.end(), [](const auto& v) { return v.version == "595.58.03"; });
    REQUIRE(v595 != c.variants.end());
    for (auto& v : c.variants)
      if (v.version == "550.144.06") {
        v.refused.reset();
        v.artifacts = v595->artifacts;
        v.artifacts.front().name = "NVIDIA-Linux-x86_64-550.144.06-grid-azure.run";
      }
  }
  plan::PlanRequest r;
  r.size = "Standard_NV36ads_A10_v5";
  r.distro = "ubuntu-22.04";
  auto p = plan::make_plan(m, r);
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  CHECK(find(*p, "driver:nvidia-grid-driver")->detail()["version"] == "550.144.06");
  const auto note = std::find_if(p->notes.begin(), p->notes.end(),
                                 [](const std::string& n) { return n.starts_with("NVadsA10 v5: Azure publishes"); });
  REQUIRE(note != p->notes.end());
  CHECK(note->find("550.144.06 (vGPU 17) is the newest pinned GRID driver within it") != std::string::npos);
  CHECK(note->find("570.195.03 (vGPU 18) is newer but cannot be installed verifiably") != std::string::npos);
  CHECK(note->find("outside it: 595.58.03 (vGPU 20)") != std::string::npos);
}

TEST_CASE("NVSwitch sizes get Fabric Manager at exactly the driver version, NC A100 v4 does not") {
  auto nd = make("Standard_ND96amsr_A100_v4", "almalinux-8.10");
  REQUIRE(nd.has_value());
  const auto* fm = find(*nd, "packages:nvidia-fabricmanager");
  REQUIRE(fm);
  CHECK(fm->detail()["version"] == find(*nd, "driver:nvidia-cuda-driver")->detail()["version"]);
  CHECK(fm->detail()["hold"] == true);
  auto nc = make("Standard_NC24ads_A100_v4", "almalinux-8.10");
  REQUIRE(nc.has_value());
  CHECK(find(*nc, "packages:nvidia-fabricmanager") == nullptr);
  CHECK(find(*nc, "waagent:rdma") == nullptr);
}

TEST_CASE("every artifact in every plan carries a URL and a SHA-256, every repository a pinned key") {
  for (const auto& size : shipped().sizes)
    for (const auto& distro : shipped().distros) {
      auto p = make(size.size, distro.id);
      if (!p) {
        CHECK(p.error().kind == ErrorKind::unsupported);
        continue;
      }
      for (const auto& s : p->steps) {
        const auto* a = s.as<plan::ArtifactStep>();
        if (!a) continue;
        CAPTURE(s.id);
        CHECK_FALSE(a->urls.empty());
        CHECK(a->sha256.has_value());
      }
      for (const auto& s : p->steps)
        if (const auto* r = s.as<plan::RepositoryStep>()) {
          CHECK(r->fingerprint.size() == 40);
          CHECK_FALSE(r->key_urls.empty());
          if (r->manager == manifest::PackageManager::apt) {
            CHECK(r->source.find("Signed-By: " + r->key_path) != std::string::npos);
          } else {
            CHECK(r->source.find("gpgcheck=1\n") != std::string::npos);
            CHECK(r->source.find("gpgkey=file://" + r->key_path) != std::string::npos);
          }
        }
      CHECK(p->steps.back().as<plan::VerifyStep>() != nullptr);
    }
}

TEST_CASE("Secure Boot unknown or on here: the repository's driver is built and signed with hpcbake's key as well") {
  detect::HostFacts host;
  host.distro_id = "ubuntu-22.04";
  host.kernels.running = "6.8.0-1012-azure";
  host.kernels.next_boot = "6.8.0-1015-azure";
  host.kernels.next_boot_rule = "test";
  host.secure_boot.state = detect::SecureBoot::unknown; // UEFI, efivarfs not mounted
  host.secure_boot.source = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c (unreadable)";
  auto p = make("Standard_ND96isr_H100_v5", "ubuntu-22.04", &host);
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  CHECK(p->signing.enabled);
  CHECK(p->signing.precaution);
  CHECK(p->signing.why.find("unknown") != std::string::npos);
  // hpcbake builds the CUDA repository's DKMS modules with its key, and checks their signer.
  const auto* check = p->find("dkms:nvidia:6.8.0-1015-azure");
  REQUIRE(check);
  CHECK(check->as<plan::DkmsCheckStep>()->check_signer);
  CHECK(p->find("driver:nvidia-cuda-driver")->as<plan::PackagesStep>()->dkms->sign);
  // With Secure Boot known to be on, the same.
  host.secure_boot.state = detect::SecureBoot::enabled;
  auto on = make("Standard_ND96isr_H100_v5", "ubuntu-22.04", &host);
  REQUIRE_MESSAGE(on.has_value(), (on ? "" : on.error().message));
  CHECK(on->find("dkms:nvidia:6.8.0-1015-azure")->as<plan::DkmsCheckStep>()->check_signer);
}

TEST_CASE("planning for this host uses its running and next-boot kernels and its Secure Boot state") {
  detect::HostFacts host;
  host.distro_id = "almalinux-9"; // its driver is a .run, which hpcbake signs under Secure Boot
  host.kernels.running = "6.8.0-1012-azure";
  host.kernels.next_boot = "6.8.0-1015-azure";
  host.kernels.next_boot_rule = "test";
  host.secure_boot.state = detect::SecureBoot::enabled;
  host.modules.nouveau_loaded = true;
  auto p = make("Standard_NC4as_T4_v3", "almalinux-9", &host);
  REQUIRE(p.has_value());
  CHECK(p->kernels == std::vector<std::string>{"6.8.0-1012-azure", "6.8.0-1015-azure"});
  CHECK(find(*p, "dkms:nvidia:6.8.0-1012-azure"));
  CHECK(find(*p, "dkms:nvidia:6.8.0-1015-azure"));
  CHECK(find(*p, "kernel-headers:6.8.0-1015-azure")->detail()["package"] == "kernel-devel-6.8.0-1015-azure");
  auto has_note = [&](const char* s) {
    return std::any_of(p->notes.begin(), p->notes.end(), [&](const auto& n) { return n.find(s) != std::string::npos; });
  };
  CHECK(has_note("Secure Boot is enabled"));
  CHECK(has_note("nouveau is loaded"));
}

TEST_CASE("--driver that contradicts the size is unsupported, AMD sizes plan their InfiniBand part") {
  plan::PlanRequest r;
  r.size = "Standard_NV36ads_A10_v5";
  r.distro = "ubuntu-22.04";
  r.driver_kind = hpcbake::manifest::DriverKind::cuda;
  auto p = plan::make_plan(shipped(), r);
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().message.find("ruled out") != std::string::npos);
  auto amd = make("Standard_ND96isr_MI300X_v5", "ubuntu-22.04");
  REQUIRE(amd.has_value());
  CHECK(amd->find("driver:doca-ofed") != nullptr);
  CHECK(amd->find("waagent:rdma") != nullptr);
  for (const auto& st : amd->steps) {
    CHECK_FALSE(st.as<plan::RunInstallerStep>());
    CHECK(st.id.find("nvidia") == std::string::npos);
  }
  CHECK(std::any_of(amd->notes.begin(), amd->notes.end(),
                    [](const std::string& n) { return n.find("out of hpcbake's scope") != std::string::npos; }));
  auto distro = make("Standard_HB120rs_v3", "centos-7");
  REQUIRE_FALSE(distro.has_value());
  CHECK(distro.error().hint.find("debian-12") != std::string::npos);
}

TEST_CASE("the plan carries the installer's argv from the recipe, with signing, for every target kernel") {
  detect::HostFacts host;
  host.distro_id = "almalinux-9";
  host.kernels.running = "6.5.0-1025-azure";
  host.kernels.next_boot = "6.8.0-1015-azure";
  host.secure_boot.state = detect::SecureBoot::enabled;
  host.secure_boot.source = "test";
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "almalinux-9";
  r.host = &host;
  r.signing.key_dir = "/var/lib/hpcbake/signing";
  auto p = plan::make_plan(shipped(), r);
  REQUIRE(p.has_value());
  CHECK(p->signing.enabled);
  REQUIRE(find(*p, "signing-key"));
  const auto* drv = find(*p, "driver:nvidia-cuda-driver")->as<plan::RunInstallerStep>();
  REQUIRE(drv);
  REQUIRE(drv->commands.size() == 2);
  const auto& argv = drv->commands[1].second;
  CHECK(argv[0] == "sh");
  CHECK(argv[1] == plan::artifact_ref("NVIDIA-Linux-x86_64-580.126.20.run"));
  for (const char* want : {"--no-x-check", "--disable-nouveau", "-m=kernel-open", "--kernel-name=6.8.0-1015-azure",
                           "--module-signing-secret-key=/var/lib/hpcbake/signing/signing.key",
                           "--module-signing-public-key=/var/lib/hpcbake/signing/signing.der"})
    CHECK_MESSAGE(std::find(argv.begin(), argv.end(), want) != argv.end(), want);
  // One module list (the recipe's), the persistenced unit from the recipe, peermem from modules-load.
  CHECK(find(*p, "dkms:nvidia:6.8.0-1015-azure")->as<plan::DkmsCheckStep>()->modules ==
        shipped().find_recipe(hpcbake::manifest::ComponentKind::nvidia_driver)->modules);
  CHECK(find(*p, "service:nvidia-persistenced"));
  CHECK(find(*p, "config:nvidia-peermem")->as<plan::ModulesLoadStep>()->modules ==
        std::vector<std::string>{"nvidia-peermem"});
  const auto* wa = find(*p, "waagent:rdma")->as<plan::WaagentStep>();
  REQUIRE(wa);
  CHECK(wa->settings.size() == 2);
  CHECK(wa->unit == "waagent");
  // Signing off while Secure Boot is on is refused by the one policy.
  r.signing.mode = driver::SignMode::off;
  auto off = plan::make_plan(shipped(), r);
  REQUIRE_FALSE(off.has_value());
  CHECK(off.error().message.find("Secure Boot is enabled") != std::string::npos);
}

TEST_CASE("a recipe edit changes the digest of the step that uses it and of its dependents, nothing else") {
  const auto dir = test::scratch("recipe-digest");
  std::filesystem::copy(test::source_dir() / "manifests", dir / "manifests", std::filesystem::copy_options::recursive);
  std::filesystem::copy(test::source_dir() / "drivers", dir / "drivers", std::filesystem::copy_options::recursive);
  auto plan_with = [&]() {
    auto m = manifest::load_manifests(dir / "manifests");
    REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
    plan::PlanRequest r;
    r.size = "Standard_ND96isr_H100_v5";
    r.distro = "almalinux-9";
    auto p = plan::make_plan(*m, r);
    REQUIRE(p.has_value());
    return *p;
  };
  const auto before = install::step_digests(plan_with());
  auto text = test::read(dir / "drivers/nvidia-driver.yaml");
  const auto at = text.find("--no-x-check");
  REQUIRE(at != std::string::npos);
  text.replace(at, 12, "--no-x-check, --no-cc-version-check");
  test::write(dir / "drivers/nvidia-driver.yaml", text);
  const auto p = plan_with();
  const auto after = install::step_digests(p);
  std::set<std::string> changed;
  for (const auto& [id, d] : after)
    if (before.at(id) != d) changed.insert(id);
  CHECK(changed.count("driver:nvidia-cuda-driver") == 1);
  CHECK(changed.count("verify") == 1);         // downstream of everything
  CHECK(changed.count("packages:build") == 0); // upstream: untouched
  CHECK(changed.count("config:nouveau") == 0);
  CHECK(changed.count("driver:doca-ofed") == 0); // independent of the driver
  for (const auto& id : changed) {
    CAPTURE(id);
    const auto* s = p.find(id);
    // every changed step is the driver or depends on it, directly or through another
    bool downstream = id == "driver:nvidia-cuda-driver";
    std::vector<std::string> todo = s->after;
    while (!downstream && !todo.empty()) {
      const auto cur = todo.back();
      todo.pop_back();
      if (cur == "driver:nvidia-cuda-driver")
        downstream = true;
      else if (const auto* d = p.find(cur))
        todo.insert(todo.end(), d->after.begin(), d->after.end());
    }
    CHECK(downstream);
  }
}

namespace {
bool depends_on(const plan::Plan& p, const std::string& id, const std::string& on) {
  const auto* s = find(p, id);
  if (!s) return false;
  for (const auto& a : s->after)
    if (a == on || depends_on(p, a, on)) return true;
  return false;
}
} // namespace

TEST_CASE("flagship ND H100 v5 on Ubuntu 22.04: signed CUDA repository, DOCA before the driver, no --sha256") {
  auto p = make("Standard_ND96isr_H100_v5", "ubuntu-22.04");
  REQUIRE(p.has_value());
  for (const auto& a : p->artifacts)
    CHECK_MESSAGE(a.artifact.sha256.has_value(), a.artifact.name);
  const auto* repo = find(*p, "repository:nvidia-cuda");
  REQUIRE(repo);
  const auto* r = repo->as<plan::RepositoryStep>();
  CHECK(r->fingerprint == "EB693B3035CD5710E231E123A4B469963BF863CC");
  CHECK(r->key_path == "/usr/share/keyrings/hpcbake-nvidia-cuda.gpg");
  CHECK(r->source_path == "/etc/apt/sources.list.d/hpcbake-nvidia-cuda.sources");
  CHECK(r->source.find("URIs: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/\n") !=
        std::string::npos);
  CHECK(r->source.find("Suites: /\n") != std::string::npos);
  CHECK(r->source.find("Components:") == std::string::npos); // a flat repository
  const auto* drv = find(*p, "driver:nvidia-cuda-driver")->as<plan::PackagesStep>();
  REQUIRE(drv);
  CHECK(drv->packages == std::vector<std::string>{"nvidia-open"});
  // The version pin goes in first, in its own apt transaction (apt reads preferences at start).
  const auto* pin = find(*p, "packages:nvidia-cuda-driver-version")->as<plan::PackagesStep>();
  REQUIRE(pin);
  CHECK(pin->packages == std::vector<std::string>{"nvidia-driver-pinning-580.126.16"});
  CHECK(depends_on(*p, "driver:nvidia-cuda-driver", "packages:nvidia-cuda-driver-version"));
  CHECK(plan::refreshes_index(*drv));
  CHECK(drv->hold);
  CHECK(depends_on(*p, "driver:nvidia-cuda-driver", "repository:nvidia-cuda"));
  CHECK(depends_on(*p, "driver:nvidia-cuda-driver", "driver:doca-ofed"));
  CHECK(depends_on(*p, "packages:nvidia-fabricmanager", "repository:nvidia-cuda"));
  CHECK(depends_on(*p, "packages:nvidia-fabricmanager", "driver:nvidia-cuda-driver"));
  CHECK(depends_on(*p, "config:nvidia-peermem", "driver:doca-ofed"));
  CHECK(find(*p, "service:nvidia-persistenced")->as<plan::ServiceStep>()->argv ==
        std::vector<std::string>{"systemctl", "enable", "nvidia-persistenced.service"});
  // Nothing loads the packaged driver or DOCA's modules live: one reboot, then the closing verify.
  CHECK(find(*p, "service:nvidia-fabricmanager")->as<plan::ServiceStep>()->argv ==
        std::vector<std::string>{"systemctl", "enable", "nvidia-fabricmanager.service"});
  REQUIRE(find(*p, "reboot:modules"));
  CHECK(find(*p, "reboot:modules")->as<plan::RebootStep>()->reason.find("DOCA-OFED") != std::string::npos);
  CHECK(depends_on(*p, "reboot:modules", "config:nvidia-peermem"));
  CHECK(depends_on(*p, "reboot:modules", "service:nvidia-fabricmanager"));
  CHECK(depends_on(*p, "verify", "reboot:modules"));
  // Secure Boot on, a size with GPUDirect RDMA: the repository's DKMS modules are built by hpcbake
  // with its key (Canonical's precompiled modules have no nvidia-peermem for DOCA's ib_core).
  detect::HostFacts host;
  host.distro_id = "ubuntu-22.04";
  host.kernels.running = "6.8.0-1015-azure";
  host.secure_boot.state = detect::SecureBoot::enabled;
  auto sb = make("Standard_ND96isr_H100_v5", "ubuntu-22.04", &host);
  REQUIRE_MESSAGE(sb.has_value(), (sb ? "" : sb.error().message));
  CHECK(sb->find("driver:nvidia-cuda-driver")->as<plan::PackagesStep>()->dkms->sign);
  CHECK(sb->route == plan::SigningRoute::hpcbake_key);
}

TEST_CASE("a .run driver gets the persistenced unit the installer does not ship, enabled after it") {
  auto p = make("Standard_ND96isr_H100_v5", "almalinux-9");
  REQUIRE(p.has_value());
  const auto* unit = find(*p, "config:nvidia-persistenced.service");
  REQUIRE(unit);
  CHECK(unit->as<plan::ConfigStep>()->path == "/etc/systemd/system/nvidia-persistenced.service");
  CHECK(unit->as<plan::ConfigStep>()->content.find("ExecStart=/usr/bin/nvidia-persistenced") != std::string::npos);
  CHECK(depends_on(*p, "service:nvidia-persistenced", "config:nvidia-persistenced.service"));
  CHECK(depends_on(*p, "driver:nvidia-cuda-driver", "driver:doca-ofed"));
  // EL: the driver is the pinned .run, Fabric Manager the pinned rpm (dnf resolves its
  // dependencies), and dkms comes from EPEL, trusted before the build packages.
  CHECK(find(*p, "packages:nvidia-fabricmanager")->as<plan::PackagesStep>()->files ==
        std::vector<std::string>{"nvidia-fabricmanager-580.126.20-1.x86_64.rpm"});
  CHECK(find(*p, "repository:nvidia-cuda") == nullptr);
  CHECK(depends_on(*p, "packages:build", "repository:epel"));
  CHECK(plan::refreshes_index(*find(*p, "packages:build")->as<plan::PackagesStep>()));
  // The .run loads its driver, so Fabric Manager starts now; DOCA's modules still need the reboot.
  CHECK(find(*p, "service:nvidia-fabricmanager")->as<plan::ServiceStep>()->argv.at(2) == "--now");
  REQUIRE(find(*p, "reboot:modules"));
  CHECK(find(*p, "reboot:modules")->as<plan::RebootStep>()->reason.find("NVIDIA") == std::string::npos);
  // Without DOCA and with a .run, nothing needs the reboot.
  auto nc = make("Standard_NC24ads_A100_v4", "almalinux-9");
  REQUIRE(nc.has_value());
  CHECK(find(*nc, "reboot:modules") == nullptr);
}

TEST_CASE("DCGM where versions.json pins it (Ubuntu), held, after the driver, with the CUDA 12 packages for V100") {
  auto nd = make("Standard_ND96isr_H100_v5", "ubuntu-22.04");
  REQUIRE(nd.has_value());
  const auto* dcgm = find(*nd, "packages:nvidia-dcgm");
  REQUIRE(dcgm);
  const auto* p = dcgm->as<plan::PackagesStep>();
  CHECK(p->hold);
  CHECK(plan::refreshes_index(*p));
  CHECK(p->packages.front() == "datacenter-gpu-manager-4-cuda13=1:4.5.2-1");
  CHECK(depends_on(*nd, "packages:nvidia-dcgm", "driver:nvidia-cuda-driver"));
  CHECK(depends_on(*nd, "packages:nvidia-dcgm", "repository:nvidia-cuda"));
  // The packaged driver loads at the next boot: DCGM starts then, not now.
  CHECK(find(*nd, "service:nvidia-dcgm")->as<plan::ServiceStep>()->argv.size() == 3);
  auto v100 = make("Standard_NC24s_v3", "ubuntu-24.04");
  REQUIRE(v100.has_value());
  CHECK(find(*v100, "packages:nvidia-dcgm")->as<plan::PackagesStep>()->packages.front() ==
        "datacenter-gpu-manager-4-cuda12=1:4.6.0-1");
  auto el = make("Standard_ND96isr_H100_v5", "almalinux-9");
  REQUIRE(el.has_value());
  CHECK(find(*el, "packages:nvidia-dcgm") == nullptr);
  bool noted = false;
  for (const auto& n : el->notes)
    noted = noted || n.find("DCGM is not pinned for almalinux-9") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("nvidia-peermem only with DOCA-OFED, whose ib_core has the peer-memory API it needs") {
  auto deb = make("Standard_ND96isr_H100_v5", "debian-12"); // inbox rdma-core: its init would be -EINVAL
  REQUIRE(deb.has_value());
  CHECK(find(*deb, "config:nvidia-peermem") == nullptr);
  for (const auto& s : deb->steps) {
    const auto* c = s.as<plan::CommandStep>();
    CHECK_FALSE((c && c->purpose == "modprobe"));
  }
  bool noted = false;
  for (const auto& n : deb->notes)
    noted = noted || n.find("nvidia-peermem is not loaded on debian-12") != std::string::npos;
  CHECK(noted);
  CHECK_FALSE(find(*deb, "verify")->as<plan::VerifyStep>()->expect.peermem);
  for (const char* distro : {"ubuntu-22.04", "almalinux-9"}) { // DOCA-OFED: loaded at the boot after its reboot
    auto p = make("Standard_ND96isr_H100_v5", distro);
    REQUIRE(p.has_value());
    CHECK(depends_on(*p, "config:nvidia-peermem", "driver:doca-ofed"));
    CHECK(depends_on(*p, "reboot:modules", "config:nvidia-peermem"));
    CHECK(find(*p, "verify")->as<plan::VerifyStep>()->expect.peermem);
  }
}

TEST_CASE("offline: a bundle install needs every repository on the machine's disk, its key too") {
  plan::Plan p;
  p.size = "Standard_X";
  p.distro_id = "debian-12";
  CHECK(plan::offline_installable(p).has_value());
  plan::RepositoryStep r;
  r.repository = "mirror";
  r.uri = "file:///srv/mirror/";
  r.key_urls = {"https://example.invalid/key.asc", "file:///srv/mirror/key.asc"};
  p.steps.push_back(plan::Step{"repository:mirror", "t", {}, r});
  CHECK(plan::offline_installable(p).has_value());
  p.steps.back().action = [&] {
    auto k = r;
    k.key_urls = {"https://example.invalid/key.asc"};
    return plan::Action(k);
  }();
  auto no_key = plan::offline_installable(p);
  REQUIRE_FALSE(no_key.has_value());
  CHECK(no_key.error().message.find("mirror (its key, https://example.invalid/key.asc)") != std::string::npos);
  r.uri = "https://example.invalid/repo/";
  p.steps.back().action = r;
  auto net = plan::offline_installable(p);
  REQUIRE_FALSE(net.has_value());
  CHECK(net.error().kind == ErrorKind::unsupported);
  CHECK(net.error().message.find("mirror (https://example.invalid/repo/)") != std::string::npos);
}

TEST_CASE("an Arm64 size: planned for another machine, refused on an x86_64 host and on an x86_64-only distro") {
  auto p = make("Standard_ND128isr_NDR_GB200_v6", "ubuntu-24.04");
  REQUIRE(p.has_value());
  CHECK(p->arch == "aarch64");
  CHECK(p->find("packages:nvidia-imex") != nullptr);
  CHECK(p->find("packages:nvidia-fabricmanager") == nullptr);
  const auto* repo = p->find("repository:nvidia-cuda")->as<plan::RepositoryStep>();
  CHECK(repo->uri.find("/ubuntu2404/sbsa/") != std::string::npos);
  detect::HostFacts host;
  host.distro_id = "ubuntu-24.04";
  host.arch = "x86_64";
  host.arch_source = "/proc/sys/kernel/arch";
  auto on_x86 = make("Standard_ND128isr_NDR_GB200_v6", "ubuntu-24.04", &host);
  REQUIRE_FALSE(on_x86.has_value());
  CHECK(on_x86.error().kind == ErrorKind::unsupported);
  CHECK(on_x86.error().message.find("this host is x86_64") != std::string::npos);
  host.arch = "aarch64";
  CHECK(make("Standard_ND128isr_NDR_GB200_v6", "ubuntu-24.04", &host).has_value());
  auto x86_only = make("Standard_ND128isr_NDR_GB200_v6", "ubuntu-22.04");
  REQUIRE_FALSE(x86_only.has_value());
  CHECK(x86_only.error().hint == "distros for aarch64: ubuntu-24.04");
}

TEST_CASE("--hold-kernel: the distro's kernel packages held after every module is built, before the reboot") {
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "ubuntu-22.04";
  CHECK(find(*plan::make_plan(shipped(), r), "kernel-hold") == nullptr); // opt-in
  r.hold_kernel = true;
  auto p = plan::make_plan(shipped(), r);
  REQUIRE(p.has_value());
  const auto* hold = find(*p, "kernel-hold");
  REQUIRE(hold);
  const auto* h = hold->as<plan::KernelHoldStep>();
  REQUIRE(h);
  CHECK(h->packages == std::vector<std::string>{"linux-azure", "linux-image-azure"});
  CHECK(h->source.find("azhpc-images") != std::string::npos);
  // After each step that builds or installs kernel modules, and the reboot after it.
  for (const auto& s : p->steps) {
    const bool builds = s.as<plan::DkmsCheckStep>() || s.as<plan::RunInstallerStep>() || s.as<plan::DkmsBuildStep>() ||
                        (s.as<plan::PackagesStep>() && !s.as<plan::PackagesStep>()->kernels.empty());
    if (builds) CHECK(std::find(hold->after.begin(), hold->after.end(), s.id) != hold->after.end());
    if (s.as<plan::RebootStep>()) CHECK(std::find(s.after.begin(), s.after.end(), "kernel-hold") != s.after.end());
  }
  // Every distro manifest names what it holds, with a source.
  for (const auto& d : shipped().distros) {
    CHECK_MESSAGE(!d.kernel_hold_packages.empty(), d.id);
    CHECK_MESSAGE(!d.kernel_hold_source.empty(), d.id);
  }
  // A CPU size: DOCA-OFED's modules are what the hold protects.
  r.size = "Standard_HC44rs";
  r.distro = "ubuntu-22.04";
  auto ib_only = plan::make_plan(shipped(), r);
  REQUIRE(ib_only.has_value());
  CHECK(find(*ib_only, "kernel-hold")); // DOCA-OFED builds modules: held after it
}

// --- the stored plan (plan.json) and the step digests ------------------------------------------

TEST_CASE("plan.json: every shipped size's plan reads back as it was written, with the same digests") {
  int plans = 0;
  for (const auto& size : shipped().sizes)
    for (const auto& distro : shipped().distros) {
      auto p = make(size.size, distro.id);
      if (!p) continue; // a combination the manifests rule out
      const auto doc = plan::to_json(*p, plan::Urls::full);
      auto back = plan::plan_from_json(doc, "plan.json");
      REQUIRE_MESSAGE(back.has_value(), size.size, " on ", distro.id, ": ", back.error().message);
      CHECK_MESSAGE(plan::to_json(*back, plan::Urls::full) == doc, size.size, " on ", distro.id);
      CHECK(install::step_digests(*back) == install::step_digests(*p));
      ++plans;
    }
  CHECK(plans > 50);
}

TEST_CASE("plan.json: the reader is strict, naming where") {
  auto p = make("Standard_ND96isr_H100_v5", "ubuntu-22.04");
  REQUIRE(p.has_value());
  const auto good = plan::to_json(*p, plan::Urls::full);
  const auto refused = [](const nlohmann::json& doc, const std::string& in_message) {
    auto r = plan::plan_from_json(doc, "plan.json");
    REQUIRE_FALSE(r.has_value());
    CHECK_MESSAGE(r.error().message.find(in_message) != std::string::npos, r.error().message);
    CHECK_FALSE(r.error().hint.empty());
  };
  auto doc = good;
  doc["colour"] = "blue";
  refused(doc, "unknown field 'colour'");
  doc = good;
  doc["schema"] = plan::kPlanSchema + 1;
  refused(doc, "plan schema");
  doc = good;
  doc.erase("artifacts");
  refused(doc, "missing field 'artifacts'");
  doc = good;
  doc["steps"][0]["detail"]["extra"] = 1;
  refused(doc, "plan.json.steps[0] (" + p->steps[0].id + ").detail: unknown field 'extra'");
  doc = good;
  doc["steps"][0]["kind"] = "teleport";
  refused(doc, "unknown step kind 'teleport'");
  doc = good;
  doc["steps"][1]["after"] = {"nowhere"};
  refused(doc, "'nowhere', which is not a step");
  doc = good;
  doc["kernels"] = "6.8.0";
  refused(doc, "plan.json.kernels: expected a list of strings");
}

TEST_CASE("plan.json: a dkms-build step from a directory, with dkms.conf directives, reads back and is digested") {
  auto p = make("Standard_ND96isr_H100_v5", "ubuntu-24.04");
  REQUIRE(p.has_value());
  plan::DkmsBuildStep d;
  d.component = "gdrcopy";
  d.version = "2.6";
  d.source_dir = "/var/lib/hpcbake/build/gdrcopy-2.6";
  d.dkms_name = "gdrdrv";
  d.modules = {"gdrdrv"};
  d.directives = {"BUILT_MODULE_LOCATION[0]=\"src/gdrdrv/\"", "CLEAN=\"cd src/gdrdrv && make clean\""};
  d.kernels = {"6.8.0-1041-azure"};
  p->steps.push_back(plan::Step{"driver:gdrcopy", "build gdrdrv 2.6 with DKMS", {p->steps.front().id}, d});
  const auto doc = plan::to_json(*p, plan::Urls::full);
  const auto& detail = doc["steps"].back()["detail"];
  CHECK(detail["source"] == "");
  CHECK(detail["source_dir"] == d.source_dir);
  CHECK(detail["directives"] == d.directives);
  auto back = plan::plan_from_json(doc, "plan.json");
  REQUIRE_MESSAGE(back.has_value(), back.error().message);
  const auto* read = back->steps.back().as<plan::DkmsBuildStep>();
  REQUIRE(read != nullptr);
  CHECK(read->source_dir == d.source_dir);
  CHECK(read->directives == d.directives);
  CHECK(plan::to_json(*back, plan::Urls::full) == doc);
  // A directive is what DKMS runs: changing one re-runs the build.
  auto edited = *p;
  std::get<plan::DkmsBuildStep>(edited.steps.back().action).directives.pop_back();
  const auto before = install::step_digests(*p), after = install::step_digests(edited);
  for (const auto& [id, digest] : before)
    CHECK_MESSAGE((after.at(id) != digest) == (id == "driver:gdrcopy"), id);
  // Sources by artifact or by directory, one of the two.
  for (const std::string artifact : {"gdrcopy-2.6.tar.gz", ""}) {
    auto bad = doc;
    bad["steps"].back()["detail"]["source"] = artifact;
    if (artifact.empty()) bad["steps"].back()["detail"].erase("source_dir");
    auto r = plan::plan_from_json(bad, "plan.json");
    REQUIRE_FALSE(r.has_value());
    CHECK_MESSAGE(r.error().message.find("by artifact (source) or by directory (source_dir), one of the two") !=
                      std::string::npos,
                  r.error().message);
  }
}

namespace {
// The steps whose digest differs between two plans with the same step ids.
std::set<std::string> changed(const plan::Plan& a, const plan::Plan& b) {
  const auto da = install::step_digests(a), db = install::step_digests(b);
  std::set<std::string> out;
  for (const auto& [id, d] : da)
    if (db.at(id) != d) out.insert(id);
  return out;
}

// `id` and every step that depends on it, directly or not.
std::set<std::string> with_dependents(const plan::Plan& p, const std::string& id) {
  std::set<std::string> out = {id};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& s : p.steps)
      if (!out.count(s.id) && std::any_of(s.after.begin(), s.after.end(), [&](const auto& a) { return out.count(a); }))
        grew = out.insert(s.id).second;
  }
  return out;
}
} // namespace

TEST_CASE("step digests: prose and provenance re-run nothing, a version re-runs its step and its dependents") {
  auto base = make("Standard_ND96isr_H100_v5", "ubuntu-22.04");
  REQUIRE(base.has_value());
  auto prose = *base;
  int edited = 0;
  for (auto& s : prose.steps) {
    s.title += " (reworded)";
    if (auto* w = std::get_if<plan::WaagentStep>(&s.action)) w->reason = "another sentence", ++edited;
    if (auto* v = std::get_if<plan::VerifyStep>(&s.action)) {
      v->thresholds_source = "https://example.org/another-source";
      v->expect.size_file = "sizes/elsewhere.yaml";
      v->expect.driver_source = "another component file";
      ++edited;
    }
    if (auto* k = std::get_if<plan::KernelHoldStep>(&s.action)) k->source = "another source", ++edited;
    if (auto* r = std::get_if<plan::RebootStep>(&s.action)) r->reason = "another reason", ++edited;
    if (auto* d = std::get_if<plan::SigningKeyStep>(&s.action)) d->signing.why = "another why", ++edited;
  }
  prose.notes.push_back("a new note");
  CHECK(edited >= 3); // waagent, verify, reboot (no kernel hold or signing key in this plan)
  CHECK(changed(*base, prose).empty());

  auto version = *base;
  const std::string fm = "packages:nvidia-fabricmanager";
  auto* step = const_cast<plan::Step*>(version.find(fm));
  REQUIRE(step);
  std::get<plan::PackagesStep>(step->action).version = "999.0";
  const auto redone = changed(*base, version);
  CHECK(redone == with_dependents(*base, fm));
  CHECK(redone.count("verify"));
  CHECK(redone.size() < base->steps.size()); // not everything
}
