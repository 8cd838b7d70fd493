// Level 3: DCGM's short diagnostic (`dcgmi diag -r 1 -j`), each of its tests one check.
#include "verify/checks.hpp"

#include <fmt/format.h>

#include <chrono>

namespace hpcbake::verify {

namespace {
using json = nlohmann::json;
using util::to_lower;
} // namespace

// DCGM 4 names the root "DCGM Diagnostic", DCGM 3 "DCGM GPU Diagnostic" (NVIDIA/DCGM
// testing/python3/dcgm_diag_schema.json); under it test_categories[].tests[] with a name,
// results[] (status, warnings[].warning) and test_summary.status: "Pass", "Skip" or "Fail".
Result<std::vector<Check>> dcgm_diag_checks(const json& doc) {
  const json* root = nullptr;
  for (const char* key : {"DCGM Diagnostic", "DCGM GPU Diagnostic"})
    if (doc.is_object() && doc.contains(key)) root = &doc[key];
  if (!root || !root->contains("test_categories") || !(*root)["test_categories"].is_array())
    return fail(ErrorKind::smoke_test, "dcgmi diag printed no \"DCGM Diagnostic\".test_categories",
                "run `dcgmi diag -r 1 -j` by hand; is nv-hostengine (nvidia-dcgm.service) running?");
  std::vector<Check> out;
  for (const auto& cat : (*root)["test_categories"]) {
    const std::string category = cat.value("category", "?");
    for (const auto& t : cat.value("tests", json::array())) {
      const std::string name = t.value("name", "?");
      std::string status = t.contains("test_summary") ? t["test_summary"].value("status", "") : "";
      std::vector<std::string> warnings;
      for (const auto& r : t.value("results", json::array())) {
        if (status.empty()) status = r.value("status", "");
        for (const auto& w : r.value("warnings", json::array()))
          if (w.is_object() && w.contains("warning")) warnings.push_back(w["warning"].get<std::string>());
      }
      const std::string st = to_lower(status);
      const Verdict v = st == "pass" ? Verdict::pass : st == "skip" ? Verdict::skip : Verdict::fail;
      std::string observed = status.empty() ? "no status" : status;
      if (!warnings.empty()) observed += ": " + warnings.front();
      out.push_back(make_check(fmt::format("dcgm.{}.{}", to_lower(category), to_lower(name)), 3,
                               fmt::format("DCGM {} / {}", category, name), "Pass", observed, v,
                               v == Verdict::fail
                                   ? "read `dcgmi diag -r 1` and NVIDIA's DCGM diagnostics guide for this "
                                     "test; a GPU that fails it needs a support case"
                                   : "",
                               "NVIDIA DCGM, dcgmi diag -r 1 (short)"));
    }
  }
  if (out.empty())
    return fail(ErrorKind::smoke_test, "dcgmi diag reported no tests", "run `dcgmi diag -r 1` by hand to see why");
  return out;
}

void dcgm_checks(Recorder& rec, const Expectations& e) {
  const auto& req = rec.request();
  const std::string title = "DCGM short diagnostic (dcgmi diag -r 1)";
  auto skip = [&](const std::string& why) { rec.add(make_check("dcgm.diag", 3, title, "Pass", why, Verdict::skip)); };
  if (!e.dcgm) return skip("the plan installs no DCGM here");
  if (!req.runner) return skip("no command runner");
  rec.status("running dcgmi diag -r 1 (about a minute)");
  exec::Command cmd;
  cmd.argv = {"dcgmi", "diag", "-r", "1", "-j"};
  cmd.timeout = std::chrono::seconds(600);
  auto r = req.runner->run(cmd);
  if (!r) return skip(fmt::format("dcgmi cannot be run: {}", r.error().message));
  json doc;
  try {
    doc = json::parse(r->output.substr(std::min(r->output.find('{'), r->output.size())));
  } catch (const json::exception&) {
    rec.add(make_check("dcgm.diag", 3, title, "Pass",
                       fmt::format("{}: no JSON ({})", r->describe(), util::last_lines(r->output, 2)), Verdict::fail,
                       "is nv-hostengine running? systemctl status nvidia-dcgm"));
    return;
  }
  auto checks = dcgm_diag_checks(doc);
  if (!checks) {
    rec.add(make_check("dcgm.diag", 3, title, "Pass", checks.error().message, Verdict::fail, checks.error().hint));
    return;
  }
  for (auto& c : *checks)
    rec.add(std::move(c));
}

} // namespace hpcbake::verify
