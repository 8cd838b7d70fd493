#include "verify/cuda.hpp"

#include "util/json.hpp"
#include "verify/ibverbs.hpp"
#include "verify/nvml.hpp"
#include "verify/verify.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace hpcbake::verify {

std::vector<LibraryProbe> probe_libraries() {
  return {nvml::probe(), cuda::probe(), ibverbs::Verbs::probe()};
}

std::string render_libraries(const std::vector<LibraryProbe>& probes) {
  std::string out;
  for (const auto& p : probes) {
    if (p.error) {
      out += fmt::format("{}: not loaded: {}\n  next: {}\n", p.soname, p.error->message, p.error->hint);
      continue;
    }
    std::size_t found = 0;
    std::vector<std::string> missing_required, missing_optional;
    for (const auto& e : p.entry_points) {
      if (e.found)
        ++found;
      else
        (e.required ? missing_required : missing_optional).push_back(e.name);
    }
    out += fmt::format("{}: {} ({} of {} entry points)\n", p.soname, p.path, found, p.entry_points.size());
    for (const auto& e : p.entry_points)
      out += fmt::format("  {:<46} {:<8} {}\n", e.name, e.required ? "required" : "optional",
                         e.found ? "found" : "MISSING");
    if (!missing_required.empty())
      out += fmt::format("  next: the library is older than verify needs (missing {}): update the package that "
                         "provides {}\n",
                         fmt::join(missing_required, ", "), p.soname);
    else if (!missing_optional.empty())
      out += fmt::format("  note: the checks that use {} report \"not supported\" with this library\n",
                         fmt::join(missing_optional, ", "));
  }
  return out;
}

std::string libraries_to_json_text(const std::vector<LibraryProbe>& probes) {
  nlohmann::json libs = nlohmann::json::array();
  for (const auto& p : probes) {
    nlohmann::json eps = nlohmann::json::array();
    for (const auto& e : p.entry_points)
      eps.push_back({{"name", e.name}, {"required", e.required}, {"found", e.found}});
    libs.push_back({{"soname", p.soname},
                    {"path", p.error ? nlohmann::json(nullptr) : nlohmann::json(p.path)},
                    {"error", p.error ? nlohmann::json(p.error->message) : nlohmann::json(nullptr)},
                    {"ok", p.ok()},
                    {"entry_points", eps}});
  }
  return util::dump_json(nlohmann::json{{"libraries", libs}}, 2) + "\n";
}

} // namespace hpcbake::verify
