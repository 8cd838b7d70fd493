// Level 3: DCGM's short diagnostic (`dcgmi diag -r 1 -j`), each of its tests one check (the
// document is read by dcgm_diag.cpp).
#include "verify/checks.hpp"

#include <fmt/format.h>

#include <chrono>

namespace hpcbake::verify {

using nlohmann::json;

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
  } catch (const json::exception& ex) {
    // what(): "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string why = ex.what();
    if (const auto p = why.find("] "); why.starts_with("[json.") && p != std::string::npos) why.erase(0, p + 2);
    rec.add(
        make_check("dcgm.diag", 3, title, "Pass",
                   fmt::format("{}: no JSON ({}; last output: {})", r->describe(), why, util::last_lines(r->output, 2)),
                   Verdict::fail, "is nv-hostengine running? systemctl status nvidia-dcgm"));
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
