#include "recording_runner.hpp"

#include <algorithm>

namespace hpcbake::exec {

void RecordingRunner::on(std::vector<std::string> argv_prefix, Completed result, int times) {
  rules_.push_back(Rule{std::move(argv_prefix), std::move(result), times});
}

Result<Completed> RecordingRunner::run(const Command& cmd) {
  calls.push_back(cmd);
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (it->times == 0) continue;
    if (it->argv_prefix.size() > cmd.argv.size()) continue;
    if (!std::equal(it->argv_prefix.begin(), it->argv_prefix.end(), cmd.argv.begin())) continue;
    if (it->times > 0) --it->times;
    Completed result = it->result;
    if (cmd.on_output && !result.output.empty()) cmd.on_output(result.output);
    return result;
  }
  return exited(0);
}

std::vector<std::vector<std::string>> RecordingRunner::argvs() const {
  std::vector<std::vector<std::string>> out;
  out.reserve(calls.size());
  for (const auto& c : calls)
    out.push_back(c.argv);
  return out;
}

} // namespace hpcbake::exec
