// The userspace components (kind userspace): placeholders, which sizes get them, the steps in
// order, and the plan JSON of the new step kinds read back.
#include "manifest/manifests.hpp"
#include "plan/plan.hpp"
#include "plan/userspace.hpp"

#include "helpers.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace hpcbake;

namespace {

manifest::ComponentManifest component(const std::string& id, manifest::AppliesTo applies,
                                      std::vector<std::string> after = {}) {
  manifest::ComponentManifest c;
  c.id = c.component = id;
  c.file = (test::shipped_manifests().dir / "components" / (id + ".yaml")).string();
  c.kind = manifest::ComponentKind::userspace;
  c.applies_to = applies;
  c.after = std::move(after);
  return c;
}

// A manifest set with two userspace components in a profile "hpc-test": an unpacked tarball with
// a module (for InfiniBand sizes), and a git source built against it (for NVIDIA GPU sizes).
manifest::Manifests with_userspace() {
  auto m = test::shipped_manifests();
  auto mpi = component("mpi-test", manifest::AppliesTo::infiniband);
  mpi.module = "mpi/test";
  manifest::ComponentVariant v;
  v.distros = {"ubuntu-22.04"};
  v.version = "1.0";
  v.prefix = "/opt/mpi-test-1.0";
  v.artifacts = {{"mpi-test-1.0.tar.gz", {"https://example.invalid/mpi-test-1.0.tar.gz"}, std::string(64, 'a'), 10}};
  v.unpack = manifest::Unpack{"mpi-test-1.0.tar.gz", "{prefix}", 1};
  v.modulefile = "#%Module1.0\nprepend-path PATH {prefix}/bin\nif { [info exists env(X)] } { puts stderr x }\n";
  mpi.variants.push_back(v);
  auto tests = component("tests-test", manifest::AppliesTo::nvidia_gpu, {"mpi-test", "nvidia-cuda-toolkit"});
  manifest::ComponentVariant t;
  t.distros = {"ubuntu-22.04"};
  t.version = "2.0";
  t.prefix = "/opt/tests-test";
  t.packages = {"build-essential"};
  t.git = manifest::GitSource{"https://example.invalid/t.git", std::string(40, 'b'), "/opt/tests-test"};
  t.build = manifest::Build{"/opt/tests-test",
                            {"CUDA_HOME={cuda_home}"},
                            {{"make", "MPI_HOME={prefix:mpi-test}", "NVCC_GENCODE={gencode}"}},
                            "{prefix}/build/all_reduce_perf"};
  tests.variants.push_back(t);
  m.components.push_back(mpi);
  m.components.push_back(tests);
  manifest::ProfileManifest p;
  p.id = "hpc-test";
  p.file = "profiles/hpc-test.yaml";
  p.components = {"nvidia-cuda-toolkit", "mpi-test", "tests-test"};
  m.profiles.push_back(p);
  return m;
}

Result<plan::Plan> make(const manifest::Manifests& m, const std::string& size) {
  plan::PlanRequest r;
  r.size = size;
  r.distro = "ubuntu-22.04";
  r.profile = "hpc-test";
  return plan::make_plan(m, r);
}

const plan::Step* find(const plan::Plan& p, const std::string& id) {
  for (const auto& s : p.steps)
    if (s.id == id) return &s;
  return nullptr;
}

std::size_t index_of(const plan::Plan& p, const std::string& id) {
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].id == id) return i;
  return p.steps.size();
}

} // namespace

TEST_CASE("placeholders resolve to the plan's values and unknown ones are named") {
  plan::Placeholders ph{"/opt/x", "1.2", {{"hpcx", "/opt/hpcx"}}, "H100", {"impi.sh"}};
  CHECK(plan::substitute("{prefix}/bin:{prefix:hpcx}/ompi v{version}", ph, "w").value() ==
        "/opt/x/bin:/opt/hpcx/ompi v1.2");
  CHECK(plan::substitute("NVCC_GENCODE={gencode}", ph, "w").value() ==
        "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90");
  CHECK(plan::substitute("${HOME} and { puts x }", ph, "w").value() == "${HOME} and { puts x }");
  auto unknown = plan::substitute("{prefx}", ph, "components/x.yaml");
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().message.find("unknown placeholder {prefx}") != std::string::npos);
  auto missing = plan::substitute("{prefix:openmpi}", ph, "w");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find("does not install") != std::string::npos);
  ph.gpu_model = "";
  CHECK_FALSE(plan::substitute("{gencode}", ph, "w").has_value());
  CHECK(plan::substitute("{artifact:impi.sh}", ph, "w").value() == plan::artifact_ref("impi.sh"));
  CHECK_FALSE(plan::substitute("{artifact:other.sh}", ph, "w").has_value());
  CHECK_FALSE(plan::substitute("x={artifact:impi.sh}", ph, "w").has_value()); // a whole argument only
  CHECK(plan::compute_capability("A100") == "8.0");
  CHECK_FALSE(plan::compute_capability("MI300X").has_value());
}

TEST_CASE("a GPU and InfiniBand size gets both userspace components, in after order, with resolved argv") {
  const auto m = with_userspace();
  auto p = make(m, "Standard_ND96isr_H100_v5");
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  const auto* base = find(*p, "packages:userspace-base");
  REQUIRE(base);
  // environment-modules, git (a checkout) and the distro's compilers (a build on the node)
  std::vector<std::string> want = {"environment-modules", "git"};
  for (const auto& d : m.distros)
    if (d.id == "ubuntu-22.04")
      want.insert(want.end(), d.userspace_build_packages.begin(), d.userspace_build_packages.end());
  CHECK(base->as<plan::PackagesStep>()->packages == want);
  CHECK(std::find(want.begin(), want.end(), "gfortran") != want.end());
  const auto* unpack = find(*p, "unpack:mpi-test");
  REQUIRE(unpack);
  CHECK(unpack->as<plan::UnpackStep>()->dest == "/opt/mpi-test-1.0");
  CHECK(std::count(unpack->after.begin(), unpack->after.end(), "artifact:mpi-test-1.0.tar.gz") == 1);
  const auto* module = find(*p, "config:module-mpi-test");
  REQUIRE(module);
  CHECK(module->as<plan::ConfigStep>()->path == "/usr/share/modules/modulefiles/mpi/test");
  CHECK(module->as<plan::ConfigStep>()->content.find("prepend-path PATH /opt/mpi-test-1.0/bin") != std::string::npos);
  const auto* git = find(*p, "git-source:tests-test");
  REQUIRE(git);
  CHECK(git->as<plan::GitSourceStep>()->commit == std::string(40, 'b'));
  const auto* build = find(*p, "build:tests-test");
  REQUIRE(build);
  const auto& b = *build->as<plan::BuildStep>();
  CHECK(b.commands.front() == std::vector<std::string>{"make", "MPI_HOME=/opt/mpi-test-1.0",
                                                       "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"});
  CHECK(b.env == std::vector<std::string>{"CUDA_HOME=/usr/local/cuda"});
  CHECK(b.creates == "/opt/tests-test/build/all_reduce_perf");
  // after: the module of mpi-test and the CUDA toolkit come first.
  CHECK(index_of(*p, "config:module-mpi-test") < index_of(*p, "build:tests-test"));
  CHECK(std::count(git->after.begin(), git->after.end(), "packages:nvidia-cuda-toolkit") == 1);
  CHECK(std::count(git->after.begin(), git->after.end(), "config:module-mpi-test") == 1);
}

TEST_CASE("a CPU InfiniBand size gets the InfiniBand component and a note for the GPU one") {
  const auto m = with_userspace();
  auto p = make(m, "Standard_HB176rs_v4");
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  CHECK(find(*p, "unpack:mpi-test"));
  CHECK_FALSE(find(*p, "build:tests-test"));
  CHECK(std::any_of(p->notes.begin(), p->notes.end(), [](const std::string& n) {
    return n.find("tests-test is for NVIDIA GPU sizes") != std::string::npos;
  }));
}

TEST_CASE("a required userspace component without a variant for the distro refuses the plan, naming it") {
  auto m = with_userspace();
  for (auto& c : m.components)
    if (c.id == "mpi-test") c.variants.front().distros = {"ubuntu-24.04"};
  auto p = make(m, "Standard_HB176rs_v4");
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().message.find("profile hpc-test needs mpi-test") != std::string::npos);
  CHECK(p.error().message.find("not pinned for ubuntu-22.04") != std::string::npos);
}

TEST_CASE("unpack, git-source and build steps read back from plan JSON unchanged") {
  const auto m = with_userspace();
  auto p = make(m, "Standard_ND96isr_H100_v5");
  REQUIRE(p.has_value());
  auto back = plan::plan_from_json(plan::to_json(*p, plan::Urls::full), "plan.json");
  REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  for (const char* id : {"unpack:mpi-test", "git-source:tests-test", "build:tests-test"}) {
    CAPTURE(id);
    REQUIRE(find(*back, id));
    CHECK(find(*back, id)->detail() == find(*p, id)->detail());
  }
}

TEST_CASE("a git source an offline bundle carries is planned from its git file, shown and read back") {
  const auto m = with_userspace();
  plan::PlanRequest r;
  r.size = "Standard_ND96isr_H100_v5";
  r.distro = "ubuntu-22.04";
  r.profile = "hpc-test";
  const std::string file = "git/tests-test-" + std::string(40, 'b') + ".bundle";
  r.git_bundles[std::string(40, 'b')] = {file, std::string(64, 'c'), 1234};
  r.git_bundles[std::string(40, 'd')] = {"git/other.bundle", std::string(64, 'e'), 1}; // another commit: unused
  auto p = plan::make_plan(m, r);
  REQUIRE_MESSAGE(p.has_value(), (p ? "" : p.error().message));
  const auto* step = find(*p, "git-source:tests-test");
  REQUIRE(step);
  const auto* g = step->as<plan::GitSourceStep>();
  REQUIRE(g->bundle.has_value());
  CHECK(g->bundle->path == file);
  CHECK(g->bundle->sha256 == std::string(64, 'c'));
  CHECK(step->title.find("from the git bundle in the bundle") != std::string::npos);
  CHECK(step->detail()["bundle"] == nlohmann::json{{"file", file}, {"sha256", std::string(64, 'c')}, {"size", 1234}});
  auto back = plan::plan_from_json(plan::to_json(*p, plan::Urls::full), "plan.json");
  REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  CHECK(find(*back, "git-source:tests-test")->detail() == step->detail());
  // Without the bundle's file the step has no "bundle" and an offline install is refused up front,
  // naming the source.
  auto plain = make(m, "Standard_ND96isr_H100_v5");
  REQUIRE(plain.has_value());
  CHECK_FALSE(find(*plain, "git-source:tests-test")->detail().contains("bundle"));
  auto refused = plan::offline_installable(*plain);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("clones the git source of tests-test (https://example.invalid/t.git at " +
                                     std::string(40, 'b') + ")") != std::string::npos);
}
