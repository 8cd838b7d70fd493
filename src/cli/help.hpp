#pragma once
// How options read in help, in the manual's check and in shell completion, from one place: the
// CLI11 definitions. `--parallel N (1-64, default 4)` instead of CLI11's `INT:INT in [1 - 64]=4`,
// the usage line with the whole command path, descriptions wrapped to the terminal, and every
// verb's help ending with the global options it also takes.
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace hpcbake::cli {

// What an option takes, for people: its option_text, else the values of a set ("auto|on|off"),
// else N for a number, FILE for an existing file, else its name in capitals. Empty for a flag.
std::string option_metavar(const CLI::Option& opt);
// The values a set-checked option accepts (CLI::IsMember), in order; empty for others.
std::vector<std::string> option_values(const CLI::Option& opt);
// "1-64" for a range-checked option; empty otherwise.
std::string option_range(const CLI::Option& opt);
// "hpcbake cache list".
std::string command_path_of(const CLI::App& app);

class HelpFormatter final : public CLI::Formatter {
public:
  explicit HelpFormatter(int width) : width_(width) {
    column_width(28);
    label("SUBCOMMAND", "COMMAND");
  }
  std::string make_usage(const CLI::App* app, std::string name) const override;
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_footer(const CLI::App* app) const override;

private:
  std::string wrap_row(const std::string& left, const std::string& desc) const;
  std::string fit_to_width_hanging(const std::string& row, std::size_t col) const;
  int width_;
};

} // namespace hpcbake::cli
