#include "install/plan_file.hpp"

#include "util/atomic_file.hpp"
#include "util/hostfs.hpp"
#include "util/json.hpp"
#include "util/sha256.hpp"
#include "util/strings.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace hpcbake::install {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json options_json(const RunOptions& o) {
  return {{"jobs", o.jobs},
          {"lock_timeout_s", o.lock_timeout.count()},
          {"verify_level", o.verify_level},
          {"ib_devices", o.ib_devices},
          {"ib_seconds", o.ib_seconds},
          {"fabric_wait_s", o.fabric_wait.count()},
          {"cache_dir", o.cache_dir.string()},
          {"ca_file", o.ca_file},
          {"parallel", o.parallel},
          {"attempts_per_url", o.attempts_per_url},
          {"low_speed_seconds", o.low_speed_seconds},
          {"backoff_initial_s", o.backoff_initial_s},
          {"max_unpinned_bytes", o.max_unpinned_bytes},
          {"quarantine_budget", o.quarantine_budget},
          {"bundle", o.bundle.string()},
          {"sha256_overrides", o.sha256_overrides},
          {"key_dir", o.key_dir.string()}};
}

const char* const kAside = "the stored plan is damaged or was written by another hpcbake: move it aside and run "
                           "'hpcbake install' again (it plans afresh; the journal keeps what is done)";

Result<RunOptions> options_from(const json& j, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return fail(ErrorKind::usage, fmt::format("{}: {}", where, what), kAside);
  };
  if (!j.is_object()) return bad("expected an object");
  const json expected = options_json(RunOptions{});
  for (const auto& [k, v] : j.items())
    if (!expected.contains(k)) return bad(fmt::format("unknown field '{}'", k));
  for (const auto& [k, v] : expected.items()) {
    if (!j.contains(k)) return bad(fmt::format("missing field '{}'", k));
    const auto& got = j.at(k);
    const bool same = (v.is_string() && got.is_string()) || (v.is_array() && got.is_array()) ||
                      (v.is_number_integer() && got.is_number_integer()) || (v.is_number_float() && got.is_number());
    if (!same) return bad(fmt::format("field '{}' has the wrong type", k));
  }
  try {
    RunOptions o;
    o.jobs = j.at("jobs").get<int>();
    o.lock_timeout = std::chrono::seconds(j.at("lock_timeout_s").get<long>());
    o.verify_level = j.at("verify_level").get<int>();
    o.ib_devices = j.at("ib_devices").get<std::vector<std::string>>();
    o.ib_seconds = j.at("ib_seconds").get<double>();
    o.fabric_wait = std::chrono::seconds(j.at("fabric_wait_s").get<long>());
    o.cache_dir = j.at("cache_dir").get<std::string>();
    o.ca_file = j.at("ca_file").get<std::string>();
    o.parallel = j.at("parallel").get<int>();
    o.attempts_per_url = j.at("attempts_per_url").get<int>();
    o.low_speed_seconds = j.at("low_speed_seconds").get<long>();
    o.backoff_initial_s = j.at("backoff_initial_s").get<double>();
    o.max_unpinned_bytes = j.at("max_unpinned_bytes").get<std::uint64_t>();
    o.quarantine_budget = j.at("quarantine_budget").get<std::uint64_t>();
    o.bundle = j.at("bundle").get<std::string>();
    o.sha256_overrides = j.at("sha256_overrides").get<std::vector<std::string>>();
    o.key_dir = j.at("key_dir").get<std::string>();
    if (o.jobs < 1 || o.jobs > 16 || o.verify_level < 0 || o.verify_level > 3 || o.lock_timeout.count() < 0 ||
        o.fabric_wait.count() < 0)
      return bad("a value out of range (jobs 1-16, verify_level 0-3, times not negative)");
    return o;
  } catch (const json::exception& e) {
    return bad(e.what());
  }
}

} // namespace

// The plan as stored: artifact URLs without query string or password, the artifacts that lost one
// named. Stored twice, it stays the same.
plan::Plan stored_form(const plan::Plan& plan) {
  plan::Plan stored = plan;
  for (auto& a : stored.artifacts) {
    bool redacted = false; // a query string (SAS token) or a password
    for (auto& u : a.artifact.urls)
      if (auto r = util::redact_url(u); r != u) {
        u = std::move(r);
        redacted = true;
      }
    if (redacted && std::find(stored.artifacts_redacted.begin(), stored.artifacts_redacted.end(), a.artifact.name) ==
                        stored.artifacts_redacted.end())
      stored.artifacts_redacted.push_back(a.artifact.name);
  }
  return stored;
}

std::string plan_digest(const plan::Plan& plan, const RunOptions& options) {
  const json in = {{"plan", plan::to_json(stored_form(plan), plan::Urls::full)}, {"options", options_json(options)}};
  // Only an OpenSSL failure (no memory) fails hashing a string.
  return util::sha256_of(util::dump_json(in)).value();
}

Result<std::string> save_plan_file(const fs::path& file, const plan::Plan& plan, const RunOptions& options) {
  const plan::Plan stored = stored_form(plan);
  const std::string digest = plan_digest(stored, options);
  const json doc = {{"format", "hpcbake-plan"},
                    {"version", kPlanFileVersion},
                    {"sha256", digest},
                    {"options", options_json(options)},
                    {"plan", plan::to_json(stored, plan::Urls::full)}};
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  // Readable by all, as the journal: it holds no credential (stored_form), and verify reads it.
  HPCBAKE_TRY(util::write_file_atomic(file, util::dump_json(doc, 1) + "\n", 0644));
  return digest;
}

Result<std::optional<std::string>> recorded_plan_sha256(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return std::optional<std::string>();
  HPCBAKE_TRY_ASSIGN(auto text, util::read_file_or_error(file));
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("sha256") || !doc["sha256"].is_string())
    return fail(ErrorKind::usage, fmt::format("{}: not an hpcbake plan file (no recorded sha256)", file.string()),
                kAside);
  return std::optional<std::string>(doc["sha256"].get<std::string>());
}

Result<std::optional<StoredPlan>> load_plan_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return std::optional<StoredPlan>();
  HPCBAKE_TRY_ASSIGN(auto text, util::read_file_or_error(file));
  const std::string where = file.string();
  auto bad = [&](const std::string& what) {
    return fail(ErrorKind::usage, fmt::format("{}: {}", where, what), kAside);
  };
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return bad("not a JSON object");
  for (const auto& [k, v] : doc.items())
    if (k != "format" && k != "version" && k != "sha256" && k != "options" && k != "plan")
      return bad(fmt::format("unknown field '{}'", k));
  if (!doc.contains("format") || doc["format"] != "hpcbake-plan") return bad("not an hpcbake plan file");
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"] != kPlanFileVersion)
    return bad(fmt::format("version {} is not the one this hpcbake reads ({})",
                           doc.contains("version") ? doc["version"].dump() : "(none)", kPlanFileVersion));
  if (!doc.contains("sha256") || !doc["sha256"].is_string()) return bad("missing field 'sha256'");
  if (!doc.contains("options")) return bad("missing field 'options'");
  if (!doc.contains("plan")) return bad("missing field 'plan'");
  StoredPlan out;
  HPCBAKE_TRY_ASSIGN(out.options, options_from(doc["options"], where + ": options"));
  HPCBAKE_TRY_ASSIGN(out.plan, plan::plan_from_json(doc["plan"], where + ": plan"));
  out.sha256 = doc["sha256"].get<std::string>();
  if (const auto d = plan_digest(out.plan, out.options); d != out.sha256)
    return bad(fmt::format("its content does not match its digest (recorded {}, content {}): it was changed "
                           "after install wrote it",
                           out.sha256, d));
  return std::optional<StoredPlan>(std::move(out));
}

} // namespace hpcbake::install
