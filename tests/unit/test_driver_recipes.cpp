// Driver recipes are data: the shipped ones load cleanly, and the .run installer's command
// line comes out exactly as NVIDIA's installer expects it, per kernel, flavour and key.
#include "driver/recipe.hpp"
#include "helpers.hpp"

#include <algorithm>
#include <doctest/doctest.h>

using namespace hpcbake::driver;
using hpcbake::manifest::Diagnostic;
using hpcbake::manifest::read_recipes;

namespace {
using K = hpcbake::manifest::ComponentKind;

std::map<hpcbake::manifest::ComponentKind, hpcbake::manifest::Recipe> shipped() {
  std::vector<Diagnostic> diags;
  auto r = read_recipes(test::source_dir() / "drivers", diags);
  for (const auto& d : diags)
    FAIL_CHECK(d.str());
  return r;
}

} // namespace

TEST_CASE("recipes: every shipped recipe loads, one per component kind") {
  const auto r = shipped();
  for (const auto& name : hpcbake::manifest::component_kind_names())
    CHECK_MESSAGE(r.contains(*hpcbake::manifest::parse_component_kind(name)), name);
  CHECK(r.size() == 11);
  CHECK(r.at(K::dcgm).hold);
  CHECK(r.at(K::dcgm).service == "nvidia-dcgm");
  CHECK(r.at(K::fabric_manager).hold);
  CHECK(r.at(K::fabric_manager).service == "nvidia-fabricmanager");
  CHECK(r.at(K::nvidia_driver).service == "nvidia-persistenced");
  CHECK(r.at(K::nvidia_driver).modules ==
        std::vector<std::string>{"nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm"});
  CHECK(r.at(K::peermem).modules_load == std::vector<std::string>{"nvidia-peermem"});
}

TEST_CASE("recipes: the NVIDIA .run command line per kernel, flavour and signing key") {
  const auto r = shipped();
  RunRequest q;
  q.run_file = "/var/cache/hpcbake/sha256/abc";
  q.kernel = "6.8.0-1021-azure";
  q.flavour = "open";
  auto argv = run_installer_argv(r.at(K::nvidia_driver), q);
  REQUIRE(argv.has_value());
  CHECK(*argv == std::vector<std::string>{"sh", "/var/cache/hpcbake/sha256/abc", "--silent", "--dkms", "--no-questions",
                                          "--ui=none", "--no-x-check", "--disable-nouveau", "-m=kernel-open",
                                          "--kernel-name=6.8.0-1021-azure"});
  q.flavour = "proprietary";
  q.signing_key = "/var/lib/hpcbake/signing/signing.key";
  q.signing_cert = "/var/lib/hpcbake/signing/signing.der";
  argv = run_installer_argv(r.at(K::nvidia_driver), q);
  REQUIRE(argv.has_value());
  CHECK(argv->at(8) == "-m=kernel");
  CHECK(argv->back() == "--module-signing-public-key=/var/lib/hpcbake/signing/signing.der");
  CHECK(argv->at(argv->size() - 2) == "--module-signing-secret-key=/var/lib/hpcbake/signing/signing.key");

  q.flavour = "open"; // GRID 20 (NCv6): --kernel-module-type=open, as azhpc-images installs it
  auto grid_open = run_installer_argv(r.at(K::grid_driver), q);
  REQUIRE(grid_open.has_value());
  CHECK(std::find(grid_open->begin(), grid_open->end(), "--kernel-module-type=open") != grid_open->end());
  q.flavour = "gpl-only"; // no such flavour: refused, naming it
  auto grid = run_installer_argv(r.at(K::grid_driver), q);
  REQUIRE_FALSE(grid.has_value());
  CHECK(grid.error().message.find("does not offer the 'gpl-only' kernel modules") != std::string::npos);
  CHECK_FALSE(run_installer_argv(r.at(K::fabric_manager), q).has_value());
}

TEST_CASE("recipes: a broken recipe names file, line and problem") {
  const auto dir = test::scratch("recipes-bad");
  test::write(dir / "nvidia-driver.yaml",
              "schema: 1\nkind: nvidia-driver\ndescription: x\ninstaller: nvidia-run\nholdd: true\n");
  std::vector<Diagnostic> diags;
  auto r = read_recipes(dir, diags);
  CHECK(r.empty());
  std::string all;
  for (const auto& d : diags)
    all += d.str() + "\n";
  CHECK(all.find("nvidia-driver.yaml:5") != std::string::npos);
  CHECK(all.find("holdd") != std::string::npos);
  CHECK(all.find("needs a run: section") != std::string::npos);
}
