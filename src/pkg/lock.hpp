#pragma once
// Waiting for the package database locks. Right after boot unattended-upgrades, cloud-init
// or waagent often hold the dpkg/rpm lock for minutes; failing at once is the top complaint
// about driver installers on Azure, so hpcbake waits (polling, with a timeout) and says who
// holds the lock while it waits and when it gives up.
//
// dpkg, apt and rpm take these locks with fcntl(F_SETLK) write locks on the whole file, so
// `fcntl(F_GETLK)` tells whether another process holds one, and which. fcntl locks belong
// to a process: a lock this process holds itself is invisible here (by design of F_GETLK).
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hpcbake::pkg {

struct LockHolder {
  long pid = 0;     // <= 0 when the kernel does not say (an open-file-description lock)
  std::string comm; // /proc/<pid>/comm, empty when unreadable
  // "unattended-upgr (pid 812)", "pid 812", "another process".
  std::string describe() const;
};

// Who holds a write-conflicting fcntl lock on `file`; nullopt when nobody does, or the file
// is missing (dpkg creates it on first use, so a missing file means unlocked) or unopenable
// (then the package manager itself reports the problem).
std::optional<LockHolder> lock_holder(const std::filesystem::path& file);

struct LockFile {
  std::string host_path; // resolved under the HostFs root: "/var/lib/dpkg/lock-frontend"
  std::string what;      // for messages: "dpkg lock"
};

struct LockWait {
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds poll{1000};
  std::function<void(const std::string&)> on_status; // optional progress messages
};

// Returns once none of `locks` is held, or fails with ErrorKind::lock_held at the deadline,
// naming the lock, its path, the holder and how long it waited. Reports "waiting for the
// dpkg lock (held by apt-get, pid 123)..." through on_status when a holder is first seen or
// changes, and a reminder every 30 s.
Status wait_for_locks(const util::HostFs& fs, const std::vector<LockFile>& locks, const LockWait& wait);

} // namespace hpcbake::pkg
