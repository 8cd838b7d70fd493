// seal/: every refusal against a fixture root (a copy of the ND H100 v5 host), the success
// path's image manifest, cache cleanup, the signing key, and the deprovision through
// exec::Runner (exact argv, and last).
#include "seal/seal.hpp"

#include "detect/host.hpp"
#include "driver/signing.hpp"
#include "install/journal.hpp"
#include "install/plan_file.hpp"
#include "util/http.hpp"
#include "util/paths.hpp"
#include "verify/record.hpp"

#include "helpers.hpp"
#include "kofile.hpp"
#include "recording_runner.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <functional>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

// DCGM's four packages as the ND H100 v5 plan on Ubuntu 22.04 installs them, held.
std::string dcgm_status() {
  std::string out;
  for (const char* p : {"datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-core",
                        "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda13"})
    out += fmt::format("Package: {}\nStatus: hold ok installed\nArchitecture: amd64\nVersion: 1:4.5.2-1\n\n", p);
  return out;
}

constexpr const char* kRunning = "6.5.0-1025-azure";
constexpr const char* kNextBoot = "6.8.0-1015-azure";
constexpr const char* kBoot = "5f0c2d2e-1b7a-4d2b-9a53-8c1f0e6d9a11";
const std::vector<std::string> kModules = {"nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm", "nvidia-peermem"};

const manifest::Manifests& shipped() {
  return test::shipped_manifests();
}

struct Machine {
  fs::path root;
  util::HostFs fs;
  detect::HostFacts facts;
  exec::RecordingRunner runner;

  explicit Machine(const std::string& name) : root(test::scratch("seal-" + name) / "root"), fs(root) {
    fs::copy(test::host_fixture("nd96isr_h100_v5"), root,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    test::write(root / "proc/sys/kernel/random/boot_id", std::string(kBoot) + "\n");
    for (const auto* k : {kRunning, kNextBoot})
      install_modules(k);
    // The driver (from the CUDA repository) and Fabric Manager installed and held. The
    // versions of the two driver packages are the fixture's; the plan pins them by name.
    test::write(root / "var/lib/dpkg/status", "Package: bash\nStatus: install ok installed\nVersion: 5.1\n\n"
                                              "Package: nvidia-driver-pinning-580.126.16\nStatus: hold ok installed\n"
                                              "Architecture: all\nVersion: 580.126.16-1\n\n"
                                              "Package: nvidia-open\nStatus: hold ok installed\n"
                                              "Architecture: amd64\nVersion: 580.126.16-1\n\n"
                                              "Package: nvidia-fabricmanager\nStatus: hold ok installed\n"
                                              "Architecture: amd64\nVersion: 580.126.16-1\n\n" +
                                                  dcgm_status());
    refresh();
    store_plan();
    install::Journal j;
    j.size = "Standard_ND96isr_H100_v5";
    j.distro = "ubuntu-22.04";
    j.state = install::RunState::complete;
    j.steps["packages:nvidia-fabricmanager"] = {"d1", install::StepStatus::done, 1, 2, 1, "", "", ""};
    j.steps["reboot:nouveau"] = {"d2", install::StepStatus::done, 1, 2, 1, "", "resumed after the reboot", ""};
    journal(j);
    verified(true);
    // A verified artifact in the cache and an enabled resume unit: seal removes both.
    test::write(root / "var/cache/hpcbake/sha256" / std::string(64, 'a'), "artifact bytes");
    fs::create_directories(root / "etc/systemd/system/multi-user.target.wants");
    fs::create_symlink("/usr/lib/systemd/system/hpcbake-resume.service",
                       root / "etc/systemd/system/multi-user.target.wants/hpcbake-resume.service");
    refresh();
  }

  void install_modules(const std::string& kernel, const std::string& built_for = "") {
    for (const auto& m : kModules)
      test::write_ko(root / "lib/modules" / kernel / "updates/dkms" / (m + ".ko"), m,
                     built_for.empty() ? kernel : built_for);
  }
  // The plan install stored (plan.json): ND H100 v5 on Ubuntu 22.04 for this host, with `options`.
  std::string plan_sha256;
  void store_plan(install::RunOptions options = {}, const std::string& distro = "ubuntu-22.04",
                  const std::function<void(plan::Plan&)>& edit = {}) {
    plan::PlanRequest pr;
    pr.size = "Standard_ND96isr_H100_v5";
    pr.distro = distro;
    pr.host = &facts;
    pr.expectations_only = true;
    auto p = plan::make_plan(shipped(), pr);
    REQUIRE(p.has_value());
    if (edit) edit(*p);
    if (options.key_dir.empty()) options.key_dir = fs.resolve(paths::kKeyDir);
    auto sha = install::save_plan_file(fs.resolve(paths::kPlanFile), *p, options);
    REQUIRE(sha.has_value());
    plan_sha256 = *sha;
  }
  // The journal, recording the stored plan unless it names another.
  void journal(install::Journal j) {
    if (j.plan_sha256.empty()) j.plan_sha256 = plan_sha256;
    REQUIRE(install::save_journal(fs.resolve(install::kJournalPath), j));
  }
  void verified(bool passed, const std::string& boot = kBoot) {
    verify::Record r;
    r.boot_id = boot;
    r.recorded_at = 100;
    r.passed = passed;
    r.size = "Standard_ND96isr_H100_v5";
    r.distro = "ubuntu-22.04";
    r.pass = passed ? 30 : 28;
    r.fail = passed ? 0 : 2;
    if (!passed) r.failed_checks = {"gpu.count", "ib.mlx5_ib0:1.rate"};
    REQUIRE(verify::write_record(fs, r));
  }
  void refresh() {
    util::CurlHttpClient http;
    detect::ImdsOptions imds;
    imds.enabled = false;
    facts = detect::detect_host(fs, http, imds, &shipped());
  }
  seal::SealRequest request(seal::Deprovision d = seal::Deprovision::no,
                            seal::SigningKey k = seal::SigningKey::refuse) {
    seal::SealRequest rq;
    rq.fs = &fs;
    rq.host = &facts;
    rq.runner = &runner;
    rq.deprovision = d;
    rq.signing_key = k;
    rq.hpcbake_version = "0.1.0-test";
    return rq;
  }
  seal::SealReport check() {
    refresh();
    auto rep = seal::check(request());
    REQUIRE(rep.has_value());
    return *rep;
  }
};

std::vector<std::string> ids(const seal::SealReport& rep) {
  std::vector<std::string> out;
  for (const auto& r : rep.refusals)
    out.push_back(r.id);
  return out;
}

bool has(const seal::SealReport& rep, const std::string& id, const std::string& in_message = "") {
  for (const auto& r : rep.refusals)
    if (r.id == id && r.message.find(in_message) != std::string::npos) {
      CHECK_FALSE(r.hint.empty());
      return true;
    }
  return false;
}

} // namespace

TEST_CASE("seal: a complete, verified, held machine passes every check") {
  Machine m("ok");
  const auto rep = m.check();
  INFO(doctest::toString(ids(rep).size()));
  for (const auto& r : rep.refusals)
    MESSAGE((r.id + ": " + r.message));
  CHECK(rep.ok());
  CHECK(rep.next_boot_kernel == kNextBoot);
  CHECK(rep.modules.size() >= 4);
  for (const auto& mc : rep.modules) {
    CHECK(mc.ok);
    CHECK(mc.kernel == kNextBoot);
    CHECK(mc.sha256.size() == 64);
  }
  REQUIRE(rep.packages.size() == 7);
  for (const auto& pk : rep.packages)
    CHECK_MESSAGE(pk.held, pk.name);
  CHECK(rep.packages[0].name == "nvidia-driver-pinning-580.126.16");
  CHECK(rep.packages[1].name == "nvidia-open");
  CHECK(rep.packages[2].name == "nvidia-fabricmanager");
  CHECK(rep.packages[2].version == "580.126.16-1");
  CHECK(rep.packages[3].name == "datacenter-gpu-manager-4-cuda13");
  CHECK(rep.packages[3].version == "1:4.5.2-1");
}

TEST_CASE("seal: journal refusals") {
  Machine m("journal");
  SUBCASE("no journal") {
    fs::remove(m.fs.resolve(install::kJournalPath));
    const auto rep = m.check();
    CHECK(has(rep, "journal.missing", "hpcbake install has not run"));
  }
  SUBCASE("failed") {
    install::Journal j;
    j.size = "Standard_ND96isr_H100_v5";
    j.distro = "ubuntu-22.04";
    j.state = install::RunState::failed;
    j.steps["driver:nvidia-cuda-driver"] = {"d", install::StepStatus::failed, 1, 2, 2, "", "exit 1", "tail"};
    m.journal(j);
    const auto rep = m.check();
    CHECK(has(rep, "journal.incomplete", "'failed'"));
    CHECK(has(rep, "journal.incomplete", "driver:nvidia-cuda-driver (failed)"));
  }
  SUBCASE("malformed") {
    test::write(m.fs.resolve(install::kJournalPath), "{not json");
    const auto rep = m.check();
    CHECK(has(rep, "journal.unreadable"));
  }
}

TEST_CASE("seal: reboot refusals") {
  Machine m("reboot");
  install::Journal j;
  j.size = "Standard_ND96isr_H100_v5";
  j.distro = "ubuntu-22.04";
  j.state = install::RunState::reboot_required;
  SUBCASE("a step asked for a reboot in this boot") {
    j.steps["reboot:nouveau"] = {"d", install::StepStatus::reboot_pending, 1, 2, 1, kBoot, "nouveau is loaded", ""};
    m.journal(j);
    const auto rep = m.check();
    CHECK(has(rep, "reboot.pending", "reboot:nouveau asked for a reboot in this boot"));
    CHECK_FALSE(has(rep, "journal.incomplete"));
  }
  SUBCASE("rebooted, but install has not resumed") {
    j.steps["reboot:nouveau"] = {"d", install::StepStatus::reboot_pending, 1, 2, 1, "another-boot", "", ""};
    m.journal(j);
    CHECK(has(m.check(), "reboot.not-resumed", "reboot:nouveau"));
  }
  SUBCASE("the distribution's flag") {
    test::write(m.root / "run/reboot-required", "*** System restart required ***\n");
    test::write(m.root / "run/reboot-required.pkgs", "linux-image-6.8.0-1015-azure\n");
    const auto rep = m.check();
    CHECK(has(rep, "reboot.pending", "/run/reboot-required exists (for linux-image-6.8.0-1015-azure)"));
    CHECK(ids(rep).size() == 1);
  }
}

TEST_CASE("seal: verify must have passed in this boot") {
  Machine m("verify");
  SUBCASE("never ran") {
    fs::remove(m.fs.resolve(verify::kRecordPath));
    CHECK(has(m.check(), "verify.missing"));
  }
  SUBCASE("another boot") {
    m.verified(true, "0b5e-previous-boot");
    CHECK(has(m.check(), "verify.other-boot", "0b5e-previous-boot"));
  }
  SUBCASE("failed") {
    m.verified(false);
    CHECK(has(m.check(), "verify.failed", "failed 2 of 30 checks: gpu.count, ib.mlx5_ib0:1.rate"));
  }
  SUBCASE("boot id unreadable") {
    fs::remove(m.root / "proc/sys/kernel/random/boot_id");
    CHECK(has(m.check(), "verify.boot-unknown"));
  }
}

TEST_CASE("seal: every DKMS module must be installed for the next-boot kernel") {
  Machine m("modules");
  SUBCASE("missing for the next-boot kernel only") {
    fs::remove(m.root / "lib/modules" / kNextBoot / "updates/dkms/nvidia-uvm.ko");
    const auto rep = m.check();
    CHECK(has(rep, "module.missing", std::string("nvidia-uvm is not installed for the next-boot kernel ") + kNextBoot));
    CHECK(ids(rep).size() == 1);
  }
  SUBCASE("built for the running kernel") {
    m.install_modules(kNextBoot, kRunning);
    const auto rep = m.check();
    CHECK(has(rep, "module.vermagic", kNextBoot));
  }
}

TEST_CASE("seal: Fabric Manager must be installed and held") {
  Machine m("held");
  SUBCASE("apt: installed, not held") {
    test::write(m.root / "var/lib/dpkg/status",
                "Package: nvidia-fabricmanager\nStatus: install ok installed\nVersion: 580.126.16-1\n");
    const auto rep = m.check();
    CHECK(has(rep, "package.not-held", "nvidia-fabricmanager (nvidia-fabricmanager) 580.126.16-1"));
    for (const auto& r : rep.refusals)
      if (r.id == "package.not-held") CHECK(r.hint.find("apt-mark hold nvidia-fabricmanager") != std::string::npos);
  }
  SUBCASE("apt: removed, config files kept") {
    test::write(m.root / "var/lib/dpkg/status",
                "Package: nvidia-fabricmanager\nStatus: deinstall ok config-files\nVersion: 580.126.16-1\n");
    CHECK(has(m.check(), "package.not-installed", "nvidia-fabricmanager"));
  }
  SUBCASE("dnf: the versionlock list decides, rpm gives the version") {
    m.store_plan({}, "almalinux-9");
    install::Journal j;
    j.size = "Standard_ND96isr_H100_v5";
    j.distro = "almalinux-9";
    j.state = install::RunState::complete;
    m.journal(j);
    m.runner.on({"rpm"}, exec::exited(0, "580.126.20-1\n"));
    auto rep = m.check();
    CHECK(has(rep, "package.not-held", "nvidia-fabricmanager"));
    for (const auto& r : rep.refusals)
      if (r.id == "package.not-held")
        CHECK(r.hint.find("dnf versionlock add nvidia-fabricmanager") != std::string::npos);
    REQUIRE_FALSE(m.runner.calls.empty());
    const auto argv = m.runner.calls.back().argv;
    CHECK(argv == std::vector<std::string>{"rpm", "--root", m.root.string(), "-q", "--qf", "%{VERSION}-%{RELEASE}\\n",
                                           "nvidia-fabricmanager"});
    test::write(m.root / "etc/dnf/plugins/versionlock.list",
                "# Added by dnf\nnvidia-fabricmanager-devel-0:1-1.*\nnvidia-fabricmanager-0:580.126.20-1.*\n");
    rep = m.check();
    CHECK_FALSE(has(rep, "package.not-held"));
    REQUIRE(rep.packages.size() == 1);
    CHECK(rep.packages[0].version == "580.126.20-1");
  }
}

TEST_CASE("seal: secrets in state, cache and logs are refused by file and line, never printed") {
  Machine m("secrets");
  const std::string sas = "sv=2022-11-02&sr=b&sig=Zm9vYmFyYmF6cXV4c2VjcmV0c2VjcmV0%3D";
  test::write(m.root / "var/log/hpcbake/install.log",
              "line one\nGET https://acct.blob.core.windows.net/c/NVIDIA.run?" + sas + "\n");
  test::write(m.root / "var/lib/hpcbake/notes/key.pem",
              "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecretsecret\n-----END RSA PRIVATE KEY-----\n");
  test::write(m.root / "var/cache/hpcbake/partial/x.json",
              "{\"headers\": {\"Authorization\": \"Bearer eyJhbGciOiJSUzI1NiJ9\"}}\n");
  test::write(m.root / "var/log/hpcbake-fetch.log",
              "a\nb\nDefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0a2V5c2VjcmV0a2V5==;\n");
  // Binary files are skipped (the cache's artifacts); a redacted URL is not a secret.
  test::write(m.root / "var/cache/hpcbake/sha256" / std::string(64, 'b'), std::string("\0sig=abc&x", 10));
  test::write(m.root / "var/lib/hpcbake/redacted.log", "https://acct.blob.core.windows.net/c/NVIDIA.run\nsig=alone\n");
  const auto rep = m.check();
  CHECK(has(rep, "secret.sas-token", "/var/log/hpcbake/install.log:2:"));
  CHECK(has(rep, "secret.private-key", "/var/lib/hpcbake/notes/key.pem:1:"));
  CHECK(has(rep, "secret.authorization", "/var/cache/hpcbake/partial/x.json:1:"));
  CHECK(has(rep, "secret.account-key", "/var/log/hpcbake-fetch.log:3:"));
  CHECK(ids(rep).size() == 4);
  CHECK(rep.scan.binary_skipped >= 1);
  for (const auto& r : rep.refusals) {
    CHECK(r.message.find("Zm9vYmFy") == std::string::npos);
    CHECK(r.message.find("MIIE") == std::string::npos);
    CHECK(r.message.find("eyJhbGci") == std::string::npos);
    CHECK(r.message.find("c2VjcmV0") == std::string::npos);
  }
}

TEST_CASE("seal: the module-signing key is refused, or removed with SigningKey::remove") {
  Machine m("signing");
  test::write(m.root / "var/lib/hpcbake/signing/signing.key",
              "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
  test::write(m.root / "var/lib/hpcbake/signing/signing.der", "0\x82 certificate");
  auto rep = m.check();
  CHECK(has(rep, "signing.private-key", "/var/lib/hpcbake/signing/signing.key"));
  CHECK(ids(rep).size() == 1);
  for (const auto& r : rep.refusals)
    CHECK(r.hint.find("--remove-signing-key") != std::string::npos);

  auto sealed = seal::seal(m.request(seal::Deprovision::no, seal::SigningKey::remove));
  REQUIRE(sealed.has_value());
  CHECK(sealed->sealed);
  CHECK(sealed->removed_keys == std::vector<std::string>{"/var/lib/hpcbake/signing/signing.key"});
  CHECK_FALSE(fs::exists(m.root / "var/lib/hpcbake/signing/signing.key"));
  CHECK(fs::exists(m.root / "var/lib/hpcbake/signing/signing.der"));
  CHECK(sealed->manifest["signing"]["private_key"] == "removed by seal");
  CHECK(sealed->manifest["signing"]["certificate_sha256"].get<std::string>().size() == 64);
}

TEST_CASE("seal: the key directory the install used (--key-dir) is the one checked, wherever it is") {
  Machine m("key-dir");
  install::RunOptions o;
  o.key_dir = m.root / "srv/keys";
  m.store_plan(o);
  auto j = install::load_journal(m.fs.resolve(install::kJournalPath));
  REQUIRE(j.has_value());
  j->plan_sha256.clear();
  m.journal(*j); // records the plan just stored
  test::write(m.root / "srv/keys/signing.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
  auto rep = m.check();
  CHECK(rep.key_dir == "/srv/keys");
  CHECK(has(rep, "signing.private-key", "/srv/keys/signing.key"));
  CHECK(ids(rep).size() == 1);
  auto sealed = seal::seal(m.request(seal::Deprovision::no, seal::SigningKey::remove));
  REQUIRE(sealed.has_value());
  CHECK(sealed->sealed);
  CHECK_FALSE(fs::exists(m.root / "srv/keys/signing.key"));
  CHECK(sealed->manifest["plan"]["sha256"] == m.plan_sha256);
}

TEST_CASE("seal: the plan is the stored one the journal records, or seal refuses") {
  Machine m("plan");
  SUBCASE("missing") {
    fs::remove(m.root / "var/lib/hpcbake/plan.json");
    CHECK(has(m.check(), "plan.missing", "/var/lib/hpcbake/plan.json"));
  }
  SUBCASE("another install's") {
    auto j = install::load_journal(m.fs.resolve(install::kJournalPath));
    REQUIRE(j.has_value());
    j->plan_sha256 = std::string(64, 'f');
    m.journal(*j);
    CHECK(has(m.check(), "plan.mismatch", std::string(64, 'f')));
  }
  SUBCASE("edited after install wrote it") {
    const auto file = m.root / "var/lib/hpcbake/plan.json";
    auto text = test::read(file);
    const auto at = text.find("Standard_ND96isr_H100_v5");
    REQUIRE(at != std::string::npos);
    text.replace(at, 24, "Standard_ND96isr_H200_v5");
    test::write(file, text);
    CHECK(has(m.check(), "plan.unreadable", "does not match its digest"));
  }
}

TEST_CASE("seal: every reason is listed at once, and nothing changes when refused") {
  Machine m("all");
  m.verified(false, "other");
  fs::remove(m.root / "lib/modules" / kNextBoot / "updates/dkms/nvidia.ko");
  test::write(m.root / "var/lib/dpkg/status",
              "Package: nvidia-fabricmanager\nStatus: install ok installed\nVersion: 1\n");
  test::write(m.root / "var/log/hpcbake/x.log", "url?sig=abcdef\n");
  test::write(m.root / "run/reboot-required", "");
  m.refresh();
  auto r = seal::seal(m.request(seal::Deprovision::yes));
  REQUIRE(r.has_value());
  CHECK_FALSE(r->sealed);
  const auto got = ids(r->report);
  for (const char* id : {"reboot.pending", "verify.other-boot", "verify.failed", "module.missing", "package.not-held",
                         "secret.sas-token"})
    CHECK_MESSAGE(std::find(got.begin(), got.end(), id) != got.end(), id);
  CHECK(m.runner.calls.empty());
  CHECK_FALSE(fs::exists(m.root / "var/lib/hpcbake/image-manifest.json"));
  CHECK(fs::exists(m.root / "var/cache/hpcbake/sha256" / std::string(64, 'a')));
}

namespace {
// Records what the machine looked like when each command ran.
class SnapshotRunner final : public exec::Runner {
public:
  explicit SnapshotRunner(fs::path root, int exit_code = 0) : root_(std::move(root)), exit_(exit_code) {}
  Result<exec::Completed> run(const exec::Command& cmd) override {
    argvs.push_back(cmd.argv);
    manifest_present.push_back(fs::exists(root_ / "var/lib/hpcbake/image-manifest.json"));
    cache_empty.push_back(fs::is_empty(root_ / "var/cache/hpcbake"));
    return exec::exited(exit_, exit_ ? "WARNING! agent failed\n" : "");
  }
  std::vector<std::vector<std::string>> argvs;
  std::vector<bool> manifest_present, cache_empty;

private:
  fs::path root_;
  int exit_;
};
} // namespace

TEST_CASE("seal: the success path writes the image manifest, cleans up, and deprovisions last") {
  Machine m("success");
  SUBCASE("RecordingRunner: the exact argv, last and only") {
    auto r = seal::seal(m.request(seal::Deprovision::yes));
    REQUIRE(r.has_value());
    for (const auto& x : r->report.refusals)
      MESSAGE((x.id + ": " + x.message));
    REQUIRE(r->sealed);
    CHECK(r->deprovisioned);
    REQUIRE_FALSE(m.runner.calls.empty());
    CHECK(m.runner.calls.back().argv == std::vector<std::string>{"waagent", "-force", "-deprovision+user"});
    CHECK(m.runner.calls.size() == 1);
    CHECK(seal::deprovision_argv() == m.runner.calls.back().argv);

    const auto doc = nlohmann::json::parse(test::slurp(m.root / "var/lib/hpcbake/image-manifest.json"));
    CHECK(doc == r->manifest);
    CHECK(doc["schema"] == 5);
    REQUIRE(doc["health_units"].size() == 3); // seal/health_units.hpp
    CHECK(doc["health_units"][0]["enabled"] == true);
    CHECK(
        std::filesystem::is_symlink(m.root / "etc/systemd/system/multi-user.target.wants/hpcbake-verify-boot.service"));
    CHECK(doc["plan"]["sha256"] == m.plan_sha256);
    // Every out-of-tree module of the next-boot kernel (Secure Boot is off here: recorded, not refused).
    CHECK(doc["out_of_tree_modules"]["kernel"] == kNextBoot);
    CHECK(doc["out_of_tree_modules"]["package_owners"].is_null()); // no /var/lib/dpkg/info in this fixture
    REQUIRE(doc["out_of_tree_modules"]["modules"].size() == kModules.size());
    for (const auto& om : doc["out_of_tree_modules"]["modules"]) {
      CHECK(om["path"].get<std::string>().starts_with(fmt::format("/lib/modules/{}/updates/dkms/", kNextBoot)));
      CHECK(om["signer"].is_null());
      CHECK(om["serial"].is_null());
      CHECK(om["package"].is_null());
      CHECK(om["loads_with_secure_boot"] == false);
      CHECK(om["secure_boot_trust"] == "unsigned");
    }
    CHECK(doc["size"] == "Standard_ND96isr_H100_v5");
    CHECK(doc["size_family"].is_string());
    CHECK_FALSE(doc["size_family"].get<std::string>().empty());
    CHECK(doc["distro"] == "ubuntu-22.04");
    CHECK(doc["kernel"]["next_boot"] == kNextBoot);
    CHECK(doc["kernel"]["running"] == kRunning);
    CHECK(doc["verify"]["passed"] == true);
    CHECK(doc["verify"]["boot_id"] == kBoot);
    CHECK(doc["journal"]["state"] == "complete");
    CHECK(doc["hpcbake_version"] == "0.1.0-test");
    CHECK(doc["deprovision"] == true);
    bool fm = false, driver = false;
    for (const auto& c : doc["components"]) {
      if (c["component"] == "nvidia-fabricmanager") {
        fm = true;
        REQUIRE(c["packages"].size() == 1);
        CHECK(c["packages"][0]["held"] == true);
        CHECK(c["packages"][0]["version"] == "580.126.16-1");
      }
      if (c["component"] == "nvidia-cuda-driver") {
        driver = true;
        CHECK(c["version"] == "580.126.16");
        CHECK(c["artifacts"].empty()); // from the CUDA repository on Ubuntu, not a .run
        REQUIRE(c["packages"].size() == 2);
        CHECK(c["packages"][0]["held"] == true);
        CHECK(c["packages"][1]["name"] == "nvidia-open");
      }
    }
    CHECK(fm);
    CHECK(driver);
    REQUIRE(doc["modules"].size() >= 4);
    for (const auto& mod : doc["modules"]) {
      CHECK(mod["kernel"] == kNextBoot);
      CHECK(mod["sha256"].get<std::string>().size() == 64);
      CHECK(mod["path"].get<std::string>().starts_with(std::string("/lib/modules/") + kNextBoot + "/updates/dkms/"));
    }
    CHECK(doc["cache"]["entries"].size() == 1);
    CHECK(doc["cache"]["removed_files"] == 1);
    CHECK(fs::is_empty(m.root / "var/cache/hpcbake"));
    CHECK_FALSE(
        fs::exists(fs::symlink_status(m.root / "etc/systemd/system/multi-user.target.wants/hpcbake-resume.service")));
    CHECK(r->disabled_units.size() == 1);
  }
  SUBCASE("the deprovision runs after the manifest and the cleanup") {
    SnapshotRunner runner(m.root);
    auto rq = m.request(seal::Deprovision::yes);
    rq.runner = &runner;
    auto r = seal::seal(rq);
    REQUIRE(r.has_value());
    REQUIRE(r->sealed);
    REQUIRE(runner.argvs.size() == 1);
    CHECK(runner.argvs[0] == seal::deprovision_argv());
    CHECK(runner.manifest_present[0]);
    CHECK(runner.cache_empty[0]);
  }
  SUBCASE("a failing agent is an error that says the manifest is written") {
    SnapshotRunner runner(m.root, 1);
    auto rq = m.request(seal::Deprovision::yes);
    rq.runner = &runner;
    auto r = seal::seal(rq);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("waagent -force -deprovision+user exited with 1") != std::string::npos);
    CHECK(r.error().hint.find("image-manifest.json is written") != std::string::npos);
  }
  SUBCASE("without --deprovision nothing is run") {
    auto r = seal::seal(m.request());
    REQUIRE(r.has_value());
    CHECK(r->sealed);
    CHECK(m.runner.calls.empty());
    CHECK_FALSE(r->deprovisioned);
  }
  SUBCASE("no agent installed: refused before anything changes") {
    fs::remove(m.root / "usr/sbin/waagent");
    auto r = seal::seal(m.request(seal::Deprovision::yes));
    REQUIRE(r.has_value());
    CHECK_FALSE(r->sealed);
    CHECK(has(r->report, "waagent.missing"));
    CHECK(m.runner.calls.empty());
  }
}

TEST_CASE("seal: with Secure Boot on, every module must be signed by a key the next-boot kernel trusts") {
  Machine m("secure-boot");
  test::write(m.root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
              std::string("\x06\x00\x00\x00\x01", 5));
  // Unsigned (what a build with --sign off makes): the kernel would refuse every one, the plan's
  // DKMS modules and every other out-of-tree module of the next-boot kernel alike, once each.
  auto rep = m.check();
  CHECK(has(rep, "module.secure-boot", "nvidia.ko: unsigned: Secure Boot is on"));
  const auto first = ids(rep);
  INFO(fmt::format("{}", fmt::join(first, ", ")));
  CHECK(std::count(first.begin(), first.end(), "module.secure-boot") == static_cast<long>(rep.out_of_tree.size()));
  CHECK(rep.out_of_tree.size() == kModules.size());
  CHECK(rep.modules.size() >= 4);

  // Secure Boot's state unknown (efivarfs not mounted): checked all the same, saying why.
  fs::remove(m.root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c");
  rep = m.check();
  CHECK(has(rep, "module.secure-boot", "its state is unknown"));
  test::write(m.root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
              std::string("\x06\x00\x00\x00\x01", 5));

  // Signed by hpcbake's key, not enrolled: still refused, with the enrollment to do.
  auto key = driver::ensure_signing_key(m.root / "root/keys", "hpcbake module signing key");
  REQUIRE(key.has_value());
  for (const auto& mod : kModules)
    REQUIRE(
        test::sign_ko(m.root / "lib/modules" / kNextBoot / "updates/dkms" / (mod + ".ko"), key->key, key->cert_der));
  rep = m.check();
  CHECK(has(rep, "module.secure-boot", "signed by 'hpcbake module signing key'"));
  for (const auto& r : rep.refusals)
    if (r.id == "module.secure-boot") CHECK(r.hint.find("mokutil --import") != std::string::npos);

  // Enrolled as a MOK (shim's MokListRT, trusted): every module loads, and the manifest says why.
  const std::string der = test::slurp(key->cert_der);
  std::string list("\xa1\x59\xc0\xa5\xe4\x94\xa7\x4a\x87\xb5\xab\x15\x5c\x2b\xf0\x72", 16);
  const auto le32 = [](std::size_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i)
      s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
  };
  list += le32(28 + 16 + der.size()) + le32(0) + le32(16 + der.size()) + std::string(16, '\x11') + der;
  test::write(m.root / "sys/firmware/efi/mok-variables/MokListRT", list);
  test::write(m.root / "sys/firmware/efi/mok-variables/MokListTrustedRT", std::string(1, '\x01'));
  rep = m.check();
  CHECK_FALSE(has(rep, "module.secure-boot"));
  for (const auto& mc : rep.modules) {
    CHECK(mc.ok);
    CHECK(mc.trust.find("enrolled as a MOK") != std::string::npos);
  }
}

TEST_CASE("seal: with Secure Boot on, a package's out-of-tree module the plan does not name must be trusted too") {
  Machine m("secure-boot-packaged");
  test::write(m.root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
              std::string("\x06\x00\x00\x00\x01", 5));
  // The kernel's own key signs its in-tree modules; the plan's DKMS modules are signed by it too,
  // so only what a package installed is left to check.
  auto kernel_key = driver::ensure_signing_key(m.root / "root/kernel-key", "Build time autogenerated kernel key");
  REQUIRE(kernel_key.has_value());
  const fs::path dir = m.root / "lib/modules" / kNextBoot;
  for (const char* sub : {"kernel/fs/ext4/ext4.ko", "kernel/crypto/cryptd.ko"}) {
    test::write_ko(dir / sub, fs::path(sub).stem().string(), kNextBoot, true);
    REQUIRE(test::sign_ko(dir / sub, kernel_key->key, kernel_key->cert_der));
  }
  for (const auto& mod : kModules)
    REQUIRE(test::sign_ko(dir / "updates/dkms" / (mod + ".ko"), kernel_key->key, kernel_key->cert_der));
  // DOCA-OFED's mlx5_ib, from a package, under updates/: unsigned.
  const std::string mlx5 =
      fmt::format("/lib/modules/{}/updates/mlnx-ofa_kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko", kNextBoot);
  test::write_ko(m.root / mlx5.substr(1), "mlx5_ib", kNextBoot);
  test::write(m.root / "var/lib/dpkg/info/mlnx-ofed-kernel-modules.list", "/.\n" + mlx5 + "\n");
  auto rep = m.check();
  INFO(fmt::format("{}", fmt::join(ids(rep), ", ")));
  CHECK(has(rep, "module.secure-boot",
            mlx5 + " (package mlnx-ofed-kernel-modules): out-of-tree module of the next-boot kernel, unsigned"));
  CHECK(std::count_if(rep.refusals.begin(), rep.refusals.end(),
                      [](const seal::Refusal& r) { return r.id == "module.secure-boot"; }) == 1);
  for (const auto& r : rep.refusals)
    if (r.id == "module.secure-boot") CHECK(r.hint.find("sign-file sha256") != std::string::npos);
  REQUIRE(rep.out_of_tree.size() == kModules.size() + 1);

  // Signed by some vendor key the kernel does not trust: refused, naming the signer and serial.
  auto vendor = driver::ensure_signing_key(m.root / "root/vendor-key", "Mellanox Technologies signing key");
  REQUIRE(vendor.has_value());
  REQUIRE(test::sign_ko(m.root / mlx5.substr(1), vendor->key, vendor->cert_der));
  auto vendor_cert = driver::read_certificate(vendor->cert_der);
  REQUIRE(vendor_cert.has_value());
  rep = m.check();
  CHECK(has(rep, "module.secure-boot",
            fmt::format("signer 'Mellanox Technologies signing key', serial {}", vendor_cert->serial)));

  // Signed by the kernel's key: it loads, and seal has nothing left to refuse about modules.
  test::write_ko(m.root / mlx5.substr(1), "mlx5_ib", kNextBoot);
  REQUIRE(test::sign_ko(m.root / mlx5.substr(1), kernel_key->key, kernel_key->cert_der));
  rep = m.check();
  CHECK_FALSE(has(rep, "module.secure-boot"));
  for (const auto& oc : rep.out_of_tree) {
    INFO(oc.path);
    CHECK(oc.loads);
    CHECK(oc.trust.find("the kernel's own key") != std::string::npos);
  }
}

TEST_CASE("seal: a plan module reached through a weak-updates link is refused once, not again as out-of-tree") {
  Machine m("secure-boot-weak");
  test::write(m.root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
              std::string("\x06\x00\x00\x00\x01", 5));
  // RHEL's weak-updates/: the next-boot kernel reaches nvidia.ko of another kernel through a link.
  const fs::path dir = m.root / "lib/modules" / kNextBoot;
  fs::remove(dir / "updates/dkms/nvidia.ko");
  test::write_ko(m.root / "lib/modules/6.8.0-1010-azure/extra/nvidia.ko", "nvidia", kNextBoot);
  fs::create_directories(dir / "weak-updates");
  fs::create_symlink("/lib/modules/6.8.0-1010-azure/extra/nvidia.ko", dir / "weak-updates/nvidia.ko");
  const auto rep = m.check();
  INFO(fmt::format("{}", fmt::join(ids(rep), ", ")));
  CHECK(has(rep, "module.secure-boot", "/lib/modules/6.8.0-1010-azure/extra/nvidia.ko: unsigned"));
  // Once: the out-of-tree check knows the link's target is the plan module already refused.
  CHECK(std::count_if(rep.refusals.begin(), rep.refusals.end(), [](const seal::Refusal& r) {
          return r.id == "module.secure-boot" && r.message.find("/nvidia.ko") != std::string::npos;
        }) == 1);
  bool recorded = false;
  for (const auto& oc : rep.out_of_tree)
    recorded |= oc.path == fmt::format("/lib/modules/{}/weak-updates/nvidia.ko", kNextBoot) && oc.name == "nvidia";
  CHECK(recorded);
}

TEST_CASE("seal: Secure Boot off here, the image's db body asked for: every module must load on the image's VMs") {
  Machine m("image-db");
  // The db route's build VM: Secure Boot off, so modules load while verify runs.
  test::write(m.root / "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
              std::string("\x06\x00\x00\x00\x00", 5));
  auto key = driver::ensure_signing_key(m.root / "root/keys", "hpcbake module signing key");
  REQUIRE(key.has_value());
  const fs::path dir = m.root / "lib/modules" / kNextBoot;
  for (const auto& mod : kModules)
    REQUIRE(test::sign_ko(dir / "updates/dkms" / (mod + ".ko"), key->key, key->cert_der));
  // DOCA-OFED's mlx5_ib from NVIDIA's package: unsigned here.
  const std::string mlx5 =
      fmt::format("/lib/modules/{}/updates/mlnx-ofa_kernel/drivers/infiniband/hw/mlx5/mlx5_ib.ko", kNextBoot);
  test::write_ko(m.root / mlx5.substr(1), "mlx5_ib", kNextBoot);
  test::write(m.root / "var/lib/dpkg/info/mlnx-ofed-kernel-modules.list", "/.\n" + mlx5 + "\n");
  auto db_check = [&] {
    m.refresh();
    auto rq = m.request();
    rq.uefi_db = true;
    rq.uefi_db_cert = key->cert_der;
    auto rep = seal::check(rq);
    REQUIRE(rep.has_value());
    return *rep;
  };
  const auto count = [](const seal::SealReport& rep) {
    return std::count_if(rep.refusals.begin(), rep.refusals.end(),
                         [](const seal::Refusal& r) { return r.id == "module.image-secure-boot"; });
  };
  // Without the body asked for, and a plan that signs nothing: recorded, not refused (as before).
  auto rep = m.check();
  CHECK(count(rep) == 0);
  CHECK_FALSE(has(rep, "module.secure-boot"));

  // The body asked for: judged with Secure Boot on and the certificate in db (Ubuntu's kernel trusts
  // the platform keyring), the plan's modules load and the package's unsigned one is refused.
  rep = db_check();
  INFO(fmt::format("{}", fmt::join(ids(rep), ", ")));
  CHECK(has(rep, "module.image-secure-boot",
            mlx5 + " (package mlnx-ofed-kernel-modules): out-of-tree module of the next-boot kernel, unsigned"));
  CHECK(has(rep, "module.image-secure-boot", "Secure Boot is off here"));
  CHECK(count(rep) == 1);
  for (const auto& mc : rep.modules)
    CHECK(mc.trust.find("in the UEFI db") != std::string::npos);

  // Signed by the vendor's key: still refused, naming the signer.
  auto vendor = driver::ensure_signing_key(m.root / "root/vendor-key", "Mellanox Technologies signing key");
  REQUIRE(vendor.has_value());
  REQUIRE(test::sign_ko(m.root / mlx5.substr(1), vendor->key, vendor->cert_der));
  CHECK(has(db_check(), "module.image-secure-boot", "signer 'Mellanox Technologies signing key'"));

  // Signed by the db certificate: nothing left to refuse.
  test::write_ko(m.root / mlx5.substr(1), "mlx5_ib", kNextBoot);
  REQUIRE(test::sign_ko(m.root / mlx5.substr(1), key->key, key->cert_der));
  CHECK(count(db_check()) == 0);

  // A kernel that does not trust db for modules (module_keyrings.platform false): the db cannot help.
  m.store_plan({}, "ubuntu-22.04", [](plan::Plan& p) { p.platform_keyring = false; });
  install::Journal j;
  j.size = "Standard_ND96isr_H100_v5";
  j.distro = "ubuntu-22.04";
  j.state = install::RunState::complete;
  m.journal(j);
  rep = db_check();
  CHECK(count(rep) == static_cast<long>(kModules.size()) + 1);
  CHECK(has(rep, "module.image-secure-boot", "nvidia.ko"));
  for (const auto& r : rep.refusals)
    if (r.id == "module.image-secure-boot" && r.message.find("updates/dkms") != std::string::npos)
      CHECK(r.hint.find("module_keyrings.platform is false") != std::string::npos);
}
