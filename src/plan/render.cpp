// Rendering of a Plan: JSON for machines (stable, golden-tested) and a table for people.
#include "plan/plan.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

namespace hpcbake::plan {

using nlohmann::json;

json to_json(const Plan& plan) {
  json steps = json::array();
  for (const auto& s : plan.steps)
    steps.push_back({{"id", s.id}, {"kind", to_string(s.kind)}, {"title", s.title}, {"after", s.after}, {"detail", s.detail}});
  return {{"schema", 1},
          {"size", plan.size},
          {"size_manifest", plan.size_id},
          {"family", plan.family},
          {"distro", plan.distro_id},
          {"distro_name", plan.distro_name},
          {"kernels", plan.kernels},
          {"kernels_source", plan.kernels_source},
          {"steps", steps},
          {"notes", plan.notes}};
}

std::string render_text(const Plan& plan) {
  std::string out = fmt::format("Plan for {} ({}) on {}\n", plan.size, plan.family, plan.distro_name);
  out += fmt::format("  kernels: {}  [{}]\n",
                     plan.kernels.empty() ? std::string("(at install time)") : util::join(plan.kernels, ", "),
                     plan.kernels_source);
  int n = 0;
  for (const auto& s : plan.steps) {
    out += fmt::format("  {:>2}. {:<15} {}\n", ++n, to_string(s.kind), s.title);
    const auto& d = s.detail;
    if (s.kind == StepKind::artifact) {
      for (const auto& u : d["urls"]) out += fmt::format("      url     {}\n", u.get<std::string>());
      out += fmt::format("      sha256  {}\n", d["sha256"].is_null() ? "UNKNOWN (refused at install without --sha256)"
                                                                        : d["sha256"].get<std::string>());
      if (!d["size"].is_null()) out += fmt::format("      size    {} bytes\n", d["size"].get<long long>());
    } else if (d.contains("packages") && d["packages"].is_array() && !d["packages"].empty()) {
      std::vector<std::string> pk;
      for (const auto& p : d["packages"]) pk.push_back(p.get<std::string>());
      out += fmt::format("      {} {}\n", d.value("manager", std::string("packages:")), util::join(pk, " "));
    } else if (s.kind == StepKind::kernel_headers) {
      out += fmt::format("      {} (then check {})\n", d["package"].get<std::string>(), d["check"].get<std::string>());
    } else if (s.kind == StepKind::config) {
      out += fmt::format("      write {}\n", d["path"].get<std::string>());
    } else if (s.kind == StepKind::initramfs) {
      std::vector<std::string> argv;
      for (const auto& a : d["argv"]) argv.push_back(a.get<std::string>());
      out += fmt::format("      {}\n", util::join(argv, " "));
    } else if (s.kind == StepKind::waagent) {
      out += fmt::format("      {}: OS.EnableRDMA=y, restart {}\n", d["config"].get<std::string>(),
                         d["restart_service"].get<std::string>());
    } else if (s.kind == StepKind::verify) {
      std::vector<std::string> checks;
      for (const auto& [k, v] : d["checks"].items()) checks.push_back(fmt::format("{}={}", k, v.dump()));
      std::string line;
      for (const auto& c : checks) {
        if (!line.empty() && line.size() + c.size() > 100) {
          out += fmt::format("      {}\n", line);
          line.clear();
        }
        line += (line.empty() ? "" : " ") + c;
      }
      if (!line.empty()) out += fmt::format("      {}\n", line);
      out += fmt::format("      thresholds from {}\n", d["thresholds_source"].get<std::string>());
    }
  }
  for (const auto& note : plan.notes) out += fmt::format("  note: {}\n", note);
  return out;
}

} // namespace hpcbake::plan
