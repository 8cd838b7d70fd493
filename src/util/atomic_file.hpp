#pragma once
// Durable, all-or-nothing file writes: a reader sees the old file or the new one, never
// half of either, and a crash after success keeps the new one.
#include "util/error.hpp"

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace hpcbake::util {

struct AtomicWriteOptions {
  unsigned mode = 0644;
  // Set the mode with fchmod before anything is written, so the umask cannot change it (to
  // keep an edited file's mode; a private key's 0600 whatever the umask).
  bool exact_mode = false;
  // fchown the temp file before the rename (to keep an edited file's owner and group).
  std::optional<std::pair<uid_t, gid_t>> owner;
  // A test hook's name: when the crash_point test hook equals it, the process SIGKILLs
  // itself after the temp file is written and fsynced, just before the rename
  // (see crash_point). Empty: no hook.
  std::string crash_point;
};

// Temp file (`path.tmp.<pid>`, created with O_EXCL|O_NOFOLLOW after removing a stale one) in
// the same directory, fsync, rename over `path`, fsync the directory. `path` itself is replaced:
// callers that must keep a symlink pass its target. Temp files of `path` left by processes that
// died before their rename are removed first (remove_stale_pid_entries), so crashes do not leave
// them behind for good.
Status write_file_atomic(const std::filesystem::path& path, const std::string& content, unsigned mode = 0644);
Status write_file_atomic(const std::filesystem::path& path, const std::string& content, const AtomicWriteOptions& opts);
// Removes what processes killed mid-write left in `dir`: entries named `prefix` + PID, or
// `prefix` + PID + "." + anything (a staging tree's suffix), whose PID is not a running process
// (kill(PID, 0) fails with ESRCH). Entries of live processes, this one included, stay. Best
// effort: errors are ignored. Returns how many entries were removed.
int remove_stale_pid_entries(const std::filesystem::path& dir, std::string_view prefix);

// fsync of a file or (with O_DIRECTORY in flags) a directory.
Status sync_path(const std::filesystem::path& path, int flags);

// Test hook for crash tests: when the test hook TestHook::crash_point equals `name`
// (util/test_hooks.hpp; HPCBAKE_TEST_CRASH_POINT in the test binaries), the process raises
// SIGKILL here (no cleanup, no atexit, like a power cut for the process). A no-op otherwise,
// and always in the shipped binary, which installs no test hooks.
void crash_point(std::string_view name);

} // namespace hpcbake::util
