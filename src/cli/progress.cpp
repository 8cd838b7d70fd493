#include "cli/progress.hpp"

#include "util/json.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace hpcbake::cli {

using util::human_bytes;
using Clock = std::chrono::steady_clock;

std::uint64_t known_total(const std::vector<std::optional<std::uint64_t>>& sizes) {
  std::uint64_t total = 0;
  for (const auto& s : sizes) {
    if (!s) return 0;
    total += *s;
  }
  return total;
}

std::string human_duration(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string fit_middle(const std::string& name, std::size_t width) {
  if (name.size() <= width) return name;
  if (width <= 4) return name.substr(0, width);
  const std::size_t head = (width - 2) / 2, tail = width - 2 - head;
  return name.substr(0, head) + ".." + name.substr(name.size() - tail);
}

ProgressMode progress_mode_for(bool json, int fd) {
  if (json) return ProgressMode::json;
  const char* term = std::getenv("TERM");
  if (::isatty(fd) && term && std::string(term) != "dumb") return ProgressMode::terminal;
  return ProgressMode::lines;
}

int terminal_width(int fd) {
  if (const char* c = std::getenv("COLUMNS"); c && *c) {
    int v = 0;
    const auto [end, ec] = std::from_chars(c, c + std::strlen(c), v);
    if (ec == std::errc() && *end == '\0' && v >= 10 && v <= 10000) return v;
  }
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 10) return ws.ws_col;
  return 80;
}

int output_width(int fd) {
  if (const char* c = std::getenv("COLUMNS"); c && *c) return terminal_width(fd);
  return ::isatty(fd) ? terminal_width(fd) : 0;
}

namespace {

// Columns a UTF-8 string takes: its code points (the manifests' text is Latin, no wide glyphs).
std::size_t columns(std::string_view s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; }));
}

std::string wrap_line(std::string_view line, std::size_t max, std::size_t hang) {
  const std::size_t indent = std::min(line.find_first_not_of(' '), line.size());
  const std::string cont(std::min(hang, max / 2), ' ');
  std::string out(line.substr(0, indent));
  std::size_t used = indent;
  bool line_start = true;
  std::size_t pos = indent;
  while (pos < line.size()) {
    // The spaces before a word are kept as they are (columns line up), unless the word wraps.
    const std::size_t word_at = std::min(line.find_first_not_of(' ', pos), line.size());
    const std::size_t end = std::min(line.find(' ', word_at), line.size());
    const std::string_view gap = line.substr(pos, word_at - pos), word = line.substr(word_at, end - word_at);
    pos = end;
    if (word.empty()) break;
    if (!line_start && used + gap.size() + columns(word) > max) {
      out += "\n" + cont;
      used = cont.size();
      line_start = true;
    }
    if (!line_start) {
      out += gap;
      used += gap.size();
    }
    out += word;
    used += columns(word);
    line_start = false;
  }
  return out;
}

} // namespace

std::string wrap_hanging(std::string_view line, int width, std::size_t hang) {
  const auto max = static_cast<std::size_t>(std::max(20, width - 1));
  return columns(line) <= max ? std::string(line) : wrap_line(line, max, hang);
}

std::string fit_to_width(const std::string& text, int width) {
  if (width < 20) return text;
  const auto max = static_cast<std::size_t>(width - 1);
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    const bool newline = end != std::string::npos;
    if (!newline) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    const std::size_t indent = std::min(line.find_first_not_of(' '), line.size());
    out += columns(line) <= max ? std::string(line) : wrap_line(line, max, indent + 4);
    if (newline) out += '\n';
    start = end + 1;
  }
  return out;
}

namespace {

// Joins the pieces that fit in `width`, in order of importance: a piece that does not fit is
// left out, and the first one is cut to fit.
std::string fit_pieces(const std::vector<std::string>& pieces, std::size_t width) {
  std::string out;
  for (const auto& p : pieces) {
    if (p.empty()) continue;
    const std::size_t need = (out.empty() ? 0 : 2) + p.size();
    if (out.size() + need > width) {
      if (out.empty()) return p.substr(0, width);
      continue;
    }
    out += (out.empty() ? "" : ", ") + p;
  }
  return out;
}

std::string rate_text(double bytes_per_s) {
  return human_bytes(static_cast<std::uint64_t>(bytes_per_s)) + "/s";
}

} // namespace

ProgressRenderer::ProgressRenderer(std::ostream& out, Options options) : out_(out), o_(std::move(options)) {
  last_summary_ = o_.now();
}

ProgressRenderer::Row& ProgressRenderer::row(const std::string& name) {
  for (auto& r : rows_)
    if (r.name == name) return r;
  rows_.push_back(Row{name});
  return rows_.back();
}

double ProgressRenderer::run_rate() const {
  if (!started_) return 0;
  const double secs = std::chrono::duration<double>(o_.now() - first_start_).count();
  std::uint64_t received = 0;
  for (const auto& r : rows_)
    received += r.received;
  return secs > 0 ? static_cast<double>(received) / secs : 0;
}

std::string ProgressRenderer::total_line(bool final) const {
  std::uint64_t bytes = 0, received = 0;
  std::size_t done = 0, cached = 0, failed = 0;
  for (const auto& r : rows_) {
    bytes += r.bytes;
    received += r.received;
    done += r.state == "done";
    cached += r.state == "cached";
    failed += r.state == "FAILED" || r.state == "stopped";
  }
  const double secs = started_ ? std::chrono::duration<double>(o_.now() - first_start_).count() : 0;
  const double rate = run_rate();
  std::string count = fmt::format("{}/{} done", done + cached, o_.jobs);
  if (cached) count += fmt::format(" ({} cached)", cached);
  if (failed) count += fmt::format(", {} failed", failed);
  const std::string amount =
      o_.total_bytes ? fmt::format("{} of {}", human_bytes(bytes), human_bytes(o_.total_bytes)) : human_bytes(bytes);
  if (final) {
    if (!received) return fit_pieces({count, amount}, static_cast<std::size_t>(o_.width - 1));
    return fit_pieces({count, amount, fmt::format("{} downloaded in {}", human_bytes(received), human_duration(secs)),
                       rate_text(rate)},
                      static_cast<std::size_t>(o_.width - 1));
  }
  std::string eta;
  // Only once the rate means something: 2 s of transfer and bytes to show for it.
  if (o_.total_bytes > bytes && rate > 0 && secs >= 2)
    eta = "ETA " + human_duration(static_cast<double>(o_.total_bytes - bytes) / rate);
  return fit_pieces({count, amount, received ? rate_text(rate) : "", eta}, static_cast<std::size_t>(o_.width - 1));
}

std::string ProgressRenderer::bar_line(const Row& r) const {
  const auto width = static_cast<std::size_t>(std::max(10, o_.width - 1));
  const double secs = std::chrono::duration<double>(o_.now() - r.started).count();
  const std::string amount =
      r.total ? fmt::format("{}/{}", human_bytes(r.bytes), human_bytes(r.total)) : human_bytes(r.bytes);
  std::string state = r.state;
  if (state == "downloading" && secs > 0) state = rate_text(static_cast<double>(r.received) / secs);
  // Columns, dropped from the right as the terminal narrows: bar, state, amount.
  const std::size_t bar = width >= 100 ? 30 : width >= 70 ? 16 : 0;
  // Fixed columns, so the bars of several transfers line up.
  std::string right = fmt::format(" {:>19}  {:<12}", amount, state);
  if (width < 50) right = fmt::format(" {:<12}", state);
  std::size_t name_w = width > right.size() + (bar ? bar + 3 : 0) ? width - right.size() - (bar ? bar + 3 : 0) : 0;
  name_w = std::min<std::size_t>(name_w, 48); // a wide terminal gets the whole name, not a gap
  if (name_w < 8) {
    right = "";
    name_w = width;
  }
  std::string line = fmt::format("{:<{}}", fit_middle(r.name, name_w), name_w);
  if (bar && right.size()) {
    const double frac = r.total ? std::min(1.0, static_cast<double>(r.bytes) / static_cast<double>(r.total)) : 0;
    const auto fill = static_cast<std::size_t>(frac * static_cast<double>(bar));
    line += " [" + std::string(fill, '#') + std::string(bar - fill, '-') + "]";
  }
  line += right;
  line = line.substr(0, width);
  return line.substr(0, line.find_last_not_of(' ') + 1);
}

void ProgressRenderer::redraw(bool force, const std::string& permanent) {
  const auto now = o_.now();
  if (!force && permanent.empty() && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::string s;
  if (drawn_lines_) s += fmt::format("\x1b[{}F", drawn_lines_); // back to the first line drawn
  s += "\x1b[J";                                                // and clear everything below it
  // A permanent line scrolls up with the rest of the output, so it may wrap; the bars below it may not.
  if (!permanent.empty()) s += permanent + "\n";
  std::size_t lines = 0;
  for (const auto& r : rows_)
    if (r.live) {
      s += bar_line(r) + "\n";
      ++lines;
    }
  // The total only while something transfers: between downloads, lines scroll as usual.
  if (lines) {
    s += total_line(false) + "\n";
    ++lines;
  }
  drawn_lines_ = lines;
  out_ << s << std::flush;
}

void ProgressRenderer::on_terminal(const fetch::Event& e, Row& r) {
  using K = fetch::EventKind;
  std::string permanent;
  const auto done_line = [&](const std::string& what) {
    r.live = false;
    permanent = fmt::format("{:<8}{}", what, r.name);
  };
  switch (e.kind) {
  case K::cache_hit:
    done_line("cached");
    permanent += fmt::format(" ({})", human_bytes(r.bytes));
    break;
  case K::finished:
    done_line("fetched");
    permanent += fmt::format(" ({})", human_bytes(r.bytes));
    break;
  case K::failed:
    done_line(r.state == "stopped" ? "stopped" : "FAILED");
    permanent += ": " + e.message;
    break;
  case K::restarted: // said above the bars, which go on from the new count
    r.live = true;
    permanent = fmt::format("{:<8}{}: {}", "restart", r.name, e.message);
    break;
  default:
    r.live = true;
    break;
  }
  redraw(e.kind != K::progress, permanent);
}

void ProgressRenderer::on_lines(const fetch::Event& e, const Row& r) {
  using K = fetch::EventKind;
  const std::string& L = o_.label;
  switch (e.kind) {
  case K::cache_hit:
    out_ << fmt::format("{}: {} cached ({})\n", L, e.name, human_bytes(e.bytes));
    break;
  case K::started:
    out_ << fmt::format("{}: {} from {}{}\n", L, e.name, e.url,
                        e.resumed_from ? fmt::format(" (resuming at {})", human_bytes(e.resumed_from)) : "");
    break;
  case K::retrying:
    out_ << fmt::format("{}: {}: {}; retry in {:.1f}s\n", L, e.name, e.message, e.delay_s);
    break;
  case K::restarted:
  case K::waiting:
    out_ << fmt::format("{}: {}: {}\n", L, e.name, e.message);
    break;
  case K::finished: {
    const double secs = std::chrono::duration<double>(o_.now() - r.started).count();
    out_ << fmt::format("{}: {} verified ({}{})\n", L, e.name, human_bytes(e.bytes),
                        e.received && secs > 0
                            ? fmt::format(", {} in {}, {}", human_bytes(e.received), human_duration(secs),
                                          rate_text(static_cast<double>(e.received) / secs))
                            : "");
    break;
  }
  case K::failed:
    out_ << fmt::format("{}: {} {}: {}\n", L, e.name, r.state == "stopped" ? "stopped" : "FAILED", e.message);
    break;
  case K::progress:
    if (o_.now() - last_summary_ >= std::chrono::seconds(10)) {
      last_summary_ = o_.now();
      out_ << L << ": " << total_line(false) << "\n";
    }
    break;
  }
  out_ << std::flush;
}

void ProgressRenderer::on_json(const fetch::Event& e) {
  using K = fetch::EventKind;
  if (e.kind == K::progress) {
    auto it = std::find_if(last_json_progress_.begin(), last_json_progress_.end(),
                           [&](const auto& p) { return p.first == e.name; });
    if (it == last_json_progress_.end()) {
      last_json_progress_.emplace_back(e.name, Clock::time_point{});
      it = std::prev(last_json_progress_.end());
    }
    if (o_.now() - it->second < std::chrono::seconds(1)) return;
    it->second = o_.now();
  }
  nlohmann::json j = {{"event", o_.json_prefix + fetch::to_string(e.kind)}, {"name", e.name}, {"bytes", e.bytes}};
  if (!e.url.empty()) j["url"] = e.url;
  if (e.total) j["total"] = e.total;
  if (e.resumed_from) j["resumed_from"] = e.resumed_from;
  if (e.received) j["received"] = e.received;
  if (e.kind == K::retrying || e.kind == K::waiting) j["delay_s"] = e.delay_s;
  if (!e.message.empty()) j["message"] = e.message;
  out_ << util::dump_json(j) << "\n" << std::flush;
}

void ProgressRenderer::on_event(const fetch::Event& e) {
  std::lock_guard lock(mu_);
  auto& r = row(e.name);
  using K = fetch::EventKind;
  // An artifact's count goes down only where the download says it starts over (or a new
  // transfer of it starts): a redraw never shows bytes going backwards without a reason.
  r.bytes = e.kind == K::restarted || e.kind == K::started ? e.bytes : std::max(r.bytes, e.bytes);
  r.total = e.total ? e.total : r.total;
  r.received = e.received;
  switch (e.kind) {
  case K::cache_hit:
    r.state = "cached";
    break;
  case K::started:
    if (!started_) first_start_ = o_.now();
    started_ = true;
    if (r.started == Clock::time_point{}) r.started = o_.now();
    r.state = e.resumed_from ? "resuming" : "downloading";
    break;
  case K::progress:
    r.state = "downloading";
    break;
  case K::retrying:
    r.state = fmt::format("retry in {}", human_duration(e.delay_s));
    break;
  case K::restarted:
    r.state = "restarted";
    break;
  case K::waiting:
    r.state = "waiting for another download";
    break;
  case K::finished:
    r.state = "done";
    break;
  case K::failed:
    r.state = e.message.starts_with("interrupted") ? "stopped" : "FAILED";
    break;
  }
  switch (o_.mode) {
  case ProgressMode::json:
    return on_json(e);
  case ProgressMode::terminal:
    return on_terminal(e, r);
  case ProgressMode::lines:
    return on_lines(e, r);
  case ProgressMode::quiet:
    return;
  }
}

void ProgressRenderer::expect(std::size_t jobs, std::uint64_t total_bytes) {
  std::lock_guard lock(mu_);
  o_.jobs = jobs;
  o_.total_bytes = total_bytes;
}

void ProgressRenderer::say(const std::string& line) {
  std::lock_guard lock(mu_);
  switch (o_.mode) {
  case ProgressMode::terminal:
    return redraw(true, line);
  case ProgressMode::json:
    out_ << util::dump_json(nlohmann::json{{"event", "log"}, {"message", line}}) << "\n" << std::flush;
    return;
  case ProgressMode::lines:
  case ProgressMode::quiet:
    out_ << line << "\n" << std::flush;
    return;
  }
}

void ProgressRenderer::finish() {
  std::lock_guard lock(mu_);
  if (o_.mode == ProgressMode::terminal) {
    std::string s;
    if (drawn_lines_) s += fmt::format("\x1b[{}F\x1b[J", drawn_lines_);
    drawn_lines_ = 0;
    out_ << s << total_line(true) << "\n" << std::flush;
  } else if (o_.mode == ProgressMode::lines) {
    out_ << o_.label << ": " << total_line(true) << "\n" << std::flush;
  }
}

} // namespace hpcbake::cli
