#include "util/preflight.hpp"

#include "util/strings.hpp"
#include "util/test_hooks.hpp"
#include "util/trust.hpp"

#include <fmt/format.h>

#include <unistd.h>

namespace hpcbake::util {

Status refuse_test_hooks_on_real_root(const HostFs& host) {
  if (!host.is_real_root()) return {};
  const std::vector<std::string> set = active_test_hooks();
  if (set.empty()) return {};
  return fail(ErrorKind::usage,
              fmt::format("{} {} set: test hooks (commands recorded instead of run, made-up failures and crashes) "
                          "take effect only with --root on a fixture tree, never on this machine",
                          join(set, ", "), set.size() == 1 ? "is" : "are"),
              fmt::format("unset {}", join(set, " ")));
}

Status require_root(std::string_view verb, const HostFs& host) {
  const uid_t euid = ::geteuid();
  if (euid == 0 || !host.is_real_root()) return {};
  return fail(ErrorKind::permission,
              fmt::format("{} changes this machine and must run as root (hpcbake runs as uid {})", verb, euid),
              fmt::format("run it as root (sudo hpcbake ... {}); to try it on a copy of a machine's files instead, "
                          "pass --root DIR",
                          verb));
}

Status check_trusted(const std::vector<TrustedPath>& paths) {
  for (const auto& p : paths) {
    if (p.path.empty()) continue;
    TrustOptions o;
    o.trusted_uid = ::geteuid();
    o.depth = p.depth;
    o.what = p.what;
    o.remedy = p.remedy;
    if (auto s = check_trusted_path(p.path, o); !s) return s;
  }
  return {};
}

Status preflight(std::string_view verb, const HostFs& host, const std::vector<TrustedPath>& paths) {
  if (auto s = require_root(verb, host); !s) return s;
  return check_trusted(paths);
}

} // namespace hpcbake::util
