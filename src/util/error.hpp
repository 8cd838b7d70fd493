#pragma once
// Errors and exit codes. Every fallible operation at an I/O boundary returns
// `Result<T>` (std::expected<T, Error>); the CLI turns an Error's kind into the
// documented exit code. Messages say what failed and where; `hint` says what to do.
#include <expected>
#include <string>
#include <utility>

namespace hpcbake {

// Documented in docs/manual.md, "EXIT STATUS". Values are part of the interface: never renumber.
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

enum class ErrorKind {
  internal,
  usage,
  manifest,
  unsupported,
  fetch,
  build,
  smoke_test,
  reboot_required,
  lock_held,
  permission
};

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

// Propagation without the boilerplate (`auto x = f(); if (!x) return std::unexpected(x.error());`),
// in functions returning any Result<U> or Status:
//   HPCBAKE_TRY(write_file(p));              // a Status or a Result whose value is not needed
//   HPCBAKE_TRY_ASSIGN(auto text, read(p));  // declares (or assigns) from the value
// Macros because only a macro can return from the caller; plain statements, no GNU extension.
#define HPCBAKE_TRY(expr)                                                                                              \
  do {                                                                                                                 \
    if (auto hpcbake_try_result_ = (expr); !hpcbake_try_result_)                                                       \
      return std::unexpected(std::move(hpcbake_try_result_).error());                                                  \
  } while (false)
#define HPCBAKE_TRY_CAT_(a, b) a##b
#define HPCBAKE_TRY_NAME_(line) HPCBAKE_TRY_CAT_(hpcbake_try_value_, line)
#define HPCBAKE_TRY_ASSIGN(lhs, expr) HPCBAKE_TRY_ASSIGN_(HPCBAKE_TRY_NAME_(__LINE__), lhs, expr)
#define HPCBAKE_TRY_ASSIGN_(tmp, lhs, expr)                                                                            \
  auto tmp = (expr);                                                                                                   \
  if (!tmp) return std::unexpected(std::move(tmp).error());                                                            \
  lhs = std::move(*tmp)

ExitCode exit_code_for(ErrorKind kind);
const char* exit_code_name(ExitCode code);

} // namespace hpcbake
