#include "driver/nouveau.hpp"

#include "archive/initramfs.hpp"
#include "detect/platform.hpp"
#include "exec/fixture_root.hpp"
#include "util/atomic_file.hpp"
#include "util/strings.hpp"

#include <fmt/format.h>

namespace hpcbake::driver {

std::vector<std::string> initramfs_argv(const manifest::DistroManifest& distro, const std::string& kernel) {
  std::vector<std::string> argv;
  for (const auto& a : distro.initramfs_command)
    argv.push_back(util::replace_all(a, "{kernel}", kernel));
  return argv;
}

namespace {

// The initramfs carries hpcbake's blacklist, as written, at the path the distro's tools copy it to.
bool blacklisted(const archive::InitramfsModules& held, const std::string& blacklist_file) {
  std::string_view p = blacklist_file;
  while (p.starts_with("/"))
    p.remove_prefix(1);
  const auto it = held.files.find(std::string(p));
  return it != held.files.end() && it->second == kNouveauBlacklist;
}

} // namespace

Result<NouveauResult> disable_nouveau(const util::HostFs& host, const manifest::DistroManifest& distro,
                                      const std::vector<std::string>& kernels, exec::Runner& runner,
                                      bool force_initramfs) {
  NouveauResult r;
  if (distro.nouveau_blacklist_file.empty() || distro.initramfs_command.empty())
    return fail(ErrorKind::manifest,
                fmt::format("{}: distro manifest {} names no nouveau_blacklist_file or initramfs_command", distro.file,
                            distro.id));
  const auto path = host.resolve(distro.nouveau_blacklist_file);
  const bool differs =
      host.read(distro.nouveau_blacklist_file, util::host_file::config).value_or("") != kNouveauBlacklist;
  // The kernels whose initramfs is rebuilt, decided before anything is written, so that a command
  // the runner refuses (exec/fixture_root.hpp: under a fixture --root) leaves nothing half done.
  // The initramfs is read even when the blacklist is already in place: a rebuild that failed in an
  // earlier run left nouveau there without it, and only the image itself tells.
  std::vector<std::pair<std::string, exec::Command>> rebuilds;
  if (differs || force_initramfs || !distro.initramfs_file.empty()) {
    archive::InitramfsLimits limits;
    limits.files = {distro.nouveau_blacklist_file};
    for (const auto& k : kernels) {
      if (!force_initramfs && !distro.initramfs_file.empty()) {
        const auto image = util::replace_all(distro.initramfs_file, "{kernel}", k);
        // Without the file there is nothing to correct on a re-run (the distro's tools make it
        // when the kernel is installed); with a new blacklist, it is made.
        if (!differs && !host.exists(image)) continue;
        const auto check = archive::check_initramfs(host, image, {"nouveau"}, limits);
        if (!check.needed()) {
          r.initramfs_skipped.push_back(k);
          continue;
        }
        if (!differs && check.held && blacklisted(*check.held, distro.nouveau_blacklist_file)) {
          r.initramfs_current.push_back(k);
          continue;
        }
        if (!check.held) r.initramfs_unread.emplace_back(k, check.held.error().message);
      } else if (!differs && !force_initramfs) {
        continue;
      }
      exec::Command cmd;
      cmd.argv = initramfs_argv(distro, k);
      cmd.timeout = std::chrono::minutes(10);
      if (auto refused = exec::refusal(runner, cmd)) {
        for (const auto& [unread, why] : r.initramfs_unread)
          if (unread == k) refused->message += fmt::format(" (needed: its initramfs was not read: {})", why);
        return std::unexpected(std::move(*refused));
      }
      rebuilds.emplace_back(k, std::move(cmd));
    }
  }
  if (differs) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    HPCBAKE_TRY(util::write_file_atomic(path, kNouveauBlacklist));
    r.changed = true;
  }
  for (const auto& [k, cmd] : rebuilds) {
    HPCBAKE_TRY_ASSIGN(auto c, runner.run(cmd));
    if (!c.ok())
      return fail(ErrorKind::build,
                  fmt::format("`{}` {} while rebuilding the initramfs of {}:\n{}", exec::shell_quote(cmd.argv),
                              c.describe(), k, c.output),
                  fmt::format("nouveau stays in {}'s initramfs until this succeeds; check free space in /boot", k));
    r.initramfs_rebuilt.push_back(k);
  }
  r.reboot_required = detect::detect_modules(host).nouveau_loaded;
  return r;
}

} // namespace hpcbake::driver
