#include "pkg/lock.hpp"

#include "util/fd.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace hpcbake::pkg {

namespace {

using Clock = std::chrono::steady_clock;

// The holder's name. The lock lives in the running kernel whatever the HostFs root is, so
// this reads the real /proc, not one under the root.
std::string comm_of(long pid) {
  if (pid <= 0) return {};
  std::ifstream in(fmt::format("/proc/{}/comm", pid));
  std::string name;
  std::getline(in, name);
  return name;
}

} // namespace

std::string LockHolder::describe() const {
  if (pid <= 0) return "another process";
  if (comm.empty()) return fmt::format("pid {}", pid);
  return fmt::format("{} (pid {})", comm, pid);
}

std::optional<LockHolder> lock_holder(const std::filesystem::path& file) {
  // Never create the file (O_CREAT): a fixture root or a fresh machine may lack it.
  util::Fd fd(::open(file.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY));
  if (!fd) fd.reset(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return std::nullopt;
  struct flock fl {};
  fl.l_type = F_WRLCK; // would a write lock on the whole file conflict with anyone's?
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  const int rc = ::fcntl(fd.get(), F_GETLK, &fl);
  // Closing drops only locks this process holds on the file, and it holds none here.
  fd.reset();
  if (rc != 0 || fl.l_type == F_UNLCK) return std::nullopt;
  LockHolder holder;
  holder.pid = fl.l_pid;
  holder.comm = comm_of(holder.pid);
  return holder;
}

Status wait_for_locks(const util::HostFs& fs, const std::vector<LockFile>& locks, const LockWait& wait) {
  const auto started = Clock::now();
  const auto poll = wait.poll.count() > 0 ? wait.poll : std::chrono::milliseconds(1000);
  auto say = [&](const std::string& msg) {
    if (wait.on_status) wait.on_status(msg);
  };
  // One pass over every lock finding none held: another process may take the first lock
  // again while we wait for the second.
  auto first_held = [&]() -> std::optional<std::pair<const LockFile*, LockHolder>> {
    for (const auto& lock : locks)
      if (auto holder = lock_holder(fs.resolve(lock.host_path))) return std::pair{&lock, *holder};
    return std::nullopt;
  };
  std::optional<std::pair<std::string, LockHolder>> last; // lock path and holder last reported
  auto last_said = Clock::now();
  while (auto held = first_held()) {
    const auto& [lock, holder] = *held;
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - started).count();
    if (now >= wait.deadline)
      return fail(
          ErrorKind::lock_held,
          fmt::format("the {} is held by {} for {} s ({})", lock->what, holder.describe(), waited, lock->host_path),
          holder.pid > 0 ? fmt::format("wait for it to finish (`ps -o pid,etime,args -p {}`) and run hpcbake again, or "
                                       "give it longer with a larger lock timeout",
                                       holder.pid)
                         : "wait for the other package manager to finish and run hpcbake again, or give it longer with "
                           "a larger lock timeout");
    const bool changed =
        !last || last->first != lock->host_path || last->second.pid != holder.pid || last->second.comm != holder.comm;
    if (changed) {
      const std::string who = holder.pid <= 0       ? std::string("another process")
                              : holder.comm.empty() ? fmt::format("pid {}", holder.pid)
                                                    : fmt::format("{}, pid {}", holder.comm, holder.pid);
      say(fmt::format("waiting for the {} (held by {})...", lock->what, who));
      last_said = now;
    } else if (now - last_said >= std::chrono::seconds(30)) {
      say(fmt::format("still waiting for the {} (held by {}, {} s so far)...", lock->what, holder.describe(), waited));
      last_said = now;
    }
    last = std::pair{lock->host_path, holder};
    std::this_thread::sleep_for(std::min<Clock::duration>(poll, wait.deadline - now));
  }
  return {};
}

} // namespace hpcbake::pkg
