#include "install/journal.hpp"

#include "util/atomic_file.hpp"
#include "util/clock.hpp"
#include "util/hostfs.hpp"
#include "util/json.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <system_error>

namespace hpcbake::install {

using nlohmann::json;

const char* to_string(StepStatus s) {
  switch (s) {
  case StepStatus::started:
    return "started";
  case StepStatus::done:
    return "done";
  case StepStatus::failed:
    return "failed";
  case StepStatus::reboot_pending:
    return "reboot-pending";
  }
  return "?";
}

std::optional<StepStatus> step_status_from(const std::string& s) {
  for (auto v : {StepStatus::started, StepStatus::done, StepStatus::failed, StepStatus::reboot_pending})
    if (s == to_string(v)) return v;
  return std::nullopt;
}

const char* to_string(RunState s) {
  switch (s) {
  case RunState::running:
    return "running";
  case RunState::complete:
    return "complete";
  case RunState::failed:
    return "failed";
  case RunState::reboot_required:
    return "reboot-required";
  case RunState::interrupted:
    return "interrupted";
  }
  return "?";
}

namespace {

std::optional<RunState> run_state_from(const std::string& s) {
  for (auto v :
       {RunState::running, RunState::complete, RunState::failed, RunState::reboot_required, RunState::interrupted})
    if (s == to_string(v)) return v;
  return std::nullopt;
}

const char* const kAside = "Move the file aside (it records what was installed) and run install again: every step "
                           "is then checked and redone where needed.";

} // namespace

json to_json(const Journal& j) {
  json steps = json::object();
  for (const auto& [id, r] : j.steps) {
    json s = {{"digest", r.digest},
              {"status", to_string(r.status)},
              {"started_at", r.started_at},
              {"finished_at", r.finished_at},
              {"attempts", r.attempts}};
    if (!r.boot_id.empty()) s["boot_id"] = r.boot_id;
    if (!r.message.empty()) s["message"] = r.message;
    if (!r.output_tail.empty()) s["output_tail"] = r.output_tail;
    steps[id] = std::move(s);
  }
  json out = {{"version", j.version},       {"size", j.size},
              {"distro", j.distro},         {"state", to_string(j.state)},
              {"updated_at", j.updated_at}, {"steps", std::move(steps)}};
  if (!j.plan_sha256.empty()) out["plan_sha256"] = j.plan_sha256;
  return out;
}

Result<Journal> journal_from_json(const json& doc, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return fail(ErrorKind::usage, fmt::format("{}: not a valid hpcbake journal: {}", where, what), kAside);
  };
  if (!doc.is_object()) return bad("the top level is not an object");
  const auto v = doc.find("version");
  if (v == doc.end() || !v->is_number_integer()) return bad("no integer \"version\"");
  // Compared as the 64-bit value JSON holds: get<int>() would wrap 4294967297 to 1 and read
  // a journal from the future as version 1 (a property fuzz/fuzz_journal.cpp checks).
  const bool newer = v->is_number_unsigned() ? v->get<std::uint64_t>() > static_cast<std::uint64_t>(kJournalVersion)
                                             : v->get<std::int64_t>() > kJournalVersion;
  if (newer)
    return fail(ErrorKind::usage,
                fmt::format("{}: journal version {} was written by a newer hpcbake (this one reads up to {})", where,
                            util::dump_json(*v), kJournalVersion),
                "Run the hpcbake that wrote it, or move the file aside to start over.");
  if (v->get<std::int64_t>() < 1) return bad("\"version\" must be 1 or more");
  Journal j;
  j.version = kJournalVersion;
  auto str = [&](const json& o, const char* key, std::string& out) -> bool {
    const auto it = o.find(key);
    if (it == o.end()) return true;
    if (!it->is_string()) return false;
    out = it->get<std::string>();
    return true;
  };
  auto num = [&](const json& o, const char* key, std::int64_t& out) -> bool {
    const auto it = o.find(key);
    if (it == o.end()) return true;
    if (!it->is_number_integer()) return false;
    out = it->get<std::int64_t>();
    return true;
  };
  if (!str(doc, "size", j.size)) return bad("\"size\" is not a string");
  if (!str(doc, "distro", j.distro)) return bad("\"distro\" is not a string");
  if (!str(doc, "plan_sha256", j.plan_sha256)) return bad("\"plan_sha256\" is not a string");
  if (!num(doc, "updated_at", j.updated_at)) return bad("\"updated_at\" is not an integer");
  std::string state = "running";
  if (!str(doc, "state", state)) return bad("\"state\" is not a string");
  const auto rs = run_state_from(state);
  if (!rs) return bad(fmt::format("unknown \"state\" '{}'", state));
  j.state = *rs;
  const auto steps = doc.find("steps");
  if (steps == doc.end() || !steps->is_object()) return bad("no \"steps\" object");
  for (const auto& [id, s] : steps->items()) {
    if (!s.is_object()) return bad(fmt::format("step '{}' is not an object", id));
    StepRecord r;
    std::string status;
    if (!str(s, "status", status) || status.empty()) return bad(fmt::format("step '{}' has no \"status\"", id));
    const auto st = step_status_from(status);
    if (!st) return bad(fmt::format("step '{}' has an unknown status '{}'", id, status));
    r.status = *st;
    std::int64_t attempts = 0;
    if (!str(s, "digest", r.digest) || !num(s, "started_at", r.started_at) || !num(s, "finished_at", r.finished_at) ||
        !num(s, "attempts", attempts) || !str(s, "boot_id", r.boot_id) || !str(s, "message", r.message) ||
        !str(s, "output_tail", r.output_tail))
      return bad(fmt::format("step '{}' has a field of the wrong type", id));
    if (attempts < 0 || attempts > 1'000'000) return bad(fmt::format("step '{}' has an impossible attempt count", id));
    r.attempts = static_cast<int>(attempts);
    j.steps.emplace(id, std::move(r));
  }
  return j;
}

Result<Journal> load_journal(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return Journal{};
  const auto text = util::read_file(file);
  if (!text)
    return fail(ErrorKind::internal, fmt::format("{}: cannot read the install journal", file.string()),
                "Check its permissions (hpcbake install runs as root).");
  json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return fail(ErrorKind::usage, fmt::format("{}: the install journal is not valid JSON", file.string()), kAside);
  return journal_from_json(doc, file.string());
}

Status save_journal(const std::filesystem::path& file, const Journal& j) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot create the directory: {}", file.parent_path().string(), ec.message()));
  // Step messages carry command output and build logs, which need not be valid UTF-8: such bytes
  // become U+FFFD instead of a type_error thrown out of a worker thread.
  return util::write_file_atomic(file, util::dump_json(to_json(j), 2) + "\n", 0644);
}

std::int64_t now_seconds() {
  return util::record_time();
}

} // namespace hpcbake::install
