#include "verify/record.hpp"

#include "util/atomic_file.hpp"
#include "util/json.hpp"

#include <fmt/format.h>

#include <system_error>

namespace hpcbake::verify {

using nlohmann::json;

std::string current_boot_id(const util::HostFs& fs) {
  return fs.read_attr(kBootIdPath).value_or("");
}

Record make_record(const Report& report, std::string boot_id, std::int64_t now) {
  Record r;
  r.boot_id = std::move(boot_id);
  r.recorded_at = now;
  r.passed = report.passed();
  r.level = report.level;
  r.size = report.size;
  r.size_id = report.size_id;
  r.distro = report.distro;
  r.kernels = report.kernels;
  r.pass = report.count(Verdict::pass);
  r.fail = report.count(Verdict::fail);
  r.skip = report.count(Verdict::skip);
  r.deferred = report.count(Verdict::deferred);
  r.hardware_deferred = report.hardware_deferred;
  for (const auto& c : report.checks) {
    if (c.verdict == Verdict::fail) r.failed_checks.push_back(c.id);
    if (c.verdict == Verdict::deferred)
      r.deferred_checks.push_back(c.id);
    else
      r.ran_checks.push_back(c.id);
  }
  return r;
}

json to_json(const Record& r) {
  return {{"schema", kRecordSchema},
          {"boot_id", r.boot_id},
          {"recorded_at", r.recorded_at},
          {"passed", r.passed},
          {"level", r.level},
          {"size", r.size},
          {"size_id", r.size_id},
          {"distro", r.distro},
          {"kernels", r.kernels},
          {"checks", {{"pass", r.pass}, {"fail", r.fail}, {"skip", r.skip}, {"deferred", r.deferred}}},
          {"failed_checks", r.failed_checks},
          {"hardware", r.hardware_deferred ? "deferred" : "checked"},
          {"deferred_checks", r.deferred_checks},
          {"ran_checks", r.ran_checks}};
}

Status write_record(const util::HostFs& fs, const Record& record) {
  const auto path = fs.resolve(kRecordPath);
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    return fail(ErrorKind::internal,
                fmt::format("{}: cannot create the directory: {}", path.parent_path().string(), ec.message()));
  return util::write_file_atomic(path, util::dump_json(to_json(record), 2) + "\n", 0644);
}

Result<std::optional<Record>> read_record(const util::HostFs& fs) {
  if (!fs.exists(kRecordPath)) return std::optional<Record>{};
  const auto where = fs.resolve(kRecordPath).string();
  const auto text = fs.read(kRecordPath, util::host_file::config);
  if (!text) return fail(ErrorKind::internal, where + ": cannot read the last verify record", "check its permissions");
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  const char* const rerun = "run 'hpcbake verify' again: it rewrites the record";
  if (doc.is_discarded() || !doc.is_object())
    return fail(ErrorKind::usage, where + ": the last verify record is not a JSON object", rerun);
  if (util::int_member(doc, "schema", 0) != kRecordSchema)
    return fail(ErrorKind::usage,
                fmt::format("{}: unknown verify record schema (this hpcbake reads {})", where, kRecordSchema), rerun);
  try {
    Record r;
    r.boot_id = doc.value("boot_id", "");
    r.recorded_at = doc.value("recorded_at", std::int64_t{0});
    r.passed = doc.at("passed").get<bool>();
    r.level = doc.value("level", 1);
    r.size = doc.value("size", "");
    r.size_id = doc.value("size_id", "");
    r.distro = doc.value("distro", "");
    r.kernels = doc.value("kernels", std::vector<std::string>{});
    if (const auto c = doc.find("checks"); c != doc.end() && c->is_object()) {
      r.pass = c->value("pass", 0);
      r.fail = c->value("fail", 0);
      r.skip = c->value("skip", 0);
      r.deferred = c->value("deferred", 0);
    }
    r.failed_checks = doc.value("failed_checks", std::vector<std::string>{});
    r.hardware_deferred = doc.value("hardware", "checked") == "deferred";
    r.deferred_checks = doc.value("deferred_checks", std::vector<std::string>{});
    r.ran_checks = doc.value("ran_checks", std::vector<std::string>{});
    return std::optional<Record>(std::move(r));
  } catch (const json::exception& e) {
    return fail(ErrorKind::usage, fmt::format("{}: malformed verify record: {}", where, e.what()), rerun);
  }
}

} // namespace hpcbake::verify
