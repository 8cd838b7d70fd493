#include "cli/sizes_cmd.hpp"

#include "util/json.hpp"
#include "util/strings.hpp"

#include "cli/report.hpp"
#include "manifest/catalog.hpp"
#include "manifest/kinds.hpp"
#include "manifest/manifests.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hpcbake::cli {

namespace {

std::string gpu_text(const manifest::SizeManifest& s) {
  if (!s.gpu) return "-";
  std::string t = fmt::format("{} x {}", s.gpu->count, s.gpu->model);
  if (s.gpu->fraction) t += " (" + *s.gpu->fraction + ")";
  return t;
}

std::string ib_text(const manifest::SizeManifest& s) {
  if (!s.infiniband) return "-";
  return fmt::format("{} x {} Gb/s", s.infiniband->ports, s.infiniband->rate_gbps);
}

// The profiles the size supports, comma-separated: "-" when none.
std::string profiles_text(const std::vector<manifest::ProfileSupport>& ps) {
  std::vector<std::string> ids;
  for (const auto& p : ps)
    if (p.supported) ids.push_back(p.profile);
  return ids.empty() ? "-" : util::join(ids, ",");
}

nlohmann::json profiles_json(const std::vector<manifest::ProfileSupport>& ps) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& p : ps) {
    nlohmann::json e = {{"supported", p.supported}, {"distros", p.distros}};
    if (!p.supported) e["reason"] = p.reason;
    j[p.profile] = e;
  }
  return j;
}

nlohmann::json size_json(const manifest::Manifests& m, const manifest::SizeManifest& s) {
  nlohmann::json j = {{"size", s.size},
                      {"family", s.family},
                      {"arch", manifest::to_string(s.arch)},
                      {"gpu", nullptr},
                      {"infiniband", nullptr},
                      {"driver", s.driver ? nlohmann::json(manifest::to_string(s.driver->kind)) : nlohmann::json()},
                      {"manifest", s.file},
                      {"profiles", profiles_json(manifest::profile_support(m, s))}};
  if (s.gpu)
    j["gpu"] = {{"vendor", s.gpu->vendor},
                {"model", s.gpu->model},
                {"count", s.gpu->count},
                {"fabric_manager", s.gpu->fabric_manager}};
  if (s.infiniband) j["infiniband"] = {{"ports", s.infiniband->ports}, {"rate_gbps", s.infiniband->rate_gbps}};
  return j;
}

} // namespace

CLI::App* add_sizes_command(CLI::App& app, SizesCliOptions& o) {
  auto* c = app.add_subcommand(
      "sizes", "list the VM sizes hpcbake knows: GPUs, InfiniBand, driver kind, the profiles each supports");
  c->add_option("FILTER", o.filter, "part of the size name (any spelling) or family, e.g. H100, hbv4");
  c->add_option("--gpu", o.gpu, "only this GPU model (H100, A100, MI300X, ...), or none")->option_text("MODEL");
  c->add_flag("--ib", o.infiniband, "only sizes with InfiniBand");
  return c;
}

std::optional<int> run_sizes_command(const CLI::App* cmd, const SizesCliOptions& o, const std::string& manifests,
                                     std::ostream& out, std::ostream& err) {
  if (!cmd->parsed()) return std::nullopt;
  auto m = manifest::load_manifests(manifest::manifest_dir_or_default(manifests));
  if (!m) return report(m.error(), err);
  const auto sizes = manifest::select_sizes(*m, {o.filter, o.gpu, o.infiniband});
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto* s : sizes)
      list.push_back(size_json(*m, *s));
    out << util::dump_json(nlohmann::json{{"schema", 1}, {"count", sizes.size()}, {"sizes", list}}, 2) << "\n";
    return 0;
  }
  if (sizes.empty()) {
    err << fmt::format("hpcbake: no size matches{}{}{}\n  hint: run `hpcbake sizes` for all {}\n",
                       o.filter.empty() ? "" : " '" + o.filter + "'", o.gpu.empty() ? "" : " with GPU " + o.gpu,
                       o.infiniband ? " with InfiniBand" : "", m->sizes.size());
    return 1;
  }
  std::size_t w = 4;
  for (const auto* s : sizes)
    w = std::max(w, s->size.size());
  out << fmt::format("{:<{}}  {:<18}  {:<14}  {:<6}  {:<7}  {}\n", "SIZE", w, "GPUS", "INFINIBAND", "DRIVER", "ARCH",
                     "PROFILES");
  for (const auto* s : sizes)
    out << fmt::format("{:<{}}  {:<18}  {:<14}  {:<6}  {:<7}  {}\n", s->size, w, gpu_text(*s), ib_text(*s),
                       s->driver ? manifest::to_string(s->driver->kind) : "-", manifest::to_string(s->arch),
                       profiles_text(manifest::profile_support(*m, *s)));
  out << fmt::format("{} of {} sizes\n", sizes.size(), m->sizes.size());
  return 0;
}

} // namespace hpcbake::cli
