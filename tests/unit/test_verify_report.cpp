// verify/: the three report formats.
#include "verify/verify.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace hpcbake;

namespace {

verify::Report sample() {
  verify::Report r;
  r.size = "Standard_ND96isr_H100_v5";
  r.size_id = "nd96isr_h100_v5";
  r.distro = "ubuntu-22.04";
  r.level = 1;
  r.kernels = {"6.5.0-1025-azure", "6.8.0-1015-azure"};
  verify::Check a;
  a.id = "gpu.count";
  a.level = 0;
  a.title = "GPU count";
  a.expected = "8";
  a.observed = "7 (NVML; 8 NVIDIA GPUs on the PCI bus)";
  a.verdict = verify::Verdict::fail;
  a.hint = "`nvidia-smi -L` & <redeploy>";
  a.source = "sizes/nd96isr_h100_v5.yaml gpu.count";
  a.value = 7;
  a.threshold = 8;
  verify::Check b;
  b.id = "gpu.0.ecc_mode";
  b.level = 1;
  b.title = "GPU 0: ECC mode";
  b.expected = "enabled";
  b.observed = "ECC not reported: \"Not Supported\" \x01";
  b.verdict = verify::Verdict::skip;
  verify::Check c;
  c.id = "cuda.0.bw_h2d";
  c.level = 1;
  c.title = "CUDA device 0: pinned host-to-device bandwidth";
  c.expected = ">= 48 GB/s";
  c.observed = "50.0 GB/s";
  c.verdict = verify::Verdict::pass;
  c.value = 50;
  c.threshold = 48;
  r.checks = {a, b, c};
  return r;
}

} // namespace

TEST_CASE("verify: xml_escape escapes markup and replaces what XML 1.0 cannot carry") {
  CHECK(verify::xml_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&apos;");
  CHECK(verify::xml_escape("tab\tnl\ncr\r") == "tab\tnl\ncr\r");
  CHECK(verify::xml_escape(std::string("x\x01y\x1bz")) == "x\xEF\xBF\xBDy\xEF\xBF\xBDz");
  CHECK(verify::xml_escape("GPU 0 (H100, 0001:00:00.0) ✓") == "GPU 0 (H100, 0001:00:00.0) ✓");
}

TEST_CASE("verify: JSON report: schema 1, a summary, every check with its verdict") {
  const auto r = sample();
  CHECK_FALSE(r.passed());
  const auto j = nlohmann::json::parse(verify::to_json_text(r));
  CHECK(j["schema"] == 1);
  CHECK(j["size"] == "Standard_ND96isr_H100_v5");
  CHECK(j["distro"] == "ubuntu-22.04");
  CHECK(j["level"] == 1);
  CHECK(j["passed"] == false);
  CHECK(j["kernels"].size() == 2);
  CHECK(j["summary"]["total"] == 3);
  CHECK(j["summary"]["fail"] == 1);
  CHECK(j["summary"]["skip"] == 1);
  CHECK(j["summary"]["pass"] == 1);
  REQUIRE(j["checks"].size() == 3);
  const auto& c0 = j["checks"][0];
  CHECK(c0["id"] == "gpu.count");
  CHECK(c0["verdict"] == "fail");
  CHECK(c0["value"] == 7);
  CHECK(c0["threshold"] == 8);
  CHECK(c0["source"] == "sizes/nd96isr_h100_v5.yaml gpu.count");
  CHECK(j["checks"][1]["hint"].is_null());
  CHECK(j["checks"][1]["value"].is_null());
  CHECK(j["checks"][2]["verdict"] == "pass");
}

TEST_CASE("verify: the table has check, expected, observed and verdict, and says what to do for each failure") {
  const std::string t = verify::render_table(sample());
  CHECK(t.find("level 0 (inventory)") != std::string::npos);
  CHECK(t.find("level 1 (function)") != std::string::npos);
  CHECK(t.find("CHECK") != std::string::npos);
  CHECK(t.find("EXPECTED") != std::string::npos);
  CHECK(t.find("OBSERVED") != std::string::npos);
  CHECK(t.find("VERDICT") != std::string::npos);
  CHECK(t.find("FAIL") != std::string::npos);
  CHECK(t.find("SKIP") != std::string::npos);
  CHECK(t.find("next: `nvidia-smi -L` & <redeploy>") != std::string::npos);
  CHECK(t.find("1 passed, 1 failed, 1 skipped") != std::string::npos);
}

TEST_CASE("verify: JUnit: a suite per level, failures and skips counted, text escaped") {
  const std::string x = verify::to_junit(sample());
  CHECK(x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"hpcbake verify\" tests=\"3\" "
                      "failures=\"1\" skipped=\"1\""));
  CHECK(x.find("<testsuite name=\"hpcbake.verify.level0 (inventory)\" tests=\"1\" failures=\"1\" skipped=\"0\"") !=
        std::string::npos);
  CHECK(x.find("<testsuite name=\"hpcbake.verify.level1 (function)\" tests=\"2\" failures=\"0\" skipped=\"1\"") !=
        std::string::npos);
  CHECK(x.find("<testcase classname=\"hpcbake.verify.level0\" name=\"gpu.count\"") != std::string::npos);
  CHECK(x.find("next: `nvidia-smi -L` &amp; &lt;redeploy&gt;") != std::string::npos);
  CHECK(x.find("<skipped message=\"ECC not reported: &quot;Not Supported&quot; \xEF\xBF\xBD\"/>") != std::string::npos);
  CHECK(x.find('\x01') == std::string::npos);
  CHECK(x.ends_with("</testsuites>\n"));
}
