// Overlays (manifest/overlay.hpp): values set over the shipped manifests, read as strictly as the
// shipped files, and the driver couplings lint checks with plan's own rule (driver_coupling).
// The version the overlays set, 580.126.20, is one the shipped manifests already pin
// (components/nvidia-cuda-driver.yaml: the ubuntu-24.04 aarch64 variant and, in its notes,
// Azure/azhpc-images@8e9d055fb9e1f7385da734969793861c447958a1 versions.json
// nvidia.ubuntu24.04.x86_64.baremetal_3p.nvidia_h100).
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;
namespace fs = std::filesystem;

namespace {

const fs::path& shipped() {
  static const fs::path dir = test::source_dir() / "manifests";
  return dir;
}

manifest::LintResult lint_with(const std::vector<fs::path>& overlays) {
  return manifest::lint_manifests(shipped(), "nd96isr_h100_v5", overlays);
}

std::string all(const std::vector<manifest::Diagnostic>& diags) {
  std::string out;
  for (const auto& d : diags)
    out += d.str() + "\n";
  return out;
}

const manifest::ComponentVariant& first_variant(const manifest::Manifests& m, const char* id) {
  const auto* c = m.find_component(id);
  REQUIRE(c);
  return c->variants.front();
}

// The driver moved with every component that follows it (the overlay a user writes).
const char* kCoupled = R"(schema: 1
overrides:
  - component: nvidia-cuda-driver
    set:
      variants[0].version: "580.126.20"
      variants[0].packages: ["nvidia-driver-pinning-580.126.20"]
  - file: components/nvidia-fabricmanager.yaml
    set:
      variants[0].version: "580.126.20"
      variants[0].packages: ["nvidia-fabricmanager=580.126.20-1"]
  - component: nvidia-peermem
    set:
      variants[0].version: "580.126.20"
)";

} // namespace

TEST_CASE("an overlay sets values of the shipped manifests and each is remembered with its line") {
  const auto ov = test::scratch("overlay-coupled") / "driver.yaml";
  test::write(ov, kCoupled);
  const auto r = lint_with({ov});
  CAPTURE(all(r.diagnostics));
  CHECK(r.diagnostics.empty());
  CHECK(first_variant(r.manifests, "nvidia-cuda-driver").version == "580.126.20");
  CHECK(first_variant(r.manifests, "nvidia-fabricmanager").packages ==
        std::vector<std::string>{"nvidia-fabricmanager=580.126.20-1"});
  REQUIRE(r.manifests.overrides.size() == 5);
  const auto& o = r.manifests.overrides.front();
  CHECK(o.what() == "components/nvidia-cuda-driver.yaml:variants[0].version");
  CHECK(o.value == "580.126.20");
  CHECK(o.overlay == ov.string());
  CHECK(o.line == 5);
  // Without the overlay, the shipped value.
  CHECK(first_variant(lint_with({}).manifests, "nvidia-cuda-driver").version == "580.173.02");
}

TEST_CASE("an overlay that moves the driver alone is refused with plan's message at the overlay's line") {
  const auto ov = test::scratch("overlay-driver-only") / "driver.yaml";
  test::write(ov, R"(schema: 1
overrides:
  - component: nvidia-cuda-driver
    set:
      variants[0].version: "580.126.20"
      variants[0].packages: ["nvidia-driver-pinning-580.126.20"]
)");
  const auto r = lint_with({ov});
  const auto text = all(r.diagnostics);
  CAPTURE(text);
  // Exactly what plan says (manifest::driver_coupling), for Fabric Manager and nvidia-peermem.
  const auto base = lint_with({});
  const auto* fm = base.manifests.find_component("nvidia-fabricmanager");
  const auto* pm = base.manifests.find_component("nvidia-peermem");
  REQUIRE((fm && pm));
  const auto fm_break = manifest::driver_coupling(*fm, fm->variants[0], "580.126.20", "ubuntu-24.04");
  const auto pm_break = manifest::driver_coupling(*pm, pm->variants[0], "580.126.20", "ubuntu-24.04");
  REQUIRE((fm_break && pm_break));
  CHECK(text.find(ov.string() + ":5:7: " + fm_break->message) != std::string::npos);
  CHECK(text.find(ov.string() + ":5:7: " + pm_break->message) != std::string::npos);
  CHECK(pm_break->message.starts_with("nvidia-peermem 580.173.02 ("));
}

TEST_CASE("a driver version without its pinning package is refused") {
  const auto ov = test::scratch("overlay-pinning") / "driver.yaml";
  test::write(ov, "schema: 1\noverrides:\n  - component: nvidia-cuda-driver\n    set:\n"
                  "      variants[0].version: \"580.126.20\"\n");
  const auto text = all(lint_with({ov}).diagnostics);
  CAPTURE(text);
  CHECK(text.find(":5:7: the version-pinning package nvidia-driver-pinning-580.173.02 (") != std::string::npos);
  CHECK(text.find("does not select the driver version 580.126.20 for ubuntu-24.04") != std::string::npos);
}

TEST_CASE("an overlay is read as strictly as a manifest") {
  const auto dir = test::scratch("overlay-strict");
  SUBCASE("unknown key") {
    test::write(dir / "o.yaml", "schema: 1\noverrides:\n  - component: nvidia-peermem\n    sett:\n"
                                "      variants[0].version: \"1\"\n");
    const auto text = all(lint_with({dir / "o.yaml"}).diagnostics);
    CAPTURE(text);
    CHECK(text.find((dir / "o.yaml").string() + ":4:5: unknown key 'overrides[0].sett'") != std::string::npos);
  }
  SUBCASE("a path the file does not have") {
    test::write(dir / "o.yaml", "schema: 1\noverrides:\n  - component: nvidia-peermem\n    set:\n"
                                "      variants[99].version: \"1\"\n");
    const auto text = all(lint_with({dir / "o.yaml"}).diagnostics);
    CAPTURE(text);
    CHECK(text.find(":5:7: components/nvidia-peermem.yaml has no value at 'variants[99].version' (no "
                    "'variants[99]')") != std::string::npos);
  }
  SUBCASE("a malformed path") {
    test::write(dir / "o.yaml", "schema: 1\noverrides:\n  - component: nvidia-peermem\n    set:\n"
                                "      \"variants[0]..version\": \"1\"\n");
    CHECK(all(lint_with({dir / "o.yaml"}).diagnostics).find("is no value path") != std::string::npos);
  }
  SUBCASE("a value of the wrong type") {
    test::write(dir / "o.yaml", "schema: 1\noverrides:\n  - component: nvidia-peermem\n    set:\n"
                                "      variants[0].version: [\"1\"]\n");
    const auto text = all(lint_with({dir / "o.yaml"}).diagnostics);
    CAPTURE(text);
    CHECK(text.find(":5:7: 'variants[0].version' in components/nvidia-peermem.yaml is a string, and the overlay "
                    "gives a list") != std::string::npos);
  }
  SUBCASE("a value the reader refuses is reported in the overlay") {
    test::write(dir / "o.yaml", "schema: 1\noverrides:\n  - size: Standard_ND96isr_H100_v5\n    set:\n"
                                "      gpu.count: 99999999999\n");
    const auto text = all(lint_with({dir / "o.yaml"}).diagnostics);
    CAPTURE(text);
    CHECK(text.find((dir / "o.yaml").string() + ":5:18: 'gpu.count' is 99999999999: must be from 1 to 1024") !=
          std::string::npos);
  }
  SUBCASE("a manifest that does not exist") {
    test::write(dir / "o.yaml", "schema: 1\noverrides:\n  - component: nvidia-nothing\n    set:\n"
                                "      version: \"1\"\n");
    CHECK(all(lint_with({dir / "o.yaml"}).diagnostics).find("components/nvidia-nothing.yaml is not a manifest under") !=
          std::string::npos);
  }
  SUBCASE("two targets in one override") {
    test::write(dir / "o.yaml", "schema: 1\noverrides:\n  - component: nvidia-peermem\n    distro: ubuntu-24.04\n"
                                "    set:\n      version: \"1\"\n");
    CHECK(
        all(lint_with({dir / "o.yaml"}).diagnostics).find("an override names one manifest, not component and distro") !=
        std::string::npos);
  }
  SUBCASE("an overlay that does not exist") {
    CHECK(all(lint_with({dir / "missing.yaml"}).diagnostics).find("overlay does not exist") != std::string::npos);
  }
}

TEST_CASE("overlays apply in order: the later value wins, a directory's files in name order") {
  const auto dir = test::scratch("overlay-order");
  const std::string body = "schema: 1\noverrides:\n  - component: nvidia-peermem\n    set:\n"
                           "      variants[0].notes: ";
  test::write(dir / "d/20-second.yaml", body + "second\n");
  test::write(dir / "d/10-first.yaml", body + "first\n");
  test::write(dir / "d/README", "not an overlay\n");
  test::write(dir / "last.yaml", body + "last\n");
  auto r = lint_with({dir / "d"});
  CAPTURE(all(r.diagnostics));
  CHECK(first_variant(r.manifests, "nvidia-peermem").notes == "second");
  REQUIRE(r.manifests.overrides.size() == 1);
  CHECK(r.manifests.overrides[0].overlay == (dir / "d/20-second.yaml").string());
  r = lint_with({dir / "d", dir / "last.yaml"});
  CHECK(first_variant(r.manifests, "nvidia-peermem").notes == "last");
  REQUIRE(r.manifests.overrides.size() == 1);
  CHECK(r.manifests.overrides[0].overlay == (dir / "last.yaml").string());
}

TEST_CASE("a plan made from an overlay lists its overrides, and they survive the stored plan's JSON") {
  const auto ov = test::scratch("overlay-plan") / "driver.yaml";
  test::write(ov, kCoupled);
  auto m = manifest::load_manifests(shipped(), "Standard_ND96isr_H100_v5");
  REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "ubuntu-24.04";
  CHECK(plan::to_json(*plan::make_plan(*m, r)).contains("overrides") == false);
  const auto merged = lint_with({ov});
  REQUIRE(merged.diagnostics.empty());
  auto p = plan::make_plan(merged.manifests, r);
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  REQUIRE(p->overrides.size() == 5);
  CHECK(plan::render_text(*p).find("override: components/nvidia-peermem.yaml:variants[0].version = 580.126.20 (from " +
                                   ov.string() + ":13)") != std::string::npos);
  const auto doc = plan::to_json(*p, plan::Urls::full);
  auto back = plan::plan_from_json(doc, "plan.json");
  REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  CHECK(plan::to_json(*back, plan::Urls::full) == doc);
  // --driver-version: the overlay's version is pinned now; the shipped one is not any more.
  r.driver_version = "580.126.20";
  CHECK(plan::make_plan(merged.manifests, r).has_value());
  r.driver_version = "580.173.02";
  const auto refused = plan::make_plan(merged.manifests, r);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("pins no NVIDIA driver 580.173.02 for ubuntu-24.04") != std::string::npos);
}
