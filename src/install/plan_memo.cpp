#include "install/plan_memo.hpp"

#include "install/run.hpp"
#include "manifest/digest.hpp"
#include "manifest/kinds.hpp"
#include "manifest/manifests.hpp"
#include "util/atomic_file.hpp"
#include "util/hostfs.hpp"
#include "util/json.hpp"
#include "util/sha256.hpp"

namespace hpcbake::install {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every option of the request, whether or not today's planner reads it (see the header).
json request_json(const InstallRequest& rq) {
  const auto& r = rq.resolve;
  json mirrors = json::object();
  for (const auto& [id, files] : r.mirrors) {
    json list = json::array();
    for (const auto& f : files)
      list.push_back({f.path, f.sha256, f.size});
    mirrors[id] = list;
  }
  return {
      {"size_filter", rq.size_filter},
      {"size", r.size},
      {"distro", r.distro},
      {"profile", r.profile},
      {"driver", r.driver ? manifest::to_string(*r.driver) : ""},
      {"sign",
       {static_cast<int>(r.signing.mode), r.signing.key.string(), r.signing.cert.string(), r.signing.key_dir.string()}},
      {"hold_kernel", r.hold_kernel},
      {"driver_source", plan::to_string(r.driver_source)},
      {"driver_version", r.driver_version},
      {"imds", {r.imds.enabled, r.imds.url}},
      {"repository_mirrors", mirrors},
      {"cache", rq.fetch.cache_dir.string()},
      {"mirrors", rq.fetch.mirrors},
      {"ca_file", rq.fetch.ca_file},
      {"bundle", rq.bundle.string()},
      {"prebuilt", r.prebuilt.string()},
      {"sha256", rq.sha256_overrides},
      {"reboot", static_cast<int>(rq.reboot)},
      {"resume_unit", rq.resume_unit},
      {"verify_level", rq.verify_level},
      {"ib_devices", rq.ib_devices},
      {"ib_seconds", rq.ib_seconds},
      {"fabric_wait", rq.fabric_wait.count()},
      {"resume", rq.resume},
      {"batch", {rq.batch.active, rq.batch.working_dir.string()}},
      {"commands_recorded", rq.runner && rq.runner->records_machine_commands()},
  };
}

} // namespace

Result<std::string> plan_inputs_digest(const InstallRequest& rq, const detect::HostFacts& facts) {
  HPCBAKE_TRY_ASSIGN(
      const auto files,
      manifest::plan_files_digest(rq.manifests_dir, manifest::only_size_stem(rq.manifests_dir, rq.size_filter)));
  detect::HostFacts own = facts;
  own.distro_id.clear(); // derived from the manifests, which `files` covers
  own.size_id.clear();
  const json doc = {{"memo", kPlanMemoVersion},
                    {"build", rq.build_id},
                    {"files", files},
                    {"request", request_json(rq)},
                    {"facts", detect::to_json(own)}};
  return util::sha256_of(util::dump_json(doc));
}

bool memo_holds(const PlanMemo& memo, const Journal& journal) {
  if (memo.inputs.empty() || journal.state != RunState::complete) return false;
  if (memo.steps.empty()) return false;
  for (const auto& [id, digest] : memo.steps) {
    const auto it = journal.steps.find(id);
    if (it == journal.steps.end() || it->second.status != StepStatus::done || it->second.digest != digest) return false;
  }
  return true;
}

std::optional<PlanMemo> load_plan_memo(const fs::path& file) {
  auto text = util::read_small_file(file, 4 << 20);
  if (!text) return std::nullopt;
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || util::int_member(doc, "version", 0) != kPlanMemoVersion) return std::nullopt;
  PlanMemo m;
  try {
    m.inputs = doc.at("inputs").get<std::string>();
    m.size = doc.at("size").get<std::string>();
    m.distro_name = doc.at("distro_name").get<std::string>();
    m.kernels = doc.at("kernels").get<std::vector<std::string>>();
    m.steps = doc.at("steps").get<std::map<std::string, std::string>>();
  } catch (const json::exception&) {
    return std::nullopt; // a memo of the wrong shape is no memo
  }
  return m;
}

Status save_plan_memo(const fs::path& file, const PlanMemo& memo) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const json doc = {{"version", kPlanMemoVersion},     {"inputs", memo.inputs},   {"size", memo.size},
                    {"distro_name", memo.distro_name}, {"kernels", memo.kernels}, {"steps", memo.steps}};
  return util::write_file_atomic(file, util::dump_json(doc, 2) + "\n", 0644);
}

} // namespace hpcbake::install
