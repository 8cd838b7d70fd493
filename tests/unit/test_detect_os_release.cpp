#include "detect/os_release.hpp"
#include "manifest/manifests.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

namespace {
detect::OsRelease load(const std::string& name) {
  auto text = test::slurp(test::fixtures() / "os-release" / name);
  REQUIRE_FALSE(text.empty());
  auto os = detect::parse_os_release(text, name);
  REQUIRE(os.has_value());
  return *os;
}
} // namespace

TEST_CASE("os-release files of every supported distro map to their manifest") {
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m.has_value());
  struct Case {
    const char* file;
    const char* id;
    const char* version;
    const char* manifest;
  };
  for (auto c :
       {Case{"ubuntu-22.04", "ubuntu", "22.04", "ubuntu-22.04"},
        Case{"ubuntu-24.04", "ubuntu", "24.04", "ubuntu-24.04"},
        Case{"almalinux-8.10", "almalinux", "8.10", "almalinux-8.10"},
        Case{"almalinux-9.6", "almalinux", "9.6", "almalinux-9"}, Case{"rhel-8.10", "rhel", "8.10", "rhel-8.10"},
        Case{"rhel-9.4", "rhel", "9.4", "rhel-9"}, Case{"debian-12", "debian", "12", "debian-12"}}) {
    CAPTURE(c.file);
    auto os = load(c.file);
    CHECK(os.id() == c.id);
    CHECK(os.version_id() == c.version);
    const auto* d = m->match_distro(os.id(), os.version_id());
    REQUIRE(d != nullptr);
    CHECK(d->id == c.manifest);
  }
}

TEST_CASE("distros without a manifest do not map, Rocky maps to its own") {
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m.has_value());
  // Rocky Linux 9.4 maps to rocky-9 (its own manifest, not AlmaLinux's through ID_LIKE).
  auto rocky = load("rocky-9.4");
  CHECK(rocky.id() == "rocky");
  CHECK(rocky.id_like() == "rhel centos fedora");
  const auto* r9 = m->match_distro(rocky.id(), rocky.version_id());
  REQUIRE(r9 != nullptr);
  CHECK(r9->id == "rocky-9");
  auto sles = load("sles-15-sp5");
  CHECK(m->match_distro(sles.id(), sles.version_id()) == nullptr);
  // "9" matches 9.x but not 90 or 8.10.
  CHECK(m->match_distro("almalinux", "90") == nullptr);
  CHECK(m->match_distro("almalinux", "8.1") == nullptr);
}

TEST_CASE("shell quoting in os-release") {
  auto os = detect::parse_os_release(
      "ID=\"rhel\"\nNAME='Red Hat'\nX=\"a \\\"q\\\" \\$b\"\n# c\nBAD LINE\nVERSION_ID=9.4 # trailing\n", "t");
  REQUIRE(os.has_value());
  CHECK(os->id() == "rhel");
  CHECK(os->get("NAME") == "Red Hat");
  CHECK(os->get("X") == "a \"q\" $b");
  CHECK(os->version_id() == "9.4");
}

TEST_CASE("broken os-release files are errors that name the line") {
  auto bad = detect::parse_os_release("NAME=x\nID=\"ubuntu\n", "/etc/os-release");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("/etc/os-release:2") != std::string::npos);
  auto noid = detect::parse_os_release("NAME=x\n", "/etc/os-release");
  REQUIRE_FALSE(noid.has_value());
  CHECK(noid.error().message.find("no ID=") != std::string::npos);
}

TEST_CASE("read_os_release falls back to /usr/lib/os-release") {
  auto root = test::scratch("osrel-fallback");
  test::write(root / "usr/lib/os-release", "ID=debian\nVERSION_ID=\"12\"\n");
  auto os = detect::read_os_release(util::HostFs(root));
  REQUIRE(os.has_value());
  CHECK(os->source == "/usr/lib/os-release");
  auto none = detect::read_os_release(util::HostFs(test::scratch("osrel-none")));
  CHECK_FALSE(none.has_value());
}

TEST_CASE("a 3 GiB sparse os-release is refused by name, not read whole (issue 40 item 8)") {
  auto root = test::scratch("osrel-huge");
  test::sparse(root / "etc/os-release", test::three_gib);
  auto os = detect::read_os_release(util::HostFs(root));
  REQUIRE_FALSE(os.has_value());
  const auto& msg = os.error().message;
  CHECK(msg.find((root / "etc/os-release").string()) != std::string::npos);
  CHECK(msg.find("3.0 GiB") != std::string::npos);
  CHECK(msg.find("an os-release file is at most 64.0 KiB: refusing to read it") != std::string::npos);
  // A file that grows past the bound while it is read (or whose size lies, as procfs's does) is
  // refused the same way: at most one byte past the bound is read.
  test::write(root / "etc/os-release", "ID=x\n" + std::string(util::host_file::os_release.max_bytes, '#'));
  auto grown = util::HostFs(root).read_checked("/etc/os-release", util::host_file::os_release);
  REQUIRE_FALSE(grown.has_value());
  CHECK(grown.error().message.find("refusing to read it") != std::string::npos);
  test::write(root / "etc/os-release", "ID=x\n" + std::string(util::host_file::os_release.max_bytes - 5, '#'));
  CHECK(detect::read_os_release(util::HostFs(root)).has_value());
}
