#pragma once
// Renders download events for the ways hpcbake runs:
//  - a terminal: a line for each finished, cached or failed artifact, and below them one bar
//    per running transfer plus a total, redrawn in place at most 10 times a second. Every line
//    fits the terminal's width (COLUMNS, else the terminal's own), so a redraw never wraps;
//  - no terminal (Batch start tasks, CI, Packer logs): a line per start/finish/retry and a
//    summary every 10 seconds;
//  - --json: one JSON object per event, per line;
//  - quiet (-q): nothing; the caller reports failures.
// Rates count only the bytes that came over the network in this run: a resumed download's
// prefix and a cache hit are not "speed". The library only emits events; everything about
// terminals lives here. Thread-safe: install's steps fetch in parallel.
#include "fetch/downloader.hpp"
#include "util/strings.hpp"

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace hpcbake::cli {

enum class ProgressMode { terminal, lines, json, quiet };
ProgressMode progress_mode_for(bool json, int fd);
// COLUMNS when it is a number, else the terminal's width on fd, else 80.
int terminal_width(int fd);
// The width text for people is fitted to: COLUMNS when set, else the terminal's when fd is one;
// 0 (no wrapping) when output goes to a pipe or file, so scripts see whole lines.
int output_width(int fd);
// Each line longer than width - 1 columns wrapped at spaces, its continuation lines indented 4
// more than the line; a word longer than a line (a URL) stays whole on a line of its own.
std::string fit_to_width(const std::string& text, int width);
// One line wrapped at spaces to width - 1 columns, continuation lines indented `hang` spaces
// (help's option rows: the description column).
std::string wrap_hanging(std::string_view line, int width, std::size_t hang);

class ProgressRenderer final : public fetch::Observer {
public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    ProgressMode mode = ProgressMode::lines;
    std::size_t jobs = 0;
    std::uint64_t total_bytes = 0; // the sum of the jobs' sizes; 0 when one is not known (known_total)
    int width = 80;                // terminal mode: no line is longer than width - 1
    std::string label = "fetch";   // lines mode: the prefix of each line
    std::string json_prefix;       // json mode: before each event's name ("download." for install)
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
  };
  ProgressRenderer(std::ostream& out, Options options);
  void on_event(const fetch::Event& e) override;
  // The final total (terminal: the bars are replaced by it).
  void finish();
  // The jobs and their total size, when they are known only after the renderer was made.
  void expect(std::size_t jobs, std::uint64_t total_bytes);
  // A line of the caller's, printed above the bars (install's step lines between downloads).
  void say(const std::string& line);

private:
  struct Row {
    std::string name;
    std::uint64_t bytes = 0, total = 0, received = 0;
    std::string state = "queued";
    Clock::time_point started{};
    bool live = false; // a bar is drawn for it
  };
  Row& row(const std::string& name);
  void on_terminal(const fetch::Event& e, Row& r);
  void on_lines(const fetch::Event& e, const Row& r);
  void on_json(const fetch::Event& e);
  void redraw(bool force, const std::string& permanent = {});
  std::string bar_line(const Row& r) const;
  std::string total_line(bool final) const;
  double run_rate() const; // network bytes per second since the first transfer started

  std::ostream& out_;
  Options o_;
  std::mutex mu_;
  std::vector<Row> rows_;
  Clock::time_point first_start_{}, last_draw_{}, last_summary_{};
  bool started_ = false;
  std::vector<std::pair<std::string, Clock::time_point>> last_json_progress_;
  std::size_t drawn_lines_ = 0;
};

using util::human_bytes; // util/strings.hpp
std::string human_duration(double seconds);
// The sum of the sizes, or 0 when one is not known: no total is better than a wrong one (an ETA
// that ends before the download does).
std::uint64_t known_total(const std::vector<std::optional<std::uint64_t>>& sizes); // "58s", "4m05s", "1h02m"
// NAME shortened in the middle to at most `width` characters ("NVIDIA-Lin..6.20.run").
std::string fit_middle(const std::string& name, std::size_t width);

} // namespace hpcbake::cli
