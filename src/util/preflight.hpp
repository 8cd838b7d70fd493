#pragma once
// What every command that changes this machine checks before it changes anything
// (docs/security.md): that it runs as root, that what it reads and acts on as root cannot have
// been changed by anyone else, and that no test hook is set on a real machine.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::util {

// A test hook changes what hpcbake does (commands recorded instead of run, a SIGKILL at a
// chosen point): set on a real machine it would make an install "succeed" having done nothing.
// They take effect only with a --root other than "/"; otherwise the command is refused (usage).
// Only a test binary has hooks to set (util/test_hooks.hpp): in the shipped one this never refuses.
Status refuse_test_hooks_on_real_root(const HostFs& host);

// A command that changes this machine runs as root: refused (ErrorKind::permission) when the
// effective uid is not 0, unless --root names a tree other than "/" (a fixture: then only
// that tree is written, and its owner may run the command). `verb` is what the message names.
Status require_root(std::string_view verb, const HostFs& host);

struct TrustedPath {
  std::filesystem::path path;
  std::string what;   // "manifest directory"
  int depth = -1;     // TrustOptions::depth
  std::string remedy; // a second way out for the hint
};

// check_trusted_path for each, with the effective uid as the trusted owner beside root.
Status check_trusted(const std::vector<TrustedPath>& paths);

// require_root, then check_trusted.
Status preflight(std::string_view verb, const HostFs& host, const std::vector<TrustedPath>& paths);

} // namespace hpcbake::util
