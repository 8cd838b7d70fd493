// The progress display, golden at 40, 80 and 200 columns with a fake clock: every bar line fits
// the width (a redraw never wraps), a cache hit says "cached" and no rate, and the rate counts
// only this run's network bytes (a resumed prefix is not speed).
#include "cli/progress.hpp"

#include <doctest/doctest.h>

#include <map>
#include <sstream>

using namespace hpcbake;
using Clock = std::chrono::steady_clock;

namespace {

struct Scene {
  Clock::time_point t0 = Clock::now(), t = t0;
  std::ostringstream out;
  cli::ProgressRenderer r;
  explicit Scene(int width, cli::ProgressMode mode = cli::ProgressMode::terminal)
      : r(out, [&] {
          cli::ProgressRenderer::Options o;
          o.mode = mode;
          o.jobs = 3;
          o.total_bytes = 3 * (100ull << 20);
          o.width = width;
          o.now = [this] { return t; };
          return o;
        }()) {}
  void ev(fetch::EventKind k, const std::string& name, std::uint64_t bytes, std::uint64_t received,
          std::uint64_t resumed = 0) {
    fetch::Event e;
    e.kind = k;
    e.name = name;
    e.bytes = bytes;
    e.total = 100ull << 20;
    e.received = received;
    e.resumed_from = resumed;
    r.on_event(e);
  }
  // The screen's lines after the last redraw: what follows the last "clear below".
  std::string last_frame() const {
    const std::string s = out.str();
    const auto at = s.rfind("\x1b[J");
    return at == std::string::npos ? s : s.substr(at + 3);
  }
};

void play(Scene& s) {
  using K = fetch::EventKind;
  const std::string long_name = "NVIDIA-Linux-x86_64-580.126.20-grid-azure-with-a-very-long-name.run";
  s.ev(K::cache_hit, "doca-host_3.2.1-044000-25.10-ubuntu2204_amd64.deb", 100ull << 20, 0);
  s.ev(K::started, long_name, 50ull << 20, 0, 50ull << 20); // resumed at 50 MiB
  s.ev(K::started, "nvidia-fabricmanager-580.126.20-1.x86_64.rpm", 0, 0);
  s.t += std::chrono::seconds(10);
  s.ev(K::progress, long_name, 60ull << 20, 10ull << 20); // 1 MiB/s of its own
  s.t += std::chrono::milliseconds(200);                  // redraws come at most every 100 ms
  s.ev(K::progress, "nvidia-fabricmanager-580.126.20-1.x86_64.rpm", 40ull << 20, 40ull << 20);
}

} // namespace

TEST_CASE("progress: golden frames at 40, 80 and 200 columns") {
  const std::map<int, std::string> golden = {
      {40, "NVIDIA-Linux..ong-name.run 1003.9 KiB/s\n"
           "nvidia-fabri..1.x86_64.rpm 3.9 MiB/s\n"
           "1/3 done (1 cached), 4.9 MiB/s, ETA 20s\n"},
      {80, "NVIDIA-Linux..ong-name.run [#########-------]  60.0 MiB/100.0 MiB  1003.9 KiB/s\n"
           "nvidia-fabri..1.x86_64.rpm [######----------]  40.0 MiB/100.0 MiB  3.9 MiB/s\n"
           "1/3 done (1 cached), 200.0 MiB of 300.0 MiB, 4.9 MiB/s, ETA 20s\n"},
      {200, "NVIDIA-Linux-x86_64-580..th-a-very-long-name.run [##################------------]  60.0 MiB/100.0 MiB  "
            "1003.9 KiB/s\n"
            "nvidia-fabricmanager-580.126.20-1.x86_64.rpm     [############------------------]  40.0 MiB/100.0 MiB  "
            "3.9 MiB/s\n"
            "1/3 done (1 cached), 200.0 MiB of 300.0 MiB, 4.9 MiB/s, ETA 20s\n"},
  };
  for (const auto& [width, frame] : golden) {
    CAPTURE(width);
    Scene s(width);
    play(s);
    // The rate counts the 50 MiB that came over the network in 10.2 s: not the 50 MiB resumed
    // prefix, not the 100 MiB cache hit.
    CHECK(s.last_frame() == frame);
    std::istringstream lines(frame);
    for (std::string line; std::getline(lines, line);)
      CHECK(line.size() <= static_cast<std::size_t>(width - 1)); // a redraw never wraps
    CHECK(s.out.str().find("cached  doca-host_3.2.1-044000-25.10-ubuntu2204_amd64.deb (100.0 MiB)\n") !=
          std::string::npos);
  }
}

TEST_CASE("progress: lines mode says cached, and the final total has no rate for a cache hit") {
  Scene s(80, cli::ProgressMode::lines);
  s.ev(fetch::EventKind::cache_hit, "a.run", 100ull << 20, 0);
  s.r.finish();
  CHECK(s.out.str() == "fetch: a.run cached (100.0 MiB)\nfetch: 1/3 done (1 cached), 100.0 MiB of 300.0 MiB\n");
}

TEST_CASE("progress: an artifact's count never goes backwards unless a restart is said") {
  using K = fetch::EventKind;
  Scene s(200);
  s.ev(K::started, "a.run", 50ull << 20, 0, 50ull << 20);
  s.t += std::chrono::milliseconds(200);
  s.ev(K::progress, "a.run", 60ull << 20, 10ull << 20);
  s.t += std::chrono::milliseconds(200);
  s.ev(K::progress, "a.run", 55ull << 20, 10ull << 20); // lower, and no restart: the bar stays at 60
  CHECK(s.last_frame().find(" 60.0 MiB/100.0 MiB ") != std::string::npos);
  s.t += std::chrono::milliseconds(200);
  fetch::Event restart;
  restart.kind = K::restarted;
  restart.name = "a.run";
  restart.total = 100ull << 20;
  restart.message = "the server ignored the range request";
  s.r.on_event(restart);
  CHECK(s.out.str().find("restart a.run: the server ignored the range request\n") != std::string::npos);
  s.t += std::chrono::milliseconds(200);
  s.ev(K::progress, "a.run", 1ull << 20, 11ull << 20); // after the restart, the new count is the truth
  CHECK(s.last_frame().find(" 1.0 MiB/100.0 MiB ") != std::string::npos);

  Scene lines(80, cli::ProgressMode::lines);
  lines.r.on_event(restart);
  CHECK(lines.out.str() == "fetch: a.run: the server ignored the range request\n");
}
