#include "exec/runner.hpp"

#include "util/fd.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {
// <linux/close_range.h> of Linux 5.11; the release's sysroot has 5.10's headers.
constexpr unsigned kCloseRangeCloexec = 1U << 2;
} // namespace

extern char** environ;

namespace hpcbake::exec {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kKillGrace = std::chrono::seconds(5);
// After the program exits, how long descendants that inherited the output pipe may keep it
// open before we stop reading: a daemon started by a maintainer script must not hang us.
constexpr auto kDrainGrace = milliseconds(500);
constexpr std::size_t kChunk = 64 * 1024;

using util::Fd;

Status make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return fail(ErrorKind::internal, fmt::format("cannot create a pipe: {}", std::strerror(errno)));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return {};
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// The child's report through the CLOEXEC error pipe: which step failed, and its errno.
enum class Stage : int { setup = 1, chdir = 2, exec = 3 };
struct ChildFailure {
  int stage;
  int err;
};

// The inherited environment with cmd.env applied ("KEY=VALUE" replaces or adds, "KEY" removes).
std::vector<std::string> child_environment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    env.emplace_back(*e);
  for (const auto& entry : overrides) {
    const auto eq = entry.find('=');
    const std::string key = entry.substr(0, eq);
    std::erase_if(
        env, [&](const std::string& s) { return s.size() > key.size() && s.starts_with(key) && s[key.size()] == '='; });
    if (eq != std::string::npos) env.push_back(entry);
  }
  return env;
}

// Where execve is tried, in order, as execvp(3) would search: computed before fork because
// the child may only make async-signal-safe calls.
std::vector<std::string> exec_candidates(const std::string& program, const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return {program};
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env)
    if (e.starts_with("PATH=")) path = e.substr(5);
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = "."; // POSIX: an empty PATH element is the current directory
    out.push_back(dir + "/" + program);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Everything here runs in the forked child: async-signal-safe calls only, no allocation.
[[noreturn]] void child_main(int in_fd, int out_fd, int err_fd, const char* cwd, const std::vector<char*>& argv,
                             const std::vector<char*>& envp, const std::vector<char*>& candidates) {
  auto report = [err_fd](Stage stage, int err) {
    const ChildFailure f{static_cast<int>(stage), err};
    [[maybe_unused]] auto n = ::write(err_fd, &f, sizeof f);
    ::_exit(127);
  };
  // Own process group, so a timeout can signal the program and everything it started.
  ::setpgid(0, 0);
  // The parent blocks SIGPIPE while it runs us; the program must get default signal handling.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, nullptr);

  auto place = [&](int fd, int target) {
    if (fd == target) {
      if (::fcntl(fd, F_SETFD, 0) != 0) report(Stage::setup, errno);
    } else if (::dup2(fd, target) < 0) {
      report(Stage::setup, errno);
    }
  };
  place(in_fd, STDIN_FILENO);
  place(out_fd, STDOUT_FILENO);
  place(out_fd, STDERR_FILENO);
  // Descriptors the rest of the process opened without O_CLOEXEC (a lock file, a socket)
  // must not leak into the program and outlive us in a daemon it starts. Best effort: the
  // flag needs Linux 5.11. The system call itself, not glibc's close_range() (2.34): the
  // release binary is linked against glibc 2.31 (docs/release.md).
  ::syscall(__NR_close_range, 3U, ~0U, kCloseRangeCloexec);
  if (cwd && ::chdir(cwd) != 0) report(Stage::chdir, errno);

  int err = ENOENT;
  bool saw_eacces = false;
  for (char* path : candidates) {
    if (!path) break;
    ::execve(path, argv.data(), envp.data());
    err = errno;
    if (err == EACCES) {
      saw_eacces = true;
      continue;
    }
    // As execvp(3): keep searching past entries that do not lead to a file.
    if (err == ENOENT || err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG || err == ESTALE || err == ENODEV ||
        err == ETIMEDOUT)
      continue;
    break;
  }
  if (saw_eacces && err != ENOEXEC) err = EACCES;
  report(Stage::exec, err);
  ::_exit(127); // unreachable: report() exits
}

// Keeps the last `keep` bytes of a stream without quadratic copying.
class Tail {
public:
  explicit Tail(std::size_t keep) : keep_(keep) {}
  void add(std::string_view s) {
    total_ += s.size();
    if (keep_ == 0) return;
    buf_.append(s);
    if (buf_.size() >= 2 * keep_) buf_.erase(0, buf_.size() - keep_);
  }
  std::string finish() {
    if (buf_.size() > keep_) buf_.erase(0, buf_.size() - keep_);
    const std::size_t elided = total_ - buf_.size();
    if (elided == 0) return std::move(buf_);
    return fmt::format("[... {} bytes elided ...]\n", elided) + buf_;
  }

private:
  std::size_t keep_;
  std::size_t total_ = 0;
  std::string buf_;
};

int poll_timeout_ms(std::optional<Clock::time_point> until, Clock::time_point now) {
  if (!until) return -1;
  if (*until <= now) return 0;
  // Round up so the wake-up is never early (which would spin).
  const auto ms = std::chrono::ceil<milliseconds>(*until - now).count();
  return static_cast<int>(std::min<long long>(ms, 60'000));
}

// Blocks SIGPIPE for the calling thread for the duration of a run, so writing to a program
// that stopped reading its stdin gives EPIPE instead of killing hpcbake; a SIGPIPE raised
// meanwhile is consumed before the old mask comes back.
class SigpipeGuard {
public:
  SigpipeGuard() {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old_);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pipe_only;
      sigemptyset(&pipe_only);
      sigaddset(&pipe_only, SIGPIPE);
      const timespec zero{0, 0};
      while (::sigtimedwait(&pipe_only, nullptr, &zero) == SIGPIPE) {
      }
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

private:
  sigset_t old_{};
  bool was_pending_ = false;
};

Fd open_pidfd([[maybe_unused]] pid_t pid) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return Fd(static_cast<int>(fd));
  }
#endif
  return Fd(); // older kernel: fall back to polling waitpid every tick
}

std::string format_duration(milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{}s", d.count() / 1000);
  return fmt::format("{}ms", d.count());
}

} // namespace

bool Completed::ok() const {
  return exit_code == 0 && signal == 0 && !timed_out;
}

std::string Completed::describe() const {
  if (timed_out) return fmt::format("timed out after {}", format_duration(timeout));
  if (signal != 0) return fmt::format("killed by signal {}", signal);
  return fmt::format("exited with {}", exit_code);
}

Completed exited(int code, std::string output) {
  Completed c;
  c.exit_code = code;
  c.output = std::move(output);
  return c;
}

std::string shell_quote(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    const bool bare = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             std::strchr("_-+=:,./@%", c) != nullptr;
    });
    if (bare) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) {
      if (c == '\'')
        out += "'\\''";
      else
        out += c;
    }
    out += '\'';
  }
  return out;
}

namespace {

// The pipes of one run: stdout+stderr (out), stdin (in, or /dev/null when there is no input)
// and the CLOEXEC error pipe that carries an exec failure (err).
struct Pipes {
  Fd out_r, out_w, in_r, in_w, err_r, err_w;
};

Result<Pipes> make_pipes(const Command& cmd) {
  Pipes p;
  HPCBAKE_TRY(make_pipe(p.out_r, p.out_w));
  HPCBAKE_TRY(make_pipe(p.err_r, p.err_w));
  if (cmd.input.empty()) {
    p.in_r.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!p.in_r)
      return fail(ErrorKind::internal, fmt::format("cannot open /dev/null: {}", std::strerror(errno)),
                  "the host's /dev is broken: check that /dev/null is a character device");
  } else {
    HPCBAKE_TRY(make_pipe(p.in_r, p.in_w));
  }
  return p;
}

// Reads the error pipe: it closes on a successful exec (CLOEXEC) or carries why the child
// failed, in which case the child is reaped and the failure returned.
Status exec_outcome(pid_t pid, Fd& err_r, const std::string& program, const std::string& cwd) {
  ChildFailure failure{};
  std::size_t got = 0;
  while (got < sizeof failure) {
    const auto n = ::read(err_r.get(), reinterpret_cast<char*>(&failure) + got, sizeof failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  err_r.reset();
  if (got != sizeof failure) return {};
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const char* what = "exec failed";
  std::string where;
  if (failure.stage == static_cast<int>(Stage::chdir)) {
    what = "cannot change directory";
    where = fmt::format(" to {}", cwd);
  } else if (failure.stage == static_cast<int>(Stage::setup)) {
    what = "cannot set up its stdin/stdout";
  }
  std::string hint = "check that the program is installed and executable";
  if (failure.stage == static_cast<int>(Stage::exec) && failure.err == ENOENT && program.find('/') == std::string::npos)
    hint = "install the package that provides it, or check PATH";
  return fail(ErrorKind::internal,
              fmt::format("could not start {}: {}{}: {} (errno {})", program, what, where, std::strerror(failure.err),
                          failure.err),
              hint);
}

// Watches a started child until it exits and its output is drained: feeds its stdin, keeps the
// tail of its output, enforces the timeout (SIGTERM to the group, SIGKILL after a grace).
class Supervisor {
public:
  Supervisor(const Command& cmd, pid_t pid, Clock::time_point started, Fd out_r, Fd in_w)
      : cmd_(cmd), pid_(pid), out_r_(std::move(out_r)), in_w_(std::move(in_w)), pidfd_(open_pidfd(pid)),
        tail_(cmd.keep_output), buf_(kChunk, '\0') {
    set_nonblocking(out_r_.get());
    if (in_w_) set_nonblocking(in_w_.get());
    if (cmd.timeout.count() > 0) deadline_ = started + cmd.timeout;
  }

  Completed run() {
    while (!child_exited_ || out_r_) {
      const auto now = Clock::now();
      if (child_exited_ && drain_until_ && now >= *drain_until_) break; // descendants hold the pipe
      enforce_timeout(now);
      if (!poll_once(now)) break;
    }
    if (!child_exited_) {
      while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
      }
    }
    // A timed-out program's group goes entirely, including what survived SIGTERM.
    if (done_.timed_out && !killed_) ::kill(-pid_, SIGKILL);
    if (WIFEXITED(status_))
      done_.exit_code = WEXITSTATUS(status_);
    else if (WIFSIGNALED(status_))
      done_.signal = WTERMSIG(status_);
    done_.output = tail_.finish();
    return std::move(done_);
  }

private:
  void enforce_timeout(Clock::time_point now) {
    if (!child_exited_ && deadline_ && !done_.timed_out && now >= *deadline_) {
      ::kill(-pid_, SIGTERM);
      done_.timed_out = true;
      done_.timeout = cmd_.timeout;
      kill_at_ = now + kKillGrace;
    }
    if (done_.timed_out && !killed_ && kill_at_ && now >= *kill_at_) {
      ::kill(-pid_, SIGKILL);
      killed_ = true;
    }
  }

  // The next moment something is due: the deadline, the kill, the end of the drain, a poll tick.
  std::optional<Clock::time_point> next_wake(Clock::time_point now) const {
    std::optional<Clock::time_point> wake;
    auto sooner = [&](std::optional<Clock::time_point> t) {
      if (t && (!wake || *t < *wake)) wake = t;
    };
    if (!child_exited_ && !done_.timed_out) sooner(deadline_);
    if (done_.timed_out && !killed_) sooner(kill_at_);
    if (child_exited_) sooner(drain_until_);
    if (!child_exited_ && !pidfd_) sooner(now + milliseconds(50));
    return wake;
  }

  // One poll round; false when poll itself failed (the child is killed and reaped then).
  bool poll_once(Clock::time_point now) {
    pollfd fds[3];
    nfds_t n = 0;
    int out_i = -1, in_i = -1, pid_i = -1;
    if (out_r_) {
      out_i = static_cast<int>(n);
      fds[n++] = {out_r_.get(), POLLIN, 0};
    }
    if (in_w_) {
      in_i = static_cast<int>(n);
      fds[n++] = {in_w_.get(), POLLOUT, 0};
    }
    if (pidfd_) {
      pid_i = static_cast<int>(n);
      fds[n++] = {pidfd_.get(), POLLIN, 0};
    }
    const int ready = ::poll(fds, n, poll_timeout_ms(next_wake(now), now));
    if (ready < 0 && errno != EINTR) {
      ::kill(-pid_, SIGKILL);
      killed_ = true;
      while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
      }
      child_exited_ = true;
      return false;
    }
    if (ready <= 0) {
      if (!child_exited_ && !pidfd_) reap();
      return true;
    }
    if (out_i >= 0 && fds[out_i].revents != 0) read_output();
    if (in_i >= 0 && in_w_ && fds[in_i].revents != 0) write_input();
    if (!child_exited_ && (pidfd_ ? (pid_i >= 0 && fds[pid_i].revents != 0) : true)) reap();
    return true;
  }

  void read_output() {
    const auto r = ::read(out_r_.get(), buf_.data(), buf_.size());
    if (r > 0) {
      const std::string_view chunk(buf_.data(), static_cast<std::size_t>(r));
      tail_.add(chunk);
      if (cmd_.on_output) cmd_.on_output(chunk);
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      out_r_.reset(); // EOF: every writer is gone
    }
  }

  void write_input() {
    const std::size_t len = std::min(kChunk, cmd_.input.size() - input_off_);
    const auto w = ::write(in_w_.get(), cmd_.input.data() + input_off_, len);
    if (w > 0)
      input_off_ += static_cast<std::size_t>(w);
    else if (w < 0 && errno != EAGAIN && errno != EINTR)
      in_w_.reset();                                    // EPIPE: it stopped reading
    if (input_off_ == cmd_.input.size()) in_w_.reset(); // EOF for the program
  }

  void reap() {
    while (true) {
      const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
      if (r < 0 && errno == EINTR) continue;
      if (r == pid_ || (r < 0 && errno == ECHILD)) {
        child_exited_ = true;
        drain_until_ = Clock::now() + kDrainGrace;
        in_w_.reset(); // nobody left to read it
        pidfd_.reset();
      }
      return;
    }
  }

  const Command& cmd_;
  const pid_t pid_;
  Fd out_r_, in_w_, pidfd_;
  Tail tail_;
  std::string buf_;
  Completed done_;
  std::size_t input_off_ = 0;
  bool child_exited_ = false;
  bool killed_ = false;
  int status_ = 0;
  std::optional<Clock::time_point> deadline_, kill_at_, drain_until_;
};

} // namespace

Result<Completed> SystemRunner::run(const Command& cmd) {
  if (cmd.argv.empty() || cmd.argv[0].empty())
    return fail(ErrorKind::internal, "cannot run an empty command", "this is a bug in hpcbake");
  const std::string& program = cmd.argv[0];

  // Everything the child needs is prepared here, before fork.
  std::vector<std::string> argv_storage = cmd.argv;
  std::vector<std::string> env_storage = child_environment(cmd.env);
  std::vector<std::string> candidate_storage = exec_candidates(program, env_storage);
  const auto argv = c_strings(argv_storage);
  const auto envp = c_strings(env_storage);
  const auto candidates = c_strings(candidate_storage);
  const std::string cwd = cmd.cwd.string();
  HPCBAKE_TRY_ASSIGN(Pipes p, make_pipes(cmd));

  SigpipeGuard sigpipe_guard;
  const auto started = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0)
    return fail(ErrorKind::internal, fmt::format("cannot start {}: fork failed: {}", program, std::strerror(errno)),
                "the host may be out of memory or processes");
  if (pid == 0)
    child_main(p.in_r.get(), p.out_w.get(), p.err_w.get(), cwd.empty() ? nullptr : cwd.c_str(), argv, envp, candidates);

  // Also set here, so the group exists before we might signal it (whichever runs first wins).
  ::setpgid(pid, pid);
  p.out_w.reset();
  p.in_r.reset();
  p.err_w.reset();
  HPCBAKE_TRY(exec_outcome(pid, p.err_r, program, cwd));
  return Supervisor(cmd, pid, started, std::move(p.out_r), std::move(p.in_w)).run();
}

} // namespace hpcbake::exec

namespace hpcbake::exec {

bool may_act_on_machine(const util::HostFs& host, const Runner& runner) {
  return host.is_real_root() || runner.records_machine_commands();
}

} // namespace hpcbake::exec
