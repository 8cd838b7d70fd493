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

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// The child's report through the CLOEXEC error pipe: which step failed, and its errno.
enum class Stage : int { setup = 1, chdir = 2, exec = 3 };
struct ChildFailure {
  int stage;
  int err;
};

// The inherited environment with cmd.env applied ("KEY=VALUE" replaces or adds, "KEY" removes).
std::vector<std::string> child_environment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  for (const auto& entry : overrides) {
    const auto eq = entry.find('=');
    const std::string key = entry.substr(0, eq);
    std::erase_if(env, [&](const std::string& s) { return s.size() > key.size() && s.starts_with(key) && s[key.size()] == '='; });
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
  for (auto& s : strings) out.push_back(s.data());
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
  // call needs Linux 5.11.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
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

bool Completed::ok() const { return exit_code == 0 && signal == 0 && !timed_out; }

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
      if (c == '\'') out += "'\\''";
      else out += c;
    }
    out += '\'';
  }
  return out;
}

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

  Fd out_r, out_w, in_r, in_w, err_r, err_w;
  if (auto s = make_pipe(out_r, out_w); !s) return std::unexpected(s.error());
  if (auto s = make_pipe(err_r, err_w); !s) return std::unexpected(s.error());
  if (cmd.input.empty()) {
    in_r.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_r) return fail(ErrorKind::internal, fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
  } else if (auto s = make_pipe(in_r, in_w); !s) {
    return std::unexpected(s.error());
  }

  SigpipeGuard sigpipe_guard;
  const auto started = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0)
    return fail(ErrorKind::internal, fmt::format("cannot start {}: fork failed: {}", program, std::strerror(errno)),
                "the host may be out of memory or processes");
  if (pid == 0) child_main(in_r.get(), out_w.get(), err_w.get(), cwd.empty() ? nullptr : cwd.c_str(), argv, envp,
                           candidates);

  // Also set here, so the group exists before we might signal it (whichever runs first wins).
  ::setpgid(pid, pid);
  out_w.reset();
  in_r.reset();
  err_w.reset();

  // The error pipe closes on a successful exec (CLOEXEC) or carries why it failed.
  ChildFailure failure{};
  std::size_t got = 0;
  while (got < sizeof failure) {
    const auto n = ::read(err_r.get(), reinterpret_cast<char*>(&failure) + got, sizeof failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  err_r.reset();
  if (got == sizeof failure) {
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

  set_nonblocking(out_r.get());
  if (in_w) set_nonblocking(in_w.get());
  Fd pidfd = open_pidfd(pid);

  Tail tail(cmd.keep_output);
  Completed done;
  std::size_t input_off = 0;
  bool child_exited = false;
  bool killed = false;
  int status = 0;
  std::optional<Clock::time_point> deadline;
  if (cmd.timeout.count() > 0) deadline = started + cmd.timeout;
  std::optional<Clock::time_point> kill_at;
  std::optional<Clock::time_point> drain_until;
  std::string buf(kChunk, '\0');

  auto reap = [&]() {
    while (true) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r < 0 && errno == EINTR) continue;
      if (r == pid || (r < 0 && errno == ECHILD)) {
        child_exited = true;
        drain_until = Clock::now() + kDrainGrace;
        in_w.reset(); // nobody left to read it
        pidfd.reset();
      }
      return;
    }
  };

  while (!child_exited || out_r) {
    const auto now = Clock::now();
    if (child_exited && drain_until && now >= *drain_until) break; // descendants hold the pipe
    if (!child_exited && deadline && !done.timed_out && now >= *deadline) {
      ::kill(-pid, SIGTERM);
      done.timed_out = true;
      done.timeout = cmd.timeout;
      kill_at = now + kKillGrace;
    }
    if (done.timed_out && !killed && kill_at && now >= *kill_at) {
      ::kill(-pid, SIGKILL);
      killed = true;
    }

    std::optional<Clock::time_point> wake;
    auto sooner = [&](std::optional<Clock::time_point> t) {
      if (t && (!wake || *t < *wake)) wake = t;
    };
    if (!child_exited && !done.timed_out) sooner(deadline);
    if (done.timed_out && !killed) sooner(kill_at);
    if (child_exited) sooner(drain_until);
    if (!child_exited && !pidfd) sooner(now + milliseconds(50));

    pollfd fds[3];
    nfds_t n = 0;
    int out_i = -1, in_i = -1, pid_i = -1;
    if (out_r) {
      out_i = static_cast<int>(n);
      fds[n++] = {out_r.get(), POLLIN, 0};
    }
    if (in_w) {
      in_i = static_cast<int>(n);
      fds[n++] = {in_w.get(), POLLOUT, 0};
    }
    if (pidfd) {
      pid_i = static_cast<int>(n);
      fds[n++] = {pidfd.get(), POLLIN, 0};
    }
    const int ready = ::poll(fds, n, poll_timeout_ms(wake, now));
    if (ready < 0 && errno != EINTR) {
      ::kill(-pid, SIGKILL);
      killed = true;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      child_exited = true;
      break;
    }
    if (ready <= 0) {
      if (!child_exited && !pidfd) reap();
      continue;
    }

    if (out_i >= 0 && fds[out_i].revents != 0) {
      const auto r = ::read(out_r.get(), buf.data(), buf.size());
      if (r > 0) {
        const std::string_view chunk(buf.data(), static_cast<std::size_t>(r));
        tail.add(chunk);
        if (cmd.on_output) cmd.on_output(chunk);
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        out_r.reset(); // EOF: every writer is gone
      }
    }
    if (in_i >= 0 && in_w && fds[in_i].revents != 0) {
      const std::size_t len = std::min(kChunk, cmd.input.size() - input_off);
      const auto w = ::write(in_w.get(), cmd.input.data() + input_off, len);
      if (w > 0) input_off += static_cast<std::size_t>(w);
      else if (w < 0 && errno != EAGAIN && errno != EINTR) in_w.reset(); // EPIPE: it stopped reading
      if (input_off == cmd.input.size()) in_w.reset();                  // EOF for the program
    }
    if (!child_exited && (pidfd ? (pid_i >= 0 && fds[pid_i].revents != 0) : true)) reap();
  }

  if (!child_exited) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // A timed-out program's group goes entirely, including what survived SIGTERM.
  if (done.timed_out && !killed) ::kill(-pid, SIGKILL);

  if (WIFEXITED(status)) done.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) done.signal = WTERMSIG(status);
  done.output = tail.finish();
  return done;
}

void RecordingRunner::on(std::vector<std::string> argv_prefix, Completed result, int times) {
  rules_.push_back(Rule{std::move(argv_prefix), std::move(result), times});
}

Result<Completed> RecordingRunner::run(const Command& cmd) {
  calls.push_back(cmd);
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (it->times == 0) continue;
    if (it->argv_prefix.size() > cmd.argv.size()) continue;
    if (!std::equal(it->argv_prefix.begin(), it->argv_prefix.end(), cmd.argv.begin())) continue;
    if (it->times > 0) --it->times;
    Completed result = it->result;
    if (cmd.on_output && !result.output.empty()) cmd.on_output(result.output);
    return result;
  }
  return exited(0);
}

std::vector<std::vector<std::string>> RecordingRunner::argvs() const {
  std::vector<std::vector<std::string>> out;
  out.reserve(calls.size());
  for (const auto& c : calls) out.push_back(c.argv);
  return out;
}

} // namespace hpcbake::exec
