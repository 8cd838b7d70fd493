// Driver recipes are data: the shipped ones load cleanly, and the .run installer's command
// line comes out exactly as NVIDIA's installer expects it, per kernel, flavour and key.
#include "driver/recipe.hpp"
#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake::driver;

TEST_CASE("recipes: every shipped recipe loads, one per component kind") {
  auto r = load_recipes(test::source_dir() / "drivers");
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
  for (const char* kind : {"nvidia-driver", "grid-driver", "fabric-manager", "ofed", "peermem", "rdma-core-inbox"})
    CHECK_MESSAGE(r->find(kind) != nullptr, kind);
  CHECK(r->find("fabric-manager")->hold);
  CHECK(r->find("fabric-manager")->packages_from_component);
  CHECK(r->find("peermem")->modules_load == std::vector<std::string>{"nvidia_peermem"});
}

TEST_CASE("recipes: the NVIDIA .run command line per kernel, flavour and signing key") {
  auto r = load_recipes(test::source_dir() / "drivers");
  REQUIRE(r.has_value());
  RunRequest q;
  q.run_file = "/var/cache/hpcbake/sha256/abc";
  q.kernel = "6.8.0-1021-azure";
  q.flavour = "open";
  auto argv = run_installer_argv(*r->find("nvidia-driver"), q);
  REQUIRE(argv.has_value());
  CHECK(*argv == std::vector<std::string>{"/var/cache/hpcbake/sha256/abc", "--silent", "--dkms", "--no-questions", "--ui=none",
                                          "--no-x-check", "--disable-nouveau", "-m=kernel-open",
                                          "--kernel-name=6.8.0-1021-azure"});
  q.flavour = "proprietary";
  q.signing_key = "/var/lib/hpcbake/signing/signing.key";
  q.signing_cert = "/var/lib/hpcbake/signing/signing.der";
  argv = run_installer_argv(*r->find("nvidia-driver"), q);
  REQUIRE(argv.has_value());
  CHECK(argv->at(7) == "-m=kernel");
  CHECK(argv->back() == "--module-signing-public-key=/var/lib/hpcbake/signing/signing.der");
  CHECK(argv->at(argv->size() - 2) == "--module-signing-secret-key=/var/lib/hpcbake/signing/signing.key");

  q.flavour = "open"; // GRID ships only the proprietary modules
  auto grid = run_installer_argv(*r->find("grid-driver"), q);
  REQUIRE_FALSE(grid.has_value());
  CHECK(grid.error().message.find("does not offer the 'open' kernel modules") != std::string::npos);
  CHECK_FALSE(run_installer_argv(*r->find("fabric-manager"), q).has_value());
}

TEST_CASE("recipes: a broken recipe names file, line and problem") {
  const auto dir = test::scratch("recipes-bad");
  test::write(dir / "nvidia-driver.yaml", "schema: 1\nkind: nvidia-driver\ndescription: x\ninstaller: nvidia-run\nholdd: true\n");
  std::vector<hpcbake::manifest::Diagnostic> diags;
  auto r = load_recipes(dir, &diags);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("nvidia-driver.yaml:5") != std::string::npos);
  CHECK(r.error().message.find("holdd") != std::string::npos);
  CHECK(r.error().message.find("needs a run: section") != std::string::npos);
}
