#pragma once
// Shell completion from the CLI's own definitions: `hpcbake __complete WORD...` prints, one per
// line, what may come at the last WORD (empty for "what comes next"): commands, every option of
// the command and of its parents, an option's values (a set's members, sizes, distros and
// profiles from the manifests). Nothing printed: the shell completes file names. The bash
// script (packaging/completion/hpcbake.bash) only asks and filters, so help and completion
// cannot drift apart.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace hpcbake::cli {

// `words`: what follows "hpcbake" on the line, the last being the word being completed. `=`
// alone (bash splits --reboot=a at the =) counts as the value separator.
std::vector<std::string> complete_words(CLI::App& app, const std::vector<std::string>& words);

} // namespace hpcbake::cli
