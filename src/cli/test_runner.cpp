#include "cli/test_runner.hpp"

#include "util/json.hpp"
#include "util/strings.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

namespace hpcbake::cli {

namespace {

namespace fs = std::filesystem;

class TestRunner final : public exec::Runner {
public:
  bool records_machine_commands() const override { return true; }
  explicit TestRunner(fs::path file) : file_(std::move(file)) {
    if (const char* f = std::getenv("HPCBAKE_TEST_FAIL_COMMANDS"); f && *f)
      for (auto part : util::split(f, ','))
        failing_.emplace_back(part);
    // Only the build tools may run for real: they write inside the fixture (--dkmstree, the
    // fixture's /lib/modules). Anything else (waagent, systemctl, apt-get) would change this
    // machine while the command believes it works on a fixture. dpkg-query only reads (this
    // machine's package database).
    if (const char* f = std::getenv("HPCBAKE_TEST_REAL_COMMANDS"); f && *f)
      for (auto part : util::split(f, ','))
        if (part == "dkms" || part == "depmod" || part == "dpkg-query") real_.emplace_back(part);
    if (const char* f = std::getenv("HPCBAKE_TEST_REBOOT"); f && *f) reboot_ = f;
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

} // namespace

std::unique_ptr<exec::Runner> make_runner() {
  if (const char* t = std::getenv("HPCBAKE_TEST_RUNNER"); t && std::string_view(t).starts_with("record:"))
    return std::make_unique<TestRunner>(std::string(t).substr(7));
  return std::make_unique<exec::SystemRunner>();
}

bool records_commands(const exec::Runner& runner) {
  return runner.records_machine_commands();
}

} // namespace hpcbake::cli
