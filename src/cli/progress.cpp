#include "cli/progress.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>

namespace hpcbake::cli {

using Clock = std::chrono::steady_clock;

std::string human_bytes(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

ProgressMode progress_mode_for(bool json, int fd) {
  if (json) return ProgressMode::json;
  const char* term = std::getenv("TERM");
  if (::isatty(fd) && term && std::string(term) != "dumb") return ProgressMode::terminal;
  return ProgressMode::lines;
}

ProgressRenderer::ProgressRenderer(std::ostream& out, ProgressMode mode, std::size_t jobs)
    : out_(out), mode_(mode), jobs_(jobs), start_(Clock::now()), last_summary_(Clock::now()) {}

std::string ProgressRenderer::summary() const {
  std::uint64_t bytes = 0, total = 0;
  std::size_t done = 0;
  bool sizes_known = rows_.size() == jobs_;
  for (const auto& [name, r] : rows_) {
    bytes += r.bytes;
    total += r.total;
    sizes_known = sizes_known && r.total > 0;
    done += r.state == "done" || r.state == "cached";
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  const double rate = secs > 0 ? static_cast<double>(bytes) / secs : 0;
  const std::string speed = human_bytes(static_cast<std::uint64_t>(rate)) + "/s";
  if (done == jobs_) return fmt::format("{}/{} done, {} in {:.1f}s ({})", done, jobs_, human_bytes(bytes), secs, speed);
  // Without every size pinned there is no total and no ETA, only what has arrived.
  if (!sizes_known) return fmt::format("{}/{} done, {} at {}", done, jobs_, human_bytes(bytes), speed);
  std::string eta;
  if (total > bytes && rate > 0) eta = fmt::format(", ETA {:.0f}s", static_cast<double>(total - bytes) / rate);
  return fmt::format("{}/{} done, {} of {} at {}{}", done, jobs_, human_bytes(bytes), human_bytes(total), speed, eta);
}

void ProgressRenderer::redraw(bool force) {
  const auto now = Clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::string s;
  if (drawn_lines_) s += fmt::format("\x1b[{}F", drawn_lines_); // back to the first bar
  std::size_t lines = 0;
  for (const auto& [name, r] : rows_) {
    const int width = 30;
    const double frac = r.total ? static_cast<double>(r.bytes) / static_cast<double>(r.total) : 0;
    const int fill = static_cast<int>(frac * width);
    s += fmt::format("\x1b[2K{:<40.40} [{}{}] {:>10} {}\n", name, std::string(static_cast<std::size_t>(fill), '#'),
                     std::string(static_cast<std::size_t>(width - fill), ' '), human_bytes(r.bytes), r.state);
    ++lines;
  }
  s += "\x1b[2Ktotal: " + summary() + "\n";
  drawn_lines_ = lines + 1;
  out_ << s << std::flush;
}

void ProgressRenderer::on_event(const fetch::Event& e) {
  auto& row = rows_[e.name];
  row.bytes = e.bytes;
  row.total = e.total ? e.total : row.total;
  using K = fetch::EventKind;
  switch (e.kind) {
  case K::cache_hit:
    row.state = "cached";
    break;
  case K::started:
    row.state = e.resumed_from ? "resuming" : "downloading";
    break;
  case K::progress:
    row.state = "downloading";
    break;
  case K::retrying:
    row.state = fmt::format("retry in {:.0f}s", e.delay_s);
    break;
  case K::finished:
    row.state = "done";
    break;
  case K::failed:
    row.state = "FAILED";
    break;
  }
  if (mode_ == ProgressMode::json) {
    const auto now = Clock::now();
    if (e.kind == K::progress) {
      auto& last = last_json_progress_[e.name];
      if (now - last < std::chrono::seconds(1)) return;
      last = now;
    }
    nlohmann::json j = {{"event", fetch::to_string(e.kind)}, {"name", e.name}, {"bytes", e.bytes}};
    if (!e.url.empty()) j["url"] = e.url;
    if (e.total) j["total"] = e.total;
    if (e.resumed_from) j["resumed_from"] = e.resumed_from;
    if (e.kind == K::retrying) j["delay_s"] = e.delay_s;
    if (!e.message.empty()) j["message"] = e.message;
    out_ << j.dump() << "\n" << std::flush;
    return;
  }
  if (mode_ == ProgressMode::terminal) {
    redraw(e.kind != K::progress);
    return;
  }
  switch (e.kind) {
  case K::cache_hit:
    out_ << fmt::format("fetch: {} already in the cache\n", e.name);
    break;
  case K::started:
    out_ << fmt::format("fetch: {} from {}{}\n", e.name, e.url,
                        e.resumed_from ? fmt::format(" (resuming at {})", human_bytes(e.resumed_from)) : "");
    break;
  case K::retrying:
    out_ << fmt::format("fetch: {}: {}; retry in {:.1f}s\n", e.name, e.message, e.delay_s);
    break;
  case K::finished:
    out_ << fmt::format("fetch: {} verified ({})\n", e.name, human_bytes(e.bytes));
    break;
  case K::failed:
    out_ << fmt::format("fetch: {} FAILED: {}\n", e.name, e.message);
    break;
  case K::progress:
    if (Clock::now() - last_summary_ >= std::chrono::seconds(10)) {
      last_summary_ = Clock::now();
      out_ << "fetch: " << summary() << "\n";
    }
    break;
  }
  out_ << std::flush;
}

void ProgressRenderer::finish() {
  if (mode_ == ProgressMode::terminal)
    redraw(true);
  else if (mode_ == ProgressMode::lines)
    out_ << "fetch: " << summary() << "\n" << std::flush;
}

} // namespace hpcbake::cli
