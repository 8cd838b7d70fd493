// Canonical's signed precompiled NVIDIA modules (issue 41 item 3): the planner's choice of route
// and its reason, the refusals, the plan JSON round trip, and install's check of the archive index
// and keyring before anything is installed (a RecordingRunner answers apt-cache and apt-get).
#include "install/actions.hpp"
#include "manifest/manifests.hpp"
#include "pkg/manager.hpp"
#include "plan/plan.hpp"
#include "repo/openpgp.hpp"

#include "helpers.hpp"
#include "recording_runner.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

using namespace hpcbake;

namespace {

const manifest::Manifests& shipped() {
  return test::shipped_manifests();
}

detect::HostFacts ubuntu_host(const std::string& distro, detect::SecureBoot sb) {
  detect::HostFacts host;
  host.distro_id = distro;
  host.kernels.running = "6.8.0-1012-azure";
  host.kernels.next_boot = "6.8.0-1015-azure";
  host.kernels.next_boot_rule = "test";
  host.secure_boot.state = sb;
  host.secure_boot.source = "test";
  return host;
}

Result<plan::Plan> make(const manifest::Manifests& m, const std::string& size, const std::string& distro,
                        const detect::HostFacts* host, plan::DriverSource source = plan::DriverSource::automatic) {
  plan::PlanRequest r;
  r.size = size;
  r.distro = distro;
  r.host = host;
  r.driver_source = source;
  r.signing.key_dir = "/var/lib/hpcbake/signing";
  return plan::make_plan(m, r);
}

const plan::CanonicalDriverStep* canonical_step(const plan::Plan& p) {
  for (const auto& s : p.steps)
    if (const auto* c = s.as<plan::CanonicalDriverStep>()) return c;
  return nullptr;
}

bool has_note(const plan::Plan& p, const std::string& text) {
  return std::any_of(p.notes.begin(), p.notes.end(), [&](const auto& n) { return n.find(text) != std::string::npos; });
}

} // namespace

TEST_CASE("Secure Boot on, Ubuntu: Canonical's signed precompiled modules for exactly the target kernels") {
  for (const char* distro : {"ubuntu-22.04", "ubuntu-24.04"}) {
    auto host = ubuntu_host(distro, detect::SecureBoot::enabled);
    // A size with GPUDirect RDMA keeps hpcbake's key by default (nvidia-peermem must be built
    // against DOCA-OFED's ib_core); asked for, the canonical route is taken without it.
    auto own = make(shipped(), "Standard_ND96isr_H100_v5", distro, &host);
    REQUIRE_MESSAGE(own.has_value(), (own ? "" : own.error().message));
    CHECK(own->route == plan::SigningRoute::hpcbake_key);
    CHECK(own->route_reason.find("GPUDirect RDMA needs nvidia-peermem") != std::string::npos);
    CHECK_FALSE(canonical_step(*own));
    auto nd = make(shipped(), "Standard_ND96isr_H100_v5", distro, &host, plan::DriverSource::canonical);
    REQUIRE_MESSAGE(nd.has_value(), (nd ? "" : nd.error().message));
    CHECK(nd->route == plan::SigningRoute::canonical_signed);
    CHECK(nd->route_reason.find("--driver-source canonical") != std::string::npos);
    const auto* c = canonical_step(*nd);
    REQUIRE(c);
    CHECK(c->branch == "580");
    CHECK(c->kernels == std::vector<std::string>{"6.8.0-1012-azure", "6.8.0-1015-azure"});
    CHECK(c->modules_for("6.8.0-1015-azure") == "linux-modules-nvidia-580-server-open-6.8.0-1015-azure");
    // The size's NVSwitches: Fabric Manager of the same branch, from the same archive, in the same step.
    CHECK(c->packages == std::vector<std::string>{"nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
                                                  "nvidia-fabricmanager-580"});
    CHECK(c->signer.find("Canonical") != std::string::npos);
    CHECK(nd->find("service:nvidia-fabricmanager"));
    // Nothing of the repository's driver: no DKMS check of NVIDIA's modules, no peermem built against DOCA.
    CHECK_FALSE(nd->find("dkms:nvidia:6.8.0-1015-azure"));
    CHECK(has_note(*nd, "nvidia-peermem is not loaded"));
    CHECK(has_note(*nd, "only the NVIDIA driver comes signed by Canonical"));
    // A size without InfiniBand or NVSwitches needs no compiler, no headers and no key.
    auto nc = make(shipped(), "Standard_NC24ads_A100_v4", distro, &host);
    REQUIRE(nc.has_value());
    CHECK(nc->route == plan::SigningRoute::canonical_signed);
    REQUIRE(canonical_step(*nc));
    CHECK(canonical_step(*nc)->packages.size() == 2);
    for (const char* id : {"packages:build", "signing-key", "kernel-headers:6.8.0-1015-azure"})
      CHECK_MESSAGE(nc->find(id) == nullptr, id);
    CHECK(has_note(*nc, "there is no key to enrol"));
    CHECK_FALSE(has_note(*nc, "signing certificate enrolled"));
    CHECK(has_note(*nd, "signing certificate enrolled")); // DOCA's modules still need it
  }
}

TEST_CASE("the canonical route only where modules must be signed, and --driver-source chooses") {
  // Secure Boot off: the manifest's own route, as before.
  auto off = ubuntu_host("ubuntu-24.04", detect::SecureBoot::disabled);
  auto p = make(shipped(), "Standard_NC40ads_H100_v5", "ubuntu-24.04", &off);
  REQUIRE(p.has_value());
  CHECK(p->route == plan::SigningRoute::none);
  CHECK_FALSE(canonical_step(*p));
  CHECK(p->find("driver:nvidia-cuda-driver")->as<plan::PackagesStep>());
  // ... unless asked for.
  auto asked = make(shipped(), "Standard_NC40ads_H100_v5", "ubuntu-24.04", &off, plan::DriverSource::canonical);
  REQUIRE(asked.has_value());
  CHECK(asked->route == plan::SigningRoute::canonical_signed);
  CHECK(asked->route_reason.find("--driver-source canonical") != std::string::npos);
  // Secure Boot unknown (signing as a precaution): not chosen by itself.
  auto unknown = ubuntu_host("ubuntu-24.04", detect::SecureBoot::unknown);
  auto u = make(shipped(), "Standard_NC40ads_H100_v5", "ubuntu-24.04", &unknown);
  REQUIRE(u.has_value());
  CHECK_FALSE(canonical_step(*u));
  // --driver-source repository keeps the repository's driver, with its own refusal under Secure Boot.
  auto on = ubuntu_host("ubuntu-24.04", detect::SecureBoot::enabled);
  auto repo = make(shipped(), "Standard_NC40ads_H100_v5", "ubuntu-24.04", &on, plan::DriverSource::repository);
  if (repo) CHECK_FALSE(canonical_step(*repo));
  // A source the manifest does not give for the distro is refused, naming the one it gives.
  auto run = make(shipped(), "Standard_NC40ads_H100_v5", "ubuntu-24.04", &off, plan::DriverSource::run);
  REQUIRE_FALSE(run.has_value());
  CHECK(run.error().kind == ErrorKind::unsupported);
  CHECK(run.error().hint.find("--driver-source repository or canonical") != std::string::npos);
  // No such route outside Ubuntu.
  auto alma = ubuntu_host("almalinux-9", detect::SecureBoot::enabled);
  auto a = make(shipped(), "Standard_NC40ads_H100_v5", "almalinux-9", &alma, plan::DriverSource::canonical);
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().kind == ErrorKind::unsupported);
  CHECK(a.error().message.find("names no precompiled signed NVIDIA modules") != std::string::npos);
  CHECK(a.error().hint.find("--driver-source run") != std::string::npos);
  auto alma_auto = make(shipped(), "Standard_NC40ads_H100_v5", "almalinux-9", &alma);
  REQUIRE(alma_auto.has_value());
  CHECK(alma_auto->find("driver:nvidia-cuda-driver")->as<plan::RunInstallerStep>());
}

TEST_CASE("a branch Canonical does not publish: refused when asked for, never chosen, and the plan says why") {
  const auto dir = test::scratch("canonical-branch");
  std::filesystem::copy(test::source_dir() / "manifests", dir / "manifests", std::filesystem::copy_options::recursive);
  std::filesystem::copy(test::source_dir() / "drivers", dir / "drivers", std::filesystem::copy_options::recursive);
  const auto file = dir / "manifests/distros/ubuntu-24.04.yaml";
  auto text = test::slurp(file);
  const auto at = text.find("branches: [\"580\"]");
  REQUIRE(at != std::string::npos);
  text.replace(at, 17, "branches: [\"570\"]");
  test::write(file, text);
  auto m = manifest::load_manifests(dir / "manifests");
  REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  auto host = ubuntu_host("ubuntu-24.04", detect::SecureBoot::enabled);
  auto asked = make(*m, "Standard_NC40ads_H100_v5", "ubuntu-24.04", &host, plan::DriverSource::canonical);
  REQUIRE_FALSE(asked.has_value());
  CHECK(asked.error().kind == ErrorKind::unsupported);
  CHECK(asked.error().message.find("publishes no precompiled signed modules of driver branch 580") !=
        std::string::npos);
  CHECK(asked.error().hint.find("--driver-source repository") != std::string::npos);
  host.secure_boot.state = detect::SecureBoot::disabled;
  auto plain = make(*m, "Standard_NC40ads_H100_v5", "ubuntu-24.04", &host);
  REQUIRE(plain.has_value());
  CHECK_FALSE(canonical_step(*plain));
}

TEST_CASE("the canonical route survives the stored plan's JSON and its digest ignores the prose") {
  auto host = ubuntu_host("ubuntu-22.04", detect::SecureBoot::enabled);
  auto p = make(shipped(), "Standard_ND96isr_H100_v5", "ubuntu-22.04", &host, plan::DriverSource::canonical);
  REQUIRE(p.has_value());
  const auto doc = plan::to_json(*p, plan::Urls::full);
  CHECK(doc["route"] == "canonical-signed");
  auto back = plan::plan_from_json(doc, "plan.json");
  REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  CHECK(back->route == plan::SigningRoute::canonical_signed);
  CHECK(back->route_reason == p->route_reason);
  REQUIRE(canonical_step(*back));
  CHECK(plan::to_json(*back, plan::Urls::full) == doc);
  const auto* step = back->find("driver:nvidia-cuda-driver");
  CHECK_FALSE(step->content().contains("signer"));
  CHECK(step->content().contains("fingerprints"));
  CHECK(plan::render_text(*p).find("route: canonical-signed") != std::string::npos);
}

TEST_CASE("the pinned archive fingerprints are the keys of Ubuntu's archive keyring") {
  const auto keys = repo::read_key_file(test::slurp(test::fixtures() / "ubuntu-keyring/ubuntu-archive-keyring.gpg"),
                                        "ubuntu-archive-keyring.gpg");
  REQUIRE(keys.has_value());
  std::vector<std::string> found;
  for (const auto& k : keys->keys)
    found.push_back(k.fingerprint);
  for (const char* distro : {"ubuntu-22.04", "ubuntu-24.04"}) {
    const auto& cs = shipped().find_distro(distro)->canonical_signed_nvidia;
    REQUIRE(cs);
    REQUIRE_FALSE(cs->archive_key_fingerprints.empty());
    for (const auto& f : cs->archive_key_fingerprints)
      CHECK_MESSAGE(std::find(found.begin(), found.end(), f) != found.end(), f);
  }
}

namespace {

// Install's canonical-driver step over a scratch root holding `keyring` as Ubuntu's archive
// keyring, apt answered by the runner.
struct InstallFixture {
  std::filesystem::path root;
  exec::RecordingRunner runner;
  std::unique_ptr<pkg::PackageManager> apt;
  plan::Plan plan;

  explicit InstallFixture(const std::string& keyring) : root(test::scratch("canonical-install")) {
    test::write(root / "usr/share/keyrings/ubuntu-archive-keyring.gpg",
                test::slurp(test::fixtures() / "ubuntu-keyring" / keyring));
    auto host = ubuntu_host("ubuntu-24.04", detect::SecureBoot::enabled);
    auto p = make(shipped(), "Standard_ND96isr_H100_v5", "ubuntu-24.04", &host, plan::DriverSource::canonical);
    REQUIRE(p.has_value());
    plan = *p;
    apt = pkg::make_package_manager(pkg::Family::apt, runner, util::HostFs(root.string()));
    exec::Completed known;
    known.exit_code = 0;
    known.output = "pkg:\n  Installed: (none)\n  Candidate: 580.95.05-0ubuntu0.24.04.2\n  Version table:\n";
    runner.on({"apt-cache", "policy"}, known);
  }
  install::StepResult run() {
    install::ActionsConfig c;
    c.host = util::HostFs(root.string());
    c.runner = &runner;
    c.packages = apt.get();
    c.plan = &plan;
    install::Actions actions(std::move(c));
    return actions.execute(*plan.find("driver:nvidia-cuda-driver"));
  }
  bool ran(const std::string& verb) const {
    const auto argvs = runner.argvs();
    return std::any_of(argvs.begin(), argvs.end(),
                       [&](const auto& a) { return a.size() > 1 && a[0] == "apt-get" && a[1] == verb; });
  }
};

} // namespace

TEST_CASE("install: no precompiled package for the next-boot kernel stops before anything is installed") {
  InstallFixture fx("ubuntu-archive-keyring.gpg");
  exec::Completed unknown; // apt-cache policy of a name the index does not know: nothing, exit 0
  unknown.exit_code = 0;
  fx.runner.on({"apt-cache", "policy", "linux-modules-nvidia-580-server-open-6.8.0-1015-azure"}, unknown);
  const auto r = fx.run();
  REQUIRE(r.kind == install::StepResult::Kind::failed);
  CHECK(r.error == ErrorKind::unsupported);
  CHECK(r.message.find("linux-modules-nvidia-580-server-open-6.8.0-1015-azure (kernel 6.8.0-1015-azure)") !=
        std::string::npos);
  // Only this step's packages wait: the plan's earlier steps (build tools, DOCA-OFED) have run.
  CHECK(r.message.find("nothing was installed") == std::string::npos);
  CHECK(r.message.find("none of the NVIDIA driver's packages was installed (the plan's steps before "
                       "driver:nvidia-cuda-driver have run)") != std::string::npos);
  for (const char* choice : {"--driver-source repository", "Secure Boot off", "wait for Canonical's package"})
    CHECK_MESSAGE(r.hint.find(choice) != std::string::npos, choice);
  CHECK(fx.ran("update"));
  CHECK_FALSE(fx.ran("install"));
}

TEST_CASE("install: every package at the candidate it read, held, and the versions recorded") {
  InstallFixture fx("ubuntu-archive-keyring.gpg");
  const auto r = fx.run();
  REQUIRE_MESSAGE(r.kind == install::StepResult::Kind::done, r.message);
  const std::string want = "linux-modules-nvidia-580-server-open-6.8.0-1015-azure=580.95.05-0ubuntu0.24.04.2";
  CHECK(r.message.find(want) != std::string::npos);
  const auto argvs = fx.runner.argvs();
  const auto install = std::find_if(
      argvs.begin(), argvs.end(), [](const auto& a) { return a.size() > 1 && a[0] == "apt-get" && a[1] == "install"; });
  REQUIRE(install != argvs.end());
  CHECK(std::find(install->begin(), install->end(), want) != install->end());
  CHECK(std::find(install->begin(), install->end(), "nvidia-fabricmanager-580=580.95.05-0ubuntu0.24.04.2") !=
        install->end());
  CHECK(std::any_of(argvs.begin(), argvs.end(), [](const auto& a) { return a.size() > 1 && a[0] == "apt-mark"; }));
  // The azure flavour's metapackage too, as ubuntu-drivers installs it, and not held: a kernel
  // update then brings the new kernel's modules package instead of leaving the driver behind.
  CHECK(canonical_step(fx.plan)->flavour_package == "linux-modules-nvidia-580-server-open-azure");
  const std::string meta = "linux-modules-nvidia-580-server-open-azure=580.95.05-0ubuntu0.24.04.2";
  CHECK(std::find(install->begin(), install->end(), meta) != install->end());
  for (const auto& a : argvs)
    if (a.size() > 1 && a[0] == "apt-mark") {
      CHECK(std::find(a.begin(), a.end(), "linux-modules-nvidia-580-server-open-6.8.0-1015-azure") != a.end());
      CHECK(std::find(a.begin(), a.end(), "linux-modules-nvidia-580-server-open-azure") == a.end());
    }
  CHECK(r.message.find("not held (kernel updates bring its modules) " + meta) != std::string::npos);
}

TEST_CASE("install: a keyring without Ubuntu's pinned archive keys is refused before the index is read") {
  InstallFixture fx("ubuntu-dbgsym-keyring.gpg");
  const auto r = fx.run();
  REQUIRE(r.kind == install::StepResult::Kind::failed);
  CHECK(r.message.find("none of the pinned Ubuntu archive keys") != std::string::npos);
  CHECK_FALSE(fx.ran("update"));
  CHECK_FALSE(fx.ran("install"));
}
