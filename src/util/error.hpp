#pragma once
// Errors and exit codes. Every fallible operation at an I/O boundary returns
// `Result<T>` (std::expected<T, Error>); the CLI turns an Error's kind into the
// documented exit code. Messages say what failed and where; `hint` says what to do.
#include <expected>
#include <string>

namespace hpcbake {

// Documented in README.md "Exit codes". Values are part of the interface: never renumber.
enum class ExitCode : int {
  ok = 0,
  internal = 1,        // unexpected failure (I/O error on the host, a bug)
  usage = 2,           // bad command line or bad manifest
  unsupported = 3,     // host, size, distro or combination not supported
  fetch = 4,           // download or verification failure
  build = 5,           // package install or kernel module build failure
  smoke_test = 6,      // verify found a failing check
  reboot_required = 7, // the bake must continue after a reboot
  lock_held = 8,       // another hpcbake install holds the machine lock
  permission = 9,      // refused for safety: not root, a path others could write, a key others could read
  interrupted = 130,   // stopped by SIGINT/SIGTERM (128 + SIGINT, as shells report it); run again to continue
};

enum class ErrorKind { internal, usage, manifest, unsupported, fetch, build, smoke_test, reboot_required, lock_held,
                       permission };

struct Error {
  ErrorKind kind = ErrorKind::internal;
  std::string message; // what failed, and where (file:line:col, path, URL)
  std::string hint;    // what to do next; may be empty
};

template <typename T> using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

inline std::unexpected<Error> fail(ErrorKind kind, std::string message, std::string hint = {}) {
  return std::unexpected(Error{kind, std::move(message), std::move(hint)});
}

ExitCode exit_code_for(ErrorKind kind);
const char* exit_code_name(ExitCode code);

} // namespace hpcbake
