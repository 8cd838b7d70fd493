// The DKMS driver with a recording runner: the exact argv and environment (signing on and
// off), and how each DKMS exit status is read. The real DKMS runs in tests/cli/test_cli_module.py.
#include "driver/dkms.hpp"
#include "exec/runner.hpp"
#include "helpers.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;
using driver::BuildOutcome;

namespace {
struct Fixture {
  std::filesystem::path root = test::scratch("dkms-unit");
  exec::RecordingRunner runner;
  driver::ModuleSpec spec{"hpcbake-fixture", "1.0", {"hpcbake_fixture"}, {}};
  driver::DkmsOptions options() {
    driver::DkmsOptions o;
    o.trees = {root / "dkms", root / "src", root / "inst"};
    o.depmod = false;
    o.kernel_modules_dir = root / "lib/modules";
    return o;
  }
  Fixture() { std::filesystem::create_directories(root / "lib/modules/6.1.0-56-amd64/build"); }
};
} // namespace

TEST_CASE("dkms: argv and environment; signing off points sign_file at nothing") {
  Fixture f;
  driver::Dkms dkms(f.runner, f.options());
  auto kb = dkms.install(f.spec, "6.1.0-56-amd64");
  REQUIRE(f.runner.calls.size() == 1);
  const auto root = f.root.string();
  CHECK(f.runner.calls[0].argv == std::vector<std::string>{"dkms", "install", "-m", "hpcbake-fixture", "-v", "1.0", "-k",
                                                           "6.1.0-56-amd64", "--dkmstree", root + "/dkms", "--sourcetree",
                                                           root + "/src", "--installtree", root + "/inst", "--no-depmod"});
  CHECK(f.runner.calls[0].env == std::vector<std::string>{"sign_file=/nonexistent/hpcbake-signing-is-off"});
  // DKMS "succeeded" but left no module behind: hpcbake does not believe it.
  CHECK(kb.outcome == BuildOutcome::install_failed);
  CHECK(kb.message.find("hpcbake_fixture is not in") != std::string::npos);

  auto o = f.options();
  o.signing = driver::SigningKey{"/k/signing.key", "/k/signing.der", "cn"};
  o.sign_file = "/usr/lib/linux-kbuild-6.1/scripts/sign-file";
  driver::Dkms signing(f.runner, o);
  signing.install(f.spec, "6.1.0-56-amd64");
  CHECK(f.runner.calls[1].env == std::vector<std::string>{"sign_file=/usr/lib/linux-kbuild-6.1/scripts/sign-file",
                                                          "mok_signing_key=/k/signing.key",
                                                          "mok_certificate=/k/signing.der"});
}

TEST_CASE("dkms: exit statuses become outcomes") {
  Fixture f;
  driver::Dkms dkms(f.runner, f.options());
  SUBCASE("77: BUILD_EXCLUSIVE") {
    f.runner.on({"dkms"}, exec::exited(77, "Warning: The /tmp/x/dkms.conf for module hpcbake-fixture/1.0 includes a BUILD_EXCLUSIVE directive"));
    auto kb = dkms.install(f.spec, "6.1.0-56-amd64");
    CHECK(kb.outcome == BuildOutcome::excluded);
    CHECK(kb.message.find("BUILD_EXCLUSIVE") != std::string::npos);
  }
  SUBCASE("10: make failed, and the make.log tail comes along") {
    test::write(f.root / "dkms/hpcbake-fixture/1.0/build/make.log", "line 1\nline 2\nfoo.c:6:16: error: implicit declaration\n");
    f.runner.on({"dkms"}, exec::exited(10, "Error! Bad return status for module build on kernel: 6.1.0-56-amd64 (x86_64)\n"));
    auto kb = dkms.install(f.spec, "6.1.0-56-amd64");
    CHECK(kb.outcome == BuildOutcome::build_failed);
    CHECK(kb.make_log == f.root / "dkms/hpcbake-fixture/1.0/build/make.log");
    CHECK(kb.make_log_tail.find("foo.c:6:16: error: implicit declaration") != std::string::npos);
    auto s = driver::overall(f.spec, {kb});
    REQUIRE_FALSE(s.has_value());
    CHECK(s.error().kind == ErrorKind::build);
    CHECK(s.error().hint.find("make.log") != std::string::npos);
  }
  SUBCASE("1 with the headers message") {
    f.runner.on({"dkms"}, exec::exited(1, "Error! Your kernel headers for kernel 6.1.0-56-amd64 cannot be found at /lib/modules/6.1.0-56-amd64/build or /lib/modules/6.1.0-56-amd64/source.\n"));
    CHECK(dkms.install(f.spec, "6.1.0-56-amd64").outcome == BuildOutcome::missing_headers);
  }
  SUBCASE("no /lib/modules/K/build: DKMS is not even started") {
    CHECK(dkms.install(f.spec, "6.1.0-99-amd64").outcome == BuildOutcome::missing_headers);
    CHECK(f.runner.calls.empty());
  }
  SUBCASE("6: install aborted, with DKMS's words") {
    f.runner.on({"dkms"}, exec::exited(6, "Error! Problems with depmod detected.\n"));
    auto kb = dkms.install(f.spec, "6.1.0-56-amd64");
    CHECK(kb.outcome == BuildOutcome::install_failed);
    CHECK(kb.message.find("Problems with depmod detected") != std::string::npos);
  }
}

TEST_CASE("dkms: dkms.conf rendering and source registration") {
  driver::ModuleSpec spec{"peer", "2.1", {"a", "b"}, {"BUILD_EXCLUSIVE_KERNEL=\"^6\\.\""}};
  const std::string conf = driver::render_dkms_conf(test::slurp(test::source_dir() / "drivers/dkms/dkms.conf.in"), spec);
  CHECK(conf.find("PACKAGE_NAME=\"peer\"\nPACKAGE_VERSION=\"2.1\"\n") != std::string::npos);
  CHECK(conf.find("BUILT_MODULE_NAME[1]=\"b\"\nDEST_MODULE_LOCATION[1]=\"/updates/dkms\"\n") != std::string::npos);
  CHECK(conf.find("BUILD_EXCLUSIVE_KERNEL=\"^6\\.\"\n") != std::string::npos);
  CHECK(conf.find('@') == std::string::npos);

  Fixture f;
  driver::Dkms dkms(f.runner, f.options());
  const auto src = test::scratch("dkms-src");
  test::write(src / "Kbuild", "obj-m := a.o b.o\n");
  REQUIRE(dkms.register_source(src, spec, "PACKAGE_NAME=\"@NAME@\"\n@MODULES@\n@DIRECTIVES@\n").has_value());
  CHECK(test::slurp(f.root / "src/peer-2.1/Kbuild") == "obj-m := a.o b.o\n");
  CHECK(test::slurp(f.root / "src/peer-2.1/dkms.conf").starts_with("PACKAGE_NAME=\"peer\"\nBUILT_MODULE_NAME[0]=\"a\""));
  auto bad = dkms.register_source(src, {"x/y", "1", {"m"}, {}}, "");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("without '/'") != std::string::npos);
}
