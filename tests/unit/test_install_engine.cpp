// The install engine with a scripted executor (ninja's FakeCommandRunner pattern): every step
// is a plan::CommandStep, and the executor answers from a script instead of running anything.
#include "helpers.hpp"
#include "install/engine.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

namespace fs = std::filesystem;
using hpcbake::install::EngineOptions;
using hpcbake::install::EngineResult;
using hpcbake::install::RunState;
using hpcbake::install::StepResult;
using hpcbake::install::StepStatus;
namespace plan = hpcbake::plan;

namespace {

plan::Step step(const std::string& id, std::vector<std::string> after = {}, std::string arg = "v1") {
  return plan::Step{id, "run " + id, std::move(after), plan::CommandStep{"test", "", {"true", std::move(arg)}, {}, {}}};
}

// a -> b -> c, and d alone: the smallest graph with a chain and an independent step.
plan::Plan chain() {
  plan::Plan p;
  p.size = "Standard_Test1_v1";
  p.distro_id = "debian-12";
  p.steps = {step("a"), step("b", {"a"}), step("c", {"b"}), step("d")};
  return p;
}

class Scripted final : public hpcbake::install::StepExecutor {
public:
  std::map<std::string, std::function<StepResult()>> script; // by step id; default: ok
  std::string boot = "boot-1";

  StepResult execute(const plan::Step& s) override {
    {
      std::lock_guard lock(mu_);
      ran.push_back(s.id);
    }
    auto it = script.find(s.id);
    return it == script.end() ? StepResult::ok() : it->second();
  }
  std::string boot_id() override { return boot; }
  std::vector<std::string> ran;

private:
  std::mutex mu_;
};

EngineResult run(const plan::Plan& p, Scripted& ex, const fs::path& journal, const std::atomic<bool>* stop = nullptr) {
  EngineOptions o;
  o.journal_file = journal;
  o.parallel = 2;
  o.size = p.size;
  o.distro = p.distro_id;
  o.stop = stop;
  auto r = hpcbake::install::execute_plan(p, ex, o);
  REQUIRE(r.has_value());
  return *r;
}

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

} // namespace

TEST_CASE("install engine: a second run skips every step whose digest is unchanged") {
  const auto journal = test::scratch("engine-skip") / "state.json";
  Scripted first;
  auto r = run(chain(), first, journal);
  CHECK(r.state == RunState::complete);
  CHECK(r.executed == 4);
  CHECK(first.ran.size() == 4);
  Scripted second;
  r = run(chain(), second, journal);
  CHECK(r.state == RunState::complete);
  CHECK(r.executed == 0);
  CHECK(r.skipped == 4);
  CHECK(second.ran.empty());
}

TEST_CASE("install engine: a changed step runs again with everything downstream of it, and nothing else") {
  const auto journal = test::scratch("engine-digest") / "state.json";
  Scripted first;
  run(chain(), first, journal);
  auto changed = chain();
  changed.steps[1] = step("b", {"a"}, "v2"); // b's argv changed
  Scripted second;
  auto r = run(changed, second, journal);
  CHECK(r.state == RunState::complete);
  std::sort(second.ran.begin(), second.ran.end());
  CHECK(second.ran == std::vector<std::string>{"b", "c"});
  CHECK(r.skipped == 2);
}

TEST_CASE("install engine: a failure blocks only its dependents, the re-run retries it and them") {
  const auto journal = test::scratch("engine-fail") / "state.json";
  Scripted first;
  first.script["b"] = [] { return StepResult::failure({hpcbake::ErrorKind::build, "b broke", "fix b"}, "last line"); };
  auto r = run(chain(), first, journal);
  CHECK(r.state == RunState::failed);
  CHECK(r.failed == std::vector<std::string>{"b"});
  CHECK(r.failure_kinds.at("b") == hpcbake::ErrorKind::build);
  CHECK(has(r.blocked, "c"));
  CHECK(has(first.ran, "d")); // independent: still ran
  CHECK_FALSE(has(first.ran, "c"));
  CHECK(r.journal.steps.at("b").status == StepStatus::failed);
  CHECK(r.journal.steps.at("b").output_tail == "last line");
  Scripted second;
  r = run(chain(), second, journal);
  CHECK(r.state == RunState::complete);
  std::sort(second.ran.begin(), second.ran.end());
  CHECK(second.ran == std::vector<std::string>{"b", "c"});
  CHECK(r.journal.steps.at("b").attempts == 2);
}

TEST_CASE("install engine: a reboot is pending in the same boot and done in a later one") {
  const auto journal = test::scratch("engine-reboot") / "state.json";
  Scripted first;
  first.script["b"] = [] { return StepResult::reboot("nouveau is loaded"); };
  auto r = run(chain(), first, journal);
  CHECK(r.state == RunState::reboot_required);
  CHECK(r.reboot == std::vector<std::string>{"b"});
  CHECK_FALSE(has(first.ran, "c")); // nothing after the reboot starts
  CHECK(r.journal.steps.at("b").boot_id == "boot-1");

  Scripted same_boot; // the same boot: still pending, b is not run again, c does not start
  auto again = run(chain(), same_boot, journal);
  CHECK(again.state == RunState::reboot_required);
  CHECK_FALSE(has(same_boot.ran, "b"));
  CHECK_FALSE(has(same_boot.ran, "c"));

  Scripted later; // a later boot: b counts as done, c runs
  later.boot = "boot-2";
  auto after = run(chain(), later, journal);
  CHECK(after.state == RunState::complete);
  CHECK(later.ran == std::vector<std::string>{"c"});
  CHECK(after.journal.steps.at("b").status == StepStatus::done);
}

TEST_CASE("install engine: a stop starts nothing new, and the journal says interrupted") {
  const auto journal = test::scratch("engine-stop") / "state.json";
  std::atomic<bool> stop{false};
  Scripted ex;
  ex.script["a"] = [&stop] {
    stop = true; // Ctrl-C while a runs
    return StepResult::ok();
  };
  plan::Plan p = chain();
  p.steps = {step("a"), step("b", {"a"}), step("c", {"b"})}; // a chain: nothing else can be running
  auto r = run(p, ex, journal, &stop);
  CHECK(r.state == RunState::interrupted);
  CHECK(ex.ran == std::vector<std::string>{"a"});
  CHECK(r.journal.steps.at("a").status == StepStatus::done); // the running step finished and was recorded
  CHECK(has(r.blocked, "b"));
  CHECK(has(r.blocked, "c"));
}

TEST_CASE("install engine: a journal that cannot be saved ends the run with an error naming it") {
  const auto dir = test::scratch("engine-save");
  const auto journal = dir / "state" / "state.json";
  fs::create_directories(journal.parent_path());
  Scripted ex;
  ex.script["a"] = [&] { // the state directory is replaced by a file while a runs
    fs::remove_all(journal.parent_path());
    test::write(journal.parent_path(), "not a directory");
    return StepResult::ok();
  };
  plan::Plan p = chain();
  p.steps = {step("a"), step("b", {"a"})};
  EngineOptions o;
  o.journal_file = journal;
  o.parallel = 1;
  auto r = hpcbake::install::execute_plan(p, ex, o);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find(journal.parent_path().string()) != std::string::npos);
  CHECK_FALSE(r.error().hint.empty());
  CHECK_FALSE(has(ex.ran, "b")); // nothing runs once the journal cannot say so
}

TEST_CASE("install engine: an unknown dependency or a cycle is refused before anything runs") {
  const auto journal = test::scratch("engine-graph") / "state.json";
  for (auto steps :
       {std::vector<plan::Step>{step("a", {"nope"})}, std::vector<plan::Step>{step("a", {"b"}), step("b", {"a"})}}) {
    plan::Plan p = chain();
    p.steps = steps;
    Scripted ex;
    EngineOptions o;
    o.journal_file = journal;
    auto r = hpcbake::install::execute_plan(p, ex, o);
    REQUIRE_FALSE(r.has_value());
    CHECK(ex.ran.empty());
  }
}

namespace {

// Which of two parallel steps fails first in time, forced with the engine's own events (no
// sleeps): the step that must fail second waits in execute until the engine has recorded the
// other one's failure.
EngineResult race_two_failures(const fs::path& journal, const std::string& fails_first) {
  plan::Plan p = chain();
  p.steps = {step("early"), step("late")}; // independent: both run at once with parallel = 2
  const std::string fails_second = fails_first == "early" ? "late" : "early";
  std::mutex mu;
  std::condition_variable cv;
  bool first_recorded = false;
  Scripted ex;
  const auto failure = [](const std::string& id) {
    const auto kind = id == "early" ? hpcbake::ErrorKind::fetch : hpcbake::ErrorKind::build;
    return StepResult::failure({kind, id + " broke", "fix " + id});
  };
  ex.script[fails_first] = [&] { return failure(fails_first); };
  ex.script[fails_second] = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return first_recorded; });
    return failure(fails_second);
  };
  EngineOptions o;
  o.journal_file = journal;
  o.parallel = 2;
  o.observe = [&](const hpcbake::install::Event& e) {
    if (e.kind != hpcbake::install::EventKind::failed || e.step->id != fails_first) return;
    std::lock_guard lock(mu);
    first_recorded = true;
    cv.notify_all();
  };
  auto r = hpcbake::install::execute_plan(p, ex, o);
  REQUIRE(r.has_value());
  return *r;
}

// Throws what it is given from execute: a bug in a step's action.
template <typename E> StepResult throws(E e) {
  throw e;
}

} // namespace

TEST_CASE("install engine: of several failures, the first in plan order is reported first, whichever finished first") {
  const auto dir = test::scratch("engine-race");
  for (const std::string fails_first : {"late", "early"}) {
    CAPTURE(fails_first);
    for (int i = 0; i < 20; ++i) {
      CAPTURE(i);
      const auto journal = dir / (fails_first + std::to_string(i)) / "state.json";
      const auto r = race_two_failures(journal, fails_first);
      CHECK(r.state == RunState::failed);
      // The CLI's exit code and first error come from failed.front().
      REQUIRE(r.failed == std::vector<std::string>{"early", "late"});
      CHECK(r.failure_kinds.at(r.failed.front()) == hpcbake::ErrorKind::fetch);
      CHECK(r.journal.steps.at("early").message == "early broke\nfix early");
      CHECK(r.journal.steps.at("late").status == StepStatus::failed);
    }
  }
}

TEST_CASE("install engine: an exception thrown by a step is that step's failure, recorded, not a crash") {
  const auto journal = test::scratch("engine-throw") / "state.json";
  Scripted ex;
  ex.script["b"] = [] { return throws(std::runtime_error("vector::_M_range_check: n >= size")); };
  ex.script["d"] = [] { return throws(42); };
  auto r = run(chain(), ex, journal);
  CHECK(r.state == RunState::failed);
  CHECK(r.failed == std::vector<std::string>{"b", "d"});
  CHECK(r.failure_kinds.at("b") == hpcbake::ErrorKind::internal);
  CHECK(r.failure_kinds.at("d") == hpcbake::ErrorKind::internal);
  CHECK(has(r.blocked, "c"));
  const auto& b = r.journal.steps.at("b");
  CHECK(b.status == StepStatus::failed);
  CHECK(b.message.find("step b (command): unexpected error: vector::_M_range_check: n >= size") == 0);
  const auto& d = r.journal.steps.at("d");
  CHECK(d.status == StepStatus::failed);
  CHECK(d.message.find("step d (command): unexpected error: an exception that is not a std::exception") == 0);
  // The journal on disk says so too: a re-run retries both.
  Scripted again;
  r = run(chain(), again, journal);
  CHECK(r.state == RunState::complete);
  std::sort(again.ran.begin(), again.ran.end());
  CHECK(again.ran == std::vector<std::string>{"b", "c", "d"});
}
