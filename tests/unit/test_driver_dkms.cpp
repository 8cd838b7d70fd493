// The DKMS driver with a recording runner: the exact argv and environment (signing on and
// off), and how each DKMS exit status is read. The real DKMS runs in tests/cli/test_cli_module.py.
#include "driver/dkms.hpp"
#include "driver/module_build.hpp"
#include "exec/runner.hpp"
#include "helpers.hpp"
#include "recording_runner.hpp"
#include "util/atomic_file.hpp"
#include "util/hostfs.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <doctest/doctest.h>

#include <cstdlib>

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

TEST_CASE("dkms: argv and environment, signing off points sign_file at nothing") {
  Fixture f;
  driver::Dkms dkms(f.runner, f.options());
  auto kb = dkms.install(f.spec, "6.1.0-56-amd64");
  REQUIRE(f.runner.calls.size() == 1);
  const auto root = f.root.string();
  CHECK(f.runner.calls[0].argv == std::vector<std::string>{"dkms", "install", "-m", "hpcbake-fixture", "-v", "1.0",
                                                           "-k", "6.1.0-56-amd64", "--dkmstree", root + "/dkms",
                                                           "--sourcetree", root + "/src", "--installtree",
                                                           root + "/inst", "--no-depmod"});
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

  // A package's modules: signed as DKMS's own setup says (framework.conf, the distribution's MOK).
  auto own = f.options();
  own.dkms_signs = true;
  driver::Dkms package(f.runner, own);
  package.install(f.spec, "6.1.0-56-amd64");
  CHECK(f.runner.calls[2].env.empty());
}

TEST_CASE("dkms: DKMS 2.8's sign_tool is passed beside 3.0's variables and signs the module it is given") {
  // DKMS 2.8 (Ubuntu 22.04) reads no sign_file/mok_*: it runs `sign_tool KERNELVER MODULE` on each
  // built module (dell/dkms v2.8.7 dkms: run_sign_tool), taken from the environment.
  Fixture f;
  auto o = f.options();
  o.signing = driver::SigningKey{"/k/signing key", "/k/signing.der", "cn"};
  o.sign_file = f.root / "sign-file";
  o.sign_tool = f.root / "dkms-sign-tool";
  driver::Dkms signing(f.runner, o);
  signing.install(f.spec, "6.1.0-56-amd64");
  REQUIRE(f.runner.calls.size() == 1);
  CHECK(f.runner.calls[0].env.back() == "sign_tool=" + o.sign_tool.string());
  // Run as DKMS 2.8 runs it: sign-file gets the hash, the key, the certificate and the module.
  const auto log = f.root / "sign-file.log";
  REQUIRE(util::write_file_atomic(o.sign_file, "#!/bin/sh\nprintf '%s\\n' \"$@\" > '" + log.string() + "'\n", 0755));
  REQUIRE(util::write_file_atomic(o.sign_tool, driver::sign_tool_script(o.sign_file, *o.signing), 0755));
  REQUIRE(std::system((o.sign_tool.string() + " 6.1.0-56-amd64 '/var/lib/dkms/m/1/build/m.ko'").c_str()) == 0);
  CHECK(util::read_file(log).value_or("") == "sha512\n/k/signing key\n/k/signing.der\n/var/lib/dkms/m/1/build/m.ko\n");
}

TEST_CASE("dkms: autoinstall is held off while a driver's packages install, and only hpcbake's file is removed") {
  const auto root = test::scratch("no-autoinstall");
  const util::HostFs host(root);
  const auto file = root / "etc/dkms/no-autoinstall";
  {
    auto off = driver::AutoinstallOff::hold(host);
    REQUIRE(off);
    CHECK(off->ours());
    CHECK(test::read(file).starts_with(std::string(driver::kAutoinstallOffMark) + "\n"));
  }
  CHECK(!std::filesystem::exists(file));
  // One a killed run left (its mark) is taken over, and removed.
  test::write(file, std::string(driver::kAutoinstallOffMark) + "\n");
  {
    auto off = driver::AutoinstallOff::hold(host);
    REQUIRE(off);
    CHECK(off->ours());
  }
  CHECK(!std::filesystem::exists(file));
  // The administrator's stays, as it was.
  test::write(file, "# autoinstall off on this machine\n");
  {
    auto off = driver::AutoinstallOff::hold(host);
    REQUIRE(off);
    CHECK(!off->ours());
  }
  CHECK(test::read(file) == "# autoinstall off on this machine\n");
}

TEST_CASE("dkms: exit statuses become outcomes") {
  Fixture f;
  driver::Dkms dkms(f.runner, f.options());
  SUBCASE("77: BUILD_EXCLUSIVE") {
    f.runner.on(
        {"dkms"},
        exec::exited(
            77, "Warning: The /tmp/x/dkms.conf for module hpcbake-fixture/1.0 includes a BUILD_EXCLUSIVE directive"));
    auto kb = dkms.install(f.spec, "6.1.0-56-amd64");
    CHECK(kb.outcome == BuildOutcome::excluded);
    CHECK(kb.message.find("BUILD_EXCLUSIVE") != std::string::npos);
  }
  SUBCASE("10: make failed, and the make.log tail comes along") {
    test::write(f.root / "dkms/hpcbake-fixture/1.0/build/make.log",
                "line 1\nline 2\nfoo.c:6:16: error: implicit declaration\n");
    f.runner.on({"dkms"},
                exec::exited(10, "Error! Bad return status for module build on kernel: 6.1.0-56-amd64 (x86_64)\n"));
    auto kb = dkms.install(f.spec, "6.1.0-56-amd64");
    CHECK(kb.outcome == BuildOutcome::build_failed);
    CHECK(kb.make_log == f.root / "dkms/hpcbake-fixture/1.0/build/make.log");
    CHECK(kb.make_log_tail.find("foo.c:6:16: error: implicit declaration") != std::string::npos);
    auto s = driver::overall(f.spec, {kb});
    REQUIRE_FALSE(s.has_value());
    CHECK(s.error().kind == ErrorKind::build);
    CHECK(s.error().hint.find("make.log") != std::string::npos);
    CHECK(kb.first_error == "foo.c:6:16: error: implicit declaration");
    CHECK(s.error().message.find("first error: foo.c:6:16: error: implicit declaration") != std::string::npos);
  }
  SUBCASE("1 with the headers message") {
    f.runner.on({"dkms"},
                exec::exited(1, "Error! Your kernel headers for kernel 6.1.0-56-amd64 cannot be found at "
                                "/lib/modules/6.1.0-56-amd64/build or /lib/modules/6.1.0-56-amd64/source.\n"));
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
  const std::string conf =
      driver::render_dkms_conf(test::slurp(test::source_dir() / "drivers/dkms/dkms.conf.in"), spec);
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
  CHECK(
      test::slurp(f.root / "src/peer-2.1/dkms.conf").starts_with("PACKAGE_NAME=\"peer\"\nBUILT_MODULE_NAME[0]=\"a\""));
  auto bad = dkms.register_source(src, {"x/y", "1", {"m"}, {}}, "");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("without '/'") != std::string::npos);
}

TEST_CASE("module build: a build killed while extracting leaves scratch trees that the next build removes") {
  // Found by bench/chaos: SIGKILL during the extraction of the module's .run left
  // <work>/extract-NAME-<pid> (and the extraction's .partial-XXXXXX staging tree) behind for good,
  // since the next build's scratch has its own pid in the name.
  Fixture f;
  const auto work = f.root / "work";
  const std::string dead = std::to_string(test::dead_pid());
  test::write(work / ("extract-hpcbake-fixture-" + dead) / "hpcbake-fixture/Kbuild", "obj-m := hpcbake_fixture.o\n");
  test::write(work / ("extract-hpcbake-fixture-" + dead + ".partial-Xy12Zw") / "Kbuild", "obj-m := hpc");
  const auto tarball = f.root / "hpcbake-fixture.tar";
  {
    const std::string kbuild = "obj-m := hpcbake_fixture.o\n";
    struct archive* a = archive_write_new();
    REQUIRE(archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
    REQUIRE(archive_write_open_filename(a, tarball.c_str()) == ARCHIVE_OK);
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, "hpcbake-fixture/Kbuild");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(kbuild.size()));
    REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
    REQUIRE(archive_write_data(a, kbuild.data(), kbuild.size()) == static_cast<la_ssize_t>(kbuild.size()));
    archive_entry_free(e);
    REQUIRE(archive_write_close(a) == ARCHIVE_OK);
    archive_write_free(a);
  }
  driver::Dkms dkms(f.runner, f.options());
  driver::BuildRequest rq;
  rq.source = tarball;
  rq.spec = f.spec;
  rq.kernels = {"6.1.0-56-amd64"};
  rq.work_dir = work;
  auto builds = driver::build_module(rq, dkms, "PACKAGE_NAME=\"@NAME@\"\n@MODULES@\n@DIRECTIVES@\n");
  REQUIRE(builds.has_value());
  CHECK(test::slurp(f.root / "src/hpcbake-fixture-1.0/Kbuild") == "obj-m := hpcbake_fixture.o\n");
  CHECK(std::filesystem::is_empty(work)); // neither the killed build's trees nor this one's scratch
}

TEST_CASE("dkms: a build killed before its modules were copied is removed, so DKMS builds again") {
  // Found by bench/chaos: `dkms install` killed while it stripped the module left
  // <tree>/NAME/VERSION/KERNEL/x86_64/{log,module/} with module/ empty. DKMS then answered every
  // later install with exit 3 ("already been built ... use the dkms remove function"), and its
  // remove skips a module it does not count as built: the install could never converge.
  Fixture f;
  const auto kdir = f.root / "dkms/hpcbake-fixture/1.0/6.1.0-56-amd64";
  test::write(kdir / "x86_64/log/make.log", "DKMS make.log\n");
  std::filesystem::create_directories(kdir / "x86_64/module");
  driver::Dkms dkms(f.runner, f.options());
  dkms.install(f.spec, "6.1.0-56-amd64");
  CHECK_FALSE(std::filesystem::exists(kdir));
  REQUIRE(f.runner.calls.size() == 1); // and DKMS was asked to build

  // A complete build (every module in module/) is DKMS's business: kept.
  test::write(kdir / "x86_64/module/hpcbake_fixture.ko", "ELF");
  CHECK_FALSE(dkms.remove_half_built(f.spec, "6.1.0-56-amd64"));
  CHECK(std::filesystem::exists(kdir / "x86_64/module/hpcbake_fixture.ko"));
  // Killed before module/ existed: removed too.
  std::filesystem::remove_all(kdir / "x86_64/module");
  CHECK(dkms.remove_half_built(f.spec, "6.1.0-56-amd64"));
  CHECK_FALSE(std::filesystem::exists(kdir));
}

TEST_CASE("dkms: the build area a killed DKMS left is removed after a successful install, kept after a failure") {
  // Found by bench/chaos: DKMS killed after copying the built module into KERNEL/ARCH/module and
  // before deleting its build area left NAME/VERSION/build (sources and objects) for good: the
  // module counted as built, so the next `dkms install` only installed it.
  Fixture f;
  const auto build = f.root / "dkms/hpcbake-fixture/1.0/build";
  test::write(build / "hpcbake_fixture.o", "object");
  driver::Dkms dkms(f.runner, f.options());
  SUBCASE("installed") {
    dkms.install(f.spec, "6.1.0-56-amd64");
    CHECK_FALSE(std::filesystem::exists(build));
  }
  SUBCASE("already installed") {
    f.runner.on({"dkms"}, exec::exited(5, "Error! This module/version combo is already installed\n"));
    CHECK(dkms.install(f.spec, "6.1.0-56-amd64").outcome != BuildOutcome::build_failed);
    CHECK_FALSE(std::filesystem::exists(build));
  }
  SUBCASE("a failed build keeps it: make.log is read from there") {
    f.runner.on({"dkms"}, exec::exited(10, "Error! Bad return status for module build\n"));
    CHECK(dkms.install(f.spec, "6.1.0-56-amd64").outcome == BuildOutcome::build_failed);
    CHECK(std::filesystem::exists(build / "hpcbake_fixture.o"));
  }
}

TEST_CASE("dkms: the first error line of a build log") {
  // NVIDIA's open modules 535.261.03 against Debian's 6.1.0-56 headers (gcc 12, UTF-8 quotes).
  const std::string nv = "  gcc-12 -Wp,-MMD,/x/.nv-pci.o.d -nostdinc -c -o /x/nv-pci.o /x/nv-pci.c\n"
                         "/x/nvidia/nv-pci.c: In function \u2018nv_resize_pcie_bars\u2019:\n"
                         "/x/nvidia/nv-pci.c:223:9: error: too few arguments to function "
                         "\u2018pci_resize_resource\u2019\n"
                         "/x/nvidia/nv-pci.c:230:1: error: second\n"
                         "make[3]: *** [/usr/src/linux-headers-6.1.0-56-common/scripts/Makefile.build:255] Error 1\n";
  CHECK(driver::first_error(nv) ==
        "/x/nvidia/nv-pci.c:223:9: error: too few arguments to function \u2018pci_resize_resource\u2019");
  CHECK(driver::first_error("a.c:1: fatal error: linux/foo.h: No such file or directory\n") ==
        "a.c:1: fatal error: linux/foo.h: No such file or directory");
  // No compiler diagnostic: the make or linker line that stopped the build.
  CHECK(driver::first_error("building\nmake: *** [Makefile:137: modules] Error 2\n") ==
        "make: *** [Makefile:137: modules] Error 2");
  CHECK(driver::first_error("ERROR: modpost: \"foo\" undefined!\n") == "ERROR: modpost: \"foo\" undefined!");
  CHECK(driver::first_error("all good\n").empty());
  CHECK(driver::first_error("").empty());
}

TEST_CASE("dkms: a failed build keeps each kernel's log and is rolled back, an earlier install is kept") {
  Fixture f;
  std::filesystem::create_directories(f.root / "lib/modules/6.1.0-56-cloud-amd64/build");
  auto o = f.options();
  o.log_dir = f.root / "var/log/hpcbake/dkms";
  driver::Dkms dkms(f.runner, o);
  const auto log = f.root / "dkms/hpcbake-fixture/1.0/build/make.log";
  test::write(log, "x.c:1:2: error: for the generic kernel\n");
  f.runner.on({"dkms", "install"}, exec::exited(10, "Error! Bad return status"), 1);
  auto first = dkms.install(f.spec, "6.1.0-56-amd64");
  // The cloud kernel's build replaces make.log in DKMS's shared build directory.
  test::write(log, "x.c:3:4: error: for the cloud kernel\n");
  f.runner.on({"dkms", "install"}, exec::exited(10, "Error! Bad return status"), 1);
  auto second = dkms.install(f.spec, "6.1.0-56-cloud-amd64");
  REQUIRE(first.outcome == BuildOutcome::build_failed);
  CHECK(first.make_log == o.log_dir / "hpcbake-fixture-1.0-6.1.0-56-amd64.make.log");
  CHECK(test::read(first.make_log) == "x.c:1:2: error: for the generic kernel\n");
  CHECK(test::read(second.make_log) == "x.c:3:4: error: for the cloud kernel\n");

  SUBCASE("nothing kept: unregistered, sources and DKMS tree gone") {
    test::write(f.root / "src/hpcbake-fixture-1.0/dkms.conf", "x");
    f.runner.calls.clear();
    REQUIRE(dkms.roll_back(f.spec, {first, second}).has_value());
    REQUIRE(f.runner.calls.size() == 1);
    CHECK(f.runner.calls[0].argv[1] == "remove");
    CHECK(f.runner.calls[0].argv[6] == "--all");
    CHECK_FALSE(std::filesystem::exists(f.root / "src/hpcbake-fixture-1.0"));
    CHECK_FALSE(std::filesystem::exists(f.root / "dkms/hpcbake-fixture"));
    CHECK(std::filesystem::exists(first.make_log));
  }
  SUBCASE("built in this run for one kernel: removed for it") {
    driver::KernelBuild ok;
    ok.kernel = "6.1.0-56-cloud-amd64";
    ok.outcome = BuildOutcome::installed;
    ok.dkms_installed = true;
    f.runner.calls.clear();
    REQUIRE(dkms.roll_back(f.spec, {first, ok}).has_value());
    REQUIRE(f.runner.calls.size() == 2);
    CHECK(f.runner.calls[0].argv[6] == "-k");
    CHECK(f.runner.calls[0].argv[7] == "6.1.0-56-cloud-amd64");
    CHECK(f.runner.calls[1].argv[6] == "--all");
  }
  SUBCASE("installed by DKMS but refused by the module checks: removed too") {
    driver::KernelBuild bad_signer;
    bad_signer.kernel = "6.1.0-56-cloud-amd64";
    bad_signer.outcome = BuildOutcome::install_failed;
    bad_signer.dkms_installed = true;
    f.runner.calls.clear();
    REQUIRE(dkms.roll_back(f.spec, {first, bad_signer}).has_value());
    REQUIRE(f.runner.calls.size() == 2);
    CHECK(f.runner.calls[0].argv[7] == "6.1.0-56-cloud-amd64");
  }
  SUBCASE("built earlier for a kernel that is no longer a target: the fallback kernel keeps it") {
    test::write(f.root / "dkms/hpcbake-fixture/1.0/6.1.0-40-amd64/x86_64/module/hpcbake_fixture.ko", "ko");
    test::write(f.root / "src/hpcbake-fixture-1.0/dkms.conf", "x");
    f.runner.calls.clear();
    REQUIRE(dkms.roll_back(f.spec, {first, second}).has_value());
    CHECK(f.runner.calls.empty());
    CHECK(std::filesystem::exists(f.root / "src/hpcbake-fixture-1.0/dkms.conf"));
    CHECK(std::filesystem::exists(f.root / "dkms/hpcbake-fixture/1.0/6.1.0-40-amd64/x86_64/module/hpcbake_fixture.ko"));
  }
  SUBCASE("installed by an earlier run for one kernel: that install and the registration stay") {
    driver::KernelBuild earlier;
    earlier.kernel = "6.1.0-56-cloud-amd64";
    earlier.outcome = BuildOutcome::already_installed;
    test::write(f.root / "src/hpcbake-fixture-1.0/dkms.conf", "x");
    f.runner.calls.clear();
    REQUIRE(dkms.roll_back(f.spec, {first, earlier}).has_value());
    CHECK(f.runner.calls.empty());
    CHECK(std::filesystem::exists(f.root / "src/hpcbake-fixture-1.0/dkms.conf"));
  }
}

TEST_CASE("dkms: prebuilt modules are added, placed where `dkms build` leaves them, then installed") {
  Fixture f;
  driver::Dkms dkms(f.runner, f.options());
  test::write(f.root / "pre/hpcbake_fixture.ko", "prebuilt bytes");
  const auto root = f.root.string();
  const auto trees = std::vector<std::string>{"--dkmstree",  root + "/dkms",  "--sourcetree",
                                              root + "/src", "--installtree", root + "/inst"};
  SUBCASE("dkms install fails: what was placed goes, so that a DKMS build can run there") {
    f.runner.on({"dkms", "install"}, exec::exited(6, "Error! install aborted"));
    auto kb = dkms.install_prebuilt(f.spec, "6.1.0-56-amd64", "x86_64", {f.root / "pre/hpcbake_fixture.ko"});
    REQUIRE(f.runner.calls.size() == 2);
    auto add = std::vector<std::string>{"dkms", "add", "-m", "hpcbake-fixture", "-v", "1.0"};
    add.insert(add.end(), trees.begin(), trees.end());
    CHECK(f.runner.calls[0].argv == add);
    CHECK(f.runner.calls[1].argv[1] == "install");
    CHECK_FALSE(kb.ok());
    CHECK_FALSE(kb.prebuilt);
    CHECK_FALSE(std::filesystem::exists(f.root / "dkms/hpcbake-fixture/1.0/6.1.0-56-amd64/x86_64"));
  }
  SUBCASE("dkms install succeeds: the file is where DKMS looks for a built module; no add when registered") {
    std::filesystem::create_directories(f.root / "dkms/hpcbake-fixture/1.0/source");
    auto kb = dkms.install_prebuilt(f.spec, "6.1.0-56-amd64", "x86_64", {f.root / "pre/hpcbake_fixture.ko"});
    REQUIRE(f.runner.calls.size() == 1);
    CHECK(f.runner.calls[0].argv[1] == "install");
    CHECK(test::read(f.root / "dkms/hpcbake-fixture/1.0/6.1.0-56-amd64/x86_64/module/hpcbake_fixture.ko") ==
          "prebuilt bytes");
    // The recording runner installs nothing: the check after `dkms install` still reads the module.
    CHECK(kb.outcome == BuildOutcome::install_failed);
    CHECK(kb.message.find("hpcbake_fixture is not in") != std::string::npos);
  }
  SUBCASE("an architecture that is a path is refused before anything runs") {
    auto kb = dkms.install_prebuilt(f.spec, "6.1.0-56-amd64", "../x", {f.root / "pre/hpcbake_fixture.ko"});
    CHECK(f.runner.calls.empty());
    CHECK_FALSE(kb.ok());
  }
}

TEST_CASE("dkms: a kernel whose prebuilt modules fail to install is built with DKMS, and says why") {
  Fixture f;
  driver::Dkms dkms(f.runner, f.options());
  test::write(f.root / "srcdir/hpcbake_fixture.c", "int x;\n");
  test::write(f.root / "pre/hpcbake_fixture.ko", "prebuilt bytes");
  f.runner.on({"dkms", "add"}, exec::exited(3, "Error! DKMS tree already contains: hpcbake-fixture-1.0"));
  driver::BuildRequest rq;
  rq.source = f.root / "srcdir";
  rq.spec = f.spec;
  rq.kernels = {"6.1.0-56-amd64", "6.1.0-57-amd64"};
  rq.work_dir = f.root / "work";
  rq.prebuilt["6.1.0-56-amd64"] = {"x86_64", {f.root / "pre/hpcbake_fixture.ko"}, "/tmp/modules.tar"};
  rq.not_prebuilt["6.1.0-57-amd64"] = "built for kernel 6.1.0-56-amd64, the target kernel is 6.1.0-57-amd64";
  std::filesystem::create_directories(f.root / "lib/modules/6.1.0-57-amd64/build");
  auto builds = driver::build_module(rq, dkms, "PACKAGE_NAME=\"@NAME@\"\n@MODULES@\n@DIRECTIVES@\n");
  REQUIRE(builds.has_value());
  REQUIRE(builds->size() == 2);
  CHECK((*builds)[0].note.find("built with DKMS; prebuilt modules not used: their install failed: `dkms add") == 0);
  CHECK((*builds)[1].note ==
        "built with DKMS; prebuilt modules not used: built for kernel 6.1.0-56-amd64, the target kernel is "
        "6.1.0-57-amd64");
  // After the failed add, each kernel went through `dkms install` (which builds).
  int installs = 0;
  for (const auto& c : f.runner.calls)
    installs += c.argv[1] == "install";
  CHECK(installs == 2);
}

TEST_CASE("dkms: a package's sources build after those their BUILD_DEPENDS name") {
  // DOCA-OFED's kernel packages: the ULPs name mlnx-ofed-kernel, whose ib_core they build against.
  CHECK(
      driver::dkms_build_depends("PACKAGE_NAME=\"fwctl\"\nBUILD_DEPENDS[0]=\"mlnx-ofed-kernel\"\n"
                                 "BUILD_DEPENDS[1]='knem'\n  BUILD_DEPENDS=xpmem\nBUILD_DEPENDS[2]=\"$(echo x)\"\n") ==
      std::vector<std::string>{"mlnx-ofed-kernel", "knem", "xpmem"});
  const auto order = driver::dkms_build_order({{"fwctl-25.10", "fwctl", "25.10", {"mlnx-ofed-kernel"}},
                                               {"iser-25.10", "iser", "25.10", {"mlnx-ofed-kernel", "other"}},
                                               {"knem-1.1.4", "knem", "1.1.4", {}},
                                               {"mlnx-ofed-kernel-25.10", "mlnx-ofed-kernel", "25.10", {}}});
  std::vector<std::string> names;
  for (const auto& s : order)
    names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"knem", "mlnx-ofed-kernel", "fwctl", "iser"});
  // A cycle is not a hang: what is left keeps its order.
  const auto cyc = driver::dkms_build_order({{"a-1", "a", "1", {"b"}}, {"b-1", "b", "1", {"a"}}});
  REQUIRE(cyc.size() == 2);
  CHECK(cyc[0].name == "a");
}
