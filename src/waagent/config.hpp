#pragma once
// /etc/waagent.conf (WALinuxAgent). Parsed exactly as the agent does it
// (azurelinuxagent/common/conf.py, ConfigurationProvider.load, 2.7.3): a line that
// starts with '#' in column 0 is a comment; otherwise "Key=Value" splits at the first
// '='; the value is cut at the first '#', stripped of '"' and spaces; "None" means
// unset; a later assignment of the same key wins.
#include "util/paths.hpp"
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::waagent {

inline constexpr const char* default_config = paths::kWaagentConf;

// The effective value of `key`, or nullopt when the agent would use its default.
std::optional<std::string> effective_value(std::string_view conf_text, std::string_view key);

} // namespace hpcbake::waagent
