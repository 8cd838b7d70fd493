// verify/node_state: what `verify --boot` leaves for start tasks, health programs and monitoring.
#include "verify/node_state.hpp"

#include "helpers.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <regex>
#include <set>

using namespace hpcbake;

namespace {

verify::Check check(std::string id, int level, verify::Verdict v) {
  verify::Check c;
  c.id = std::move(id);
  c.level = level;
  c.title = "title of " + c.id;
  c.expected = "8";
  c.observed = "2 (NVML)";
  c.verdict = v;
  if (v == verify::Verdict::fail) c.hint = "redeploy the VM";
  return c;
}

verify::Report report(std::vector<verify::Check> checks, int level = 1) {
  verify::Report r;
  r.size = "Standard_ND96isr_H100_v5";
  r.size_id = "nd96isr_h100_v5";
  r.level = level;
  r.seconds = 2.5;
  r.checks = std::move(checks);
  return r;
}

const verify::NodeStateContext kCtx{"boot-a", 1700000000, "0.9.0", "/var/lib/hpcbake/plan.json", "ab12"};

// Every line of the text format, as "Text format details" of
// https://prometheus.io/docs/instrumenting/exposition_formats/ puts it: a HELP or TYPE line, or
// name{label="value",...} value, a label value escaping \ " and line feed.
void check_exposition(const std::string& text) {
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n'); // the last line ends with a line feed
  const std::regex help(R"(# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*)");
  const std::regex type(R"(# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped))");
  const std::regex sample(
      R"([a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? -?[0-9.e+-]+)");
  std::set<std::string> typed;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    INFO(line);
    CHECK((std::regex_match(line, help) || std::regex_match(line, type) || std::regex_match(line, sample)));
    if (line.starts_with("# TYPE ")) CHECK(typed.insert(line.substr(7, line.find(' ', 7) - 7)).second);
  }
}

} // namespace

TEST_CASE("node state: the verdict, the failed checks with what was expected and observed, and the context") {
  const auto s = verify::make_node_state(
      report({check("gpu.count", 0, verify::Verdict::fail), check("cuda.0.kernel", 1, verify::Verdict::pass),
              check("gpu.0.ecc_mode", 1, verify::Verdict::skip)}),
      kCtx);
  CHECK_FALSE(s.healthy);
  CHECK(s.pass == 1);
  CHECK(s.fail == 1);
  CHECK(s.skip == 1);
  REQUIRE(s.failed().size() == 1);
  const auto doc = verify::to_json(s);
  CHECK(doc["verdict"] == "unhealthy");
  CHECK(doc["boot_id"] == "boot-a");
  CHECK(doc["checked_at"] == 1700000000);
  CHECK(doc["hpcbake_version"] == "0.9.0");
  CHECK(doc["plan"]["sha256"] == "ab12");
  CHECK(doc["size"] == "Standard_ND96isr_H100_v5");
  CHECK(doc["duration_seconds"] == 2.5);
  REQUIRE(doc["failed_checks"].size() == 1);
  CHECK(doc["failed_checks"][0]["id"] == "gpu.count");
  CHECK(doc["failed_checks"][0]["expected"] == "8");
  CHECK(doc["failed_checks"][0]["observed"] == "2 (NVML)");
  CHECK(doc["failed_checks"][0]["hint"] == "redeploy the VM");
  // Read back as written.
  const auto back = verify::node_state_from_json(doc);
  REQUIRE(back);
  CHECK(verify::to_json(*back) == doc);

  const auto ok = verify::make_node_state(report({check("gpu.count", 0, verify::Verdict::pass)}), kCtx);
  CHECK(ok.healthy);
  CHECK(verify::to_json(ok)["verdict"] == "healthy");
  const auto err = verify::error_node_state("no plan", 1, 0.1, kCtx);
  CHECK_FALSE(err.healthy);
  CHECK(verify::to_json(err)["error"] == "no plan");
}

TEST_CASE("node state: a malformed or foreign file is refused, never taken as healthy") {
  CHECK_FALSE(verify::node_state_from_json(nlohmann::json::array()));
  CHECK_FALSE(verify::node_state_from_json({{"schema", 2}, {"verdict", "healthy"}}));
  CHECK_FALSE(verify::node_state_from_json({{"schema", 1}, {"verdict", "fine"}}));
  CHECK_FALSE(verify::node_state_from_json({{"schema", 1}}));
}

TEST_CASE("node state: Prometheus text exposition for node exporter's textfile collector") {
  auto r = report({check("gpu.count", 0, verify::Verdict::fail), check("cuda.0.kernel", 1, verify::Verdict::pass),
                   check("gpu.0.ecc_mode", 1, verify::Verdict::skip),
                   check("odd\"id\\with\nbreak", 1, verify::Verdict::pass)});
  r.size = "Standard_\"quoted\"";
  const auto text = verify::to_prometheus(verify::make_node_state(r, kCtx));
  check_exposition(text);
  CHECK(text.find("hpcbake_node_healthy{size=\"Standard_\\\"quoted\\\"\",level=\"1\"} 0\n") != std::string::npos);
  CHECK(text.find("hpcbake_check_passed{id=\"gpu.count\",level=\"0\"} 0\n") != std::string::npos);
  CHECK(text.find("hpcbake_check_passed{id=\"cuda.0.kernel\",level=\"1\"} 1\n") != std::string::npos);
  CHECK(text.find("gpu.0.ecc_mode") == std::string::npos); // skipped: not listed
  CHECK(text.find("hpcbake_check_passed{id=\"odd\\\"id\\\\with\\nbreak\",level=\"1\"} 1\n") != std::string::npos);
  CHECK(text.find("hpcbake_verify_timestamp_seconds 1700000000\n") != std::string::npos);
  CHECK(text.find("hpcbake_verify_duration_seconds 2.5\n") != std::string::npos);
  CHECK(text.find("hpcbake_verify_checks{verdict=\"fail\"} 1\n") != std::string::npos);
  const auto healthy =
      verify::to_prometheus(verify::make_node_state(report({check("gpu.count", 0, verify::Verdict::pass)}), kCtx));
  check_exposition(healthy);
  CHECK(healthy.find("hpcbake_node_healthy{size=\"Standard_ND96isr_H100_v5\",level=\"1\"} 1\n") != std::string::npos);
}

TEST_CASE("node state: the periodic level 0 keeps the boot's level-1 results of the same boot") {
  const auto boot = verify::make_node_state(
      report({check("gpu.count", 0, verify::Verdict::pass), check("cuda.0.kernel", 1, verify::Verdict::fail)}), kCtx);
  auto periodic = verify::make_node_state(report({check("gpu.count", 0, verify::Verdict::pass)}, 0), kCtx);
  CHECK(periodic.healthy);
  verify::carry_forward(periodic, boot);
  CHECK_FALSE(periodic.healthy); // the level-1 failure stays
  CHECK(periodic.level == 1);
  CHECK(periodic.pass == 1);
  CHECK(periodic.fail == 1);
  REQUIRE(periodic.failed().size() == 1);
  CHECK(periodic.failed()[0]->id == "cuda.0.kernel");

  auto next_boot_ctx = kCtx;
  next_boot_ctx.boot_id = "boot-b";
  auto other = verify::make_node_state(report({check("gpu.count", 0, verify::Verdict::pass)}, 0), next_boot_ctx);
  verify::carry_forward(other, boot); // another boot: nothing carried
  CHECK(other.healthy);
  CHECK(other.level == 0);
  auto rerun = verify::make_node_state(report({check("cuda.0.kernel", 1, verify::Verdict::pass)}), kCtx);
  verify::carry_forward(rerun, boot); // the same level ran again: its result replaces the earlier one
  CHECK(rerun.healthy);

  // A boot run that stopped with an error (no checks) keeps the node unhealthy after the periodic run.
  const auto errored = verify::error_node_state("no stored plan", 1, 0.1, kCtx);
  auto after = verify::make_node_state(report({check("gpu.count", 0, verify::Verdict::pass)}, 0), kCtx);
  verify::carry_forward(after, errored);
  CHECK_FALSE(after.healthy);
  CHECK(after.level == 1);
  CHECK(after.error.find("no stored plan") != std::string::npos);
}

TEST_CASE("node state: both files written whole under the root, read back") {
  const auto root = test::scratch("node-state");
  const util::HostFs fs(root);
  CHECK_FALSE(*verify::read_node_state(fs));
  const auto s = verify::make_node_state(report({check("gpu.count", 0, verify::Verdict::fail)}), kCtx);
  REQUIRE(verify::write_node_state(fs, s));
  REQUIRE(verify::write_textfile(fs, "/var/lib/prometheus/node-exporter", s));
  const auto back = verify::read_node_state(fs);
  REQUIRE(back);
  REQUIRE(*back);
  CHECK(verify::to_json(**back) == verify::to_json(s));
  CHECK(test::slurp(root / "var/lib/prometheus/node-exporter/hpcbake.prom") == verify::to_prometheus(s));
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(root / "var/lib/prometheus/node-exporter"))
    names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"hpcbake.prom"}); // no temp file left behind
  test::write(root / "var/lib/hpcbake/node-state.json", "{\"schema\": 1, \"verdict\": ");
  CHECK_FALSE(verify::read_node_state(fs));
}
