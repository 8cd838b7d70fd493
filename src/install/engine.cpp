#include "install/engine.hpp"

#include "util/json.hpp"
#include "util/sha256.hpp"
#include "util/test_hooks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>

namespace hpcbake::install {

std::string_view to_string(EventKind kind) {
  switch (kind) {
  case EventKind::skipped:
    return "skipped";
  case EventKind::resumed:
    return "resumed";
  case EventKind::started:
    return "started";
  case EventKind::finished:
    return "finished";
  case EventKind::failed:
    return "failed";
  case EventKind::reboot:
    return "reboot";
  }
  return "started";
}

using nlohmann::json;

std::map<std::string, std::string> step_digests(const plan::Plan& plan) {
  std::map<std::string, std::string> out;
  // Plan steps come in dependency order (the planner only refers back), but do not rely on
  // it: resolve by id, depth first.
  std::map<std::string, const plan::Step*> by_id;
  for (const auto& s : plan.steps)
    by_id[s.id] = &s;
  std::function<std::string(const plan::Step&)> digest = [&](const plan::Step& s) -> std::string {
    if (auto it = out.find(s.id); it != out.end()) return it->second;
    out[s.id] = ""; // a cycle resolves to an empty digest here; execute_plan refuses cycles
    json in = {{"id", s.id}, {"kind", s.kind()}, {"content", s.content()}};
    json deps = json::object();
    for (const auto& a : s.after)
      if (auto d = by_id.find(a); d != by_id.end()) deps[a] = digest(*d->second);
    in["after"] = deps;
    // Only an OpenSSL failure (no memory) fails hashing a string: .value() throws then.
    return out[s.id] = util::sha256_of(util::dump_json(in)).value();
  };
  for (const auto& s : plan.steps)
    digest(s);
  return out;
}

namespace {

Status check_graph(const plan::Plan& plan) {
  std::map<std::string, const plan::Step*> by_id;
  for (const auto& s : plan.steps)
    if (!by_id.emplace(s.id, &s).second)
      return fail(ErrorKind::internal, fmt::format("the plan has two steps named '{}'", s.id));
  for (const auto& s : plan.steps)
    for (const auto& a : s.after)
      if (!by_id.count(a))
        return fail(ErrorKind::internal,
                    fmt::format("plan step '{}' depends on '{}', which is not in the plan", s.id, a));
  // Kahn: every step must become ready.
  std::map<std::string, int> pending;
  for (const auto& s : plan.steps)
    pending[s.id] = static_cast<int>(s.after.size());
  std::deque<std::string> ready;
  for (const auto& [id, n] : pending)
    if (n == 0) ready.push_back(id);
  std::size_t seen = 0;
  while (!ready.empty()) {
    const std::string id = ready.front();
    ready.pop_front();
    ++seen;
    for (const auto& s : plan.steps)
      if (std::find(s.after.begin(), s.after.end(), id) != s.after.end() && --pending[s.id] == 0) ready.push_back(s.id);
  }
  if (seen != plan.steps.size()) return fail(ErrorKind::internal, "the plan's steps depend on each other in a cycle");
  return {};
}

// The executor's calls with a boundary: an exception thrown by a step (a bug, std::bad_alloc)
// becomes that step's failure, recorded in the journal like any other, instead of reaching
// std::terminate on a worker thread. A step that asks for a reboot gets this boot's id in `boot`.
StepResult execute_guarded(StepExecutor& ex, const plan::Step& s, std::string& boot) {
  const auto internal = [&s](std::string what) {
    return StepResult::failure(Error{ErrorKind::internal,
                                     fmt::format("step {} ({}): unexpected error: {}", s.id, s.kind(), what),
                                     "this is a bug in hpcbake: report it with the install log"});
  };
  try {
    StepResult res = ex.execute(s);
    if (res.kind == StepResult::Kind::reboot) boot = ex.boot_id();
    return res;
  } catch (const std::exception& e) {
    return internal(e.what());
  } catch (...) {
    return internal("an exception that is not a std::exception");
  }
}

// Failures and reboots in plan order, not in the order the threads finished: the first failure
// decides the exit code and the first error shown, the same in every run.
void sort_by_plan_order(const plan::Plan& plan, std::vector<std::string>& ids) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < plan.steps.size(); ++i)
    index.emplace(plan.steps[i].id, i);
  std::stable_sort(ids.begin(), ids.end(),
                   [&index](const std::string& a, const std::string& b) { return index.at(a) < index.at(b); });
}

class Run {
public:
  Run(const plan::Plan& plan, StepExecutor& ex, const EngineOptions& o) : plan_(plan), ex_(ex), o_(o) {
    if (const auto n = util::test_hook(util::TestHook::crash_after_writes); !n.empty())
      crash_after_ = std::atoi(n.c_str());
  }

  Result<EngineResult> go() {
    HPCBAKE_TRY(check_graph(plan_));
    HPCBAKE_TRY_ASSIGN(auto j, load_journal(o_.journal_file));
    journal_ = std::move(j);
    digests_ = step_digests(plan_);
    for (const auto& s : plan_.steps) {
      deps_left_[s.id] = static_cast<int>(s.after.size());
      for (const auto& a : s.after)
        dependents_[a].push_back(&s);
    }
    // Records of steps no longer in the plan go: the journal describes this plan.
    bool changed = journal_.size != o_.size || journal_.distro != o_.distro || journal_.plan_sha256 != o_.plan_sha256;
    for (auto it = journal_.steps.begin(); it != journal_.steps.end();) {
      if (!digests_.count(it->first)) {
        it = journal_.steps.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    journal_.size = o_.size;
    journal_.distro = o_.distro;
    journal_.plan_sha256 = o_.plan_sha256;

    std::unique_lock lock(mu_);
    const std::string boot = ex_.boot_id();
    for (const auto& s : plan_.steps) {
      auto it = journal_.steps.find(s.id);
      if (it == journal_.steps.end() || it->second.digest != digests_[s.id]) continue;
      auto& r = it->second;
      if (r.status == StepStatus::done) {
        complete_.insert(s.id);
        ++result_.skipped;
        emit(EventKind::skipped, s, "done before, inputs unchanged");
      } else if (r.status == StepStatus::reboot_pending && !r.boot_id.empty() && r.boot_id != boot) {
        r.status = StepStatus::done;
        r.finished_at = now_seconds();
        r.message = "resumed after the reboot it asked for";
        complete_.insert(s.id);
        ++result_.skipped;
        changed = true;
        emit(EventKind::resumed, s, r.message);
      } else if (r.status == StepStatus::reboot_pending) {
        reboot_pending_ = true;
        result_.reboot.push_back(s.id);
        emit(EventKind::reboot, s, r.message + " (still this boot: reboot the machine)");
      }
    }
    for (const auto& s : plan_.steps)
      if (complete_.count(s.id))
        for (const auto* d : dependents_[s.id])
          --deps_left_[d->id];
    if (!reboot_pending_)
      for (const auto& s : plan_.steps)
        if (!complete_.count(s.id) && deps_left_[s.id] == 0) ready_.push_back(&s);

    const bool all_done = complete_.size() == plan_.steps.size();
    if (all_done && journal_.state == RunState::complete && !changed) {
      // A no-op re-run writes nothing.
      result_.state = RunState::complete;
      result_.journal = journal_;
      return std::move(result_);
    }
    journal_.state = RunState::running;
    HPCBAKE_TRY(save());

    const int workers = std::max(1, std::min<int>(o_.parallel, static_cast<int>(plan_.steps.size())));
    std::vector<std::thread> threads;
    lock.unlock();
    for (int i = 0; i < workers; ++i)
      threads.emplace_back([this] { work(); });
    for (auto& t : threads)
      t.join();
    lock.lock();
    if (!save_error_.empty())
      return fail(ErrorKind::internal, save_error_, "Check free space and permissions under /var/lib/hpcbake.");

    for (const auto& s : plan_.steps)
      if (!complete_.count(s.id) && !failed_.count(s.id)) result_.blocked.push_back(s.id);
    result_.interrupted = stopping() && !result_.blocked.empty();
    sort_by_plan_order(plan_, result_.failed);
    sort_by_plan_order(plan_, result_.reboot);
    if (!result_.failed.empty())
      journal_.state = RunState::failed;
    else if (reboot_pending_)
      journal_.state = RunState::reboot_required;
    else if (result_.interrupted)
      journal_.state = RunState::interrupted;
    else
      journal_.state = RunState::complete;
    HPCBAKE_TRY(save());
    result_.state = journal_.state;
    result_.journal = journal_;
    return std::move(result_);
  }

private:
  bool stopping() const { return o_.stop && o_.stop->load(); }

  void emit(EventKind kind, const plan::Step& s, std::string message, double seconds = 0) {
    if (!o_.observe) return;
    Event e{kind,
            &s,
            std::move(message),
            seconds,
            static_cast<int>(complete_.size()),
            static_cast<int>(plan_.steps.size())};
    o_.observe(e);
  }

  // With mu_ held.
  Status save() {
    journal_.updated_at = now_seconds();
    if (auto s = save_journal(o_.journal_file, journal_); !s) return s;
    if (crash_after_ > 0 && ++writes_ == crash_after_) ::kill(::getpid(), SIGKILL);
    return {};
  }

  void work() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return !ready_.empty() || running_ == 0 || !save_error_.empty(); });
      if (!save_error_.empty()) return;
      if (ready_.empty() || reboot_pending_ || stopping()) {
        if (running_ == 0) {
          cv_.notify_all();
          return;
        }
        cv_.wait(lock, [&] { return running_ == 0 || (!ready_.empty() && !reboot_pending_ && !stopping()); });
        continue;
      }
      const plan::Step* s = ready_.front();
      ready_.pop_front();
      auto& r = journal_.steps[s->id];
      r.digest = digests_[s->id];
      r.status = StepStatus::started;
      r.started_at = now_seconds();
      r.finished_at = 0;
      r.message.clear();
      r.output_tail.clear();
      r.boot_id.clear();
      ++r.attempts;
      ++running_;
      if (auto st = save(); !st) {
        save_error_ = st.error().message;
        --running_;
        cv_.notify_all();
        return;
      }
      emit(EventKind::started, *s, s->title);
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      std::string boot;
      const StepResult res = execute_guarded(ex_, *s, boot);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      --running_;
      auto& rec = journal_.steps[s->id];
      rec.finished_at = now_seconds();
      rec.message = res.message;
      switch (res.kind) {
      case StepResult::Kind::done:
        rec.status = StepStatus::done;
        complete_.insert(s->id);
        ++result_.executed;
        for (const auto* d : dependents_[s->id])
          if (--deps_left_[d->id] == 0) ready_.push_back(d);
        break;
      case StepResult::Kind::reboot:
        rec.status = StepStatus::reboot_pending;
        rec.boot_id = boot;
        reboot_pending_ = true;
        ++result_.executed;
        result_.reboot.push_back(s->id);
        break;
      case StepResult::Kind::failed:
        rec.status = StepStatus::failed;
        rec.output_tail = res.output_tail;
        if (!res.hint.empty()) rec.message += "\n" + res.hint;
        failed_.insert(s->id);
        ++result_.executed;
        result_.failed.push_back(s->id);
        result_.failure_kinds[s->id] = res.error;
        break;
      }
      if (auto st = save(); !st) save_error_ = st.error().message;
      emit(res.kind == StepResult::Kind::done     ? EventKind::finished
           : res.kind == StepResult::Kind::reboot ? EventKind::reboot
                                                  : EventKind::failed,
           *s,
           res.kind == StepResult::Kind::failed && !res.hint.empty() ? res.message + "\n  hint: " + res.hint
                                                                     : res.message,
           secs);
      cv_.notify_all();
    }
  }

  const plan::Plan& plan_;
  StepExecutor& ex_;
  const EngineOptions& o_;
  Journal journal_;
  std::map<std::string, std::string> digests_;
  std::map<std::string, int> deps_left_;
  std::map<std::string, std::vector<const plan::Step*>> dependents_;
  std::set<std::string> complete_, failed_;
  std::deque<const plan::Step*> ready_;
  int running_ = 0;
  bool reboot_pending_ = false;
  std::string save_error_;
  EngineResult result_;
  int crash_after_ = 0;
  int writes_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

} // namespace

Result<EngineResult> execute_plan(const plan::Plan& plan, StepExecutor& executor, const EngineOptions& options) {
  Run run(plan, executor, options);
  return run.go();
}

} // namespace hpcbake::install
