// Who signs each module a plan builds (issue 41, item 2): with Secure Boot on (or --sign on), a
// repository driver's DKMS modules are built by hpcbake with its own key, their signer checked.
#include "plan/plan.hpp"

#include "helpers.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace hpcbake;

namespace {
const manifest::Manifests& shipped() {
  return test::shipped_manifests();
}

// The repository's driver asked for: without it, the sizes with no GPUDirect RDMA take Canonical's
// signed precompiled driver by default on Ubuntu (test_plan_canonical.cpp).
Result<plan::Plan> make_signed(const std::string& size, const std::string& distro,
                               plan::DriverSource source = plan::DriverSource::repository) {
  plan::PlanRequest r;
  r.size = size;
  r.distro = distro;
  r.driver_source = source;
  r.signing.mode = driver::SignMode::on;
  r.signing.key_dir = "/var/lib/hpcbake/signing";
  return plan::make_plan(shipped(), r);
}

const plan::Step* find(const plan::Plan& p, const std::string& id) {
  for (const auto& s : p.steps)
    if (s.id == id) return &s;
  return nullptr;
}
} // namespace

TEST_CASE("--sign on: the repository driver's modules are built and signed with hpcbake's key, signer checked") {
  for (const char* size : {"Standard_ND96isr_H100_v5", "Standard_NC24ads_A100_v4", "Standard_NC40ads_H100_v5"})
    for (const char* distro : {"ubuntu-22.04", "ubuntu-24.04"}) {
      CAPTURE(size);
      CAPTURE(distro);
      auto p = make_signed(size, distro);
      REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
      CHECK(p->signing.enabled);
      CHECK(p->signing_route() == plan::SigningRoute::hpcbake_key);
      CHECK(plan::to_json(*p)["signing"]["route"] == "hpcbake-key");
      const auto* drv = find(*p, "driver:nvidia-cuda-driver");
      REQUIRE(drv);
      const auto* pk = drv->as<plan::PackagesStep>();
      REQUIRE(pk);
      REQUIRE(pk->dkms);
      // hpcbake builds them (autoinstall held while the packages go in), with its key.
      CHECK(pk->dkms->sign);
      CHECK(pk->dkms->dkms_name == "nvidia");
      CHECK(drv->detail()["signed_by"] == "hpcbake-key");
      CHECK(drv->detail()["dkms"]["prebuilt"].is_null());
      CHECK(plan::step_lines(*drv).find("signed by: hpcbake's key") != std::string::npos);
      CHECK(plan::step_lines(*drv).find("/etc/dkms/no-autoinstall") != std::string::npos);
      // The key is generated first, and each module's signer is checked against its certificate.
      CHECK(std::find(drv->after.begin(), drv->after.end(), "signing-key") != drv->after.end());
      const auto* check = find(*p, "dkms:nvidia:{kernel}");
      REQUIRE(check);
      CHECK(check->as<plan::DkmsCheckStep>()->check_signer);
      // The plan reads back as it was written.
      auto back = plan::plan_from_json(plan::to_json(*p, plan::Urls::full), "test");
      REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
      CHECK(plan::to_json(*back, plan::Urls::full) == plan::to_json(*p, plan::Urls::full));
      CHECK(back->find("driver:nvidia-cuda-driver")->as<plan::PackagesStep>()->dkms->sign);
    }
}

TEST_CASE("--sign off: the repository's packages build their modules with DKMS's own MOK, and the plan says so") {
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "ubuntu-24.04";
  r.signing.mode = driver::SignMode::off;
  auto p = plan::make_plan(shipped(), r);
  REQUIRE(p.has_value());
  CHECK(p->signing_route() == plan::SigningRoute::none);
  CHECK(plan::to_json(*p)["signing"]["route"] == "none");
  const auto* drv = find(*p, "driver:nvidia-cuda-driver");
  REQUIRE(drv);
  CHECK_FALSE(drv->as<plan::PackagesStep>()->dkms->sign);
  CHECK(drv->detail()["signed_by"] == "dkms-mok");
  CHECK_FALSE(drv->detail().contains("dkms")); // the package manager alone installs them
  CHECK_FALSE(find(*p, "dkms:nvidia:{kernel}")->as<plan::DkmsCheckStep>()->check_signer);
}

TEST_CASE("a .run driver and a DKMS module component say who signs them") {
  auto p = make_signed("Standard_ND96isr_H100_v5", "almalinux-9", plan::DriverSource::automatic);
  REQUIRE(p.has_value());
  const auto* run = find(*p, "driver:nvidia-cuda-driver");
  REQUIRE(run);
  REQUIRE(run->as<plan::RunInstallerStep>());
  CHECK(run->detail()["signed_by"] == "hpcbake-key");
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "almalinux-9";
  r.signing.mode = driver::SignMode::off;
  auto off = plan::make_plan(shipped(), r);
  REQUIRE(off.has_value());
  CHECK(find(*off, "driver:nvidia-cuda-driver")->detail()["signed_by"] == "unsigned");
  CHECK(plan::step_lines(*find(*off, "driver:nvidia-cuda-driver")).find("signed by: nobody") != std::string::npos);
  CHECK(plan::to_string(plan::SignedBy::dkms_mok) == std::string("dkms-mok"));
  CHECK(plan::signed_by_of("unsigned") == plan::SignedBy::unsigned_modules);
  CHECK_FALSE(plan::signed_by_of("canonical").has_value());
}

TEST_CASE("--sign on: DOCA-OFED's DKMS modules on Ubuntu are built with hpcbake's key, EL says who signs them") {
  for (const char* distro : {"ubuntu-22.04", "ubuntu-24.04"}) {
    CAPTURE(distro);
    auto p = make_signed("Standard_ND96isr_H100_v5", distro);
    REQUIRE(p.has_value());
    const auto* doca = find(*p, "driver:doca-ofed");
    REQUIRE(doca);
    const auto* pk = doca->as<plan::PackagesStep>();
    REQUIRE(pk->dkms);
    CHECK(pk->dkms->discovered()); // which modules is known once the packages are unpacked
    CHECK(pk->dkms->sign);
    CHECK(doca->detail()["signed_by"] == "hpcbake-key");
    CHECK(std::find(doca->after.begin(), doca->after.end(), "signing-key") != doca->after.end());
    CHECK(plan::step_lines(*doca).find("every DKMS module they added") != std::string::npos);
    auto back = plan::plan_from_json(plan::to_json(*p, plan::Urls::full), "test");
    REQUIRE(back.has_value());
    CHECK(back->find("driver:doca-ofed")->as<plan::PackagesStep>()->dkms->discovered());
  }
  auto el = make_signed("Standard_ND96isr_H100_v5", "almalinux-9", plan::DriverSource::automatic);
  REQUIRE(el.has_value());
  CHECK_FALSE(find(*el, "driver:doca-ofed")->as<plan::PackagesStep>()->dkms.has_value());
  CHECK(std::any_of(el->notes.begin(), el->notes.end(), [](const std::string& n) {
    return n.find("hpcbake's key does not sign them") != std::string::npos;
  }));
}
