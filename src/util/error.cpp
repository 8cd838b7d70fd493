#include "util/error.hpp"

namespace hpcbake {

ExitCode exit_code_for(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::internal:
    return ExitCode::internal;
  case ErrorKind::usage:
  case ErrorKind::manifest:
    return ExitCode::usage;
  case ErrorKind::unsupported:
    return ExitCode::unsupported;
  case ErrorKind::fetch:
    return ExitCode::fetch;
  case ErrorKind::build:
    return ExitCode::build;
  case ErrorKind::smoke_test:
    return ExitCode::smoke_test;
  case ErrorKind::reboot_required:
    return ExitCode::reboot_required;
  case ErrorKind::lock_held:
    return ExitCode::lock_held;
  case ErrorKind::permission:
    return ExitCode::permission;
  }
  return ExitCode::internal;
}

const char* exit_code_name(ExitCode code) {
  switch (code) {
  case ExitCode::ok:
    return "ok";
  case ExitCode::internal:
    return "internal error";
  case ExitCode::usage:
    return "usage or manifest error";
  case ExitCode::unsupported:
    return "unsupported";
  case ExitCode::fetch:
    return "download or verification failure";
  case ExitCode::build:
    return "build failure";
  case ExitCode::smoke_test:
    return "smoke-test failure";
  case ExitCode::reboot_required:
    return "reboot required";
  case ExitCode::lock_held:
    return "lock held";
  case ExitCode::permission:
    return "refused for safety (permissions)";
  case ExitCode::interrupted:
    return "interrupted";
  }
  return "unknown";
}

} // namespace hpcbake
