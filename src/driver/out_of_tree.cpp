#include "driver/out_of_tree.hpp"

#include "util/strings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

namespace hpcbake::driver {

namespace fs = std::filesystem;

namespace {

bool is_module_file(const std::string& name) {
  for (const std::string_view ext : {".ko", ".ko.xz", ".ko.zst", ".ko.gz"})
    if (name.size() > ext.size() && name.ends_with(ext)) return true;
  return false;
}

// A dpkg file list: one path a line. dpkg sets no size; the largest packages list some 100,000
// files of under 200 bytes each. Our generous choice: 64 MiB.
constexpr util::FileBound kDpkgFileList{64 * 1024 * 1024, "a dpkg file list"};

// "/usr/lib/modules/K/..." (a merged-/usr package's spelling) -> "/lib/modules/K/...".
std::string modules_path(std::string_view line) {
  if (line.starts_with("/usr/lib/modules/")) line.remove_prefix(4);
  return std::string(line);
}

} // namespace

ModuleTreeScan out_of_tree_modules(const util::HostFs& host, const std::string& kernel, std::size_t max_entries) {
  ModuleTreeScan scan;
  scan.kernel = kernel;
  const std::string top = "/lib/modules/" + kernel;
  const fs::path dir = host.resolve(top);
  std::error_code ec;
  scan.found = fs::is_directory(dir, ec);
  if (!scan.found) return scan;
  const ModuleReader reader;
  // Directory symlinks are not followed (no follow_directory_symlink): a loop cannot hold the walk.
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (++scan.entries > max_entries) {
      scan.truncated = true;
      break;
    }
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    // build/ and source/ point at the headers: never descend into them.
    if (it.depth() == 0 && (name == "build" || name == "source")) {
      it.disable_recursion_pending();
      continue;
    }
    if (!is_module_file(name)) continue;
    const std::string host_path = top + "/" + p.lexically_relative(dir).generic_string();
    const fs::path file = host.resolve(host_path); // a link (weak-updates/) is followed inside the root
    std::error_code type_ec;
    if (!fs::is_regular_file(file, type_ec)) {
      if (fs::is_symlink(fs::symlink_status(p, type_ec)))
        scan.modules.push_back(
            {host_path, {}, "a link to nothing inside the root (a dangling weak-updates link?)", {}});
      continue;
    }
    ++scan.module_files;
    auto info = reader.read(file);
    if (!info) {
      scan.modules.push_back({host_path, {}, info.error().message, {}});
      continue;
    }
    if (info->intree) continue;
    scan.modules.push_back({host_path, std::move(*info), {}, {}});
  }
  if (ec) scan.error = fmt::format("{}: cannot list it: {}", top, ec.message());
  std::sort(scan.modules.begin(), scan.modules.end(),
            [](const OutOfTreeModule& a, const OutOfTreeModule& b) { return a.path < b.path; });
  return scan;
}

std::string owning_packages(const util::HostFs& host, std::vector<OutOfTreeModule>& modules) {
  const std::string info_dir = "/var/lib/dpkg/info";
  if (!host.exists(info_dir)) return {};
  std::map<std::string, OutOfTreeModule*> wanted;
  for (auto& m : modules)
    wanted[m.path] = &m;
  if (wanted.empty()) return "dpkg";
  for (const auto& file : host.list(info_dir)) {
    if (!file.ends_with(".list")) continue;
    const auto text = host.read(info_dir + "/" + file, kDpkgFileList);
    if (!text || text->find("/lib/modules/") == std::string::npos) continue;
    // "nvidia-dkms-580:amd64.list" -> "nvidia-dkms-580" (the architecture qualifier dropped).
    std::string package = file.substr(0, file.size() - 5);
    if (const auto colon = package.find(':'); colon != std::string::npos) package.resize(colon);
    for (const auto line : util::split(*text, '\n')) {
      if (line.find("/lib/modules/") == std::string_view::npos) continue;
      if (const auto at = wanted.find(modules_path(util::trim(line))); at != wanted.end())
        at->second->package = package;
    }
  }
  return "dpkg";
}

std::map<std::string, std::string> dpkg_owners(const util::HostFs& host, const std::set<std::string>& paths) {
  std::map<std::string, std::string> out;
  const std::string info_dir = "/var/lib/dpkg/info";
  if (paths.empty() || !host.exists(info_dir)) return out;
  for (const auto& file : host.list(info_dir)) {
    if (!file.ends_with(".list")) continue;
    const auto text = host.read(info_dir + "/" + file, kDpkgFileList);
    if (!text) continue;
    std::string package = file.substr(0, file.size() - 5);
    if (const auto colon = package.find(':'); colon != std::string::npos) package.resize(colon);
    for (const auto line : util::split(*text, '\n'))
      if (const std::string path(util::trim(line)); paths.contains(path)) out.emplace(path, package);
  }
  return out;
}

} // namespace hpcbake::driver
