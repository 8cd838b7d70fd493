#pragma once
// The NVIDIA container runtime in the engines an image carries: Docker (moby) reads
// /etc/docker/daemon.json, containerd /etc/containerd/config.toml. What is written is what
// NVIDIA's `nvidia-ctk runtime configure` writes (NVIDIA/nvidia-container-toolkit,
// pkg/config/engine/{docker,containerd}): a runtime named "nvidia" whose binary is
// nvidia-container-runtime, the engine's default runtime left alone (containers ask for it:
// `docker run --runtime=nvidia`, `--gpus all`, a Kubernetes RuntimeClass, or CDI).
//
// Unlike nvidia-ctk, which re-serialises the whole file, the edits here keep every other byte
// of the file (comments, order, spacing, the admin's other settings): a member or a table is
// inserted, or one value replaced, and the result re-read to prove nothing else moved. The
// write is atomic, through symlinks under the root, with the original kept once beside it
// ("<config>.hpcbake-orig"), as waagent's edit is.
#include "util/error.hpp"
#include "util/hostfs.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpcbake::container {

enum class Engine { docker, containerd };
const char* engine_name(Engine engine);
std::optional<Engine> parse_engine(std::string_view name);
// Where the engine reads its configuration on every distro hpcbake bakes.
const char* default_config(Engine engine);

inline constexpr const char* kBackupSuffix = ".hpcbake-orig";
// Test hook (util::crash_point): SIGKILL after the new config is written and fsynced, before the rename.
inline constexpr const char* kCrashBeforeRename = "container-before-rename";

struct Runtime {
  std::string name = "nvidia";
  std::string binary = "/usr/bin/nvidia-container-runtime";
  // A Kubernetes node (the profile's `kubernetes` option), containerd only: what
  // `nvidia-ctk runtime configure --runtime=containerd --set-as-default --cdi.enabled` adds,
  // <cri>.containerd.default_runtime_name = NAME and <cri>.enable_cdi = true
  // (NVIDIA/nvidia-container-toolkit@5e0421c pkg/config/engine/containerd/config.go AddRuntime,
  // EnableCDI). Docker's file is left as without it.
  bool set_as_default = false;
  bool enable_cdi = false;
  // An InfiniBand size: Docker's containers get an unlimited locked-memory limit by default,
  // daemon.json default-ulimits.memlock = {"Hard": -1, "Name": "memlock", "Soft": -1} (the
  // file's format: docker/cli@11d98e5b880db15bd4fc59077bc445f87660792a
  // docs/reference/commandline/dockerd.md "Daemon configuration file"; -1 is unlimited, as in
  // NCCL's `docker run --ulimit memlock=-1`), since RDMA pins the memory it registers.
  // containerd's file has no such setting (docs/containers.md "RDMA in containers").
  bool memlock_unlimited = false;
};

struct TextEdit {
  std::string text;
  bool changed = false;
  std::string what; // "added runtimes.nvidia", "set BinaryName", ...
};

// daemon.json: runtimes.<name> = {"args": [], "path": BINARY}. `where` names the file in errors.
// Errors: text that is not a JSON object (with line and column), `runtimes` not an object.
Result<TextEdit> edit_docker(std::string_view text, const Runtime& rt, const std::string& where);
// config.toml: [<cri>.containerd.runtimes.<name>] runtime_type = "io.containerd.runc.v2" and
// [...<name>.options] BinaryName = BINARY, where <cri> follows the file's `version`
// (1: plugins.cri, 2: plugins."io.containerd.grpc.v1.cri", 3: plugins."io.containerd.cri.v1.runtime").
// SystemdCgroup is copied from the runc runtime's options when the file sets it there, as
// nvidia-ctk does (a kubelet on the systemd cgroup driver needs it). Errors: a runtime of that
// name defined inline or with dotted keys (not edited: said so), malformed TOML around it.
Result<TextEdit> edit_containerd(std::string_view text, const Runtime& rt, const std::string& where);

// daemon.json: default-ulimits.<name> = {"Hard": hard, "Name": name, "Soft": soft}, every other
// byte kept, as edit_docker does for the runtime.
Result<TextEdit> edit_docker_ulimit(std::string_view text, const std::string& name, long long soft, long long hard,
                                    const std::string& where);
// default-ulimits.<name> as dockerd reads it, or nullopt when the file sets none.
Result<std::optional<nlohmann::json>> docker_default_ulimit(std::string_view text, const std::string& name,
                                                            const std::string& where);

// What the engine reading `text` finds for the runtime: its binary, or nullopt when it has none.
Result<std::optional<std::string>> docker_runtime(std::string_view text, const std::string& name,
                                                  const std::string& where);
Result<std::optional<std::string>> containerd_runtime(std::string_view text, const std::string& name,
                                                      const std::string& where);

// What containerd's CRI plugin reads from `text`: its default runtime ("runc" when the file names
// none, containerd's built-in default) and whether CDI is enabled (false when unset: containerd
// before 2.0 defaults to false). `cri` names the plugin's table.
struct CriSettings {
  std::string cri;
  std::string default_runtime = "runc";
  bool default_runtime_set = false;
  std::optional<bool> enable_cdi;
  std::vector<std::string> cdi_spec_dirs; // empty: containerd's default (/etc/cdi, /var/run/cdi)
};
Result<CriSettings> containerd_cri(std::string_view text, const std::string& where);

struct Change {
  Engine engine = Engine::docker;
  std::string config;         // host path
  std::filesystem::path path; // the file written: under the root, symlinks followed
  bool changed = false;
  bool created = false;
  std::string what;
  std::optional<std::filesystem::path> backup;
  bool backup_created = false;
};

// Makes the engine's config name the runtime: nothing is written when it already does.
Result<Change> configure(const util::HostFs& host, Engine engine, const Runtime& rt, const std::string& config);

struct RuntimeStatus {
  Engine engine = Engine::docker;
  std::string config;
  bool exists = false;
  std::optional<std::string> binary; // the runtime's binary as the engine reads it
  bool configured = false;           // binary == the wanted one
  std::string detail;                // one sentence for a report
};
Result<RuntimeStatus> status(const util::HostFs& host, Engine engine, const Runtime& rt, const std::string& config);

nlohmann::json to_json(const Change& c);

} // namespace hpcbake::container
