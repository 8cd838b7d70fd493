#include "plan/rdma_os.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

namespace hpcbake::plan {

namespace {

void add(Plan& plan, std::string id, std::string title, std::vector<std::string> after, Action action) {
  plan.steps.push_back(Step{std::move(id), std::move(title), std::move(after), std::move(action)});
}

// One settings manifest: its files, then its commands (which read the files), then its services.
void settings_steps(const manifest::SettingsManifest& st, Plan& plan, std::vector<std::string>& after) {
  std::vector<std::string> written;
  for (const auto& f : st.files) {
    const std::string id = fmt::format("config:{}:{}", st.id, f.name);
    add(plan, id, fmt::format("write {} ({})", f.path, st.id), after, ConfigStep{f.path, f.content, f.mode});
    written.push_back(id);
  }
  if (!written.empty()) after = written;
  for (const auto& c : st.commands) {
    const std::string id = fmt::format("command:{}:{}", st.id, c.name);
    add(plan, id, fmt::format("run {} ({})", util::join(c.argv, " "), st.id), after,
        CommandStep{st.id, {}, c.argv, {}, {}});
    after = {id};
  }
  for (const auto& unit : st.services) {
    const std::string id = "service:" + unit;
    add(plan, id, fmt::format("enable and start {} ({})", unit, st.id), after,
        ServiceStep{unit, {"systemctl", "enable", "--now", unit}});
    after = {id};
  }
  for (const auto& note : st.notes)
    plan.notes.push_back(fmt::format("settings/{}.yaml: {}", st.id, note));
}

} // namespace

Status rdma_os_steps(const manifest::Manifests& m, const manifest::SizeManifest& size,
                     const manifest::ProfileManifest* profile, Plan& plan, const std::string& after) {
  if (!profile || !profile->rdma_os) return {};
  std::vector<std::string> chain;
  if (!after.empty()) chain.push_back(after);
  if (size.infiniband)
    for (const auto& st : m.settings)
      if (st.applies_to == manifest::SettingsScope::infiniband) settings_steps(st, plan, chain);
  if (size.os_settings.empty()) return {};
  const auto* own = m.find_settings(size.os_settings);
  if (!own)
    return fail(ErrorKind::manifest,
                fmt::format("{}: os_settings names unknown settings '{}'", size.file, size.os_settings),
                fmt::format("add settings/{}.yaml to the manifests, or remove os_settings", size.os_settings));
  settings_steps(*own, plan, chain);
  return {};
}

} // namespace hpcbake::plan
