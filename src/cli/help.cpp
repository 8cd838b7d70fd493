#include "cli/help.hpp"

#include "cli/progress.hpp"
#include "util/datadir.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace hpcbake::cli {

namespace {

// The validator part of CLI11's type name: "INT:INT in [1 - 64]" -> "INT in [1 - 64]".
std::string checks_of(const CLI::Option& opt) {
  const std::string t = opt.get_type_name();
  const auto colon = t.find(':');
  return colon == std::string::npos ? std::string() : t.substr(colon + 1);
}

std::string base_type(const CLI::Option& opt) {
  const std::string t = opt.get_type_name();
  return t.substr(0, t.find(':'));
}

// Where the manual and the guides are installed: share/doc/hpcbake beside the executable's bin/
// (/usr/share/doc/hpcbake from the .deb or .rpm; under the release tarball's directory), named as
// found; a binary without them beside it (a build tree) says where the packages put them.
std::string docs_footer() {
  std::error_code ec;
  if (const auto exe = util::self_exe()) {
    const auto dir = exe->parent_path().parent_path() / "share" / "doc" / "hpcbake";
    if (std::filesystem::is_regular_file(dir / "docs" / "manual.md", ec))
      return fmt::format("The manual: man hpcbake, or {}; the guides: {}/\n", (dir / "docs" / "manual.md").string(),
                         dir.string());
  }
  return "The manual: man hpcbake; it and the guides are installed in /usr/share/doc/hpcbake/ by the\n"
         ".deb and .rpm, and in share/doc/hpcbake/ in the release tarball.\n";
}

} // namespace

std::vector<std::string> option_values(const CLI::Option& opt) {
  const std::string c = checks_of(opt);
  const auto open = c.find('{'), close = c.find('}');
  if (open == std::string::npos || close == std::string::npos || close < open) return {};
  std::vector<std::string> values;
  const std::string inside = c.substr(open + 1, close - open - 1); // split's views point into it
  for (auto v : util::split(inside, ','))
    if (!v.empty()) values.emplace_back(v);
  return values;
}

std::string option_range(const CLI::Option& opt) {
  const std::string c = checks_of(opt);
  const auto open = c.find('['), dash = c.find(" - "), close = c.find(']');
  if (open == std::string::npos || dash == std::string::npos || close == std::string::npos) return {};
  return c.substr(open + 1, dash - open - 1) + "-" + c.substr(dash + 3, close - dash - 3);
}

std::string option_metavar(const CLI::Option& opt) {
  if (opt.get_expected_max() == 0) return {}; // a flag
  if (!opt.get_option_text().empty()) return opt.get_option_text();
  if (const auto values = option_values(opt); !values.empty()) return util::join(values, "|");
  const std::string type = base_type(opt);
  if (type == "INT" || type == "UINT" || type == "FLOAT") return "N";
  if (checks_of(opt) == "FILE") return "FILE";
  if (checks_of(opt) == "DIR") return "DIR";
  std::string name = opt.get_lnames().empty() ? opt.get_name() : opt.get_lnames().front();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return ch == '-' ? '_' : static_cast<char>(std::toupper(ch)); });
  return name;
}

std::string command_path_of(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* a = &app; a; a = a->get_parent())
    names.insert(names.begin(), a->get_name());
  return util::join(names, " ");
}

std::string HelpFormatter::make_usage(const CLI::App* app, std::string /*name*/) const {
  return CLI::Formatter::make_usage(app, command_path_of(*app));
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (opt->get_positional()) return {};
  const std::string m = option_metavar(*opt);
  return m.empty() ? std::string() : " " + m;
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  std::string desc = opt->get_description();
  std::vector<std::string> notes;
  if (const std::string r = option_range(*opt); !r.empty()) notes.push_back(r);
  if (const std::string d = opt->get_default_str();
      !d.empty() && opt->get_expected_max() != 0 && desc.find("default") == std::string::npos)
    notes.push_back("default " + d);
  if (opt->get_required()) notes.push_back("required");
  if (!notes.empty()) desc += " (" + util::join(notes, ", ") + ")";
  return desc;
}

std::string HelpFormatter::fit_to_width_hanging(const std::string& row, std::size_t col) const {
  std::string out;
  for (const auto line : util::split(row, '\n'))
    out += wrap_hanging(line, width_, col) + "\n";
  return out;
}

std::string HelpFormatter::wrap_row(const std::string& left, const std::string& desc) const {
  const auto col = get_column_width();
  // The description starts in its column, on the option's line when the option leaves room.
  const std::string row = left.size() < col ? left + std::string(col - left.size(), ' ') + desc
                                            : left + "\n" + std::string(col, ' ') + desc;
  return fit_to_width_hanging(row, col);
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  return wrap_row("  " + make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  return wrap_row("  " + sub->get_display_name(true), sub->get_description());
}

std::string HelpFormatter::make_footer(const CLI::App* app) const {
  if (!app->get_parent()) return "Run 'hpcbake help COMMAND' for a command's options.\n" + docs_footer();
  return "Global options (anywhere on the line): --root DIR, --manifests DIR,\n"
         "--imds-url URL, --no-imds, --json, -q, -v; 'hpcbake help' says what each does.\n";
}

} // namespace hpcbake::cli
