#include "seams.hpp"

#include "cli/test_runner.hpp"
#include "util/json.hpp"
#include "util/strings.hpp"
#include "util/test_hooks.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string_view>

namespace hpcbake::test {

namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

class EnvHooks final : public util::TestHooks {
public:
  std::string value(util::TestHook hook) const override {
    switch (hook) {
    case util::TestHook::crash_point:
      return env("HPCBAKE_TEST_CRASH_POINT");
    case util::TestHook::crash_after_writes:
      return env("HPCBAKE_TEST_CRASH_AFTER_WRITES");
    case util::TestHook::tls_root:
      return env("HPCBAKE_TEST_TLS_ROOT");
    case util::TestHook::rootfs_walk:
      return env("HPCBAKE_TEST_ROOTFS_WALK");
    }
    return {};
  }
  std::vector<std::string> active() const override {
    std::vector<std::string> set;
    for (const auto& v : hook_variables())
      if (!env(v.c_str()).empty()) set.push_back(v);
    return set;
  }
};

// HPCBAKE_TEST_RUNNER=record:FILE (seams.hpp).
class TestRunner final : public exec::Runner {
public:
  bool records_machine_commands() const override { return true; }
  explicit TestRunner(fs::path file) : file_(std::move(file)) {
    const std::string failing = env("HPCBAKE_TEST_FAIL_COMMANDS"), real = env("HPCBAKE_TEST_REAL_COMMANDS");
    for (auto part : util::split(failing, ','))
      if (!part.empty()) failing_.emplace_back(part);
    // Only the build tools may run for real: they write inside the fixture (--dkmstree, the
    // fixture's /lib/modules). Anything else (waagent, systemctl, apt-get) would change this
    // machine while the command believes it works on a fixture. dpkg-query only reads (this
    // machine's package database). gpgv always runs: it checks the files it is given (bundle
    // create's repository signatures) and writes only its --output. git writes only the clone its
    // argv names (a git-source step's, inside the fixture).
    real_.emplace_back("gpgv");
    for (auto part : util::split(real, ','))
      if (part == "dkms" || part == "depmod" || part == "dpkg-query" || part == "git") real_.emplace_back(part);
    reboot_ = env("HPCBAKE_TEST_REBOOT");
  }
  Result<exec::Completed> run(const exec::Command& cmd) override {
    {
      std::lock_guard lock(mu_);
      std::ofstream(file_, std::ios::app) << util::dump_json(nlohmann::json{{"argv", cmd.argv}}) << "\n";
    }
    if (!reboot_.empty() && cmd.argv == std::vector<std::string>{"systemctl", "reboot"}) {
      exec::Command hook = cmd;
      hook.argv = {reboot_};
      return system_.run(hook);
    }
    auto named = [&](const std::vector<std::string>& list) {
      return !cmd.argv.empty() &&
             std::find(list.begin(), list.end(), fs::path(cmd.argv[0]).filename().string()) != list.end();
    };
    if (named(real_)) return system_.run(cmd);
    const bool fails = named(failing_);
    exec::Completed c = exec::exited(fails ? 1 : 0, fails ? "simulated failure of " + cmd.argv[0] + "\n" : "");
    if (cmd.on_output && !c.output.empty()) cmd.on_output(std::string(util::trim(c.output)));
    return c;
  }

private:
  fs::path file_;
  std::vector<std::string> failing_, real_;
  std::string reboot_;
  exec::SystemRunner system_;
  std::mutex mu_;
};

class RecordingRunnerFactory final : public cli::RunnerFactory {
public:
  std::unique_ptr<exec::Runner> make() const override {
    const std::string t = env("HPCBAKE_TEST_RUNNER");
    if (!t.starts_with("record:")) return nullptr;
    return std::make_unique<TestRunner>(t.substr(std::string_view("record:").size()));
  }
};

} // namespace

const std::vector<std::string>& hook_variables() {
  static const std::vector<std::string> vars = {"HPCBAKE_TEST_CRASH_POINT",   "HPCBAKE_TEST_CRASH_AFTER_WRITES",
                                                "HPCBAKE_TEST_TLS_ROOT",      "HPCBAKE_TEST_ROOTFS_WALK",
                                                "HPCBAKE_TEST_RUNNER",        "HPCBAKE_TEST_FAIL_COMMANDS",
                                                "HPCBAKE_TEST_REAL_COMMANDS", "HPCBAKE_TEST_REBOOT"};
  return vars;
}

void install_test_seams() {
  static const EnvHooks hooks;
  static const RecordingRunnerFactory runners;
  util::install_test_hooks(&hooks);
  cli::install_test_runner(&runners);
}

} // namespace hpcbake::test
