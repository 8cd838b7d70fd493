#pragma once
// Renders download events for the three ways hpcbake runs:
//  - a terminal: one bar per transfer plus a total, redrawn at most 10 times a second;
//  - no terminal (Batch start tasks, CI, Packer logs): a line per start/finish/retry and a
//    summary every 10 seconds;
//  - --json: one JSON object per event, per line.
// The library only emits events; everything about terminals lives here.
#include "fetch/downloader.hpp"

#include <chrono>
#include <map>
#include <ostream>
#include <string>

namespace hpcbake::cli {

enum class ProgressMode { terminal, lines, json };
ProgressMode progress_mode_for(bool json, int fd);

class ProgressRenderer final : public fetch::Observer {
public:
  ProgressRenderer(std::ostream& out, ProgressMode mode, std::size_t jobs);
  void on_event(const fetch::Event& e) override;
  void finish();

private:
  struct Row {
    std::uint64_t bytes = 0, total = 0;
    std::string state = "queued";
  };
  void redraw(bool force);
  std::string summary() const;

  std::ostream& out_;
  ProgressMode mode_;
  std::size_t jobs_;
  std::map<std::string, Row> rows_;
  std::chrono::steady_clock::time_point start_, last_draw_{}, last_summary_{};
  std::map<std::string, std::chrono::steady_clock::time_point> last_json_progress_;
  std::size_t drawn_lines_ = 0;
};

std::string human_bytes(std::uint64_t bytes);

} // namespace hpcbake::cli
