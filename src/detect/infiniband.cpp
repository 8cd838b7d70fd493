#include "detect/infiniband.hpp"

#include "util/strings.hpp"

namespace hpcbake::detect {

bool parse_coded_value(std::string_view text, int& code, std::string& name) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  auto n = util::parse_int(text.substr(0, colon));
  if (!n) return false;
  code = static_cast<int>(*n);
  name = std::string(util::trim(text.substr(colon + 1)));
  return true;
}

std::optional<double> parse_rate_gbps(std::string_view text) {
  text = util::trim(text);
  auto space = text.find(' ');
  if (space == std::string_view::npos || !util::trim(text.substr(space)).starts_with("Gb/sec")) return std::nullopt;
  return util::parse_double(text.substr(0, space));
}

std::vector<IbPort> scan_ib_ports(const util::HostFs& host) {
  std::vector<IbPort> out;
  const std::string dir = ib_class_dir;
  for (const auto& dev : host.list(dir)) {
    for (const auto& port : host.list(dir + "/" + dev + "/ports")) {
      auto num = util::parse_int(port);
      if (!num) continue;
      const std::string base = dir + "/" + dev + "/ports/" + port + "/";
      IbPort p;
      p.device = dev;
      p.port = static_cast<int>(*num);
      if (auto s = host.read_attr(base + "state")) parse_coded_value(*s, p.state_code, p.state);
      if (auto s = host.read_attr(base + "phys_state")) parse_coded_value(*s, p.phys_state_code, p.phys_state);
      if (auto s = host.read_attr(base + "rate")) {
        p.rate_text = *s;
        p.rate_gbps = parse_rate_gbps(*s);
      }
      p.link_layer = host.read_attr(base + "link_layer").value_or("");
      out.push_back(std::move(p));
    }
  }
  return out;
}

} // namespace hpcbake::detect
