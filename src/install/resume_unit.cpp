#include "install/resume_unit.hpp"

#include "install/resume_unit_text.hpp"
#include "util/atomic_file.hpp"
#include "util/paths.hpp"

#include <fmt/format.h>

namespace hpcbake::install {

namespace fs = std::filesystem;

namespace {

bool is_control(unsigned char c) {
  return c < 0x20 || c == 0x7f;
}

// One argument word: quoted, C escapes, %% and $$.
std::string quote_argument(const std::string& word) {
  std::string out = "\"";
  for (const char ch : word) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\')
      out += {'\\', ch};
    else if (ch == '%')
      out += "%%";
    else if (ch == '$')
      out += "$$";
    else if (is_control(c))
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out + "\"";
}

} // namespace

Result<std::string> systemd_exec_line(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty() || argv[0].front() != '/')
    return fail(ErrorKind::internal, "the resume unit needs the absolute path of the hpcbake executable");
  const std::string& exe = argv[0];
  for (const char ch : exe)
    if (ch == '"' || ch == '\'' || ch == '\\' || is_control(static_cast<unsigned char>(ch)))
      return fail(ErrorKind::usage,
                  fmt::format("the resume unit cannot run {}: systemd refuses an executable path holding a quote, a "
                              "backslash or a control character",
                              exe),
                  "install hpcbake at a plain path (e.g. /usr/local/bin/hpcbake), or run install without "
                  "--resume-unit and continue it by hand after the reboot");
  std::string line = "\"";
  for (const char ch : exe)
    line += ch == '%' ? std::string("%%") : std::string(1, ch);
  line += "\"";
  for (std::size_t i = 1; i < argv.size(); ++i)
    line += " " + quote_argument(argv[i]);
  return line;
}

Status write_resume_unit(const util::HostFs& host, const std::vector<std::string>& argv) {
  HPCBAKE_TRY_ASSIGN(auto exec_line, systemd_exec_line(argv));
  const std::string dropin =
      fmt::format("# Written by hpcbake install: the command that continues this install after the\n"
                  "# reboot it asked for. Removed with the unit when the install completes.\n"
                  "[Service]\n"
                  "ExecStart=\n"
                  "ExecStart={}\n",
                  exec_line);
  const fs::path unit = host.resolve(paths::kResumeUnit), dropin_file = host.resolve(paths::kResumeDropIn),
                 wants = host.resolve_entry(paths::kResumeUnitWants); // the link itself
  for (const fs::path& dir : {unit.parent_path(), dropin_file.parent_path(), wants.parent_path()}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      return fail(ErrorKind::internal, fmt::format("{}: cannot create the directory: {}", dir.string(), ec.message()));
  }
  // The drop-in first: a unit enabled without it would run the packaged default command.
  if (auto s = util::write_file_atomic(dropin_file, dropin, 0644); !s) return s;
  if (host.read(paths::kResumeUnit, util::host_file::config).value_or("") != kResumeUnitText)
    if (auto s = util::write_file_atomic(unit, std::string(kResumeUnitText), 0644); !s) return s;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(wants, ec))) {
    fs::create_symlink(paths::kResumeUnit, wants, ec);
    if (ec)
      return fail(ErrorKind::internal,
                  fmt::format("{}: cannot enable the resume unit: {}", wants.string(), ec.message()),
                  "check that the directory is writable, then run install again");
  }
  return {};
}

void remove_resume_unit(const util::HostFs& host) {
  std::error_code ec;
  // The entries themselves: a link is removed, never the file it leads to.
  fs::remove(host.resolve_entry(paths::kResumeUnitWants), ec);
  const fs::path dropin = host.resolve_entry(paths::kResumeDropIn);
  fs::remove(dropin, ec);
  fs::remove(dropin.parent_path(), ec); // only when empty: another drop-in is the admin's
  fs::remove(host.resolve_entry(paths::kResumeUnit), ec);
}

} // namespace hpcbake::install
