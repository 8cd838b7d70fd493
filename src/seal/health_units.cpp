#include "seal/health_units.hpp"

#include "install/resume_unit.hpp"
#include "seal/health_units_text.hpp"
#include "util/atomic_file.hpp"
#include "util/paths.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

namespace hpcbake::seal {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPackagedExe = "/usr/bin/hpcbake";

// The packaged text with its "ExecStart=/usr/bin/hpcbake ARGS" line naming `exec_prefix` instead
// (the quoted executable, and --root for a tree); `exec_start` gets the value written.
Result<std::string> with_executable(std::string_view packaged, const std::string& exec_prefix,
                                    std::string& exec_start) {
  std::string out;
  bool found = false;
  const std::string head = "ExecStart=" + std::string(kPackagedExe) + " ";
  const auto lines = util::split(packaged, '\n');
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if (lines[i].starts_with(head)) {
      exec_start = exec_prefix + " " + std::string(lines[i].substr(head.size()));
      out += "ExecStart=" + exec_start;
      found = true;
    } else {
      out += lines[i];
    }
  }
  if (!found) return fail(ErrorKind::internal, "a packaged health unit has no ExecStart=/usr/bin/hpcbake line");
  return out;
}

} // namespace

Result<std::vector<HealthUnit>> health_units(const util::HostFs& fs, const std::string& exe) {
  std::vector<std::string> argv = {exe.empty() ? std::string(kPackagedExe) : exe};
  // The image's units run this binary at every boot of every VM made from it: not from a home
  // folder (`waagent -deprovision+user` deletes the provisioning user's) or a temporary one.
  if (fs.is_real_root())
    for (const char* gone : {"/home/", "/tmp/", "/var/tmp/", "/dev/shm/", "/run/"})
      if (argv[0].starts_with(gone))
        return fail(ErrorKind::usage,
                    fmt::format("the health units would run {} at every boot, and {} does not outlive the "
                                "image's capture (deprovisioning removes the user's home; temporary folders are "
                                "emptied)",
                                argv[0], gone),
                    "install hpcbake where it stays (the release tarball in /opt/hpcbake, the .deb's "
                    "/usr/bin/hpcbake) and run seal from there");
  if (!fs.is_real_root()) argv.insert(argv.end(), {"--root", fs::absolute(fs.root()).string()});
  HPCBAKE_TRY_ASSIGN(const std::string prefix, install::systemd_exec_line(argv));
  const std::string dir = paths::kSystemdUnitDir;
  std::vector<HealthUnit> units;
  HealthUnit boot{
      "hpcbake-verify-boot.service", {}, dir + "/multi-user.target.wants/hpcbake-verify-boot.service", {}, {}};
  HPCBAKE_TRY_ASSIGN(boot.text, with_executable(kVerifyBootUnitText, prefix, boot.exec_start));
  HealthUnit periodic{"hpcbake-verify-periodic.service", {}, {}, {}, {}};
  HPCBAKE_TRY_ASSIGN(periodic.text, with_executable(kVerifyPeriodicUnitText, prefix, periodic.exec_start));
  HealthUnit timer{
      "hpcbake-verify.timer", {}, dir + "/timers.target.wants/hpcbake-verify.timer", {}, std::string(kVerifyTimerText)};
  for (auto* u : {&boot, &periodic, &timer}) {
    u->path = dir + "/" + u->name;
    units.push_back(std::move(*u));
  }
  return units;
}

Status write_health_units(const util::HostFs& fs, const std::vector<HealthUnit>& units) {
  for (const auto& u : units) {
    const fs::path file = fs.resolve(u.path);
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (ec)
      return fail(ErrorKind::internal,
                  fmt::format("{}: cannot create the directory: {}", file.parent_path().string(), ec.message()));
    if (fs.read(u.path, util::host_file::config).value_or("") != u.text)
      HPCBAKE_TRY(util::write_file_atomic(file, u.text, 0644));
    if (u.wants_link.empty()) continue;
    const fs::path link = fs.resolve_entry(u.wants_link); // the link itself
    fs::create_directories(link.parent_path(), ec);
    if (ec)
      return fail(ErrorKind::internal,
                  fmt::format("{}: cannot create the directory: {}", link.parent_path().string(), ec.message()));
    if (fs::is_symlink(fs::symlink_status(link, ec))) fs::remove(link, ec); // made again: it names u.path
    fs::create_symlink(u.path, link, ec);
    if (ec)
      return fail(ErrorKind::internal, fmt::format("{}: cannot enable {}: {}", u.wants_link, u.name, ec.message()),
                  "check that the directory is writable, then seal again");
  }
  return {};
}

} // namespace hpcbake::seal
