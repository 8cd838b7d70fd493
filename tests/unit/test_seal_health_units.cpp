// seal/health_units: the boot check, its timer and periodic service, written and enabled by seal.
#include "seal/health_units.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

TEST_CASE("health units: ExecStart names the installed hpcbake, the rest is the packaged unit") {
  const util::HostFs real("/");
  const auto units = seal::health_units(real, "/opt/hpcbake/bin/hpcbake");
  REQUIRE(units);
  REQUIRE(units->size() == 3);
  const auto& boot = (*units)[0];
  CHECK(boot.name == "hpcbake-verify-boot.service");
  CHECK(boot.path == "/etc/systemd/system/hpcbake-verify-boot.service");
  CHECK(boot.wants_link == "/etc/systemd/system/multi-user.target.wants/hpcbake-verify-boot.service");
  CHECK(boot.exec_start == "\"/opt/hpcbake/bin/hpcbake\" verify --boot --level 1 --first-boot");
  CHECK(boot.text.find("\nExecStart=\"/opt/hpcbake/bin/hpcbake\" verify --boot --level 1 --first-boot\n") !=
        std::string::npos);
  CHECK(boot.text.find("/usr/bin/hpcbake verify") == std::string::npos);
  for (const char* line :
       {"\nType=oneshot\n", "\nRemainAfterExit=yes\n", "\nStandardOutput=journal\n", "\nWantedBy=multi-user.target\n",
        "nvidia-fabricmanager.service", "nvidia-persistenced.service", "azure_persistent_rdma_naming.service",
        "network-online.target"})
    CHECK_MESSAGE(boot.text.find(line) != std::string::npos, line);
  const auto& periodic = (*units)[1];
  CHECK(periodic.exec_start == "\"/opt/hpcbake/bin/hpcbake\" verify --boot --level 0");
  CHECK(periodic.wants_link.empty()); // the timer starts it
  CHECK(periodic.text.find("RemainAfterExit=yes") == std::string::npos);
  const auto& timer = (*units)[2];
  CHECK(timer.wants_link == "/etc/systemd/system/timers.target.wants/hpcbake-verify.timer");
  CHECK(timer.text.find("\nOnBootSec=15min\n") != std::string::npos);
  CHECK(timer.text.find("\nOnUnitActiveSec=15min\n") != std::string::npos);
  CHECK(timer.text.find("\nWantedBy=timers.target\n") != std::string::npos);
  CHECK(seal::health_units(real, "")->front().exec_start ==
        "\"/usr/bin/hpcbake\" verify --boot --level 1 --first-boot");
  // systemd refuses such an executable path ("Executable name contains special characters").
  CHECK_FALSE(seal::health_units(real, "/opt/hp\"cbake"));
}

TEST_CASE("health units: under --root the unit names the tree and is enabled by links in it") {
  const auto root = test::scratch("health-units");
  const util::HostFs fs(root);
  const auto units = seal::health_units(fs, "/usr/local/bin/hpcbake");
  REQUIRE(units);
  CHECK(units->front().exec_start ==
        "\"/usr/local/bin/hpcbake\" \"--root\" \"" + root.string() + "\" verify --boot --level 1 --first-boot");
  REQUIRE(seal::write_health_units(fs, *units));
  REQUIRE(seal::write_health_units(fs, *units)); // again: nothing changes, no error
  const auto sys = root / "etc/systemd/system";
  CHECK(test::slurp(sys / "hpcbake-verify-boot.service") == units->front().text);
  CHECK(std::filesystem::read_symlink(sys / "multi-user.target.wants/hpcbake-verify-boot.service") ==
        "/etc/systemd/system/hpcbake-verify-boot.service");
  CHECK(std::filesystem::read_symlink(sys / "timers.target.wants/hpcbake-verify.timer") ==
        "/etc/systemd/system/hpcbake-verify.timer");
  CHECK(std::filesystem::exists(sys / "hpcbake-verify-periodic.service"));
  CHECK_FALSE(std::filesystem::exists(sys / "multi-user.target.wants/hpcbake-verify-periodic.service"));
}

TEST_CASE("health units: a binary in a home or temporary folder is refused on the machine itself") {
  const util::HostFs host("/");
  for (const char* exe : {"/home/azureuser/hpcbake/bin/hpcbake", "/tmp/hpcbake", "/var/tmp/x/hpcbake"}) {
    const auto units = seal::health_units(host, exe);
    REQUIRE_FALSE(units.has_value());
    CHECK(units.error().message.find(exe) != std::string::npos);
    CHECK(units.error().hint.find("/opt/hpcbake") != std::string::npos);
  }
  CHECK(seal::health_units(host, "/opt/hpcbake/bin/hpcbake").has_value());
  CHECK(seal::health_units(host, "").has_value()); // the packaged /usr/bin/hpcbake
}
