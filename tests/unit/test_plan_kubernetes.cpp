// The kubernetes profile (profiles/kubernetes.yaml, `kubernetes: true`): containerd alone, its
// container-runtime step marked for the default runtime and CDI, the verify step expecting the
// device-plugin checks, and both surviving the stored plan's JSON.
#include "plan/plan.hpp"

#include "shipped.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

namespace {

Result<plan::Plan> plan_for(const std::string& profile) {
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "ubuntu-24.04";
  r.profile = profile;
  return plan::make_plan(test::shipped_manifests(), r);
}

} // namespace

TEST_CASE("kubernetes profile: containerd made the nvidia default with CDI, in the plan and its JSON") {
  auto p = plan_for("kubernetes");
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  const auto* step = p->find("config:container-runtime");
  REQUIRE(step);
  const auto* cr = step->as<plan::ContainerRuntimeStep>();
  REQUIRE(cr);
  CHECK(cr->kubernetes);
  CHECK(cr->engines == std::vector<std::pair<std::string, std::string>>{{"containerd", "/etc/containerd/config.toml"}});
  const auto doc = plan::to_json(*p, plan::Urls::full);
  auto back = plan::plan_from_json(doc, "plan.json");
  REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  CHECK(plan::to_json(*back, plan::Urls::full) == doc);
  CHECK(back->find("config:container-runtime")->as<plan::ContainerRuntimeStep>()->kubernetes);
  const auto* verify = back->find("verify");
  REQUIRE(verify);
  CHECK(verify->as<plan::VerifyStep>()->expect.container_kubernetes);
  CHECK(plan::render_text(*p).find("kubernetes: containerd's default runtime nvidia, CDI enabled") !=
        std::string::npos);

  // The containers profile: neither, and no `kubernetes` key in its JSON (its golden unchanged).
  auto c = plan_for("containers");
  REQUIRE(c.has_value());
  CHECK_FALSE(c->find("config:container-runtime")->as<plan::ContainerRuntimeStep>()->kubernetes);
  const auto cdoc = plan::to_json(*c, plan::Urls::full);
  CHECK(cdoc.dump().find("kubernetes") == std::string::npos);
}
