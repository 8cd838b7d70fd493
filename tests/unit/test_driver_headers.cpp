// Kernel headers: one install for the kernels that lack /lib/modules/K/build, the exact
// package names from the distro manifest, and a check afterwards.
#include "driver/headers.hpp"
#include "exec/runner.hpp"
#include "helpers.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

TEST_CASE("headers: installs only what is missing, then checks /lib/modules/K/build") {
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m.has_value());
  const auto root = test::scratch("headers");
  std::filesystem::create_directories(root / "lib/modules/6.1.0-56-amd64/build");
  util::HostFs host(root);
  exec::RecordingRunner runner;
  pkg::PkgOptions po;
  po.lock_timeout = std::chrono::seconds(1);
  auto apt = pkg::make_package_manager(pkg::Family::apt, runner, host, po);
  // The recording runner installs nothing, so the cloud kernel's build dir stays missing.
  auto r = driver::ensure_headers(host, *m->find_distro("debian-12"), {"6.1.0-56-amd64", "6.1.0-56-cloud-amd64"}, *apt);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find(
            "linux-headers-6.1.0-56-cloud-amd64 installed, but /lib/modules/6.1.0-56-cloud-amd64/build") !=
        std::string::npos);
  REQUIRE(runner.calls.size() == 1);
  const auto& argv = runner.calls[0].argv;
  CHECK(argv.front() == "apt-get");
  CHECK(argv.back() == "linux-headers-6.1.0-56-cloud-amd64");
  CHECK(std::count(argv.begin(), argv.end(), "linux-headers-6.1.0-56-amd64") == 0);

  std::filesystem::create_directories(root / "lib/modules/6.1.0-56-cloud-amd64/build");
  exec::RecordingRunner idle;
  auto apt2 = pkg::make_package_manager(pkg::Family::apt, idle, host, po);
  auto ok =
      driver::ensure_headers(host, *m->find_distro("debian-12"), {"6.1.0-56-amd64", "6.1.0-56-cloud-amd64"}, *apt2);
  REQUIRE(ok.has_value());
  CHECK(ok->empty());
  CHECK(idle.calls.empty());
  CHECK(driver::headers_package(*m->find_distro("rhel-9"), "5.14.0-427.el9.x86_64") ==
        "kernel-devel-5.14.0-427.el9.x86_64");
}

TEST_CASE("headers: a plan's kernel-headers step installs exactly the package it names, only when missing") {
  const auto root = test::scratch("headers-step");
  util::HostFs host(root);
  exec::RecordingRunner runner;
  pkg::PkgOptions po;
  po.lock_timeout = std::chrono::seconds(1);
  auto apt = pkg::make_package_manager(pkg::Family::apt, runner, host, po);
  const std::string check = "/lib/modules/6.1.0-56-cloud-amd64/build";
  auto r = driver::ensure_headers(host, "6.1.0-56-cloud-amd64", "linux-headers-6.1.0-56-cloud-amd64", check, *apt);
  REQUIRE_FALSE(r.has_value()); // recorded, not run: the build directory is still missing
  CHECK(r.error().message.find("linux-headers-6.1.0-56-cloud-amd64 installed, but " + check) != std::string::npos);
  REQUIRE(runner.calls.size() == 1);
  CHECK(runner.calls[0].argv.back() == "linux-headers-6.1.0-56-cloud-amd64");

  std::filesystem::create_directories(root / "lib/modules/6.1.0-56-cloud-amd64/build");
  exec::RecordingRunner idle;
  auto apt2 = pkg::make_package_manager(pkg::Family::apt, idle, host, po);
  auto ok = driver::ensure_headers(host, "6.1.0-56-cloud-amd64", "linux-headers-6.1.0-56-cloud-amd64", check, *apt2);
  REQUIRE(ok.has_value());
  CHECK(ok->empty());
  CHECK(idle.calls.empty());
}
