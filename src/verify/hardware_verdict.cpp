#include "verify/hardware_verdict.hpp"

#include "util/atomic_file.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace hpcbake::verify {

using nlohmann::json;

std::optional<PendingHardware> pending_hardware(const util::HostFs& fs, std::string& warning) {
  if (!fs.exists(paths::kImageManifest)) return std::nullopt;
  const auto text = fs.read(paths::kImageManifest, util::host_file::config);
  const auto where = fs.display(paths::kImageManifest).string();
  if (!text) {
    warning = where + ": cannot read the image manifest: the first-boot hardware checks are not run";
    return std::nullopt;
  }
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    warning = where + ": not a JSON object: the first-boot hardware checks are not run";
    return std::nullopt;
  }
  const auto hv = doc.find("hardware_verdict");
  if (hv == doc.end() || !hv->is_object() || hv->value("state", "") != "pending") return std::nullopt;
  PendingHardware p;
  p.size = hv->value("size", "");
  const auto level = hv->find("level");
  p.level = level != hv->end() && level->is_number_integer() ? level->get<int>() : 1;
  p.level = std::clamp(p.level, 0, kFirstBootMaxLevel);
  return p;
}

json to_json(const HardwareVerdict& v) {
  return {{"schema", 1},    {"state", v.state}, {"passed", v.passed},         {"boot_id", v.boot_id},
          {"size", v.size}, {"level", v.level}, {"checked_at", v.checked_at}, {"failed_checks", v.failed_checks}};
}

Result<std::optional<HardwareVerdict>> read_hardware_verdict(const util::HostFs& fs) {
  if (!fs.exists(kHardwareVerdictPath)) return std::optional<HardwareVerdict>{};
  const auto where = fs.display(kHardwareVerdictPath).string();
  const auto text = fs.read(kHardwareVerdictPath, util::host_file::config);
  const json doc = text ? json::parse(*text, nullptr, /*allow_exceptions=*/false) : json();
  if (!doc.is_object() || util::int_member(doc, "schema", 0) != 1)
    return fail(ErrorKind::usage, where + ": not a first-boot hardware verdict this hpcbake reads",
                "remove it: the next boot runs the deferred hardware checks again");
  HardwareVerdict v;
  try {
    v.state = doc.value("state", "done");
    v.passed = doc.value("passed", false);
    v.boot_id = doc.value("boot_id", "");
    v.size = doc.value("size", "");
    v.level = doc.value("level", 0);
    v.checked_at = doc.value("checked_at", std::int64_t{0});
    v.failed_checks = doc.value("failed_checks", std::vector<std::string>{});
  } catch (const json::exception& e) {
    return fail(ErrorKind::usage, fmt::format("{}: malformed: {}", where, e.what()),
                "remove it: the next boot runs the deferred hardware checks again");
  }
  return std::optional<HardwareVerdict>(std::move(v));
}

Status write_hardware_verdict(const util::HostFs& fs, const HardwareVerdict& v) {
  const auto path = fs.resolve(kHardwareVerdictPath);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  return util::write_file_atomic(path, util::dump_json(to_json(v), 2) + "\n", 0644);
}

HardwareVerdict verdict_of(const Report& report, std::string boot_id, std::int64_t now) {
  HardwareVerdict v;
  v.passed = report.passed();
  v.boot_id = std::move(boot_id);
  v.size = report.size;
  v.level = report.level;
  v.checked_at = now;
  for (const auto& c : report.checks)
    if (c.verdict == Verdict::fail) v.failed_checks.push_back(c.id);
  return v;
}

Check hardware_verdict_check(const std::optional<HardwareVerdict>& v, const PendingHardware& p) {
  Check c;
  c.id = "image.hardware_verdict";
  c.level = 0;
  c.title = "the image's first-boot hardware checks (deferred at the bake)";
  c.expected = fmt::format("passed on {}", p.size.empty() ? std::string("the image's size") : p.size);
  c.source =
      fmt::format("{} hardware_verdict (seal --verify deferred); {}", paths::kImageManifest, kHardwareVerdictPath);
  c.verdict = Verdict::fail;
  const std::string again = "the boot unit (hpcbake-verify-boot.service, verify --boot --first-boot) runs them "
                            "again at the next boot until they pass";
  if (!v) {
    c.observed = "not run yet";
    c.hint = "start hpcbake-verify-boot.service, or reboot: " + again;
  } else if (v->state == "running") {
    c.observed =
        fmt::format("started at level {} in boot {} and never finished (stopped or timed out)", v->level, v->boot_id);
    c.hint = "`journalctl -u hpcbake-verify-boot.service`; " + again;
  } else if (!v->passed) {
    c.observed = fmt::format("failed at level {} in boot {}: {}", v->level, v->boot_id,
                             v->failed_checks.empty() ? "?" : util::join(v->failed_checks, ", "));
    c.hint = "fix what those checks report (or redeploy the VM on healthy hardware); " + again;
  } else {
    c.observed = fmt::format("passed at level {} in boot {}", v->level, v->boot_id);
    c.verdict = Verdict::pass;
    c.hint.clear();
  }
  return c;
}

} // namespace hpcbake::verify
