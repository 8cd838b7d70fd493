// verify/: expectations from manifests and plans, host-file checks, port rates, dlopen errors.
#include "driver/modinfo.hpp"
#include "verify/checks.hpp"
#include "verify/dynlib.hpp"
#include "verify/ibverbs.hpp"

#include "helpers.hpp"
#include "recording_runner.hpp"
#include "shipped.hpp"

#include <doctest/doctest.h>

using namespace hpcbake;

namespace {

const manifest::Manifests& shipped() {
  return test::shipped_manifests();
}

verify::Expectations expect(const std::string& size, const std::string& distro, double fraction = 0.75) {
  plan::PlanRequest r;
  r.size = size;
  r.distro = distro;
  auto p = plan::make_plan(shipped(), r);
  REQUIRE(p.has_value());
  auto e = verify::expectations(*p, fraction);
  REQUIRE(e.has_value());
  return *e;
}

} // namespace

TEST_CASE("verify: expectations of an NVSwitch + InfiniBand size come from its manifest and plan") {
  const auto e = expect("Standard_ND96isr_H100_v5", "ubuntu-22.04");
  CHECK(e.nvidia);
  CHECK(e.gpu_count == 8);
  CHECK(e.nvswitch_count == 4);
  CHECK(e.fabric_manager);
  CHECK(e.size_file == "sizes/nd96isr_h100_v5.yaml");
  const auto* comp = shipped().find_component("nvidia-cuda-driver");
  REQUIRE(comp);
  CHECK(e.driver_version == comp->variant_for("ubuntu-22.04")->version);
  CHECK(e.driver_source.find("components/nvidia-cuda-driver.yaml for ubuntu-22.04") != std::string::npos);
  CHECK(e.modules ==
        std::vector<std::string>{"nvidia", "nvidia-modeset", "nvidia-uvm", "nvidia-drm", "nvidia-peermem"});
  CHECK(e.peermem);
  CHECK(e.ipoib);
  CHECK(e.ib_ports == 8);
  CHECK(e.ib_rate_gbps == 400);
  REQUIRE(e.gpu_bw_gbs);
  CHECK(*e.gpu_bw_gbs == doctest::Approx(48));
  // No ib_write_bw_gbps in this size's reference conf: a fraction of the port rate.
  REQUIRE(e.ib_bw_gbps);
  CHECK(*e.ib_bw_gbps == doctest::Approx(300));
  CHECK(e.ib_bw_source == "0.75 of sizes/nd96isr_h100_v5.yaml infiniband.rate_gbps (400 Gb/s)");
}

TEST_CASE("verify: a CPU-only InfiniBand size takes the loopback threshold from its reference conf") {
  const auto e = expect("Standard_HB120rs_v3", "almalinux-8.10");
  CHECK_FALSE(e.nvidia);
  CHECK(e.modules.empty());
  CHECK(e.ib_ports == 1);
  CHECK(e.ib_rate_gbps == 200);
  REQUIRE(e.ib_bw_gbps);
  CHECK(*e.ib_bw_gbps == doctest::Approx(190));
  CHECK(e.ib_bw_source == "sizes/hb120rs_v3.yaml checks.ib_write_bw_gbps");
  CHECK(e.waagent_service == "waagent");
}

TEST_CASE("verify: find_module prefers DKMS's updates/ and treats '-' and '_' alike") {
  const auto root = test::scratch("verify-find-module");
  const std::string k = "6.8.0-1015-azure";
  test::write(root / "lib/modules" / k / "kernel/drivers/video/nvidia.ko", "in-tree");
  test::write(root / "lib/modules" / k / "updates/dkms/nvidia.ko.zst", "dkms");
  test::write(root / "lib/modules" / k / "updates/dkms/nvidia_uvm.ko.xz", "dkms");
  test::write(root / "lib/modules" / k / "build/nvidia-drm.ko", "a header tree, not a module");
  const util::HostFs host(root);
  auto p = driver::find_module(host, k, "nvidia");
  REQUIRE(p);
  CHECK(p->filename() == "nvidia.ko.zst");
  auto uvm = driver::find_module(host, k, "nvidia-uvm");
  REQUIRE(uvm);
  CHECK(uvm->filename() == "nvidia_uvm.ko.xz");
  CHECK_FALSE(driver::find_module(host, k, "nvidia-drm"));
  CHECK_FALSE(driver::find_module(host, "6.1.0-99-amd64", "nvidia"));
  CHECK_FALSE(driver::find_module(host, k, "nvidia-modeset"));
}

TEST_CASE("verify: module_loaded reads /proc/modules, else /sys/module") {
  const util::HostFs nd(test::host_fixture("nd96isr_h100_v5"));
  CHECK(verify::module_loaded(nd, "nvidia-peermem"));
  CHECK(verify::module_loaded(nd, "nvidia_uvm"));
  CHECK(verify::module_loaded(nd, "nvidia"));
  CHECK_FALSE(verify::module_loaded(nd, "nvidia_peer")); // whole names only, never a prefix
  CHECK_FALSE(verify::module_loaded(nd, "nouveau"));
  const auto root = test::scratch("verify-sys-module");
  std::filesystem::create_directories(root / "sys/module/nvidia_peermem");
  CHECK(verify::module_loaded(util::HostFs(root), "nvidia-peermem"));
  CHECK_FALSE(verify::module_loaded(util::HostFs(root), "nouveau"));
}

TEST_CASE("verify: unverified_modules lists the loaded modules whose taint letters hold E") {
  // The format kernel/module/procfs.c prints: name, size, references, users, state, address, then
  // the module's taint letters in parentheses when it has any.
  const std::string text = "nvidia_uvm 2076672 0 - Live 0xffffffffc2a00000 (POE)\n"
                           "nvidia 104099840 2 nvidia_uvm, Live 0xffffffffc0400000 (PO)\n"
                           "mlx5_ib 471040 0 - Live 0xffffffffc0380000 (OE)\n"
                           "ext4 1003520 1 - Live 0xffffffffc0100000\n"
                           "\n"
                           "E_named 4096 0 - Live 0x0\n";
  const auto got = verify::unverified_modules(text);
  REQUIRE(got.size() == 2);
  CHECK(got[0].name == "nvidia_uvm");
  CHECK(got[0].taints == "POE");
  CHECK(got[1].name == "mlx5_ib");
  CHECK(verify::unverified_modules("").empty());
  CHECK(verify::unverified_modules("x 1 0 - Live 0x0 (E").empty()); // cut short: no closing parenthesis
}

TEST_CASE("verify: OS.EnableRDMA is on only for y, as the agent's get_switch reads it") {
  CHECK(verify::rdma_switch_on(std::string("y")));
  CHECK(verify::rdma_switch_on(std::string("Y")));
  CHECK_FALSE(verify::rdma_switch_on(std::nullopt));
  CHECK_FALSE(verify::rdma_switch_on(std::string("n")));
  CHECK_FALSE(verify::rdma_switch_on(std::string("yes")));
}

TEST_CASE("verify: port rate is speed x width, as sysfs prints it") {
  verify::ibverbs::PortInfo p;
  p.width = 2; // 4X
  p.speed = 128;
  CHECK(*p.rate_gbps() == doctest::Approx(400));
  p.speed = 64;
  CHECK(*p.rate_gbps() == doctest::Approx(200));
  p.speed = 32;
  CHECK(*p.rate_gbps() == doctest::Approx(100));
  p.width = 1;
  p.speed = 1;
  CHECK(*p.rate_gbps() == doctest::Approx(2.5));
  p.speed = 0;
  CHECK_FALSE(p.rate_gbps());
  CHECK(verify::ibverbs::port_state_name(1) == "DOWN");
  CHECK(verify::ibverbs::phys_state_name(5) == "LinkUp");
  CHECK(verify::ibverbs::speed_name(128) == "NDR");
  CHECK(verify::ibverbs::width_name(2) == "4X");
}

TEST_CASE("verify: a library that cannot be loaded is an error naming it and what to install") {
  auto lib = verify::DynLib::open("libhpcbake-no-such-library.so.1", "install the hpcbake-test package");
  REQUIRE_FALSE(lib);
  CHECK(lib.error().kind == ErrorKind::smoke_test);
  CHECK(lib.error().message.find("libhpcbake-no-such-library.so.1 could not be loaded") != std::string::npos);
  CHECK(lib.error().hint == "install the hpcbake-test package");

  auto libc = verify::DynLib::open("libc.so.6", "");
  REQUIRE(libc);
  std::size_t (*strlen_fn)(const char*) = nullptr;
  CHECK(libc->require(strlen_fn, "strlen"));
  const bool bound = strlen_fn != nullptr;
  REQUIRE(bound);
  CHECK(strlen_fn("four") == 4);
  void (*missing)() = nullptr;
  auto s = libc->require(missing, "hpcbake_no_such_symbol");
  REQUIRE_FALSE(s);
  CHECK(s.error().message.find("libc.so.6 does not export hpcbake_no_such_symbol") != std::string::npos);
}

// A `dcgmi diag -r 1 -j` document shaped as NVIDIA/DCGM testing/python3/dcgm_diag_schema.json
// describes DCGM 4's output (root "DCGM Diagnostic", test_categories[].tests[], results[] with
// status and warnings, test_summary.status). Written from the schema, not captured from a GPU:
// none is lent to this project's CI.
TEST_CASE("dcgm: each test of the short diagnostic is one check, warnings say why a test failed") {
  const auto doc = nlohmann::json::parse(R"({
    "DCGM Diagnostic": {
      "test_categories": [
        {"category": "Deployment", "tests": [
          {"name": "software", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"}],
           "test_summary": {"status": "Pass"}}]},
        {"category": "Hardware", "tests": [
          {"name": "memory", "results": [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 3, "status": "Fail",
             "warnings": [{"error_category": 1, "error_id": 2, "error_severity": 3,
                           "warning": "Uncorrectable ECC errors found on GPU 3"}]}],
           "test_summary": {"status": "Fail"}},
          {"name": "diagnostic", "results": [], "test_summary": {"status": "Skip"}}]}
      ]
    },
    "metadata": {"version": "4.5.2"}
  })");
  auto checks = verify::dcgm_diag_checks(doc);
  REQUIRE(checks);
  REQUIRE(checks->size() == 3);
  CHECK((*checks)[0].id == "dcgm.deployment.software");
  CHECK((*checks)[0].verdict == verify::Verdict::pass);
  CHECK((*checks)[0].level == 3);
  CHECK((*checks)[1].id == "dcgm.hardware.memory");
  CHECK((*checks)[1].verdict == verify::Verdict::fail);
  CHECK((*checks)[1].observed == "Fail: Uncorrectable ECC errors found on GPU 3");
  CHECK_FALSE((*checks)[1].hint.empty());
  CHECK((*checks)[2].verdict == verify::Verdict::skip);
  // DCGM 3's root name reads the same; anything else is an error, not an empty pass.
  nlohmann::json v3 = {{"DCGM GPU Diagnostic", doc["DCGM Diagnostic"]}};
  CHECK(verify::dcgm_diag_checks(v3).value().size() == 3);
  CHECK_FALSE(verify::dcgm_diag_checks(nlohmann::json::parse(R"({"error": "host engine not running"})")));
  CHECK_FALSE(verify::dcgm_diag_checks(nlohmann::json::parse(R"({"DCGM Diagnostic": {"test_categories": []}})")));
}

// dcgmi's JSON is read without throwing accessors: a member of the wrong type anywhere is a
// failed check that says what and where, never an exception out of verify.
TEST_CASE("dcgm: unexpected JSON from dcgmi is an error naming the place in the document, not an exception") {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"DCGM Diagnostic": []})", R"("DCGM Diagnostic" is an array, not an object)"},
      {R"({"DCGM Diagnostic": {"test_categories": {"category": "x"}}})",
       R"("DCGM Diagnostic".test_categories is an object, not an array)"},
      {R"({"DCGM Diagnostic": {"test_categories": ["Deployment"]}})",
       R"("DCGM Diagnostic".test_categories[0] is a string, not an object)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"category": 7, "tests": []}]}})",
       R"("DCGM Diagnostic".test_categories[0].category is a number, not a string)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": "memory"}]}})",
       R"("DCGM Diagnostic".test_categories[0].tests is a string, not an array)"},
      {R"({"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": ["memory"]}]}]}})",
       R"("DCGM GPU Diagnostic".test_categories[0].tests[0].name is an array, not a string)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "test_summary": "Pass"}]}]}})",
       R"("DCGM Diagnostic".test_categories[0].tests[0].test_summary is a string, not an object)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "test_summary": {"status": 0}}]}]}})",
       R"("DCGM Diagnostic".test_categories[0].tests[0].test_summary.status is a number, not a string)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": [null]}]}]}})",
       R"("DCGM Diagnostic".test_categories[0].tests[0].results[0] is null, not an object)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": [{"status": true}]}]}]}})",
       R"("DCGM Diagnostic".test_categories[0].tests[0].results[0].status is a boolean, not a string)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": [{"status": "Fail",
           "warnings": [{"warning": {"text": "ECC"}}]}]}]}]}})",
       R"("DCGM Diagnostic".test_categories[0].tests[0].results[0].warnings[0].warning is an object, not a string)"},
      {R"({"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "m", "results": [{"warnings": ["ECC"]}]}]}]}})",
       R"("DCGM Diagnostic".test_categories[0].tests[0].results[0].warnings[0] is a string, not an object)"},
  };
  for (const auto& [text, where] : cases) {
    CAPTURE(text);
    std::optional<hpcbake::Result<std::vector<verify::Check>>> checks;
    CHECK_NOTHROW(checks = verify::dcgm_diag_checks(nlohmann::json::parse(text)));
    REQUIRE(checks.has_value());
    REQUIRE_FALSE(checks->has_value());
    CHECK(checks->error().kind == hpcbake::ErrorKind::smoke_test);
    CHECK(checks->error().message == std::string("dcgmi diag printed unexpected JSON: ") + where);
    CHECK_FALSE(checks->error().hint.empty());
  }
}

// Through the runner, as verify --level 3 runs it: dcgmi's output that is not the document
// expected (wrong types, or not JSON at all) is the failed dcgm.diag check saying why.
TEST_CASE("dcgm: dcgmi output verify cannot read is the failed dcgm.diag check, with what and where") {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": 3}]}]}})",
       R"(dcgmi diag printed unexpected JSON: "DCGM Diagnostic".test_categories[0].tests[0].name is a number, not a string)"},
      {"Error: unable to connect to host engine\n{\"DCGM Diagnostic\": {\"test_categories\": [}\n", "syntax error"},
  };
  for (const auto& [output, why] : cases) {
    CAPTURE(output);
    exec::RecordingRunner runner;
    runner.on({"dcgmi", "diag"}, exec::exited(0, output));
    verify::VerifyRequest rq;
    rq.runner = &runner;
    verify::Report report;
    verify::Recorder rec(rq, report);
    verify::Expectations e;
    e.dcgm = true;
    CHECK_NOTHROW(verify::dcgm_checks(rec, e));
    REQUIRE(report.checks.size() == 1);
    const auto& c = report.checks.front();
    CHECK(c.id == "dcgm.diag");
    CHECK(c.verdict == verify::Verdict::fail);
    CHECK(c.observed.find(why) != std::string::npos);
    CHECK_FALSE(c.hint.empty());
  }
}
