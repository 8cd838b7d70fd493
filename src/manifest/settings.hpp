#pragma once
// OS settings as data (manifests/settings/<id>.yaml): the files, commands and services that set up
// what RDMA and NCCL need from the OS (limits, sysctl, device naming, NCCL topology files), each
// citing where it comes from. A profile with `rdma_os: true` applies them: every settings file
// with `applies_to: infiniband` on sizes with InfiniBand, and the one a size names in
// `os_settings` (`applies_to: size`). The planner turns them into ordinary config, command and
// service steps (plan/rdma_os.hpp), so `plan --json` shows every file and its content.
#include "manifest/yaml_reader.hpp"

#include <optional>
#include <string>
#include <vector>

namespace hpcbake::manifest {

enum class SettingsScope { infiniband, size };
const char* to_string(SettingsScope scope);

struct SettingsFile {
  std::string name; // short and unique in the manifest: the step id is config:<settings>:<name>
  std::string path; // absolute host path
  std::string from; // a file under the manifest directory the content was read from, or empty
  std::string content;
  unsigned mode = 0644; // 0644 or 0755
  std::string source;
};

struct SettingsCommand {
  std::string name;
  std::vector<std::string> argv;
  std::string source;
};

struct SettingsManifest {
  std::string id;
  std::string file;
  SettingsScope applies_to = SettingsScope::size;
  std::string description;
  std::string source;
  std::vector<std::string> notes; // shown in the plan's notes
  std::vector<SettingsFile> files;
  std::vector<SettingsCommand> commands;
  std::vector<std::string> services; // enabled and started (systemctl enable --now)
  Positions positions;
};

// Reads one settings manifest; `from:` files are read relative to the manifest directory (the
// folder above the file's), and must lie inside it.
std::optional<SettingsManifest> read_settings(MapReader& r, const std::string& id);

} // namespace hpcbake::manifest
