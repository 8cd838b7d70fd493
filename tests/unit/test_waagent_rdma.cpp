#include "waagent/rdma.hpp"

#include "detect/platform.hpp"
#include "exec/runner.hpp"
#include "manifest/manifests.hpp"
#include "util/hostfs.hpp"
#include "waagent/config.hpp"

#include "helpers.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

namespace fs = std::filesystem;
using namespace hpcbake;
using namespace hpcbake::waagent;

namespace {

// Byte-identical copy of Debian 12 waagent 2.7.3's /etc/waagent.conf.
std::string real_conf() {
  const auto text = test::slurp(test::fixtures() / "reference" / "waagent.conf.debian-2.7.3");
  REQUIRE_MESSAGE(text.find("\n# OS.EnableRDMA=y\n") != std::string::npos, "the reference file is missing or changed");
  return text;
}

// Lines with their terminators, so that a changed line ending counts as a change.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size() - 1;
    out.push_back(text.substr(pos, nl + 1 - pos));
    pos = nl + 1;
  }
  return out;
}

// Indices (0-based) of the lines that differ; both texts must have `extra` more lines in `after`.
std::vector<std::size_t> changed_lines(const std::string& before, const std::string& after, std::size_t extra = 0) {
  const auto a = lines_of(before), b = lines_of(after);
  REQUIRE(b.size() == a.size() + extra);
  std::vector<std::size_t> diff;
  for (std::size_t i = 0; i < b.size(); ++i)
    if (i >= a.size() || a[i] != b[i]) diff.push_back(i);
  return diff;
}

std::size_t line_index(const std::string& text, const std::string& line) {
  const auto ls = lines_of(text);
  for (std::size_t i = 0; i < ls.size(); ++i)
    if (ls[i] == line) return i;
  FAIL("line not found: " << line);
  return 0;
}

std::string crlf(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

std::optional<std::string> rdma(const std::string& text) {
  return effective_value(text, kEnableRdma);
}

const std::vector<Setting> on = rdma_settings(RdmaMode::on);
const std::vector<Setting> off = rdma_settings(RdmaMode::off);

// A fixture root holding /etc/waagent.conf and an os-release.
fs::path make_root(const std::string& name, const std::optional<std::string>& conf,
                   const std::string& os_id = "debian") {
  const auto root = test::scratch(name);
  fs::create_directories(root / "etc");
  if (conf) test::write(root / "etc/waagent.conf", *conf);
  test::write(root / "etc/os-release", "ID=" + os_id + "\nVERSION_ID=\"12\"\n");
  return root;
}

std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) names.push_back(e.path().filename().string());
  return names;
}

// A Runner whose programs cannot be started (no systemctl on the machine).
struct NoSystemctl final : exec::Runner {
  Result<exec::Completed> run(const exec::Command& cmd) override {
    return fail(ErrorKind::internal, cmd.argv.at(0) + ": not found in PATH");
  }
};

RdmaOptions with_unit(std::string unit = "walinuxagent") {
  RdmaOptions o;
  o.unit = std::move(unit);
  return o;
}

// A child process that runs apply_rdma with each of `modes` in turn, one apply per word from the
// parent, so that a test stops it at a chosen step, not after a chosen delay. It answers a byte
// when it has started and after each apply, then waits (in read) for the next word.
class Applier {
public:
  Applier(const fs::path& root, const std::vector<RdmaMode>& modes) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(fds[0]);
      child(root, modes, fds[1]);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    REQUIRE(answered());
  }
  Applier(const Applier&) = delete;
  Applier& operator=(const Applier&) = delete;
  ~Applier() {
    if (!reaped_) { // a failed check left it running
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(fd_);
  }
  pid_t pid() const { return pid_; }
  // The next apply, with the crash point (util::crash_point, kCrashBeforeRename) set or not.
  // True when the child answered that it finished it; false when it died first.
  bool apply(bool crash_before_rename) {
    const char word = crash_before_rename ? 'c' : 'a';
    REQUIRE(::send(fd_, &word, 1, MSG_NOSIGNAL) == 1);
    return answered();
  }
  // SIGKILL (the child waits for a word: it is between applies), then its wait status.
  int kill() {
    ::kill(pid_, SIGKILL);
    return reap();
  }
  int reap() {
    int status = 0;
    reaped_ = true;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    return status;
  }

private:
  [[noreturn]] static void child(const fs::path& root, const std::vector<RdmaMode>& modes, int fd) {
    // Never back into doctest: every way out is _exit (no atexit handlers, no unwinding).
    try {
      exec::RecordingRunner runner;
      char word = 'r';
      for (std::size_t i = 0;; ++i) {
        if (::write(fd, &word, 1) != 1) ::_exit(2);
        if (::read(fd, &word, 1) != 1 || i == modes.size()) ::_exit(0); // the parent is gone, or asks too much
        if (word == 'c') ::setenv("HPCBAKE_TEST_CRASH_POINT", kCrashBeforeRename, 1);
        if (!apply_rdma(util::HostFs(root), desired_without_size(modes[i]), runner, with_unit())) ::_exit(1);
      }
    } catch (...) {
      ::_exit(3);
    }
  }
  // A byte from the child: true; the end of the stream (it died): false.
  bool answered() {
    char word = 0;
    ssize_t n;
    while ((n = ::read(fd_, &word, 1)) < 0 && errno == EINTR) {
    }
    REQUIRE(n >= 0);
    return n == 1;
  }
  pid_t pid_ = 0;
  bool reaped_ = false;
  int fd_ = -1;
};

} // namespace

// ---- the pure edit, on the real file -------------------------------------------------

TEST_CASE("rdma: enable on the real Debian file uncomments the shipped line and keeps every other byte") {
  const auto conf = real_conf();
  REQUIRE_FALSE(rdma(conf).has_value());
  const auto r = plan_edit(conf, on);
  CHECK(rdma(r.text) == "y");
  const auto at = line_index(conf, "# OS.EnableRDMA=y\n");
  CHECK(changed_lines(conf, r.text) == std::vector<std::size_t>{at});
  CHECK(lines_of(r.text)[at] == "OS.EnableRDMA=y\n");
  REQUIRE(r.edits.size() == 1);
  CHECK(r.edits[0].key == "OS.EnableRDMA");
  CHECK_FALSE(r.edits[0].before.has_value());
  CHECK(r.edits[0].after == "y");
  CHECK(r.edits[0].line == at + 1);
  CHECK(r.edits[0].how == Edit::How::uncommented);
  // Everything else the agent reads is unchanged.
  for (const char* key : {"Provisioning.Agent", "AutoUpdate.Enabled", "OS.EnableFirewall", "ResourceDisk.MountOptions"})
    CHECK(effective_value(r.text, key) == effective_value(conf, key));
}

TEST_CASE("rdma: enable is idempotent, and disable after enable sets n on the same line") {
  const auto conf = real_conf();
  const auto enabled = edit_config(conf, on);
  CHECK(edit_config(enabled, on) == enabled);
  CHECK(plan_edit(enabled, on).edits.empty());

  const auto disabled = plan_edit(enabled, off);
  const auto at = line_index(conf, "# OS.EnableRDMA=y\n");
  CHECK(changed_lines(conf, disabled.text) == std::vector<std::size_t>{at});
  CHECK(lines_of(disabled.text)[at] == "OS.EnableRDMA=n\n");
  REQUIRE(disabled.edits.size() == 1);
  CHECK(disabled.edits[0].before == "y");
  CHECK(disabled.edits[0].how == Edit::How::in_place);
  CHECK(edit_config(disabled.text, off) == disabled.text);
  // And on again: back to exactly what enable wrote.
  CHECK(edit_config(disabled.text, on) == enabled);
}

TEST_CASE("rdma: disable on the shipped file changes nothing: unset already reads as off") {
  const auto conf = real_conf();
  CHECK(edit_config(conf, off) == conf);
  CHECK(plan_edit(conf, off).edits.empty());
}

// ---- edge cases ------------------------------------------------------------------------

TEST_CASE("rdma: a key present with another value is changed in place") {
  CHECK(edit_config("A=1\nOS.EnableRDMA=n\nB=2\n", on) == "A=1\nOS.EnableRDMA=y\nB=2\n");
  CHECK(edit_config("A=1\nOS.EnableRDMA=None\nB=2\n", on) == "A=1\nOS.EnableRDMA=y\nB=2\n");
  CHECK(edit_config("  OS.EnableRDMA = n\n", on) == "  OS.EnableRDMA = y\n");
  CHECK(edit_config("OS.EnableRDMA=\n", on) == "OS.EnableRDMA=y\n");
  // Already on in another case: the agent lower-cases switches, so nothing changes.
  CHECK(edit_config("OS.EnableRDMA=Y\n", on) == "OS.EnableRDMA=Y\n");
  CHECK(edit_config("OS.EnableRDMA=Y\n", off) == "OS.EnableRDMA=n\n");
}

TEST_CASE("rdma: several assignments: only the last (the one the agent uses) is edited") {
  const std::string two = "OS.EnableRDMA=y\nX=1\nOS.EnableRDMA=n\n";
  REQUIRE(rdma(two) == "n");
  const auto r = plan_edit(two, on);
  CHECK(r.text == "OS.EnableRDMA=y\nX=1\nOS.EnableRDMA=y\n");
  CHECK(r.edits.at(0).line == 3);
  // Disabling leaves the overridden first one alone too.
  CHECK(edit_config("OS.EnableRDMA=n\nOS.EnableRDMA=y\n", off) == "OS.EnableRDMA=n\nOS.EnableRDMA=n\n");
  CHECK(edit_config("OS.EnableRDMA=y\nOS.EnableRDMA=n\n", off) == "OS.EnableRDMA=y\nOS.EnableRDMA=n\n");
  // A last "None" unsets it: that line is the one to set.
  CHECK(edit_config("OS.EnableRDMA=y\nOS.EnableRDMA=None\n", on) == "OS.EnableRDMA=y\nOS.EnableRDMA=y\n");
  // An active line wins over a commented one, wherever each is.
  CHECK(edit_config("OS.EnableRDMA=n\n# OS.EnableRDMA=y\n", on) == "OS.EnableRDMA=y\n# OS.EnableRDMA=y\n");
}

TEST_CASE("rdma: commented-out assignments are uncommented, spacing and all") {
  CHECK(edit_config("#OS.EnableRDMA=y\n", on) == "OS.EnableRDMA=y\n");
  CHECK(edit_config("# OS.EnableRDMA = y\n", on) == "OS.EnableRDMA = y\n");
  CHECK(edit_config("#\tOS.EnableRDMA=n # the default\n", on) == "OS.EnableRDMA=y # the default\n");
  CHECK(edit_config("# OS.EnableRDMA=\"n\"\n", on) == "OS.EnableRDMA=y\n");
  // With several, the last is taken; the others stay comments.
  CHECK(edit_config("# OS.EnableRDMA=n\n# OS.EnableRDMA=y\n", on) == "# OS.EnableRDMA=n\nOS.EnableRDMA=y\n");
  // Prose that mentions the key is not an assignment: append instead.
  CHECK(edit_config("# OS.EnableRDMA=y is for HPC images\n", on) ==
        "# OS.EnableRDMA=y is for HPC images\nOS.EnableRDMA=y\n");
  // Not '#' in column 0: the agent reads the key "# OS.EnableRDMA", which is not ours.
  CHECK(edit_config("  # OS.EnableRDMA=y\n", on) == "  # OS.EnableRDMA=y\nOS.EnableRDMA=y\n");
  // A longer key that starts with ours is another key.
  CHECK(edit_config("# OS.EnableRDMAX=y\n", on) == "# OS.EnableRDMAX=y\nOS.EnableRDMA=y\n");
}

TEST_CASE("rdma: a value with a trailing comment, or quotes, keeps the comment") {
  CHECK(edit_config("OS.EnableRDMA=n # off for now\n", on) == "OS.EnableRDMA=y # off for now\n");
  CHECK(edit_config("OS.EnableRDMA = \"n\"  # quoted\n", on) == "OS.EnableRDMA = y  # quoted\n");
  CHECK(edit_config("OS.EnableRDMA=n# tight\n", on) == "OS.EnableRDMA=y# tight\n");
  for (const auto& t :
       {edit_config("OS.EnableRDMA=n # off for now\n", on), edit_config("OS.EnableRDMA = \"n\"  # quoted\n", on)})
    CHECK(rdma(t) == "y");
}

TEST_CASE("rdma: CRLF line endings are kept on every line, edited or appended") {
  const auto conf = crlf(real_conf());
  const auto r = edit_config(conf, on);
  const auto at = line_index(conf, "# OS.EnableRDMA=y\r\n");
  CHECK(changed_lines(conf, r) == std::vector<std::size_t>{at});
  CHECK(lines_of(r)[at] == "OS.EnableRDMA=y\r\n");
  CHECK(rdma(r) == "y");
  CHECK(edit_config("A=1\r\nOS.EnableRDMA=n\r\n", on) == "A=1\r\nOS.EnableRDMA=y\r\n");
  CHECK(edit_config("A=1\r\n", on) == "A=1\r\nOS.EnableRDMA=y\r\n");
  // The agent strips quotes before whitespace: "\"y\"\r" reads as y" (not on), so hpcbake
  // rewrites it bare.
  REQUIRE(rdma("OS.EnableRDMA=\"y\"\r\n") == "y\"");
  CHECK(edit_config("OS.EnableRDMA=\"y\"\r\n", on) == "OS.EnableRDMA=y\r\n");
}

TEST_CASE("rdma: a missing key is appended, keeping the final-newline convention") {
  CHECK(edit_config("A=1\n", on) == "A=1\nOS.EnableRDMA=y\n");
  CHECK(edit_config("A=1", on) == "A=1\nOS.EnableRDMA=y");
  CHECK(edit_config("A=1\r\nB=2", on) == "A=1\r\nB=2\r\nOS.EnableRDMA=y");
  CHECK(edit_config("", on) == "OS.EnableRDMA=y\n");
  const auto r = plan_edit("A=1\n\n", on);
  CHECK(r.text == "A=1\n\nOS.EnableRDMA=y\n");
  CHECK(r.edits.at(0).line == 3);
  CHECK(r.edits.at(0).how == Edit::How::appended);
}

TEST_CASE("rdma: enable turns OS.UpdateRdmaDriver off only when it is on, disable turns every RDMA switch off") {
  CHECK(edit_config("OS.EnableRDMA=y\nOS.UpdateRdmaDriver=y\n", on) == "OS.EnableRDMA=y\nOS.UpdateRdmaDriver=n\n");
  CHECK(edit_config("OS.EnableRDMA=y\n", on) == "OS.EnableRDMA=y\n"); // unset reads as off: not added
  CHECK(edit_config("OS.EnableRDMA=y\nOS.CheckRdmaDriver=y\n", on) == "OS.EnableRDMA=y\nOS.CheckRdmaDriver=y\n");
  // enable_rdma() is the OR of the three switches: each one that reads y goes to n.
  CHECK(edit_config("OS.CheckRdmaDriver=Y\nOS.UpdateRdmaDriver=y\n", off) ==
        "OS.CheckRdmaDriver=n\nOS.UpdateRdmaDriver=n\n");
  CHECK(edit_config("OS.CheckRdmaDriver=n\n", off) == "OS.CheckRdmaDriver=n\n");
}

// ---- status ----------------------------------------------------------------------------

TEST_CASE("rdma: status reads the keys as the agent does, and compares with what is wanted") {
  const auto root = make_root("rdma-status", real_conf());
  const util::HostFs host(root);
  auto s = rdma_status(host, desired_without_size(RdmaMode::on));
  REQUIRE(s);
  CHECK(s->exists);
  CHECK(s->path == root / "etc/waagent.conf");
  REQUIRE(s->keys.size() == 3);
  CHECK_FALSE(s->keys[0].value.has_value());
  CHECK(s->keys[0].line == 0);
  CHECK_FALSE(s->rdma_enabled);
  CHECK_FALSE(s->driver_update);
  CHECK(s->driver_check); // the agent's default
  CHECK(s->matches == false);
  REQUIRE(s->differences.size() == 1);
  CHECK(s->differences[0] == "OS.EnableRDMA is unset; wants y");
  CHECK_FALSE(s->backup.has_value());

  auto off_status = rdma_status(host, desired_without_size(RdmaMode::off));
  REQUIRE(off_status);
  CHECK(off_status->matches == true);
  auto none = rdma_status(host, std::nullopt);
  REQUIRE(none);
  CHECK_FALSE(none->matches.has_value());

  test::write(root / "etc/waagent.conf", "OS.EnableRDMA=n\nOS.CheckRdmaDriver=y\nOS.EnableRDMA=y\n");
  s = rdma_status(host, desired_without_size(RdmaMode::off));
  REQUIRE(s);
  CHECK(s->keys[0].value == "y");
  CHECK(s->keys[0].line == 3);
  CHECK(s->keys[0].assignments == 2);
  CHECK(s->rdma_enabled);
  CHECK(s->matches == false);
  CHECK(s->differences.size() == 2);
  const auto j = to_json(*s);
  CHECK(j["keys"]["OS.EnableRDMA"]["line"] == 3);
  CHECK(j["agent"]["enable_rdma"] == true);
  CHECK(j["wanted"] == "off");
}

TEST_CASE("rdma: status of a missing config is a status, not an error") {
  const auto root = make_root("rdma-status-missing", std::nullopt);
  auto s = rdma_status(util::HostFs(root), desired_without_size(RdmaMode::on));
  REQUIRE(s);
  CHECK_FALSE(s->exists);
  CHECK_FALSE(s->rdma_enabled);
  CHECK(s->matches == false);
  CHECK(s->differences.at(0) == "the config does not exist");
}

TEST_CASE("rdma: what a size wants comes from its manifest") {
  auto m = manifest::load_manifests(test::source_dir() / "manifests");
  REQUIRE(m);
  const auto* hb = m->find_size("Standard_HB120rs_v3");
  const auto* nc = m->find_size("Standard_NC6s_v3");
  const auto* nd = m->find_size("Standard_ND96isr_H100_v5");
  REQUIRE((hb && nc && nd));
  CHECK(desired_for(*hb).mode == RdmaMode::on);
  CHECK(desired_for(*nd).mode == RdmaMode::on);
  CHECK(desired_for(*nc).mode == RdmaMode::off);
  manifest::SizeManifest no_ipoib = *hb;
  no_ipoib.infiniband->ipoib = false;
  CHECK(desired_for(no_ipoib).mode == RdmaMode::off);
}

// ---- apply: files, backup, service -----------------------------------------------------

TEST_CASE("rdma: apply: enable writes, backs up once, restarts only a running agent, and is idempotent") {
  const auto conf = real_conf();
  const auto root = make_root("rdma-apply", conf);
  const util::HostFs host(root);
  const auto path = root / "etc/waagent.conf";
  const auto backup = root / "etc/waagent.conf.hpcbake-orig";
  ::chmod(path.c_str(), 0640);

  exec::RecordingRunner runner; // unmatched commands exit 0: is-active says "running"
  auto r = apply_rdma(host, desired_without_size(RdmaMode::on), runner, with_unit());
  REQUIRE(r);
  CHECK(r->changed);
  CHECK(r->backup_created);
  CHECK(r->backup == backup);
  CHECK(test::slurp(backup) == conf);
  CHECK(test::slurp(path) == edit_config(conf, on));
  CHECK(r->service_active == true);
  CHECK(r->restarted);
  CHECK(runner.argvs() == std::vector<std::vector<std::string>>{{"systemctl", "is-active", "--quiet", "walinuxagent"},
                                                                {"systemctl", "restart", "walinuxagent"}});
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640); // the mode is kept
  CHECK(leftovers(root / "etc").empty());

  // Again: nothing written, nothing restarted, the backup untouched.
  exec::RecordingRunner again;
  const auto mtime_before = fs::last_write_time(path);
  r = apply_rdma(host, desired_without_size(RdmaMode::on), again, with_unit());
  REQUIRE(r);
  CHECK_FALSE(r->changed);
  CHECK_FALSE(r->backup_created);
  CHECK(r->backup == backup);
  CHECK(again.calls.empty());
  CHECK(fs::last_write_time(path) == mtime_before);

  // Disable: the backup still holds the true original, never the enabled file.
  exec::RecordingRunner third;
  r = apply_rdma(host, desired_without_size(RdmaMode::off), third, with_unit());
  REQUIRE(r);
  CHECK(r->changed);
  CHECK_FALSE(r->backup_created);
  CHECK(test::slurp(backup) == conf);
  CHECK(rdma(test::slurp(path)) == "n");
  CHECK(third.calls.size() == 2);
}

TEST_CASE("rdma: apply: an agent that is not running is not restarted") {
  const auto root = make_root("rdma-inactive", real_conf());
  exec::RecordingRunner runner;
  runner.on({"systemctl", "is-active"}, exec::exited(3, "inactive\n"));
  auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
  REQUIRE(r);
  CHECK(r->changed);
  CHECK(r->service_active == false);
  CHECK_FALSE(r->restarted);
  CHECK(runner.argvs() == std::vector<std::vector<std::string>>{{"systemctl", "is-active", "--quiet", "walinuxagent"}});
  CHECK(r->note.find("not running") != std::string::npos);
}

TEST_CASE("rdma: apply: no systemctl, Restart::never, and a failing restart") {
  SUBCASE("systemctl cannot be run: written, not restarted, not an error") {
    const auto root = make_root("rdma-nosystemctl", real_conf());
    NoSystemctl runner;
    auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
    REQUIRE(r);
    CHECK(r->changed);
    CHECK_FALSE(r->service_active.has_value());
    CHECK_FALSE(r->restarted);
  }
  SUBCASE("Restart::never runs nothing") {
    const auto root = make_root("rdma-never", real_conf());
    exec::RecordingRunner runner;
    auto o = with_unit();
    o.restart = Restart::never;
    o.no_restart_reason = "--no-restart";
    auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, o);
    REQUIRE(r);
    CHECK(r->changed);
    CHECK(runner.calls.empty());
    CHECK(r->note == "walinuxagent not restarted: --no-restart");
  }
  SUBCASE("a failed restart is an error that says the file is written") {
    const auto root = make_root("rdma-restart-fails", real_conf());
    exec::RecordingRunner runner;
    runner.on({"systemctl", "restart"}, exec::exited(1, "Job for walinuxagent.service failed.\n"));
    auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
    REQUIRE_FALSE(r);
    CHECK(r.error().kind == ErrorKind::internal);
    CHECK(r.error().message.find("is written") != std::string::npos);
    CHECK(r.error().message.find("Job for walinuxagent.service failed.") != std::string::npos);
    CHECK(rdma(test::slurp(root / "etc/waagent.conf")) == "y");
  }
}

TEST_CASE("rdma: apply: a missing config is an error unless creation is asked for, disable needs none") {
  const auto root = make_root("rdma-missing", std::nullopt);
  const util::HostFs host(root);
  exec::RecordingRunner runner;
  auto r = apply_rdma(host, desired_without_size(RdmaMode::on), runner, with_unit());
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::unsupported);
  CHECK(r.error().message.find("does not exist") != std::string::npos);
  CHECK(r.error().hint.find("--create") != std::string::npos);
  CHECK_FALSE(fs::exists(root / "etc/waagent.conf"));
  CHECK_FALSE(fs::exists(root / "etc/waagent.conf.hpcbake-orig"));
  CHECK(runner.calls.empty());

  auto d = apply_rdma(host, desired_without_size(RdmaMode::off), runner, with_unit());
  REQUIRE(d);
  CHECK_FALSE(d->changed);
  CHECK_FALSE(fs::exists(root / "etc/waagent.conf"));

  auto o = with_unit();
  o.missing = Missing::create;
  o.restart = Restart::never;
  auto c = apply_rdma(host, desired_without_size(RdmaMode::on), runner, o);
  REQUIRE(c);
  CHECK(c->created);
  CHECK(test::slurp(root / "etc/waagent.conf") == "OS.EnableRDMA=y\n");
  CHECK_FALSE(fs::exists(root / "etc/waagent.conf.hpcbake-orig")); // nothing to back up
}

TEST_CASE("rdma: apply: a read-only config is refused and nothing changes") {
  const auto conf = real_conf();
  const auto root = make_root("rdma-readonly", conf);
  const auto path = root / "etc/waagent.conf";
  REQUIRE(::chmod(path.c_str(), 0444) == 0);
  exec::RecordingRunner runner;
  auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::internal);
  CHECK(r.error().message.find("read-only (mode 0444)") != std::string::npos);
  CHECK(r.error().message.find("nothing changed") != std::string::npos);
  CHECK(r.error().hint.find("chmod u+w") != std::string::npos);
  CHECK(test::slurp(path) == conf);
  CHECK_FALSE(fs::exists(root / "etc/waagent.conf.hpcbake-orig"));
  CHECK(leftovers(root / "etc").empty());
  CHECK(runner.calls.empty());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0444);
  // Already satisfied: a read-only file is fine when nothing must change.
  REQUIRE(::chmod(path.c_str(), 0644) == 0);
  test::write(path, edit_config(conf, on));
  REQUIRE(::chmod(path.c_str(), 0444) == 0);
  CHECK(apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit()));
}

TEST_CASE("rdma: apply: a symlinked config is written through to its target, under the root") {
  const auto conf = real_conf();
  for (const bool absolute : {false, true}) {
    CAPTURE(absolute);
    const auto root = make_root(absolute ? "rdma-symlink-abs" : "rdma-symlink-rel", std::nullopt);
    const auto target = root / "usr/share/waagent/waagent.conf";
    test::write(target, conf);
    // An absolute target means the host's /usr/share/..., i.e. under the root, never this machine's.
    fs::create_symlink(absolute ? fs::path("/usr/share/waagent/waagent.conf")
                                : fs::path("../usr/share/waagent/waagent.conf"),
                       root / "etc/waagent.conf");
    exec::RecordingRunner runner;
    auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
    REQUIRE(r);
    CHECK(r->changed);
    CHECK(r->path == target);
    CHECK(fs::is_symlink(root / "etc/waagent.conf"));
    CHECK(test::slurp(target) == edit_config(conf, on));
    CHECK(test::slurp(root / "etc/waagent.conf.hpcbake-orig") == conf);
    CHECK(leftovers(root / "usr/share/waagent").empty());
    auto s = rdma_status(util::HostFs(root), std::nullopt);
    REQUIRE(s);
    CHECK(s->keys[0].value == "y");
  }
}

TEST_CASE("rdma: the agent's unit: distro manifest, then unit files under the root, then os-release") {
  const auto root = make_root("rdma-unit", real_conf(), "debian");
  const util::HostFs host(root);
  CHECK(detect::agent_unit(host, nullptr) == "walinuxagent");
  manifest::DistroManifest rhel;
  rhel.waagent_service = "waagent";
  CHECK(detect::agent_unit(host, &rhel) == "waagent");
  test::write(root / "etc/os-release", "ID=\"almalinux\"\nID_LIKE=\"rhel centos fedora\"\n");
  CHECK(detect::agent_unit(host, nullptr) == "waagent");
  test::write(root / "etc/os-release", "ID=ubuntu\nID_LIKE=debian\n");
  CHECK(detect::agent_unit(host, nullptr) == "walinuxagent");
  test::write(root / "usr/lib/systemd/system/waagent.service", "[Unit]\n");
  CHECK(detect::agent_unit(host, nullptr) == "waagent");
}

// ---- crashes ----------------------------------------------------------------------------

TEST_CASE("rdma: a crash between writing the temp file and the rename leaves the old file, whole") {
  const auto conf = real_conf();
  const auto root = make_root("rdma-crash", conf);
  const auto path = root / "etc/waagent.conf";
  const auto expected = edit_config(conf, on);

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("HPCBAKE_TEST_CRASH_POINT", kCrashBeforeRename, 1);
    exec::RecordingRunner runner;
    auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
    ::_exit(r ? 0 : 1); // not reached when the hook fires
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE_MESSAGE(WIFSIGNALED(status), "the child was not killed at the crash point");
  CHECK(WTERMSIG(status) == SIGKILL);

  // The config is the old file, byte for byte; the agent still reads it.
  CHECK(test::slurp(path) == conf);
  // The new content had fully reached the temp file: the kill came after the write, before the rename.
  const auto tmp = root / "etc" / ("waagent.conf.tmp." + std::to_string(child));
  REQUIRE(fs::exists(tmp));
  CHECK(test::slurp(tmp) == expected);
  // The backup made before the write is complete.
  CHECK(test::slurp(root / "etc/waagent.conf.hpcbake-orig") == conf);
  // The leftover is not the config: status reads waagent.conf only, and a rerun finishes the job.
  auto s = rdma_status(util::HostFs(root), desired_without_size(RdmaMode::on));
  REQUIRE(s);
  CHECK(s->matches == false);
  exec::RecordingRunner runner;
  auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
  REQUIRE(r);
  CHECK(r->changed);
  CHECK(test::slurp(path) == expected);
  CHECK(test::slurp(root / "etc/waagent.conf.hpcbake-orig") == conf);
  // ... and removes the dead process's temp file (found by bench/chaos: it stayed in /etc for good).
  CHECK_FALSE(fs::exists(tmp));
}

TEST_CASE(
    "rdma: the backup's temp file left by a process killed after making the backup is removed by the next apply") {
  // create_once links its temp file to the backup's name, then unlinks the temp file: a SIGKILL
  // between the two leaves both. The next apply finds the backup made and must still clear the
  // dead process's temp file (it returned before doing so, and /etc kept it for good).
  const auto conf = real_conf();
  const auto root = make_root("rdma-backup-leftover", conf);
  exec::RecordingRunner runner;
  REQUIRE(apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit()));
  const pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  const auto leftover = root / "etc" / ("waagent.conf.hpcbake-orig.tmp." + std::to_string(dead));
  test::write(leftover, conf);
  REQUIRE(apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::off), runner, with_unit()));
  CHECK_FALSE(fs::exists(leftover));
  CHECK(leftovers(root / "etc").empty());
  CHECK(test::slurp(root / "etc/waagent.conf.hpcbake-orig") == conf);
}

TEST_CASE("rdma: SIGKILL at every stage of enabling and disabling: always a whole old or new file") {
  // A child enables, disables, enables and disables, one apply at the parent's word. After k
  // applies it is killed waiting for the next (the last rename done, the next temp file not
  // begun), or sent into apply k+1 with the crash point set (its new config written to the temp
  // file and fsynced, not renamed). The stops are counted steps, never delays: a sanitizer build
  // on a loaded machine stops at the same points.
  const auto conf = real_conf();
  const auto enabled = edit_config(conf, on);
  const auto disabled = edit_config(enabled, off);
  const std::vector<RdmaMode> modes = {RdmaMode::on, RdmaMode::off, RdmaMode::on, RdmaMode::off};
  const std::vector<std::string> after = {conf, enabled, disabled, enabled, disabled}; // after k applies
  std::set<std::string> seen;
  std::size_t kills = 0, temps = 0;
  for (std::size_t k = 0; k <= modes.size(); ++k)
    for (const bool in_write : {false, true}) {
      if (in_write && k == modes.size()) continue; // no apply k+1
      CAPTURE(k);
      CAPTURE(in_write);
      const auto root = make_root("rdma-crash-stages", conf);
      const auto etc = root / "etc";
      Applier child(root, modes);
      for (std::size_t i = 0; i < k; ++i)
        REQUIRE(child.apply(false));
      if (in_write) REQUIRE_FALSE(child.apply(true)); // it died at the crash point instead of answering
      const int status = in_write ? child.reap() : child.kill();
      REQUIRE(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == SIGKILL);
      ++kills;
      // The config is whole: what the last completed apply left.
      const auto now = test::slurp(etc / "waagent.conf");
      CHECK_MESSAGE(now == after[k], "a config of " << now.size() << " bytes, not the one the applies left");
      seen.insert(now);
      // The backup is absent (no apply has begun) or whole: it is made before the first write.
      if (k == 0 && !in_write)
        CHECK_FALSE(fs::exists(etc / "waagent.conf.hpcbake-orig"));
      else
        CHECK(test::slurp(etc / "waagent.conf.hpcbake-orig") == conf);
      // A child killed inside a write leaves its new config in its temp file, whole, and that is
      // not the config (status reads waagent.conf alone); killed between applies, it leaves none.
      const auto tmp = "waagent.conf.tmp." + std::to_string(child.pid());
      if (in_write) {
        REQUIRE(fs::exists(etc / tmp));
        CHECK(test::slurp(etc / tmp) == after[k + 1]);
        CHECK(now != after[k + 1]);
        auto s = rdma_status(util::HostFs(root), desired_without_size(modes[k]));
        REQUIRE(s);
        CHECK(s->matches == false);
        ++temps;
      }
      CHECK(leftovers(etc) == (in_write ? std::vector<std::string>{tmp} : std::vector<std::string>{}));
      // Running the whole job again finishes it, and removes the dead child's temp file.
      exec::RecordingRunner runner;
      for (const auto mode : modes)
        REQUIRE(apply_rdma(util::HostFs(root), desired_without_size(mode), runner, with_unit()));
      CHECK(test::slurp(etc / "waagent.conf") == disabled);
      CHECK(test::slurp(etc / "waagent.conf.hpcbake-orig") == conf);
      CHECK(leftovers(etc).empty());
    }
  CHECK(kills == 2 * modes.size() + 1);
  CHECK(temps == modes.size());
  CHECK(seen == std::set<std::string>{conf, enabled, disabled});
}

TEST_CASE("rdma: apply: a config that cannot be read says why, from the failing call") {
  // Regression: the reason came from strerror(errno) after an ifstream read, which sets no
  // errno: the message could say "Success" or a stale error. A directory in place of the
  // config opens (even for root) but fails to read with EISDIR.
  const auto root = make_root("rdma-unreadable", real_conf());
  fs::remove(root / "etc" / "waagent.conf");
  fs::create_directories(root / "etc" / "waagent.conf");
  exec::RecordingRunner runner;
  auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find((root / "etc" / "waagent.conf").string()) != std::string::npos);
  // fstat names what it is (issue 20, item 10) rather than a read's EISDIR.
  CHECK(r.error().message.find("is a directory, not a regular file") != std::string::npos);
  CHECK(r.error().message.find("Success") == std::string::npos);
  CHECK_FALSE(r.error().hint.empty());
  CHECK(runner.argvs().empty());
}

TEST_CASE("rdma: a 3 GiB sparse waagent.conf is refused by name, not read whole (issue 40 item 8)") {
  const auto root = make_root("rdma-huge", real_conf());
  test::sparse(root / "etc" / "waagent.conf", test::three_gib);
  const std::string named = (root / "etc" / "waagent.conf").string() + " is 3.0 GiB; a configuration file is at most";
  exec::RecordingRunner runner;
  auto r = apply_rdma(util::HostFs(root), desired_without_size(RdmaMode::on), runner, with_unit());
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find(named) != std::string::npos);
  CHECK(runner.argvs().empty());
  // detect says the same, and goes on.
  const auto f = detect::detect_waagent(util::HostFs(root));
  CHECK(f.config_error.find(named) != std::string::npos);
}
