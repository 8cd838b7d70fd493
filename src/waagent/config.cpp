#include "waagent/config.hpp"

#include "util/strings.hpp"

namespace hpcbake::waagent {

std::optional<std::string> effective_value(std::string_view conf_text, std::string_view key) {
  std::optional<std::string> result;
  for (auto line : util::split(conf_text, '\n')) {
    if (line.starts_with("#")) continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    if (util::trim(line.substr(0, eq)) != key) continue;
    auto value = line.substr(eq + 1);
    if (auto hash = value.find('#'); hash != std::string_view::npos) value = value.substr(0, hash);
    while (!value.empty() && (value.front() == '"' || value.front() == ' '))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == '"' || value.back() == ' '))
      value.remove_suffix(1);
    value = util::trim(value);
    if (value == "None")
      result.reset();
    else
      result = std::string(value);
  }
  return result;
}

} // namespace hpcbake::waagent
