// SystemRunner against real programs (sh, cat, seq, sleep, pwd): exit status, signals,
// timeouts that take the whole process group down, large output and input without
// deadlock, and start failures that are Errors rather than exit 127. RecordingRunner: rules.
#include "exec/runner.hpp"
#include "helpers.hpp"
#include "recording_runner.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <thread>

#include <sys/stat.h>

using namespace hpcbake;
using namespace hpcbake::exec;
using namespace std::chrono_literals;

namespace {

Completed must_run(Command cmd) {
  SystemRunner runner;
  auto r = runner.run(cmd);
  REQUIRE_MESSAGE(r.has_value(), (r ? std::string() : r.error().message));
  return *r;
}

Command argv_cmd(std::vector<std::string> argv) {
  Command c;
  c.argv = std::move(argv);
  return c;
}

Command sh(const std::string& script) {
  Command c;
  c.argv = {"sh", "-c", script};
  return c;
}

// Dead, or a zombie nobody has reaped yet (a container's init may never reap it).
bool process_gone(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

bool wait_gone(long pid) {
  for (int i = 0; i < 100; ++i) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

} // namespace

TEST_CASE("exec runner: exit codes and output") {
  auto c = must_run(sh("echo out; echo err >&2; exit 3"));
  CHECK(c.exit_code == 3);
  CHECK(c.signal == 0);
  CHECK_FALSE(c.timed_out);
  CHECK_FALSE(c.ok());
  CHECK(c.describe() == "exited with 3");
  CHECK(c.output == "out\nerr\n");

  auto ok = must_run(sh("true"));
  CHECK(ok.ok());
  CHECK(ok.exit_code == 0);
  CHECK(ok.output.empty());

  // A program that starts and exits 127 is a result, not an Error.
  auto e127 = must_run(sh("exit 127"));
  CHECK(e127.exit_code == 127);
}

TEST_CASE("exec runner: death by signal") {
  auto c = must_run(sh("kill -9 $$"));
  CHECK(c.signal == 9);
  CHECK(c.exit_code == -1);
  CHECK_FALSE(c.ok());
  CHECK(c.describe() == "killed by signal 9");
}

TEST_CASE("exec runner: timeout kills the program") {
  Command cmd;
  cmd.argv = {"sleep", "30"};
  cmd.timeout = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto c = must_run(cmd);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 10s);
  CHECK(c.timed_out);
  CHECK_FALSE(c.ok());
  CHECK(c.signal == SIGTERM);
  CHECK(c.describe() == "timed out after 200ms");
}

TEST_CASE("exec runner: timeout kills the whole process group") {
  // The grandchild prints its pid; SIGTERM to the group must reach it too.
  Command cmd = sh("sleep 30 & echo $!; wait");
  cmd.timeout = 300ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto c = must_run(cmd);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(c.timed_out);
  const long grandchild = std::stol(c.output);
  REQUIRE(grandchild > 0);
  const bool gone = wait_gone(grandchild);
  if (!gone) ::kill(static_cast<pid_t>(grandchild), SIGKILL);
  CHECK(gone);
}

TEST_CASE("exec runner: a program ignoring SIGTERM gets SIGKILL after the grace period") {
  // An ignored signal stays ignored across exec, so sleep ignores SIGTERM as well.
  Command cmd = sh("trap '' TERM; sleep 30");
  cmd.timeout = 200ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto c = must_run(cmd);
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  CHECK(c.timed_out);
  CHECK(c.signal == SIGKILL);
}

TEST_CASE("exec runner: does not wait for descendants that keep the output pipe open") {
  Command cmd = sh("sleep 30 & echo $!");
  const auto t0 = std::chrono::steady_clock::now();
  auto c = must_run(cmd);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(c.ok());
  const long straggler = std::stol(c.output);
  REQUIRE(straggler > 0);
  ::kill(static_cast<pid_t>(straggler), SIGKILL);
}

TEST_CASE("exec runner: 10 MiB of output, tail kept, every chunk observed") {
  std::string expected;
  for (int i = 1; i <= 1'500'000; ++i)
    expected += std::to_string(i) + "\n";
  REQUIRE(expected.size() > 10u * 1024 * 1024);

  Command cmd;
  cmd.argv = {"seq", "1", "1500000"};
  std::string seen;
  cmd.on_output = [&](std::string_view chunk) { seen.append(chunk); };
  auto c = must_run(cmd);
  CHECK(c.ok());
  CHECK(seen == expected);

  const std::size_t keep = 1 << 20;
  const std::string prefix = "[... " + std::to_string(expected.size() - keep) + " bytes elided ...]\n";
  CHECK(c.output.size() == prefix.size() + keep);
  CHECK(c.output.starts_with(prefix));
  CHECK(c.output.substr(prefix.size()) == expected.substr(expected.size() - keep));
  CHECK(c.output.ends_with("\n1500000\n"));
}

TEST_CASE("exec runner: keep_output bounds and zero") {
  Command cmd = sh("printf 0123456789");
  cmd.keep_output = 4;
  CHECK(must_run(cmd).output == "[... 6 bytes elided ...]\n6789");
  cmd.keep_output = 10;
  CHECK(must_run(cmd).output == "0123456789");
  cmd.keep_output = 0;
  CHECK(must_run(cmd).output == "[... 10 bytes elided ...]\n");
}

TEST_CASE("exec runner: 5 MiB of stdin echoed through cat") {
  std::string input;
  input.reserve(5u * 1024 * 1024 + 64);
  for (unsigned i = 0; input.size() < 5u * 1024 * 1024; ++i)
    input += "line " + std::to_string(i * 2654435761u) + "\n";
  Command cmd;
  cmd.argv = {"cat"};
  cmd.input = input;
  cmd.keep_output = 8u * 1024 * 1024;
  cmd.timeout = 60s; // a deadlock fails the test instead of hanging it
  auto c = must_run(cmd);
  CHECK_FALSE(c.timed_out);
  CHECK(c.ok());
  CHECK(c.output.size() == input.size());
  CHECK(c.output == input);
}

TEST_CASE("exec runner: a program that does not read its stdin") {
  Command cmd = sh("exec 0<&-; echo done");
  cmd.input = std::string(4u * 1024 * 1024, 'x'); // more than a pipe holds: writing hits EPIPE
  auto c = must_run(cmd);
  CHECK(c.ok());
  CHECK(c.output == "done\n");
}

TEST_CASE("exec runner: stdin is /dev/null without input") {
  auto c = must_run(argv_cmd({"cat"}));
  CHECK(c.ok());
  CHECK(c.output.empty());
}

TEST_CASE("exec runner: environment and working directory") {
  ::setenv("HPCBAKE_TEST_INHERITED", "kept", 1);
  ::setenv("HPCBAKE_TEST_REMOVED", "present", 1);
  Command cmd = sh("echo \"$HPCBAKE_X|$HOME|$HPCBAKE_TEST_INHERITED|${HPCBAKE_TEST_REMOVED-unset}\"; pwd -P");
  cmd.env = {"HPCBAKE_X=a b", "HOME=/nonexistent", "HPCBAKE_TEST_REMOVED"};
  const auto dir = test::scratch("exec-cwd");
  cmd.cwd = dir;
  auto c = must_run(cmd);
  CHECK(c.ok());
  CHECK(c.output == "a b|/nonexistent|kept|unset\n" + std::filesystem::canonical(dir).string() + "\n");
  ::unsetenv("HPCBAKE_TEST_INHERITED");
  ::unsetenv("HPCBAKE_TEST_REMOVED");
}

TEST_CASE("exec runner: PATH from the command's environment finds the program") {
  const auto dir = test::scratch("exec-path");
  test::write(dir / "hpcbake-test-tool", "#!/bin/sh\necho tool \"$@\"\n");
  std::filesystem::permissions(dir / "hpcbake-test-tool", std::filesystem::perms::owner_all);
  Command cmd;
  cmd.argv = {"hpcbake-test-tool", "x"};
  cmd.env = {"PATH=/nonexistent-dir:" + dir.string() + ":/usr/bin:/bin"};
  auto c = must_run(cmd);
  CHECK(c.output == "tool x\n");
}

TEST_CASE("exec runner: start failures are Errors naming the program and errno") {
  SystemRunner runner;
  {
    auto r = runner.run(argv_cmd({"hpcbake-no-such-program-xyz", "arg"}));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("hpcbake-no-such-program-xyz") != std::string::npos);
    CHECK(r.error().message.find("exec failed") != std::string::npos);
    CHECK(r.error().message.find(std::strerror(ENOENT)) != std::string::npos);
    CHECK_FALSE(r.error().hint.empty());
  }
  {
    const auto dir = test::scratch("exec-noexec");
    test::write(dir / "not-executable", "#!/bin/sh\necho hi\n");
    std::filesystem::permissions(dir / "not-executable",
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    auto r = runner.run(argv_cmd({(dir / "not-executable").string()}));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("not-executable") != std::string::npos);
    CHECK(r.error().message.find(std::strerror(EACCES)) != std::string::npos);
  }
  {
    Command cmd = sh("true");
    cmd.cwd = "/nonexistent/hpcbake-dir";
    auto r = runner.run(cmd);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("/nonexistent/hpcbake-dir") != std::string::npos);
  }
  CHECK_FALSE(runner.run(Command{}).has_value());
}

TEST_CASE("exec runner: describe and ok") {
  Completed c;
  c.timed_out = true;
  c.timeout = 30s;
  c.signal = 15;
  CHECK(c.describe() == "timed out after 30s");
  CHECK_FALSE(c.ok());
  CHECK(exited(0).ok());
  CHECK(exited(2).describe() == "exited with 2");
}

TEST_CASE("exec shell_quote") {
  CHECK(shell_quote({"apt-get", "install", "-y", "a b"}) == "apt-get install -y 'a b'");
  CHECK(shell_quote({"-f=${Version}", "it's", ""}) == "'-f=${Version}' 'it'\\''s' ''");
  CHECK(shell_quote({"Dpkg::Options::=--force-confold", "/usr/bin/x", "pkg=1.2-3"}) ==
        "Dpkg::Options::=--force-confold /usr/bin/x pkg=1.2-3");
}

TEST_CASE("exec recording runner: rules, order, times") {
  RecordingRunner r;
  r.on({"apt-get"}, exited(100, "E: broken"));
  r.on({"apt-get", "update"}, exited(0, "Hit:1"), 1); // newer and more specific: wins, once

  std::string seen;
  Command update = argv_cmd({"apt-get", "update", "-q"});
  update.on_output = [&](std::string_view s) { seen.append(s); };
  auto first = r.run(update);
  REQUIRE(first);
  CHECK(first->ok());
  CHECK(first->output == "Hit:1");
  CHECK(seen == "Hit:1");

  auto second = r.run(argv_cmd({"apt-get", "update", "-q"})); // the one-shot rule is spent
  REQUIRE(second);
  CHECK(second->exit_code == 100);

  auto other = r.run(argv_cmd({"dpkg-query", "-W"}));
  REQUIRE(other);
  CHECK(other->ok());
  CHECK(other->output.empty());

  auto shorter = r.run(argv_cmd({"apt"})); // a prefix longer than argv never matches
  REQUIRE(shorter);
  CHECK(shorter->ok());

  CHECK(r.calls.size() == 4);
  CHECK(r.argvs() == std::vector<std::vector<std::string>>{
                         {"apt-get", "update", "-q"}, {"apt-get", "update", "-q"}, {"dpkg-query", "-W"}, {"apt"}});

  r.on({}, exited(7)); // an empty prefix matches everything
  auto any = r.run(argv_cmd({"x"}));
  REQUIRE(any);
  CHECK(any->exit_code == 7);
}

TEST_CASE("exec: the one fixture-root rule: acting on the machine only at / or when commands are only recorded") {
  SystemRunner real;
  RecordingRunner recorded;
  const util::HostFs machine("/");
  const util::HostFs tree(test::scratch("fixture-root-rule"));
  CHECK(may_act_on_machine(machine, real));
  CHECK(may_act_on_machine(machine, recorded));
  CHECK_FALSE(may_act_on_machine(tree, real)); // a tree's services are this machine's: never restarted from it
  CHECK(may_act_on_machine(tree, recorded));   // recorded, never run
}
